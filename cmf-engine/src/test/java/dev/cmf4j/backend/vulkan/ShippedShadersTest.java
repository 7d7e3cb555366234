package dev.cmf4j.backend.vulkan;

import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Every Vulkan compute shader of the engine ({@code src/main/resources/dev/cmf4j/backend/vulkan/*.comp}) ships with the
 * SPIR-V glslc built from exactly that source: the engine has no shader compiler at run time, so a stale .spv would run
 * old code. The fix for a failure is to run tools/build-vulkan-shaders.sh.
 */
class ShippedShadersTest {
    static final Path DIR = Path.of("src/main/resources/dev/cmf4j/backend/vulkan");

    @Test void everyShaderHasAFreshSpirv() throws Exception {
        assertThat(DIR).as("run from the cmf-engine module folder").isDirectory();
        List<Path> sources;
        try (Stream<Path> s = Files.list(DIR)) {
            sources = s.filter(p -> p.toString().endsWith(".comp")).sorted().toList();
        }
        assertThat(sources).isNotEmpty();
        List<String> problems = new ArrayList<>();
        for (Path src : sources) {
            String name = src.getFileName().toString().replace(".comp", "");
            Path spv = DIR.resolve(name + ".spv"), stamp = DIR.resolve(name + ".spv.stamp");
            String p = Shaders.problem(name, Files.readString(src, StandardCharsets.UTF_8), Files.exists(spv) ? Files.readAllBytes(spv) : null,
                    Files.exists(stamp) ? dev.cmf4j.backend.BuildStamp.parse(Files.readString(stamp)) : null);
            if (p != null) problems.add(p);
        }
        assertThat(problems).as("""
                the SPIR-V shipped in the jar must be built from the current .comp sources.
                Fix: run tools/build-vulkan-shaders.sh (needs glslc: apt-get install glslc) from the repository root,
                then commit cmf-engine/%s/*.comp, *.spv and *.spv.stamp together. Problems""".formatted(DIR)).isEmpty();
        try (Stream<Path> s = Files.list(DIR)) {
            for (Path p : s.filter(p -> p.toString().endsWith(".spv")).toList())
                assertThat(p.resolveSibling(p.getFileName().toString().replace(".spv", ".comp")))
                        .as(p + " has no source: delete it (tools/build-vulkan-shaders.sh does)").exists();
        }
    }

    @Test void aStaleOrAlteredSpirvIsNamed() {
        String src = "#version 450\nvoid main() {}\n";
        byte[] spv = {3, 2, 35, 7, 0, 0, 0, 0};
        var stamp = dev.cmf4j.backend.BuildStamp.parse("# c\nsource x.comp\nsource-sha256 " + dev.cmf4j.backend.BuildStamp.sourceSha256(src) + "\nspv-sha256 " + dev.cmf4j.backend.BuildStamp.sha256(spv) + "\n");
        assertThat(Shaders.problem("x", src, spv, stamp)).isNull();
        assertThat(Shaders.problem("x", src.replace("\n", "\r\n"), spv, stamp)).as("a CRLF checkout stays fresh").isNull();
        assertThat(Shaders.problem("x", src + "// edit\n", spv, stamp)).isEqualTo("x.spv was built from another x.comp");
        assertThat(Shaders.problem("x", src, new byte[] {3, 2, 35, 7, 1, 0, 0, 0}, stamp)).isEqualTo("x.spv is not the file its stamp records");
        assertThat(Shaders.problem("x", src, null, stamp)).isEqualTo("x.spv is missing");
        assertThat(Shaders.problem("x", src, spv, null)).isEqualTo("x.spv.stamp is missing");
    }
}
