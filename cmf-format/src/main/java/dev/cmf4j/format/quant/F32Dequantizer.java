package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/** f32 (id 0): IEEE single, little-endian, 4 bytes per element. */
public final class F32Dequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.F32; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireLength(data.byteSize(), s.mul(s.elements(), 4), "4 bytes per element");
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                long cols = shape.cols();
                // A bulk copy: the fastest thing a memory-bound decode can be.
                MemorySegment.copy(data, Le.F32, r0 * cols * 4, out, off, (int) (n * cols));
            }
        };
    }
}
