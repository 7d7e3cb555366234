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

    /** bf16 values per decode block: one load of L int lanes, two halves each. */
    private static final int BLOCK = 2 * L;

    /** Decode layout: per block of 2L columns the L even ones, then the L odd ones; the tail as is. */
    @Override int preparedLength() { return Simd.VECTOR ? cols : 0; }

    @Override
    void prepare(float[] x, int xOff, float[] dst, int dOff) {
        int n = cols, full = n - n % BLOCK;
        for (int b = 0; b < full; b += BLOCK)
            for (int i = 0; i < L; i++) {
                dst[dOff + b + i] = x[xOff + b + 2 * i];
                dst[dOff + b + L + i] = x[xOff + b + 2 * i + 1];
            }
        for (int c = full; c < n; c++) dst[dOff + c] = x[xOff + c];
    }

    /**
     * Decode. Bound: memory bandwidth. Two bf16 per int lane: the low one is {@code v << 16}, the
     * high one {@code v & 0xFFFF0000}, both already f32 bit patterns — one op per L weights, no
     * widening shuffle — against the activation split into even and odd columns.
     */
    @Override
    void dotRows(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        int n = cols;
        int full = Simd.VECTOR ? n - n % BLOCK : 0, quads = full - full % (4 * BLOCK);
        for (int r = r0; r < r1; r++) {
            long base = 2L * (row0 + r) * n;
            float s = 0f;
            int c = 0;
            if (full > 0) {
                // four loads a step into eight chains: faster from DRAM than two loads into four (docs/CPU_KERNELS.md,
                // "Boxed vectors")
                FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
                for (; c < quads; c += 4 * BLOCK) {
                    long o = base + 2L * c;
                    int xb = xo + c;
                    IntVector v0 = IntVector.fromMemorySegment(Simd.I, m, o, LE);
                    IntVector v1 = IntVector.fromMemorySegment(Simd.I, m, o + 2L * BLOCK, LE);
                    IntVector v2 = IntVector.fromMemorySegment(Simd.I, m, o + 4L * BLOCK, LE);
                    IntVector v3 = IntVector.fromMemorySegment(Simd.I, m, o + 6L * BLOCK, LE);
                    a0 = v0.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xb), a0);
                    a1 = v0.and(0xFFFF0000).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xb + L), a1);
                    a2 = v1.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xb + BLOCK), a2);
                    a3 = v1.and(0xFFFF0000).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xb + BLOCK + L), a3);
                    a4 = v2.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xb + 2 * BLOCK), a4);
                    a5 = v2.and(0xFFFF0000).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xb + 2 * BLOCK + L), a5);
                    a6 = v3.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xb + 3 * BLOCK), a6);
                    a7 = v3.and(0xFFFF0000).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xb + 3 * BLOCK + L), a7);
                }
                for (; c < full; c += BLOCK) {
                    IntVector v = IntVector.fromMemorySegment(Simd.I, m, base + 2L * c, LE);
                    a0 = v.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xo + c), a0);
                    a1 = v.and(0xFFFF0000).reinterpretAsFloats().fma(FloatVector.fromArray(F, x, xo + c + L), a1);
                }
                s = a0.add(a1).add(a2.add(a3)).add(a4.add(a5).add(a6.add(a7))).reduceLanes(VectorOperators.ADD);
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
            for (; j < vec; j += L)                     // the top half of an int lane is the bf16's float
                ((IntVector) ShortVector.fromMemorySegment(Simd.S, m, base + 2L * j, LE).convertShape(VectorOperators.S2I, Simd.I, 0))
                        .lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats().intoArray(dst, d + j);
            for (; j < nk; j++) dst[d + j] = Simd.bf16(m, base + 2L * j);
        }
    }
}
