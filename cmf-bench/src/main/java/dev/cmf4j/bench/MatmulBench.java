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

/** Prefill: one [rows, cols] × [tokens] product per op; GFLOP/s = 2·rows·cols·tokens / time. */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 4, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = {"--add-modules", "jdk.incubator.vector", "-Xmx4g"})
public class MatmulBench {
    @Param({"q8_2f", "q4_block", "bf16"})
    public String dtype;
    @Param({"2048x2048"})
    public String shape;
    @Param({"128"})
    public int tokens;
    @Param({"2"})
    public int threads;

    WeightMatrix w;
    float[] x, y;
    WorkerPool pool;
    Arena arena;

    @Setup(Level.Trial)
    public void setup() {
        int rows = Integer.parseInt(shape.split("x")[0]), cols = Integer.parseInt(shape.split("x")[1]);
        DType d = DType.ofLabel(dtype);
        arena = Arena.ofShared();
        w = BenchWeights.matrices(d, rows, cols, 1, arena)[0];
        x = BenchWeights.gaussian(7, tokens * cols, 1f);
        y = new float[tokens * rows];
        pool = new WorkerPool(threads);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        pool.close();
        arena.close();
    }

    @Benchmark
    public float matmul() {
        w.matmul(x, tokens, y, pool);
        return y[0];
    }
}
