package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.MemorySegment;

/**
 * q8_row: per row {@code s = f16(absmax/127)}, {@code q = rint(w/s)} clamped to ±127 (ties to
 * even); layout {@code [i8 q: rows·cols][f16 s: rows]}. The codes are chosen against the
 * f16-rounded scale the reader will use.
 */
public final class Q8RowQuantizer implements Quantizer {
    @Override public DType dtype() { return DType.Q8_ROW; }

    @Override public boolean supports(long[] shape) { return true; }

    @Override public long encodedSize(long[] shape) {
        TensorShape s = TensorShape.of(dtype(), shape);
        return s.add(s.elements(), s.mul(s.rows(), 2));
    }

    @Override public TensorEncoder begin(FloatSource src, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long size = encodedSize(dims);
        long scales = s.elements();
        return new RowEncoder(s, src, true) {
            @Override public long encodedSize() { return size; }

            @Override void encodeRow(long r, float[] row, MemorySegment dst) {
                float scale = Scales.scale(Scales.absmax(row, 0, row.length) / 127f, shape, "row", r);
                long at = r * row.length;
                for (int c = 0; c < row.length; c++)
                    dst.set(Scales.I8, at + c, (byte) Scales.quantize(row[c], scale, -127, 127));
                dst.set(Scales.I16, scales + 2 * r, Scales.f16(scale));
            }
        };
    }
}
