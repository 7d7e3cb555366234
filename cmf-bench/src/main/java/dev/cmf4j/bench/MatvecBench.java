package dev.cmf4j.bench;

import dev.cmf4j.backend.cpu.kernel.WeightMatrix;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.format.DType;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

import java.lang.foreign.Arena;
import java.util.concurrent.TimeUnit;

/**
 * Decode: one matvec per op over an [rows, cols] matrix, rotating over enough copies (256 MiB in
 * all) that every op reads its weights from DRAM, as decode does. GB/s = byteSize / time per op;
 * {@link KernelBench} prints it next to the machine's measured read bandwidth.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 4, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--add-modules", "jdk.incubator.vector", "-Xmx6g"})
public class MatvecBench {
    @Param({"q8_2f", "q4_block", "bf16", "q8_row", "q4tp", "f16", "f32"})
    public String dtype;
    @Param({"8192x2048"})
    public String shape;
    @Param({"2"})
    public int threads;

    WeightMatrix[] ms;
    float[] x, y;
    int next;
    WorkerPool pool;
    Arena arena;

    @Setup(Level.Trial)
    public void setup() {
        int rows = Integer.parseInt(shape.split("x")[0]), cols = Integer.parseInt(shape.split("x")[1]);
        DType d = DType.ofLabel(dtype);
        arena = Arena.ofShared();
        ms = BenchWeights.matrices(d, rows, cols, BenchWeights.copiesFor(d, rows, cols, 256L << 20), arena);
        x = BenchWeights.gaussian(7, cols, 1f);
        y = new float[rows];
        pool = new WorkerPool(threads);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        pool.close();
        arena.close();
    }

    @Benchmark
    public float matvec() {
        WeightMatrix w = ms[next];
        next = next + 1 == ms.length ? 0 : next + 1;
        w.matvec(x, y, pool);
        return y[0];
    }

    /** Bytes one op reads, for the GB/s column. */
    public static long bytesPerOp(String dtype, String shape) {
        String[] p = shape.split("x");
        return WeightMatrix.byteSize(DType.ofLabel(dtype), Long.parseLong(p[0]), Long.parseLong(p[1]));
    }
}
