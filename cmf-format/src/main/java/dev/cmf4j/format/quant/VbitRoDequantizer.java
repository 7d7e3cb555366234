package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * vbit_ro (id 10): vbit plus a row offset table for O(1) row access:
 * {@code [u8 bits: rows][f16 scale: rows·gpr][u32 row_offsets: rows+1][packed rows]}, offsets
 * relative to the packed area. The check verifies offsets[0] = 0, that every span equals the
 * row's width ({@code ceil(cols·b/8)}), and that the last offset ends the payload.
 */
public final class VbitRoDequantizer implements Dequantizer {
    @Override public DType dtype() { return DType.VBIT_RO; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireColsMultipleOfGroup();
        long scales = s.rows();
        long offsets = s.add(scales, s.mul(s.mul(s.rows(), s.groupsPerRow()), 2));
        long packed = s.add(offsets, s.mul(s.add(s.rows(), 1), 4));
        s.requireAtLeast(data.byteSize(), packed, "the width header, scales and row offset table");
        long prev = Le.u32(data, offsets);
        if (prev != 0) throw s.fail("row_offsets[0] is " + prev + ", must be 0");
        for (long r = 0; r < s.rows(); r++) {
            long next = Le.u32(data, offsets + 4 * (r + 1));
            long want = VbitDequantizer.rowBytes(s, r, Le.u8(data, r));
            if (next - prev != want)
                throw s.fail("row " + r + " spans " + (next - prev) + " bytes in row_offsets, its width needs " + want);
            prev = next;
        }
        s.requireLength(data.byteSize(), s.add(packed, prev), "headers + packed rows ending at row_offsets[rows]");
        return new VbitDequantizer.Rows(s, data, scales, null, offsets, packed);
    }
}
