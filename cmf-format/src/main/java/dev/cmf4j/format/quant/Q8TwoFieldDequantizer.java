package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q8_2f (id 9), the two-field int8: {@code [i8 q: rows·cols][f16 row_scale: rows][f16 col: cols]};
 * {@code w = q · row_scale[r] · col[c]}, multiplied in that order (left to right, f32) — the
 * order the reference decoder uses, so the result is bit-identical to it.
 */
public final class Q8TwoFieldDequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.Q8_2F; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long rowScales = s.elements();
        long colField = s.add(rowScales, s.mul(s.rows(), 2));
        s.requireLength(data.byteSize(), s.add(colField, s.mul(s.cols(), 2)),
                "rows·cols int8 + rows f16 row scales + cols f16 column field");
        if (s.cols() > Integer.MAX_VALUE - 16) throw s.fail("rows of " + s.cols() + " columns are too long to decode");
        // The column field is tiny (cols floats) and read by every row: widen it once.
        float[] col = new float[(int) s.cols()];
        for (int c = 0; c < col.length; c++) col[c] = Le.f16(data, colField + 2L * c);
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                int cols = col.length;
                for (int r = 0; r < n; r++) {
                    long row = r0 + r;
                    float scale = Le.f16(data, rowScales + 2 * row);
                    Kernels.q8Col(data, row * cols, cols, scale, col, out, off + r * cols);
                }
            }
        };
    }
}
