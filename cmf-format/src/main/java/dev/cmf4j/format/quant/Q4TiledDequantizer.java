package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q4_tiled "q4t" (id 11): the q4_block values and nibble order, but one interleaved 18-byte tile
 * per 32-group, {@code [f16 scale][16 B nibbles]}, rows·(cols/32) tiles; needs cols % 32 == 0.
 */
public final class Q4TiledDequantizer implements Dequantizer {
    static final int TILE = 18;

    @Override public DType dtype() { return DType.Q4_TILED; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireColsMultipleOfGroup();
        s.requireLength(data.byteSize(), s.mul(s.mul(s.rows(), s.groupsPerRow()), TILE), "rows·cols/32 tiles of 18 B");
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                long tiles = n * shape.groupsPerRow();
                long t0 = r0 * shape.groupsPerRow();
                for (long t = 0; t < tiles; t++) {
                    long at = (t0 + t) * TILE;
                    Kernels.q4Group(data, at + 2, Le.f16(data, at), out, off + (int) (t * 32));
                }
            }
        };
    }
}
