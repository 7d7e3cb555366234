package dev.cmf4j.backend.cpu.kernel;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Compiled products allocate next to nothing: a Vector API value that C2 cannot keep in a register (a vector passed to
 * a method past its inlining budget, a tile with more live vectors than registers) is boxed on the heap on every
 * iteration, which makes a kernel several times slower while every result stays the same, so no test of values sees
 * it. Once a review folded the prefill tile's adds into a helper and CPU prefill ran at a fifth of its speed. Here a
 * child JVM compiles the kernels with C2 at once ({@code -Xbatch}: deterministic, where tiered compilation finishes
 * when it finishes on a busy machine) and reports the bytes each product allocates per
 * token; a few small arrays per call are fine, a box per vector per iteration is a hundred kilobytes and more. Also at
 * 256-bit vectors (AVX2's width and its 5-row tile).
 */
class KernelAllocationTest {
    /**
     * Bytes per product and token allowed: the per-call scratch (a lane-sum array, q4tp's ladders: a few KB a chunk) is
     * under this; boxing was 100 KB and more (the prefill tile through a helper: 166 KB a token).
     */
    private static final long MAX_BYTES = 16 << 10;

    @Test
    void compiledProductsDoNotBoxVectors() throws Exception {
        check(child());
        check(child("-XX:MaxVectorSize=32"));
    }

    private static void check(String report) {
        List<String> lines = report.lines().toList();
        assertThat(lines).as(report).hasSize(1 + 3 * KernelAllocationProbe.DTYPES.length);
        assertThat(lines.subList(1, lines.size())).as("products allocating %d bytes or more a token (DTYPE PATH BYTES_PER_TOKEN), in:%n%s", MAX_BYTES, report)
                .filteredOn(line -> Long.parseLong(line.split(" ")[2]) >= MAX_BYTES).isEmpty();
    }

    private static String child(String... options) throws Exception {
        List<String> jvm = new ArrayList<>(List.of("-XX:-TieredCompilation", "-Xbatch", "-XX:CompileThreshold=100"));
        jvm.addAll(List.of(options));
        return ChildJvm.output(KernelAllocationProbe.class, jvm);
    }
}
