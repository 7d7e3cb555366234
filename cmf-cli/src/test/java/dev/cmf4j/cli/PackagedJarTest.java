package dev.cmf4j.cli;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The one-file launcher, {@code target/cmf.jar} as {@code mvn package} makes it, run as a user without a checkout
 * would: {@code java -jar cmf.jar ...} with no flags (the jar runs itself again with the Vector API module) and with
 * {@code --add-modules} given (no second JVM); both print what the command prints in process. Runs after
 * {@code package}, in the integration-test phase (cmf-cli's pom).
 */
class PackagedJarTest {
    static Path jar, model, root;

    @BeforeAll static void find() throws IOException {
        jar = Path.of("target/cmf.jar").toAbsolutePath();
        Path classes = Path.of("target/classes/dev/cmf4j/cli/Cmf.class");
        assumeTrue(Files.isRegularFile(jar) && Files.getLastModifiedTime(jar).compareTo(Files.getLastModifiedTime(classes)) >= 0,
                "target/cmf.jar is missing or older than the classes: run mvn verify (this test runs after package)");
        root = Path.of(System.getProperty("cmf.repo.root", "..")).toAbsolutePath().normalize();
        model = root.resolve("models/default.cmf");
    }

    record Result(int code, String out, String err) {}

    static Result java(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        cmd.addAll(List.of(args));
        Path out = Files.createTempFile("cmf-jar", ".out"), err = Files.createTempFile("cmf-jar", ".err");
        try {
            Process p = new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(err.toFile()).start();
            assertThat(p.waitFor(120, TimeUnit.SECONDS)).as("finished: " + cmd).isTrue();
            return new Result(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
        } finally {
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
        }
    }

    @Test void javaDashJarRunsTheCommandWithoutFlags() throws Exception {
        // run without FILE takes models/default.cmf under cmf.home: found only if the caller's -D reached the relaunch
        Result r = java("-Dcmf.home=" + root, "-jar", jar.toString(), "run", "-p", "The ls command", "--greedy", "-n", "6");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(Run.run("run", model.toString(), "-p", "The ls command", "--greedy", "-n", "6").out());
    }

    @Test void javaDashJarWithTheModuleFlagRunsInOneJvm() throws Exception {
        Result r = java("--add-modules", "jdk.incubator.vector", "-Dcmf.relaunched=true", "-jar", jar.toString(),
                "generate", model.toString(), "--ids", "1,2,3", "--greedy", "-n", "8", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(Run.run("generate", model.toString(), "--ids", "1,2,3", "--greedy", "-n", "8", "--json").out());
        assertThat(r.err()).as("Enable-Native-Access in the manifest").doesNotContain("restricted method");
    }

    /**
     * An Embryo sequence (anchor rings and delta states) saved by one process and continued by a second: the text one
     * in-process run of both prompts writes.
     */
    @Test void anEmbryoStateSavedByOneProcessContinuesInAnother(@org.junit.jupiter.api.io.TempDir Path tmp) throws Exception {
        String embryo = dev.cmf4j.testkit.Fixtures.require("embryo/embryo_a").resolve("model.cmf").toString();
        String snap = tmp.resolve("e.cmfstate").toString();
        String head = "The ls command lists the files of a directory; with -l it prints", tail = " one file per line";
        String[] one = {"--add-modules", "jdk.incubator.vector", "-Dcmf.relaunched=true", "-jar", jar.toString(), "run", embryo, "--greedy"};
        Result first = java(concat(one, "-p", head, "-n", "0", "--state-out", snap));
        assertThat(first.code()).as(first.err()).isZero();
        Result second = java(concat(one, "-p", tail, "-n", "24", "--state-in", snap));
        assertThat(second.code()).as(second.err()).isZero();
        assertThat(second.out()).isEqualTo(Run.run("run", embryo, "--greedy", "-p", head + tail, "-n", "24").out());
    }

    private static String[] concat(String[] a, String... b) {
        String[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
