package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static dev.cmf4j.backend.cpu.kernel.Simd.F;
import static dev.cmf4j.backend.cpu.kernel.Simd.L;
import static dev.cmf4j.backend.cpu.kernel.Simd.LE;

/**
 * q8_row and q8_2f: {@code [i8 q: rows·cols][f16 row_scale: rows]} and, for q8_2f, a trailing
 * {@code [f16 col_field: cols]}; w = q·row[r] (·col[c]).
 *
 * <p>Decode: the column field is folded into the activation once per call (x'[c] = col[c]·x[c]),
 * so each row is a plain dot of int8 weights with floats, scaled once by the row scale at the end
 * (see {@link #dotRows} for the inner loop). An int8-activation variant with integer accumulation
 * was measured slower on AVX2 (docs/CPU_KERNELS.md).
 */
final class Q8Matrix extends WeightMatrix {
    private final boolean twoField;
    private final long scalesOff;
    /** The column field widened once at construction (cols floats; null for q8_row). */
    private final float[] colField;

    Q8Matrix(MemorySegment data, long storedRows, int cols, long row0, int rows, boolean twoField) {
        super(data, storedRows, cols, row0, rows, twoField ? DType.Q8_2F : DType.Q8_ROW);
        this.twoField = twoField;
        this.scalesOff = storedRows * cols;
        if (twoField) {
            colField = new float[cols];
            long off = scalesOff + 2L * storedRows;
            for (int c = 0; c < cols; c++) colField[c] = Simd.f16(data, off + 2L * c);
        } else {
            colField = null;
        }
    }

    private Q8Matrix(Q8Matrix whole, long row0, int rows) {
        super(whole.data, whole.storedRows, whole.cols, row0, rows, whole.dtype());
        this.twoField = whole.twoField;
        this.scalesOff = whole.scalesOff;
        this.colField = whole.colField;
    }

    @Override WeightMatrix window(long firstRow, int n) { return new Q8Matrix(this, firstRow, n); }

    @Override public DType dtype() { return twoField ? DType.Q8_2F : DType.Q8_ROW; }

    /** Bytes per decode block: one load of L int lanes. */
    private static final int BLOCK = 4 * L;
    private static final float[] POW256 = {1f, 0x1p-8f, 0x1p-16f, 1f};

    /**
     * Decode layout of the activation (x' = col ⊙ x for q8_2f, x for q8_row): per block of 4L
     * columns, for byte k = 0..3 the L lanes' elements 4i+k times 256^−k; then the tail columns
     * (cols % 4L) as they are; then Σx' over the blocks.
     */
    @Override int preparedLength() { return Simd.VECTOR ? cols + 1 : 0; }

    @Override
    boolean samePreparation(WeightMatrix o) {
        return super.samePreparation(o) && ((Q8Matrix) o).colField == colField;   // q8_2f: only the same tensor's field
    }

    @Override
    void prepare(float[] x, int xOff, float[] dst, int dOff) {
        float[] col = colField;
        int n = cols, full = n - n % BLOCK;
        float sum = 0f;
        for (int b = 0; b < full; b += BLOCK)
            for (int i = 0; i < L; i++)
                for (int k = 0; k < 4; k++) {
                    int c = b + 4 * i + k;
                    float v = col == null ? x[xOff + c] : x[xOff + c] * col[c];
                    dst[dOff + b + k * L + i] = v * POW256[k];
                    sum += v;
                }
        for (int c = full; c < n; c++) dst[dOff + c] = col == null ? x[xOff + c] : x[xOff + c] * col[c];
        dst[dOff + n] = sum;
    }

    /** L int8 weights at byte offset {@code o}, widened to f32 (for unpack). */
    static FloatVector load(MemorySegment m, long o) {
        return (FloatVector) ByteVector.fromMemorySegment(Simd.B, m, o, LE).convertShape(VectorOperators.B2F, F, 0);
    }

