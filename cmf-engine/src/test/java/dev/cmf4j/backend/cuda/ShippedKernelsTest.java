package dev.cmf4j.backend.cuda;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Every CUDA kernel file of the engine ({@code src/main/resources/dev/cmf4j/backend/cuda/*.cu}) ships with the
 * fatbin nvcc built from exactly that source: without it a user's machine needs NVRTC, and with a stale one
 * the engine ignores the fatbin. CI has no nvcc; the fix for a failure is to run the build script.
 */
class ShippedKernelsTest {
    static final Path DIR = Path.of("src/main/resources/dev/cmf4j/backend/cuda");
    /** What the build script puts in every fatbin: SASS for these GPUs, PTX of the lowest as the fallback. */
    static final List<String> TARGETS = List.of("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", "compute_80");

    static List<Path> kernelFiles() throws Exception {
        assertThat(DIR).as("run from the cmf-engine module folder").isDirectory();
        try (Stream<Path> s = Files.list(DIR)) {
            return s.filter(p -> p.getFileName().toString().endsWith(".cu")).sorted().toList();
        }
    }

    @Test void everyKernelFileHasAFreshFatbin() throws Exception {
        List<Path> cus = kernelFiles();
        assertThat(cus).isNotEmpty();
        List<String> problems = new ArrayList<>();
        for (Path cu : cus) {
            String name = cu.getFileName().toString(), fb = KernelSource.fatbinName(name);
            Path fatbin = DIR.resolve(fb), stamp = DIR.resolve(fb + ".stamp");
            KernelSource k = new KernelSource(name, KernelSource.text(name, new java.util.HashSet<>()),   // its headers inlined, as the jar reads it
                    Files.exists(fatbin) ? Files.readAllBytes(fatbin) : null,
                    Files.exists(stamp) ? dev.cmf4j.backend.BuildStamp.parse(Files.readString(stamp)) : Map.of());
            String problem = k.fatbinProblem();
            if (problem != null) problems.add(problem);
        }
        assertThat(problems).as("""
                        the CUDA fatbins shipped in the jar must be built from the current .cu sources.
                        Fix: run tools/build-cuda-kernels.sh (needs nvcc from CUDA 13, e.g. /usr/local/bin/nvcc) from the repository
                        root, then commit %s/*.cu, *.fatbin and *.fatbin.stamp together.
                        (While a fatbin is stale the engine compiles that .cu with NVRTC instead, so users then need libnvrtc.)
                        Problems""".formatted("cmf-engine/" + DIR)).isEmpty();
    }

    @Test void everyFatbinHoldsTheAgreedTargetsAndAFatbinNeverOutlivesItsSource() throws Exception {
        for (Path cu : kernelFiles()) {
            Path fatbin = DIR.resolve(KernelSource.fatbinName(cu.getFileName().toString()));
            if (!Files.exists(fatbin)) continue;   // reported by everyKernelFileHasAFreshFatbin
            Fatbin f = Fatbin.parse(Files.readAllBytes(fatbin));
            assertThat(f.labels()).as(fatbin + " (rebuild with tools/build-cuda-kernels.sh)").containsExactlyInAnyOrderElementsOf(TARGETS);
            assertThat(f.choose(9, 0).label()).as("H100/H200").isEqualTo("sm_90");
            assertThat(f.choose(8, 7).label()).as("Orin").isEqualTo("sm_86");
            assertThat(f.choose(11, 0).label()).as("a GPU newer than every SASS").isEqualTo("compute_80");
            assertThat(Files.size(fatbin)).as(fatbin + " size").isLessThan(3_000_000);   // resident_attn.fatbin (every attention kernel with its f16- and q8-cache instances) is the largest
        }
        try (Stream<Path> s = Files.list(DIR)) {
            for (Path p : s.filter(p -> p.toString().endsWith(".fatbin")).toList())
                assertThat(p.resolveSibling(p.getFileName().toString().replace(".fatbin", ".cu")))
                        .as(p + " has no source: delete it (tools/build-cuda-kernels.sh does)").exists();
        }
    }
}
