package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.MemorySegment;

/** f32: the source values verbatim (bit for bit, NaN payloads included). */
public final class F32Quantizer implements Quantizer {
    @Override public DType dtype() { return DType.F32; }

    @Override public boolean supports(long[] shape) { return true; }

    @Override public long encodedSize(long[] shape) {
        TensorShape s = TensorShape.of(dtype(), shape);
        return s.mul(s.elements(), 4);
    }

    @Override public TensorEncoder begin(FloatSource src, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long size = encodedSize(dims);
        return new RowEncoder(s, src, false) {
            @Override public long encodedSize() { return size; }

            @Override void encodeRow(long r, float[] row, MemorySegment dst) {
                MemorySegment.copy(row, 0, dst, FloatSource.F32_LE, r * row.length * 4L, row.length);
            }
        };
    }
}
