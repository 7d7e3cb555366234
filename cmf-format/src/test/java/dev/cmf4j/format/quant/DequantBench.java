package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CyclicBarrier;

/**
 * Dequantization throughput benchmark (a plain main, not a test): for each dtype, a random valid
 * payload of about {@code --mb} MB (far larger than the last-level cache) lives off-heap like a
 * memory-mapped tensor; it is decoded row block by row block into a small per-thread buffer that
 * stays in L1/L2, the way a matmul kernel consumes weights. Throughput is STORED bytes per second
 * (1 GB = 1e9 B), best and median of {@code --reps} full passes, on 1 thread and on {@code --threads}.
 *
 * <pre>
 * mvn -q -o -pl cmf-format test-compile
 * java --enable-native-access=ALL-UNNAMED -cp cmf-format/target/classes:cmf-format/target/test-classes \
 *      dev.cmf4j.format.quant.DequantBench --mb 256 --threads 2 --reps 7
 * </pre>
 */
public final class DequantBench {
    public static void main(String[] args) throws Exception {
        long mb = 256;
        int threads = Runtime.getRuntime().availableProcessors(), reps = 7, cols = 4096;
        List<DType> dtypes = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--mb" -> mb = Long.parseLong(args[++i]);
                case "--threads" -> threads = Integer.parseInt(args[++i]);
                case "--reps" -> reps = Integer.parseInt(args[++i]);
                case "--cols" -> cols = Integer.parseInt(args[++i]);
                case "--dtype" -> dtypes.add(DType.ofLabel(args[++i]));
                default -> throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        if (dtypes.isEmpty())
            for (DType t : DType.values()) if (Dequantizers.decodable(t)) dtypes.add(t);
        System.out.printf("dequant throughput, stored bytes/s (1 GB = 1e9 B); ~%d MB per tensor, %d cols, best/median of %d%n",
                mb, cols, reps);
        System.out.printf("%-9s %7s %7s | %8s %8s %8s | %8s %8s (%d threads)%n", "dtype", "MB", "bytes/w", "1T best", "1T med",
                "1T cpu", "NT best", "NT med", threads);
        for (DType t : dtypes) run(t, mb, cols, threads, reps);
    }

    private static void run(DType t, long mb, int cols, int threads, int reps) throws Exception {
        // Size the tensor from a one-row sample of the layout.
        byte[] one = RandomPayloads.of(t, new long[] {64, cols}, new Random(1));
        long rows = Math.max(threads * 64L, mb * 1_000_000L * 64 / one.length / 64 * 64);
        long[] shape = {rows, cols};
        try (Arena arena = Arena.ofShared()) {
            MemorySegment data = build(t, shape, arena);
            RowDecoder dec = Dequantizers.of(t).decoder(data, shape);
            double bpw = data.byteSize() / (double) (rows * cols);
            double[] single = measure(dec, data.byteSize(), 1, reps);
            double[] multi = measure(dec, data.byteSize(), threads, reps);
            System.out.printf("%-9s %7.1f %7.3f | %8.2f %8.2f %8.2f | %8.2f %8.2f%n", t.label, data.byteSize() / 1e6, bpw,
                    single[0], single[1], single[2], multi[0], multi[1]);
        }
    }

    /** A payload of the full shape, built from 64-row random blocks (headers regenerated where rows matter). */
    private static MemorySegment build(DType t, long[] shape, Arena arena) {
        byte[] p = RandomPayloads.of(t, shape, new Random(42));
        MemorySegment s = arena.allocate(p.length, 4096);
        MemorySegment.copy(p, 0, s, ValueLayout.JAVA_BYTE, 0, p.length);
        return s;
    }

    /**
     * {best, median, best per CPU-second} GB/s over {@code reps} passes of the whole tensor split
     * across {@code threads}. The CPU-time figure divides by the busiest worker's own CPU time, so
     * it stays meaningful on a machine shared with other jobs (wall time then includes waiting).
     */
    private static double[] measure(RowDecoder dec, long bytes, int threads, int reps) throws Exception {
        int block = 16;
        long rows = dec.rows();
        double[] gbs = new double[reps + 2];
        long[][] cpu = new long[threads][reps + 2];
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        CyclicBarrier start = new CyclicBarrier(threads + 1), end = new CyclicBarrier(threads + 1);
        int passes = reps + 2;                          // 2 warm-up passes
        Thread[] ts = new Thread[threads];
        for (int k = 0; k < threads; k++) {
            long lo = rows * k / threads, hi = rows * (k + 1) / threads;
            int worker = k;
            ts[k] = Thread.ofPlatform().start(() -> {
                float[] out = new float[(int) (block * dec.cols())];
                try {
                    for (int p = 0; p < passes; p++) {
                        start.await();
                        long c0 = mx.getCurrentThreadCpuTime();
                        for (long r = lo; r < hi; r += block) dec.rows(r, (int) Math.min(block, hi - r), out, 0);
                        cpu[worker][p] = mx.getCurrentThreadCpuTime() - c0;
                        end.await();
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
        }
        for (int p = 0; p < passes; p++) {
            long t0 = System.nanoTime();            // before the release: no worker starts earlier
            start.await();
            end.await();
            gbs[p] = bytes / ((System.nanoTime() - t0) * 1e-9) / 1e9;
        }
        for (Thread t : ts) t.join();
        double[] timed = Arrays.copyOfRange(gbs, 2, passes);
        Arrays.sort(timed);
        double bestCpu = 0;
        for (int p = 2; p < passes; p++) {
            long busiest = 0;
            for (long[] c : cpu) busiest = Math.max(busiest, c[p]);
            bestCpu = Math.max(bestCpu, bytes / (busiest * 1e-9) / 1e9);
        }
        return new double[] {timed[timed.length - 1], timed[timed.length / 2], bestCpu};
    }
}
