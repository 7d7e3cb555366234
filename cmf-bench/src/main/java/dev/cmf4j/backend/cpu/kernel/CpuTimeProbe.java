package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.convert.quant.Quantizer;
import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * Single-thread kernel throughput per second of this thread's CPU time (not wall time), so that
 * variants can be compared on a machine shared with other work: a descheduled thread accrues no
 * CPU time. Data sized to stay in L2 (arithmetic-bound) or to stream from DRAM.
 *
 * <pre>java --add-modules jdk.incubator.vector -cp cmf-bench/target/benchmarks.jar dev.cmf4j.backend.cpu.kernel.CpuTimeProbe [decode|prefill|all] [q8_2f,q4_block,...]</pre>
 */
public final class CpuTimeProbe {
    static final ThreadMXBean MX = ManagementFactory.getThreadMXBean();

    interface Body { void run(); }

    static double cpuSecondsPerRun(Body b, int minRuns, double minCpuSeconds) {
        for (int i = 0; i < 3; i++) { long t0 = MX.getCurrentThreadCpuTime(); while (MX.getCurrentThreadCpuTime() - t0 < 300_000_000L) b.run(); }
        double best = Double.MAX_VALUE;
        for (int rep = 0; rep < 5; rep++) {
            long t0 = MX.getCurrentThreadCpuTime();
            int n = 0;
            while (n < minRuns || MX.getCurrentThreadCpuTime() - t0 < minCpuSeconds * 1e9) { b.run(); n++; }
            best = Math.min(best, (MX.getCurrentThreadCpuTime() - t0) * 1e-9 / n);
        }
        return best;
    }

    static MemorySegment encode(DType d, int rows, int cols, Arena arena) {
        SplittableRandom rnd = new SplittableRandom(5);
        float[] w = new float[rows * cols];
        for (int i = 0; i < w.length; i++) w[i] = (float) ((rnd.nextDouble() - 0.5) * 0.1);
        long[] shape = {rows, cols};
        Quantizer q = Quantizer.of(d);
        MemorySegment m = arena.allocate(q.encodedSize(shape), 4096);
        q.encode(w, shape, m);
        return m;
    }

    public static void main(String[] args) {
        String what = args.length > 0 ? args[0] : "all";
        Arena arena = Arena.ofShared();
        System.out.println("vector: " + Simd.F + " VECTOR=" + Simd.VECTOR);
        if (what.equals("all") || what.equals("decode")) {
            String[] dtypes = args.length > 1 ? args[1].split(",") : new String[] {"q8_2f", "q4_block", "bf16", "f16", "q4tp", "f32"};
            for (String d : dtypes) {
                DType dt = DType.ofLabel(d);
                for (int rows : new int[] {128, 8192}) {          // 128 x 2048: in L2; 8192 x 2048: DRAM
                    int cols = 2048;
                    WeightMatrix w = WeightMatrix.of(dt, encode(dt, rows, cols, arena), rows, cols);
                    float[] x = new float[cols], xp = new float[Math.max(1, w.preparedLength())], y = new float[rows];
                    for (int i = 0; i < cols; i++) x[i] = (float) Math.sin(i);
                    float[] src = w.preparedLength() > 0 ? xp : x;
                    if (w.preparedLength() > 0) w.prepare(x, 0, xp, 0);
                    double s = cpuSecondsPerRun(() -> w.dotRows(src, 0, 0, rows, y, 0, false), 10, 0.5);
                    System.out.printf(Locale.ROOT, "decode %-8s %5dx%d  %7.2f GB/s per CPU-s%n", d, rows, cols, w.byteSize() / s / 1e9);
                }
            }
        }
        if (what.equals("all") || what.equals("prefill")) {
            int tokens = 128;
            for (String d : new String[] {"q8_2f", "q4_block", "bf16"}) {
                DType dt = DType.ofLabel(d);
                int rows = 1024, cols = 2048;
                WeightMatrix w = WeightMatrix.of(dt, encode(dt, rows, cols, arena), rows, cols);
                float[] x = new float[tokens * cols], y = new float[tokens * rows];
                for (int i = 0; i < x.length; i++) x[i] = (float) Math.sin(i);
                try (WorkerPool pool = new WorkerPool(1)) {
                    double s = cpuSecondsPerRun(() -> w.matmul(x, tokens, y, pool), 3, 1.0);
                    System.out.printf(Locale.ROOT, "prefill %-8s %dx%d x %d tokens  %6.1f GFLOP/s per CPU-s%n", d, rows, cols, tokens,
                            2.0 * rows * cols * tokens / s / 1e9);
                }
            }
        }
    }
}
