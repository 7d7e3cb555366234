package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q4tp (id 15), q4 tiles with predicted scales. Three planes:
 * {@code [nibbles: rows·gpr·16 B][per row: f16 lo, f16 step][per row: gpr 5-bit codes, LSB-first
 * bit stream, each row padded to a byte]}. Group g of row r has scale {@code t[code]} on the row's
 * {@link TpLadder#q4tp ladder}; its nibbles decode as in q4_block: {@code w = (q − 8) · scale}.
 * Needs cols % 32 == 0.
 */
public final class Q4TpDequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.Q4TP; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireColsMultipleOfGroup();
        long gpr = s.groupsPerRow();
        long stride = TpLadder.codeStride(gpr);
        long params = s.mul(s.mul(s.rows(), gpr), 16);
        long codes = s.add(params, s.mul(s.rows(), 4));
        s.requireLength(data.byteSize(), s.add(codes, s.mul(s.rows(), stride)),
                "rows·gpr·16 B nibbles + rows·4 B (lo, step) + rows·ceil(gpr·5/8) B codes");
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                float[] ladder = new float[TpLadder.RUNGS];
                int cols = (int) shape.cols();
                for (int r = 0; r < n; r++) {
                    long row = r0 + r;
                    TpLadder.q4tp(Le.f16(data, params + 4 * row), Le.f16(data, params + 4 * row + 2), ladder);
                    long codeRow = codes + row * stride;
                    long nib = row * gpr * 16;
                    int o = off + r * cols;
                    for (int g = 0; g < gpr; g++) {
                        Kernels.q4Group(data, nib + g * 16L, ladder[code(data, codeRow, g)], out, o + 32 * g);
                    }
                }
            }
        };
    }

    /** The 5-bit code of group g in a row's LSB-first code stream. */
    static int code(MemorySegment data, long codeRow, long g) {
        long bit = g * 5;
        long at = codeRow + (bit >>> 3);
        int shift = (int) (bit & 7);
        int v = Le.u8(data, at);
        if (shift > 3) v |= Le.u8(data, at + 1) << 8;   // the code straddles two bytes
        return (v >>> shift) & 31;
    }
}
