package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.MemorySegment;

/** f16: IEEE half by round-to-nearest-even ({@link Float#floatToFloat16}); beyond ±65504 becomes ±inf. */
public final class F16Quantizer implements Quantizer {
    @Override public DType dtype() { return DType.F16; }

    @Override public boolean supports(long[] shape) { return true; }

    @Override public long encodedSize(long[] shape) {
        TensorShape s = TensorShape.of(dtype(), shape);
        return s.mul(s.elements(), 2);
    }

    @Override public TensorEncoder begin(FloatSource src, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long size = encodedSize(dims);
        return new RowEncoder(s, src, false) {
            @Override public long encodedSize() { return size; }

            @Override void encodeRow(long r, float[] row, MemorySegment dst) {
                long at = r * row.length * 2L;
                for (int c = 0; c < row.length; c++) dst.set(Scales.I16, at + 2L * c, Float.floatToFloat16(row[c]));
            }
        };
    }
}
