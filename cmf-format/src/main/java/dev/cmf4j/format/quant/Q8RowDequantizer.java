package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q8_row (id 3): {@code [i8 q: rows·cols][f16 scale: rows]}; {@code w = q · scale[r]}.
 */
public final class Q8RowDequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.Q8_ROW; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long scales = s.elements();
        s.requireLength(data.byteSize(), s.add(scales, s.mul(s.rows(), 2)), "rows·cols int8 + rows f16 scales");
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                int cols = (int) shape.cols();
                for (int r = 0; r < n; r++) {
                    long row = r0 + r;
                    float scale = Le.f16(data, scales + 2 * row);
                    Kernels.q8(data, row * cols, cols, scale, out, off + r * cols);
                }
            }
        };
    }
}
