package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q1 (id 12), one bit per weight: 6-byte tiles {@code [f16 s][4 B sign bits]} per 32-group,
 * rows·gpr tiles; bit k of byte j (LSB-first) is weight 8j+k; {@code w = (2·bit − 1) · s}.
 * For 1-bit-trained models only. Needs cols % 32 == 0.
 */
public final class Q1Dequantizer implements Dequantizer {
    static final int TILE = 6;

    @Override public DType dtype() { return DType.Q1; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireColsMultipleOfGroup();
        s.requireLength(data.byteSize(), s.mul(s.mul(s.rows(), s.groupsPerRow()), TILE), "rows·cols/32 tiles of 6 B");
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                tiles(data, r0 * shape.groupsPerRow(), n * shape.groupsPerRow(), out, off);
            }
        };
    }

    /** Decodes {@code count} consecutive q1 tiles starting at tile {@code t0}. */
    static void tiles(MemorySegment data, long t0, long count, float[] out, int off) {
        for (long t = 0; t < count; t++) {
            long at = (t0 + t) * TILE;
            float s = Le.f16(data, at);
            int o = off + (int) (t * 32);
            // (2·bit − 1)·s is exactly ±s: flip the sign bit of s where the bit is 0. Branch-free,
            // because the bits are as good as random and a branch would mispredict half the time.
            int sBits = Float.floatToRawIntBits(s);
            int flip = ~data.get(Le.I32, at + 2);
            for (int k = 0; k < 32; k++) out[o + k] = Float.intBitsToFloat(sBits ^ (((flip >>> k) & 1) << 31));
        }
    }
}
