package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.MemorySegment;

/** bf16: the top half of the f32 bits, rounded to nearest-even; NaN stays a (quiet) NaN. */
public final class Bf16Quantizer implements Quantizer {
    @Override public DType dtype() { return DType.BF16; }

    @Override public boolean supports(long[] shape) { return true; }

    @Override public long encodedSize(long[] shape) {
        TensorShape s = TensorShape.of(dtype(), shape);
        return s.mul(s.elements(), 2);
    }

    /** f32 → bf16 bits, round-to-nearest-even (overflow rounds to ±inf, as IEEE says). */
    public static short bf16(float x) {
        int bits = Float.floatToRawIntBits(x);
        if (Float.isNaN(x)) return (short) ((bits >>> 16) | 0x0040);   // keep sign and payload top, force quiet
        int lsb = (bits >>> 16) & 1;
        return (short) ((bits + 0x7FFF + lsb) >>> 16);
    }

    @Override public TensorEncoder begin(FloatSource src, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long size = encodedSize(dims);
        return new RowEncoder(s, src, false) {
            @Override public long encodedSize() { return size; }

            @Override void encodeRow(long r, float[] row, MemorySegment dst) {
                long at = r * row.length * 2L;
                for (int c = 0; c < row.length; c++) dst.set(Scales.I16, at + 2L * c, bf16(row[c]));
            }
        };
    }
}