    /**
     * Decode. Bound: memory bandwidth; the loop must outrun it. The weights are read as int lanes
     * (4 bytes each) and flipped to offset binary (q + 128, one XOR per 4L bytes); byte k of a lane
     * is then {@code v & (255 << 8k)} = (q+128)·256^k, exact as a float, so against the activation
     * pre-scaled by 256^−k each weight costs an AND, a convert and an FMA — no shuffles (the
     * sign-extending byte→int widening runs on one port and capped this loop at ~60% of the
     * speed). Σ(q+128)·x' − 128·Σx' = Σq·x'.
     */
    @Override
    void dotRows(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        if (!Simd.VECTOR) { dotRowsScalar(x, xo, r0, r1, y, yo, add); return; }
        MemorySegment m = data;
        int n = cols, full = n - n % BLOCK, pairs = full - full % (2 * BLOCK);
        float sumx = x[xo + n];
        IntVector flip = IntVector.broadcast(Simd.I, 0x80808080), b0 = IntVector.broadcast(Simd.I, 0xFF),
                b1 = IntVector.broadcast(Simd.I, 0xFF00), b2 = IntVector.broadcast(Simd.I, 0xFF0000);
        for (int r = r0; r < r1; r++) {
            long sr = row0 + r;
            long base = sr * n;
            FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0;
            int c = 0;
            for (; c < pairs; c += 2 * BLOCK) {              // two blocks per step: four independent chains
                long o = base + c;
                int xb = xo + c;
                IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE).lanewise(VectorOperators.XOR, flip);
                IntVector u = IntVector.fromMemorySegment(Simd.I, m, o + BLOCK, LE).lanewise(VectorOperators.XOR, flip);
                a0 = cvt(v.and(b0)).fma(FloatVector.fromArray(F, x, xb), a0);
                a1 = cvt(v.and(b1)).fma(FloatVector.fromArray(F, x, xb + L), a1);
                a2 = cvt(v.and(b2)).fma(FloatVector.fromArray(F, x, xb + 2 * L), a2);
                a3 = cvt(v.lanewise(VectorOperators.LSHR, 24)).fma(FloatVector.fromArray(F, x, xb + 3 * L), a3);
                a0 = cvt(u.and(b0)).fma(FloatVector.fromArray(F, x, xb + BLOCK), a0);
                a1 = cvt(u.and(b1)).fma(FloatVector.fromArray(F, x, xb + BLOCK + L), a1);
                a2 = cvt(u.and(b2)).fma(FloatVector.fromArray(F, x, xb + BLOCK + 2 * L), a2);
                a3 = cvt(u.lanewise(VectorOperators.LSHR, 24)).fma(FloatVector.fromArray(F, x, xb + BLOCK + 3 * L), a3);
            }
            if (c < full) {
                IntVector v = IntVector.fromMemorySegment(Simd.I, m, base + c, LE).lanewise(VectorOperators.XOR, flip);
                int xb = xo + c;
                a0 = cvt(v.and(b0)).fma(FloatVector.fromArray(F, x, xb), a0);
                a1 = cvt(v.and(b1)).fma(FloatVector.fromArray(F, x, xb + L), a1);
                a2 = cvt(v.and(b2)).fma(FloatVector.fromArray(F, x, xb + 2 * L), a2);
                a3 = cvt(v.lanewise(VectorOperators.LSHR, 24)).fma(FloatVector.fromArray(F, x, xb + 3 * L), a3);
                c += BLOCK;
            }
            float s = a0.add(a1).add(a2.add(a3)).reduceLanes(VectorOperators.ADD) - 128f * sumx;
            for (; c < n; c++) s += m.get(ValueLayout.JAVA_BYTE, base + c) * x[xo + c];
            s *= Simd.f16(m, scalesOff + 2L * sr);
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    private static FloatVector cvt(IntVector v) {
        return (FloatVector) v.convert(VectorOperators.I2F, 0);
    }

    /** Machines without usable vectors: plain loops over the unprepared activation. */
    private void dotRowsScalar(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        for (int r = r0; r < r1; r++) {
            long sr = row0 + r, base = sr * cols;
            float s = 0f;
            for (int c = 0; c < cols; c++) {
                float xv = colField == null ? x[xo + c] : x[xo + c] * colField[c];
                s += m.get(ValueLayout.JAVA_BYTE, base + c) * xv;
            }
            s *= Simd.f16(m, scalesOff + 2L * sr);
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    @Override
    void unpack(int r0, int nr, int k0, int nk, float[] dst, int dOff, int ld) {
        MemorySegment m = data;
        float[] col = colField;
        int vec = Simd.VECTOR ? nk - nk % L : 0;
        for (int i = 0; i < nr; i++) {
            long sr = row0 + r0 + i;
            long base = sr * cols + k0;
            float rs = Simd.f16(m, scalesOff + 2L * sr);
            int d = dOff + i * ld;
            int j = 0;
            if (twoField) {
                for (; j < vec; j += L)
                    load(m, base + j).mul(rs).mul(FloatVector.fromArray(F, col, k0 + j)).intoArray(dst, d + j);
                for (; j < nk; j++) dst[d + j] = m.get(ValueLayout.JAVA_BYTE, base + j) * rs * col[k0 + j];
            } else {
                for (; j < vec; j += L) load(m, base + j).mul(rs).intoArray(dst, d + j);
                for (; j < nk; j++) dst[d + j] = m.get(ValueLayout.JAVA_BYTE, base + j) * rs;
            }
        }
    }
}
