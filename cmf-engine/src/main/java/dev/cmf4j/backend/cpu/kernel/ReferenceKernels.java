package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Plain scalar twins of the fast kernels, written straight from CMF_FORMAT.md §2 with no tricks
 * (candle's {@code vec_dot_unopt} pattern): the tests check every vector kernel against these on
 * random inputs, and the fast kernels fall back to them for shapes their vector paths do not cover
 * (q4_block rows that are not a whole number of groups). Slow on purpose; never used in hot loops
 * of supported shapes.
 */
public final class ReferenceKernels {
    private ReferenceKernels() {}

    /**
     * Dequantizes row {@code r} of a [rows, cols] matrix of {@code dtype} stored in {@code m} into
     * {@code out[0..cols)}.
     */
    public static void dequantRow(DType dtype, MemorySegment m, int rows, int cols, int r, float[] out) {
        long n = (long) rows * cols;
        switch (dtype) {
            case F32 -> { for (int c = 0; c < cols; c++) out[c] = m.get(Simd.F32, 4 * ((long) r * cols + c)); }
            case F16 -> { for (int c = 0; c < cols; c++) out[c] = Simd.f16(m, 2 * ((long) r * cols + c)); }
            case BF16 -> { for (int c = 0; c < cols; c++) out[c] = Simd.bf16(m, 2 * ((long) r * cols + c)); }
            case Q8_ROW, Q8_2F -> {
                float rs = Simd.f16(m, n + 2L * r);
                for (int c = 0; c < cols; c++) {
                    float w = m.get(ValueLayout.JAVA_BYTE, (long) r * cols + c) * rs;
                    if (dtype == DType.Q8_2F) w *= Simd.f16(m, n + 2L * rows + 2L * c);
                    out[c] = w;
                }
            }
            case Q4_BLOCK -> {
                long scales = (n + 31) / 32 * 16;                 // nibble plane, then the scale plane
                for (int c = 0; c < cols; c++) {
                    long i = (long) r * cols + c;                 // flat index: groups run over the whole tensor
                    long g = i / 32;
                    int j = (int) (i % 32);
                    int b = m.get(ValueLayout.JAVA_BYTE, g * 16 + j / 2) & 0xFF;
                    int q = (j % 2 == 0) ? (b & 0x0F) : (b >>> 4);
                    out[c] = (q - 8) * Simd.f16(m, scales + 2 * g);
                }
            }
            case Q4TP -> {
                int gpr = Simd.ceilDiv(cols, 32);
                long plane = (long) rows * gpr * 16;
                float lo = Simd.f16(m, plane + 4L * r);
                float step = Simd.f16(m, plane + 4L * r + 2);
                float[] ladder = q4tpLadder(lo, step);
                int codeBytes = Simd.ceilDiv(gpr * 5, 8);
                long codes = plane + 4L * rows + (long) r * codeBytes;
                for (int c = 0; c < cols; c++) {
                    int g = c / 32, j = c % 32;
                    int b = m.get(ValueLayout.JAVA_BYTE, ((long) r * gpr + g) * 16 + j / 2) & 0xFF;
                    int q = (j % 2 == 0) ? (b & 0x0F) : (b >>> 4);
                    out[c] = (q - 8) * ladder[q4tpCode(m, codes, g)];
                }
            }
            default -> throw new IllegalArgumentException("no matrix kernel for dtype " + dtype.label);
        }
    }

    /** The 5-bit code of group {@code g} from a row's LSB-first code stream starting at {@code codes}. */
    static int q4tpCode(MemorySegment m, long codes, int g) {
        int code = 0;
        for (int k = 0; k < 5; k++) {
            int bit = g * 5 + k;
            int byt = m.get(ValueLayout.JAVA_BYTE, codes + bit / 8) & 0xFF;
            code |= ((byt >>> (bit % 8)) & 1) << k;
        }
        return code;
    }

    /** The q4tp row ladder: t0 = exp2(lo), t[c] = t[c-1]·exp2(step), in f32 (the normative order). */
    static float[] q4tpLadder(float lo, float step) {
        float[] t = new float[32];
        t[0] = exp2(lo);
        float ratio = exp2(step);
        for (int c = 1; c < 32; c++) t[c] = t[c - 1] * ratio;
        return t;
    }

    static float exp2(float v) {
        return (float) Math.pow(2.0, v);
    }

    /** y = W·x computed row by row in double from the dequantized rows (the reference result). */
    public static void matvec(DType dtype, MemorySegment m, int rows, int cols, float[] x, float[] y) {
        float[] row = new float[cols];
        for (int r = 0; r < rows; r++) {
            dequantRow(dtype, m, rows, cols, r, row);
            double s = 0;
            for (int c = 0; c < cols; c++) s += (double) row[c] * x[c];
            y[r] = (float) s;
        }
    }

    /** Sum over c of |W[r][c]·x[c]| for every row: the scale the tests normalise errors by. */
    public static void absMatvec(DType dtype, MemorySegment m, int rows, int cols, float[] x, float[] y) {
        float[] row = new float[cols];
        for (int r = 0; r < rows; r++) {
            dequantRow(dtype, m, rows, cols, r, row);
            double s = 0;
            for (int c = 0; c < cols; c++) s += Math.abs((double) row[c] * x[c]);
            y[r] = (float) s;
        }
    }
}
