package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.KvType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * A KV cache's rows as the resident kernels store them (resident.cuh's r_kv_head): f32, f16, or q8, where each head of
 * a position keeps its codes padded to 4 bytes, then its float scale ({@link KvType#quantizeQ8}'s rule). Sizes the
 * device caches and builds and reads host images of them for the operator checks.
 */
final class KvLayout {
    private KvLayout() {}

    /** Bytes of one head's block in a q8 row: the codes padded to 4 bytes, then the scale. */
    private static int q8HeadBytes(int headDim) { return ((headDim + 3) & ~3) + Float.BYTES; }

    /**
     * Rows of a sliding layer's ring (window > 0) for sessions whose chunks hold at most {@code chunk} tokens (> 0):
     * window + chunk, key j in row j mod that (resident.cuh's r_kv_ring and r_kv_slot); 0 when the layer keeps a row
     * per position (a full layer, or chunk 0).
     */
    static int ringRows(int window, int chunk) { return window > 0 && chunk > 0 ? window + chunk : 0; }

    /** The row of key {@code j} in a cache of {@link #ringRows} {@code ring} (0: row j). */
    static int slot(int j, int ring) { return ring > 0 ? j % ring : j; }

    /** Bytes of one position's row with {@code kvHeads} heads of {@code headDim}. */
    static long rowBytes(KvType kv, int kvHeads, int headDim) {
        return kv == KvType.Q8 ? (long) kvHeads * q8HeadBytes(headDim) : (long) kv.elementBytes * kvHeads * headDim;
    }

    /**
     * The stored image of rows {@code x} ([positions, kvHeads·headDim]); x's values are replaced by what the kernels
     * read back (f16 and q8 rounded).
     */
    static MemorySegment encode(Arena a, float[] x, KvType kv, int headDim) {
        return switch (kv) {
            case F32 -> MemorySegment.ofArray(x);
            case F16 -> {
                short[] h = new short[x.length];
                for (int i = 0; i < x.length; i++) {
                    h[i] = Float.floatToFloat16(x[i]);
                    x[i] = Float.float16ToFloat(h[i]);
                }
                yield MemorySegment.ofArray(h);
            }
            case Q8 -> {
                int heads = x.length / headDim, hb = q8HeadBytes(headDim);
                MemorySegment s = a.allocate((long) heads * hb, 4);
                byte[] codes = new byte[headDim];
                for (int h = 0; h < heads; h++) {
                    float scale = KvType.quantizeQ8(x, h * headDim, codes, 0, headDim);
                    for (int i = 0; i < headDim; i++) x[h * headDim + i] = codes[i] * scale;
                    MemorySegment.copy(codes, 0, s, ValueLayout.JAVA_BYTE, (long) h * hb, headDim);
                    s.set(ValueLayout.JAVA_FLOAT_UNALIGNED, (long) h * hb + hb - Float.BYTES, scale);
                }
                yield s;
            }
        };
    }

    /** The {@code n} values (n a whole number of rows) the kernels read from an image. */
    static float[] decode(MemorySegment s, int n, KvType kv, int headDim) {
        float[] x = new float[n];
        switch (kv) {
            case F32 -> MemorySegment.copy(s, ValueLayout.JAVA_FLOAT, 0, x, 0, n);
            case F16 -> { for (int i = 0; i < n; i++) x[i] = Float.float16ToFloat(s.getAtIndex(ValueLayout.JAVA_SHORT, i)); }
            case Q8 -> {
                int hb = q8HeadBytes(headDim);
                for (int h = 0; h < n / headDim; h++) {
                    float scale = s.get(ValueLayout.JAVA_FLOAT_UNALIGNED, (long) h * hb + hb - Float.BYTES);
                    for (int i = 0; i < headDim; i++) x[h * headDim + i] = s.get(ValueLayout.JAVA_BYTE, (long) h * hb + i) * scale;
                }
            }
        }
        return x;
    }
}
