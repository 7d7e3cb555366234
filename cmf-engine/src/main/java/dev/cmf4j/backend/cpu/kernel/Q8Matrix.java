package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
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
 * so each row is a plain dot of int8 weights with floats, scaled once by the row scale at the end.
 * Each load of L int8 weights widens to one float vector (sign-extend + convert) feeding one FMA;
 * an int8-activation variant with integer accumulation was measured slower on AVX2 (docs/CPU_KERNELS.md).
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

    @Override int preparedLength() { return twoField ? cols : 0; }

    @Override
    void prepare(float[] x, int xOff, float[] dst, int dOff) {
        float[] col = colField;
        int n = cols, c = 0;
        if (Simd.VECTOR)
            for (int vec = n - n % L; c < vec; c += L)
                FloatVector.fromArray(F, x, xOff + c).mul(FloatVector.fromArray(F, col, c)).intoArray(dst, dOff + c);
        for (; c < n; c++) dst[dOff + c] = x[xOff + c] * col[c];
    }

    /** L int8 weights at byte offset {@code o}, widened to f32. */
    static FloatVector load(MemorySegment m, long o) {
        return (FloatVector) ByteVector.fromMemorySegment(Simd.B, m, o, LE).convertShape(VectorOperators.B2F, F, 0);
    }

    @Override
    void dotRows(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        int n = cols;
        int vec = Simd.VECTOR ? n - n % (4 * L) : 0;
        for (int r = r0; r < r1; r++) {
            long sr = row0 + r;
            long base = sr * n;
            float s = 0f;
            int c = 0;
            if (vec > 0) {
                FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0;
                for (; c < vec; c += 4 * L) {
                    long o = base + c;
                    a0 = load(m, o).fma(FloatVector.fromArray(F, x, xo + c), a0);
                    a1 = load(m, o + L).fma(FloatVector.fromArray(F, x, xo + c + L), a1);
                    a2 = load(m, o + 2 * L).fma(FloatVector.fromArray(F, x, xo + c + 2 * L), a2);
                    a3 = load(m, o + 3 * L).fma(FloatVector.fromArray(F, x, xo + c + 3 * L), a3);
                }
                s = a0.add(a1).add(a2.add(a3)).reduceLanes(VectorOperators.ADD);
            }
            for (; c < n; c++) s += m.get(ValueLayout.JAVA_BYTE, base + c) * x[xo + c];
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
