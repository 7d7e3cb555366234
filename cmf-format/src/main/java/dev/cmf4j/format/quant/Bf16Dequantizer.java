package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/** bf16 (id 2): the top 16 bits of an IEEE single; float = bits &lt;&lt; 16 (exact). */
public final class Bf16Dequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.BF16; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireLength(data.byteSize(), s.mul(s.elements(), 2), "2 bytes per element");
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                long base = r0 * shape.cols() * 2;
                int count = (int) (n * shape.cols());
                Kernels.bf16(data, base, count, out, off);
            }
        };
    }
}
