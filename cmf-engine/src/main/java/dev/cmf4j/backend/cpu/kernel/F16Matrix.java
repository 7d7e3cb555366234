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
 * IEEE f16 weights. The Vector API has no half-float conversion, so lanes are widened by bit
 * arithmetic: exponent+mantissa shifted into f32 position and multiplied by 2^112 (which also
 * renormalises subnormals exactly), sign OR-ed back. Finite values convert exactly; inf/NaN
 * weights would come out as large finite numbers (checkpoints hold none).
 */
final class F16Matrix extends WeightMatrix {
    private static final float TWO_112 = 0x1p112f;

    F16Matrix(MemorySegment data, long storedRows, int cols, long row0, int rows) {
        super(data, storedRows, cols, row0, rows, DType.F16);
    }

    @Override WeightMatrix window(long firstRow, int n) { return new F16Matrix(data, storedRows, cols, firstRow, n); }

    @Override public DType dtype() { return DType.F16; }

    /**
     * L f16 values at byte offset {@code o}, widened to f32, into {@code dst[d..d+L)}. Sign-extended and shifted: bit 31
     * is the sign, bits 27..13 exponent and mantissa, bits 30..28 copies of the sign that the mask clears; the multiply
     * keeps the sign. {@link #dotRows} writes the same steps out (docs/CPU_KERNELS.md, "C2's node budget").
     */
    static void widen(MemorySegment m, long o, float[] dst, int d) {
        ((IntVector) ShortVector.fromMemorySegment(Simd.S, m, o, LE).convertShape(VectorOperators.S2I, Simd.I, 0))
                .lanewise(VectorOperators.LSHL, 13).and(0x8FFFE000).reinterpretAsFloats().mul(TWO_112).intoArray(dst, d);
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
                    // widen()'s steps written out: a helper passing a vector is boxed once C2's node budget is spent
                    IntVector h0 = (IntVector) ShortVector.fromMemorySegment(Simd.S, m, o, LE).convertShape(VectorOperators.S2I, Simd.I, 0);
                    IntVector h1 = (IntVector) ShortVector.fromMemorySegment(Simd.S, m, o + 2L * L, LE).convertShape(VectorOperators.S2I, Simd.I, 0);
                    IntVector h2 = (IntVector) ShortVector.fromMemorySegment(Simd.S, m, o + 4L * L, LE).convertShape(VectorOperators.S2I, Simd.I, 0);
                    IntVector h3 = (IntVector) ShortVector.fromMemorySegment(Simd.S, m, o + 6L * L, LE).convertShape(VectorOperators.S2I, Simd.I, 0);
                    a0 = h0.lanewise(VectorOperators.LSHL, 13).and(0x8FFFE000).reinterpretAsFloats().mul(TWO_112).fma(FloatVector.fromArray(F, x, xo + c), a0);
                    a1 = h1.lanewise(VectorOperators.LSHL, 13).and(0x8FFFE000).reinterpretAsFloats().mul(TWO_112).fma(FloatVector.fromArray(F, x, xo + c + L), a1);
                    a2 = h2.lanewise(VectorOperators.LSHL, 13).and(0x8FFFE000).reinterpretAsFloats().mul(TWO_112).fma(FloatVector.fromArray(F, x, xo + c + 2 * L), a2);
                    a3 = h3.lanewise(VectorOperators.LSHL, 13).and(0x8FFFE000).reinterpretAsFloats().mul(TWO_112).fma(FloatVector.fromArray(F, x, xo + c + 3 * L), a3);
                }
                s = a0.add(a1).add(a2.add(a3)).reduceLanes(VectorOperators.ADD);
            }
            for (; c < n; c++) s += Simd.f16(m, base + 2L * c) * x[xo + c];
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
            for (; j < vec; j += L) widen(m, base + 2L * j, dst, d + j);
            for (; j < nk; j++) dst[d + j] = Simd.f16(m, base + 2L * j);
        }
    }
}
