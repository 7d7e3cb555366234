package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q4_block (id 4): 32-element groups over the FLATTENED tensor (the last group zero-padded), two
 * planes: {@code [nibbles: 16 B per group][f16 scale per group]}. Element 2k of a group is the low
 * nibble of byte k, element 2k+1 the high one; {@code w = (q − 8) · scale}.
 */
public final class Q4BlockDequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.Q4_BLOCK; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long groups = s.elements() / 32 + (s.elements() % 32 == 0 ? 0 : 1);
        long scales = s.mul(groups, 16);
        s.requireLength(data.byteSize(), s.add(scales, s.mul(groups, 2)), "ceil(n/32) groups · (16 B nibbles + f16 scale)");
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                long e = r0 * shape.cols();              // first flat element
                long end = e + n * shape.cols();
                int o = off;
                while (e < end) {
                    long g = e >>> 5;
                    int k = (int) (e & 31);
                    int take = (int) Math.min(32 - k, end - e);
                    float scale = Le.f16(data, scales + 2 * g);
                    long nib = g * 16;
                    if (k == 0 && take == 32) {
                        Kernels.q4Group(data, nib, scale, out, o);   // whole group: the common case
                    } else {
                        for (int i = k; i < k + take; i++) {
                            int v = data.get(Le.I8, nib + (i >> 1));
                            int q = (i & 1) == 0 ? v & 0x0F : (v >> 4) & 0x0F;
                            out[o + i - k] = (q - 8) * scale;
                        }
                    }
                    o += take;
                    e += take;
                }
            }
        };
    }
}
