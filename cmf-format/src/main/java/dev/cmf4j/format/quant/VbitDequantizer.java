package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * vbit (id 8), variable bits per row:
 * {@code [u8 bits: rows][f16 scale: rows·gpr][rows bit-packed MSB-first, each row padded to a byte]}.
 * {@code w = (u − (2^(b−1) − 1)) · scale[r, c/32]} with b ∈ {3, 4, 5, 6, 8}. Needs cols % 32 == 0.
 * Rows have no offset table, so the decoder computes one (rows+1 longs) when it checks the widths.
 */
public final class VbitDequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.VBIT; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireColsMultipleOfGroup();
        long scales = s.rows();
        long packed = s.add(scales, s.mul(s.mul(s.rows(), s.groupsPerRow()), 2));
        s.requireAtLeast(data.byteSize(), packed, "the width header and scales");
        if (s.rows() > Integer.MAX_VALUE - 16) throw s.fail("too many rows (" + s.rows() + ") for a row offset table");
        long[] start = new long[(int) s.rows() + 1];
        long at = packed;
        for (int r = 0; r < s.rows(); r++) {
            start[r] = at;
            at = s.add(at, rowBytes(s, r, Le.u8(data, r)));
        }
        start[(int) s.rows()] = at;
        s.requireLength(data.byteSize(), at, "rows + rows·gpr·2 + Σ ceil(cols·bits[r]/8)");
        return new Rows(s, data, scales, start);
    }

    /** Bytes of one packed row of width {@code bits}; refuses widths outside {3,4,5,6,8}. */
    static long rowBytes(TensorShape s, long row, int bits) {
        if (bits < 3 || bits > 8 || bits == 7)
            throw s.fail("row " + row + " has bit width " + bits + ", allowed 3, 4, 5, 6, 8");
        return (s.mul(s.cols(), bits) + 7) / 8;
    }

    /** Shared by vbit and vbit_ro: decode through a row start table. */
    static final class Rows extends RowDecoder {
        private final MemorySegment data;
        private final long scales;
        private final long[] start;   // absolute byte offset of each row's packed bits; null = read from vbit_ro table
        private final long offsets, packed0;

        Rows(TensorShape s, MemorySegment data, long scales, long[] start) {
            this(s, data, scales, start, 0, 0);
        }

        Rows(TensorShape s, MemorySegment data, long scales, long[] start, long offsets, long packed) {
            super(s);
            this.data = data;
            this.scales = scales;
            this.start = start;
            this.offsets = offsets;
            this.packed0 = packed;
        }

        @Override protected void decode(long r0, int n, float[] out, int off) {
            int cols = (int) shape.cols();
            int gpr = (int) shape.groupsPerRow();
            byte[] packed = new byte[cols + 8];            // one row at ≤ 8 bits a weight, plus slack
            for (int r = 0; r < n; r++) {
                long row = r0 + r;
                int b = Le.u8(data, row);
                int rowBytes = (cols * b + 7) / 8;
                long at = start != null ? start[(int) row] : packed0 + Le.u32(data, offsets + 4 * row);
                MemorySegment.copy(data, Le.I8, at, packed, 0, rowBytes);   // bulk read; the bit loop runs on the heap copy
                float level = (1 << (b - 1)) - 1;
                int mask = (1 << b) - 1;
                long scaleRow = scales + row * gpr * 2L;
                int o = off + r * cols;
                long acc = 0;
                int have = 0, p = 0;
                for (int g = 0; g < gpr; g++) {
                    float scale = Le.f16(data, scaleRow + 2L * g);
                    for (int i = 0; i < 32; i++) {
                        // MSB-first: keep ≥ b bits in the window, take the top b.
                        if (have < b) {
                            acc = (acc << 8) | (packed[p++] & 0xFF);
                            have += 8;
                        }
                        have -= b;
                        float u = (int) (acc >>> have) & mask;
                        out[o + 32 * g + i] = (u - level) * scale;
                    }
                }
            }
        }
    }
}
