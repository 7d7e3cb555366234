package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;

import java.lang.management.ManagementFactory;
import java.util.Random;

/**
 * The child-JVM side of {@link KernelAllocationTest}: for each kernel dtype, the bytes the calling thread allocates per
 * product and token once the kernels are compiled: one token (decode), four tokens (a step's decode rows) and 64 tokens (the
 * tiled prefill). One line per dtype and path: {@code DTYPE PATH BYTES_PER_TOKEN}.
 */
public final class KernelAllocationProbe {
    private KernelAllocationProbe() {}

    static final DType[] DTYPES = {DType.F32, DType.F16, DType.BF16, DType.Q8_ROW, DType.Q8_2F, DType.Q4_BLOCK, DType.Q4TP};
    static final int ROWS = 256, COLS = 512, WARM = 400, MEASURED = 50, WINDOWS = 10;

    /**
     * Bytes this thread allocates per call of {@code r} once compiled: after {@value #WARM} calls, the least over
     * {@value #WINDOWS} windows of {@value #MEASURED} calls (compiled code that boxes does so in every window; a
     * late recompilation shows in one).
     */
    static long bytesPerCall(Runnable r) {
        for (int i = 0; i < WARM; i++) r.run();
        long least = Long.MAX_VALUE;
        for (int w = 0; w < WINDOWS; w++) {
            long before = THREADS.getThreadAllocatedBytes(SELF);
            for (int i = 0; i < MEASURED; i++) r.run();
            least = Math.min(least, (THREADS.getThreadAllocatedBytes(SELF) - before) / MEASURED);
        }
        return least;
    }

    private static final com.sun.management.ThreadMXBean THREADS = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    private static final long SELF = Thread.currentThread().threadId();

    public static void main(String[] args) {
        StringBuilder out = new StringBuilder("L=" + Simd.L + "\n");
        try (WorkerPool pool = new WorkerPool(1)) {   // one thread: every chunk runs on this one
            Random rnd = new Random(7);
            for (DType dtype : DTYPES) {
                WeightMatrix w = WeightMatrix.of(dtype, TestWeights.encode(dtype, TestWeights.randomMatrix(rnd, ROWS, COLS), ROWS, COLS), ROWS, COLS);
                for (int tokens : new int[] {1, 4, 64}) {
                    float[] x = TestWeights.randomVector(rnd, tokens * COLS), y = new float[tokens * ROWS];
                    Runnable product = tokens == 1 ? () -> w.matvec(x, 0, y, 0, false, pool)
                            : tokens <= 8 ? () -> w.matvecRows(x, 0, tokens, y, 0, false, pool)
                            : () -> w.matmul(x, 0, tokens, y, 0, false, pool);
                    long bytes = bytesPerCall(product) / tokens;
                    out.append(dtype.label).append(' ').append(tokens == 1 ? "decode" : tokens <= 8 ? "rows" : "prefill")
                            .append(' ').append(bytes).append('\n');
                }
            }
        }
        System.out.print(out);
    }
}
