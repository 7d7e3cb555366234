package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;

import java.lang.foreign.MemorySegment;

import static dev.cmf4j.backend.cpu.kernel.Simd.F;
import static dev.cmf4j.backend.cpu.kernel.Simd.L;
import static dev.cmf4j.backend.cpu.kernel.Simd.LE;

/**
 * bf16 weights: the top half of an f32, so widening is a 16-bit shift of the sign-extended lane
 * (load L halves, widen to ints, shift, reinterpret: 3 cheap ops per L weights, then one FMA).
 */
final class Bf16Matrix extends WeightMatrix {

    Bf16Matrix(MemorySegment data, long storedRows, int cols, long row0, int rows) {
        super(data, storedRows, cols, row0, rows, DType.BF16);
    }

    @Override WeightMatrix window(long firstRow, int n) { return new Bf16Matrix(data, storedRows, cols, firstRow, n); }

    @Override public DType dtype() { return DType.BF16; }

    /** L bf16 values at byte offset {@code o}, widened to f32. */
    static FloatVector load(MemorySegment m, long o) {
        return ((IntVector) ShortVector.fromMemorySegment(Simd.S, m, o, LE).convertShape(VectorOperators.S2I, Simd.I, 0))
                .lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats();
    }

    @Override
    void dotRows(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        int n = cols;
        int vec = Simd.VECTOR ? n - n % (4 * L) : 0;
        for (int r = r0; r < r1; r++) {
            long base = 2L * (row0 + r) * n;
            float s = 0f;
            int c = 0;
            if (vec > 0) {
                FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0;
                for (; c < vec; c += 4 * L) {
                    long o = base + 2L * c;
                    a0 = load(m, o).fma(FloatVector.fromArray(F, x, xo + c), a0);
                    a1 = load(m, o + 2L * L).fma(FloatVector.fromArray(F, x, xo + c + L), a1);
                    a2 = load(m, o + 4L * L).fma(FloatVector.fromArray(F, x, xo + c + 2 * L), a2);
                    a3 = load(m, o + 6L * L).fma(FloatVector.fromArray(F, x, xo + c + 3 * L), a3);
                }
                s = a0.add(a1).add(a2.add(a3)).reduceLanes(VectorOperators.ADD);
            }
            for (; c < n; c++) s += Simd.bf16(m, base + 2L * c) * x[xo + c];
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    @Override
    void unpack(int r0, int nr, int k0, int nk, float[] dst, int dOff, int ld) {
        MemorySegment m = data;
        int vec = Simd.VECTOR ? nk - nk % L : 0;
        for (int i = 0; i < nr; i++) {
            long base = 2L * ((row0 + r0 + i) * cols + k0);
            int d = dOff + i * ld;
            int j = 0;
            for (; j < vec; j += L) load(m, base + 2L * j).intoArray(dst, d + j);
            for (; j < nk; j++) dst[d + j] = Simd.bf16(m, base + 2L * j);
        }
    }
}
