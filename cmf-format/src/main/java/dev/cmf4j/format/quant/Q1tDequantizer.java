package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q1t (id 14), ternary: 9-byte tiles {@code [f16 s][7 B base-3 codes]} per 32-group (five trits a
 * byte: {@code code_k = (byte[k/5] / 3^(k%5)) % 3}; 0 → 0, 1 → +s, 2 → −s), then a per-row
 * overlay {@code [u32 row_ptr: rows+1][entries {u16 col, f16 value}]}: the entries
 * {@code row_ptr[r]..row_ptr[r+1]} overwrite columns of row r. The check verifies row_ptr[0] = 0,
 * monotonic pointers, the payload ending at the last entry, and every column below cols.
 */
public final class Q1tDequantizer implements Dequantizer {
    static final int TILE = 9;
    static final int ENTRY = 4;
    /** TRITS[5·byte + k] = (byte / 3^k) % 3, for every byte value (bytes above 242 decode by the same formula). */
    private static final byte[] TRITS = new byte[256 * 5];

    static {
        for (int b = 0; b < 256; b++) for (int k = 0, p = 1; k < 5; k++, p *= 3) TRITS[5 * b + k] = (byte) ((b / p) % 3);
    }

    @Override public DType dtype() { return DType.Q1T; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireColsMultipleOfGroup();
        if (s.cols() > 65536) throw s.fail("q1t overlay columns are u16: cols " + s.cols() + " > 65536");
        long ptrs = s.mul(s.mul(s.rows(), s.groupsPerRow()), TILE);
        long entries = s.add(ptrs, s.mul(s.add(s.rows(), 1), 4));
        s.requireAtLeast(data.byteSize(), entries, "the ternary tiles and row_ptr table");
        long prev = Le.u32(data, ptrs);
        if (prev != 0) throw s.fail("row_ptr[0] is " + prev + ", must be 0");
        for (long r = 1; r <= s.rows(); r++) {
            long p = Le.u32(data, ptrs + 4 * r);
            if (p < prev) throw s.fail("row_ptr decreases at row " + r + " (" + prev + " → " + p + ")");
            prev = p;
        }
        s.requireLength(data.byteSize(), s.add(entries, s.mul(prev, ENTRY)),
                "tiles + (rows+1)·4 B row_ptr + row_ptr[rows](" + prev + ")·4 B overlay entries");
        for (long e = 0; e < prev; e++) {
            int col = data.get(Le.I16, entries + e * ENTRY) & 0xFFFF;
            if (col >= s.cols()) throw s.fail("overlay entry " + e + " has column " + col + " ≥ cols " + s.cols());
        }
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                int cols = (int) shape.cols();
                long gpr = shape.groupsPerRow();
                float[] value = new float[3];     // code 0 → +0, 1 → +s, 2 → −s
                for (int r = 0; r < n; r++) {
                    long row = r0 + r;
                    int o = off + r * cols;
                    for (long g = 0; g < gpr; g++) {
                        long at = (row * gpr + g) * TILE;
                        float sc = Le.f16(data, at);
                        value[1] = sc;
                        value[2] = -sc;
                        int base = o + (int) (g * 32);
                        for (int j = 0; j < 7; j++) {
                            int t = 5 * Le.u8(data, at + 2 + j);
                            for (int k = 0; k < 5 && 5 * j + k < 32; k++) out[base + 5 * j + k] = value[TRITS[t + k]];
                        }
                    }
                    long e0 = Le.u32(data, ptrs + 4 * row), e1 = Le.u32(data, ptrs + 4 * (row + 1));
                    for (long e = e0; e < e1; e++) {
                        int col = data.get(Le.I16, entries + e * ENTRY) & 0xFFFF;
                        out[o + col] = Le.f16(data, entries + e * ENTRY + 2);
                    }
                }
            }
        };
    }
}
