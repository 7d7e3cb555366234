package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static dev.cmf4j.backend.cpu.kernel.Simd.F;
import static dev.cmf4j.backend.cpu.kernel.Simd.L;

/**
 * q4tp: a plane of nibbles {@code rows·gpr·16} (each row's groups contiguous, the last group of a
 * row zero padded), then per row {@code f16 lo, f16 step}, then per row a 5-bit code per group
 * (LSB-first bit stream, row padded to a byte). Group scale = ladder[code], ladder t0 = exp2(lo),
 * t[c] = t[c−1]·exp2(step) in f32 (the normative order). Weights as q4_block: (q − 8)·scale.
 *
 * <p>exp2(lo) and exp2(step) are computed once per row at construction (8 bytes per row on the
 * heap); each call rebuilds a row's 32-rung ladder with 31 multiplies, which overlaps the row's
 * loads. Decode then runs the shared {@link Q4} group dot.
 */
final class Q4tpMatrix extends WeightMatrix {
    private final int gpr;
    private final int codeBytes;
    private final long codesOff;
    /** Per row exp2(lo) and exp2(step); index 0 is stored row {@code ladderRow0}. */
    private final float[] ladderT0, ladderRatio;
    private final long ladderRow0;

    Q4tpMatrix(MemorySegment data, long storedRows, int cols, long row0, int rows) {
        super(data, storedRows, cols, row0, rows, DType.Q4TP);
        this.gpr = Simd.ceilDiv(cols, 32);
        this.codeBytes = Simd.ceilDiv(gpr * 5, 8);
        long plane = storedRows * gpr * 16;
        this.codesOff = plane + 4L * storedRows;
        this.ladderT0 = new float[rows];
        this.ladderRatio = new float[rows];
        this.ladderRow0 = row0;
        for (int r = 0; r < rows; r++) {
            long sr = row0 + r;
            ladderT0[r] = ReferenceKernels.exp2(Simd.f16(data, plane + 4L * sr));
            ladderRatio[r] = ReferenceKernels.exp2(Simd.f16(data, plane + 4L * sr + 2));
        }
    }

    private Q4tpMatrix(Q4tpMatrix whole, long row0, int rows) {
        super(whole.data, whole.storedRows, whole.cols, row0, rows, DType.Q4TP);
        this.gpr = whole.gpr;
        this.codeBytes = whole.codeBytes;
        this.codesOff = whole.codesOff;
        this.ladderT0 = whole.ladderT0;
        this.ladderRatio = whole.ladderRatio;
        this.ladderRow0 = whole.ladderRow0;
    }

    @Override WeightMatrix window(long firstRow, int n) { return new Q4tpMatrix(this, firstRow, n); }

    @Override public DType dtype() { return DType.Q4TP; }

    @Override int preparedLength() { return Simd.VECTOR ? Q4.preparedLength(gpr) : 0; }

    @Override
    void prepare(float[] x, int xOff, float[] dst, int dOff) {
        Q4.prepare(x, xOff, cols, gpr, dst, dOff);
    }

    private void ladder(int r, float[] t) {
        int i = (int) (row0 + r - ladderRow0);
        float v = ladderT0[i], ratio = ladderRatio[i];
        t[0] = v;
        for (int c = 1; c < 32; c++) t[c] = v = v * ratio;
    }

    /** The 5-bit code of group g of the row whose code stream starts at {@code codes}. */
    private int code(long codes, int g) {
        int bit = g * 5, at = bit >>> 3;
        int v = data.get(ValueLayout.JAVA_BYTE, codes + at) & 0xFF;
        if (at + 1 < codeBytes) v |= (data.get(ValueLayout.JAVA_BYTE, codes + at + 1) & 0xFF) << 8;
        return (v >>> (bit & 7)) & 31;
    }

    private static final java.lang.foreign.ValueLayout.OfLong LONG = java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED.withOrder(Simd.LE);

