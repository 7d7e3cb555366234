package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static dev.cmf4j.backend.cpu.kernel.Simd.F;

/**
 * q4_block: groups of 32 over the FLATTENED tensor, two planes: {@code [nibbles: 16 B per
 * group][f16 scale per group]} (4.5 bits per weight); w = (q − 8)·s. When cols is a multiple of 32
 * (every real matrix) row r is groups r·cols/32 .. — contiguous nibbles and contiguous scales — and
 * the vector path runs (see {@link Q4}); otherwise groups straddle rows and a scalar path computes
 * each weight's group from its flat index.
 *
 * <p>Decode reads 16 + 2 bytes per 32 weights: two (AVX2) or one (AVX-512) L-byte loads,
 * zero-extend, mask and shift to the two nibble vectors, convert, FMA with the reordered
 * activation; one scale per group multiplies the group's partial vector.
 */
final class Q4BlockMatrix extends WeightMatrix {
    private final boolean aligned;
    private final int gpr;
    private final long scalesOff;

    Q4BlockMatrix(MemorySegment data, long storedRows, int cols, long row0, int rows) {
        super(data, storedRows, cols, row0, rows, DType.Q4_BLOCK);
        this.aligned = cols % 32 == 0;
        this.gpr = cols / 32;
        this.scalesOff = (storedRows * cols + 31) / 32 * 16;
    }

    @Override WeightMatrix window(long firstRow, int n) { return new Q4BlockMatrix(data, storedRows, cols, firstRow, n); }

    @Override public DType dtype() { return DType.Q4_BLOCK; }

    @Override int preparedLength() { return aligned && Simd.VECTOR ? Q4.preparedLength(gpr) : 0; }

    @Override
    void prepare(float[] x, int xOff, float[] dst, int dOff) {
        Q4.prepare(x, xOff, cols, gpr, dst, dOff);
    }

    @Override
    void dotRows(float[] xp, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        if (!aligned || !Simd.VECTOR) { dotRowsScalar(xp, xo, r0, r1, y, yo, add); return; }
        MemorySegment m = data;
        int groups = gpr, sums = xo + groups * 32;
        for (int r = r0; r < r1; r++) {
            long g0 = (row0 + r) * groups;
            long o = g0 * 16, so = scalesOff + 2 * g0;
            FloatVector acc0 = FloatVector.zero(F), acc1 = acc0;
            float corr = 0f;
            int g = 0;
            for (; g + 1 < groups; g += 2, o += 32, so += 4) {     // two groups per step: two independent chains
                float s0 = Simd.f16(m, so), s1 = Simd.f16(m, so + 2);
                acc0 = Q4.groupDot(m, o, xp, xo + g * 32, FloatVector.zero(F)).fma(FloatVector.broadcast(F, s0), acc0);
                acc1 = Q4.groupDot(m, o + 16, xp, xo + g * 32 + 32, FloatVector.zero(F)).fma(FloatVector.broadcast(F, s1), acc1);
                corr += s0 * xp[sums + g] + s1 * xp[sums + g + 1];
            }
            if (g < groups) {
                float s0 = Simd.f16(m, so);
                acc0 = Q4.groupDot(m, o, xp, xo + g * 32, FloatVector.zero(F)).fma(FloatVector.broadcast(F, s0), acc0);
                corr += s0 * xp[sums + g];
            }
            float s = acc0.add(acc1).reduceLanes(VectorOperators.ADD) - 8f * corr;
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    /** The weight at flat index i. */
    private float weight(long i) {
        long g = i >>> 5;
        int j = (int) (i & 31);
        int b = data.get(ValueLayout.JAVA_BYTE, g * 16 + (j >> 1));
        int q = (j & 1) == 0 ? b & 15 : (b >>> 4) & 15;
        return (q - 8) * Simd.f16(data, scalesOff + 2 * g);
    }

    /** Any shape: each weight's group from its flat index (groups may straddle rows). */
    private void dotRowsScalar(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        for (int r = r0; r < r1; r++) {
            float s = 0f;
            long i = (row0 + r) * cols;
            for (int c = 0; c < cols; c++, i++) s += weight(i) * x[xo + c];
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    @Override boolean groupPermuted() { return aligned && Simd.VECTOR; }

    @Override
    void unpack(int r0, int nr, int k0, int nk, float[] dst, int dOff, int ld) {
        MemorySegment m = data;
        boolean permuted = groupPermuted();
        for (int i = 0; i < nr; i++) {
            int d = dOff + i * ld;
            long flat = (row0 + r0 + i) * cols + k0;
            if (permuted) {
                long g = flat >>> 5;
                for (int j = 0; j < nk; j += 32, g++)
                    Q4.unpackGroupPermuted(m, g * 16, Simd.f16(m, scalesOff + 2 * g), dst, d + j);
            } else if (aligned) {
                long g = flat >>> 5;
                for (int j = 0; j < nk; j += 32, g++)
                    Q4.unpackGroup(m, g * 16, Simd.f16(m, scalesOff + 2 * g), dst, d + j, Math.min(32, nk - j));
            } else {
                for (int j = 0; j < nk; j++, flat++) dst[d + j] = weight(flat);
            }
        }
    }
}
