package dev.cmf4j.bench;

import dev.cmf4j.backend.cpu.kernel.WeightMatrix;
import dev.cmf4j.convert.quant.Quantizer;
import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.SplittableRandom;

/** Random weights encoded by the project's own quantizers, copied into as many segments as asked. */
final class BenchWeights {
    private BenchWeights() {}

    static float[] gaussian(long seed, int n, float scale) {
        SplittableRandom rnd = new SplittableRandom(seed);
        float[] v = new float[n];
        for (int i = 0; i < n; i++) {
            // Box-Muller is slow; a sum of uniforms is close enough for benchmark data
            double s = rnd.nextDouble() + rnd.nextDouble() + rnd.nextDouble() - 1.5;
            v[i] = (float) (s * scale);
        }
        return v;
    }

    /** {@code copies} separate segments, each holding the same encoded [rows, cols] matrix. */
    static MemorySegment[] encode(DType dtype, int rows, int cols, int copies, Arena arena) {
        float[] w = gaussian(42, rows * cols, 0.05f);
        long[] shape = {rows, cols};
        Quantizer q = Quantizer.of(dtype);
        long n = q.encodedSize(shape);
        MemorySegment first = arena.allocate(n, 4096);
        q.encode(w, shape, first);
        MemorySegment[] out = new MemorySegment[copies];
        out[0] = first;
        for (int i = 1; i < copies; i++) {
            out[i] = arena.allocate(n, 4096);
            out[i].copyFrom(first);
        }
        return out;
    }

    static WeightMatrix[] matrices(DType dtype, int rows, int cols, int copies, Arena arena) {
        MemorySegment[] segs = encode(dtype, rows, cols, copies, arena);
        WeightMatrix[] ms = new WeightMatrix[copies];
        for (int i = 0; i < copies; i++) ms[i] = WeightMatrix.of(dtype, segs[i], rows, cols);
        return ms;
    }

    /** Copies needed so that one round over them reads at least {@code bytes} (defeats the caches). */
    static int copiesFor(DType dtype, int rows, int cols, long bytes) {
        long one = WeightMatrix.byteSize(dtype, rows, cols);
        return (int) Math.max(2, (bytes + one - 1) / one);
    }
}