    /**
     * sc[g] = ladder rung (code g) for the row whose codes start at {@code codes}, the ladder being
     * lad[c·L + j]: 8 codes per 5 bytes, read as one long.
     */
    private void rowScales(long codes, float[] lad, int j, float[] sc) {
        float[] t = lad;
        int g = 0;
        long end = data.byteSize();
        for (; g + 8 <= gpr && codes + 5L * (g >>> 3) + 8 <= end; g += 8) {
            long v = data.get(LONG, codes + 5L * (g >>> 3));       // bits 0..39: codes g..g+7
            sc[g] = t[((int) v & 31) * L + j];
            sc[g + 1] = t[((int) (v >>> 5) & 31) * L + j];
            sc[g + 2] = t[((int) (v >>> 10) & 31) * L + j];
            sc[g + 3] = t[((int) (v >>> 15) & 31) * L + j];
            sc[g + 4] = t[((int) (v >>> 20) & 31) * L + j];
            sc[g + 5] = t[((int) (v >>> 25) & 31) * L + j];
            sc[g + 6] = t[((int) (v >>> 30) & 31) * L + j];
            sc[g + 7] = t[((int) (v >>> 35) & 31) * L + j];
        }
        for (; g < gpr; g++) sc[g] = t[code(codes, g) * L + j];
    }

    @Override
    void dotRows(float[] xp, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        float[] t = new float[32];                          // one ladder per call (chunk), reused per row
        if (!Simd.VECTOR) { dotRowsScalar(xp, xo, r0, r1, y, yo, add, t); return; }
        MemorySegment m = data;
        float[] sc = new float[Q4.scaleLength(gpr)];
        float[] lad = new float[32 * L];                    // ladders of L rows at once: lad[c·L + j]
        for (int rb = r0; rb < r1; rb += L) {
            // the L rows' ladders side by side: the same sequential f32 products as the scalar definition,
            // one vector multiply per rung instead of L dependent chains
            int i0 = (int) (row0 + rb - ladderRow0);
            var lanes = Simd.F.indexInRange(0, r1 - rb);
            FloatVector tv = FloatVector.fromArray(Simd.F, ladderT0, i0, lanes);
            FloatVector rv = FloatVector.fromArray(Simd.F, ladderRatio, i0, lanes);
            for (int c = 0; c < 32; c++, tv = tv.mul(rv)) tv.intoArray(lad, c * L);
            for (int r = rb, rEnd = Math.min(r1, rb + L); r < rEnd; r++) {
                rowScales(codesOff + (row0 + r) * codeBytes, lad, r - rb, sc);
                float s = Q4.dotRow(m, (row0 + r) * gpr * 16, gpr, sc, xp, xo);
                y[yo + r] = add ? y[yo + r] + s : s;
            }
        }
    }

    private void dotRowsScalar(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add, float[] t) {
        float[] row = new float[gpr * 32];
        for (int r = r0; r < r1; r++) {
            unpack(r, 1, 0, cols, row, 0, cols);
            float s = 0f;
            for (int c = 0; c < cols; c++) s += row[c] * x[xo + c];
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    @Override boolean groupPermuted() { return cols % 32 == 0 && Simd.VECTOR; }

    @Override
    void unpack(int r0, int nr, int k0, int nk, float[] dst, int dOff, int ld) {
        float[] t = new float[32];
        MemorySegment m = data;
        boolean permuted = groupPermuted();
        for (int i = 0; i < nr; i++) {
            int r = r0 + i;
            ladder(r, t);
            long codes = codesOff + (row0 + r) * codeBytes;
            int d = dOff + i * ld;
            if (permuted) {
                for (int j = 0; j < nk; j += 32) {
                    int g = (k0 + j) >>> 5;
                    Q4.unpackGroupPermuted(m, ((row0 + r) * gpr + g) * 16, t[code(codes, g)], dst, d + j);
                }
                continue;
            }
            for (int j = 0; j < nk; j += 32) {
                int g = (k0 + j) >>> 5;
                Q4.unpackGroup(m, ((row0 + r) * gpr + g) * 16, t[code(codes, g)], dst, d + j, Math.min(32, nk - j));
            }
        }
    }
}
