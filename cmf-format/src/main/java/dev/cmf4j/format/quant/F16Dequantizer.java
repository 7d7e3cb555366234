package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/** f16 (id 1): IEEE half, little-endian; widened exactly (subnormals, ±inf and NaN payloads kept). */
public final class F16Dequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.F16; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireLength(data.byteSize(), s.mul(s.elements(), 2), "2 bytes per element");
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                long base = r0 * shape.cols() * 2;
                int count = (int) (n * shape.cols());
                // Float.float16ToFloat is an intrinsic (vcvtph2ps); the loop is bound by the read.
                for (int i = 0; i < count; i++) out[off + i] = Float.float16ToFloat(data.get(Le.I16, base + 2L * i));
            }
        };
    }
}
