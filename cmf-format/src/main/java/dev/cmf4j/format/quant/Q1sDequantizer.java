package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q1s (id 13): a q1 base followed by a sparse overwrite of outliers,
 * {@code [q1 tiles][u32 count][count × {u32 flat_index, f16 value}]}. Each entry replaces the base
 * value of element {@code flat_index} (row-major over the whole tensor). The check bounds the
 * count by the payload length and every index by the element count.
 */
public final class Q1sDequantizer implements Dequantizer {
    static final int ENTRY = 6;

    @Override public DType dtype() { return DType.Q1S; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireColsMultipleOfGroup();
        long countAt = s.mul(s.mul(s.rows(), s.groupsPerRow()), Q1Dequantizer.TILE);
        s.requireAtLeast(data.byteSize(), s.add(countAt, 4), "the q1 tiles and the outlier count");
        long count = Le.u32(data, countAt);
        long entries = countAt + 4;
        s.requireLength(data.byteSize(), s.add(entries, s.mul(count, ENTRY)),
                "q1 tiles + 4 + count(" + count + ")·6 B outliers");
        boolean sorted = true;
        long prev = -1;
        for (long i = 0; i < count; i++) {
            long idx = Le.u32(data, entries + i * ENTRY);
            if (idx >= s.elements()) throw s.fail("outlier " + i + " has flat index " + idx + " ≥ " + s.elements() + " elements");
            sorted &= idx > prev;
            prev = idx;
        }
        boolean ascending = sorted;
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                Q1Dequantizer.tiles(data, r0 * shape.groupsPerRow(), n * shape.groupsPerRow(), out, off);
                long lo = r0 * shape.cols(), hi = lo + n * shape.cols();
                // The reference writer emits indices ascending: binary-search the range then.
                long i = ascending ? firstAtLeast(lo) : 0;
                for (; i < count; i++) {
                    long idx = Le.u32(data, entries + i * ENTRY);
                    if (idx >= hi) { if (ascending) break; else continue; }
                    if (idx >= lo) out[off + (int) (idx - lo)] = Le.f16(data, entries + i * ENTRY + 4);
                }
            }

            private long firstAtLeast(long flat) {
                long a = 0, b = count;
                while (a < b) {
                    long m = (a + b) >>> 1;
                    if (Le.u32(data, entries + m * ENTRY) < flat) a = m + 1; else b = m;
                }
                return a;
            }
        };
    }
}
