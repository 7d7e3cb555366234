package dev.cmf4j.format;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * CMF's non-cryptographic integrity hash (CMF_FORMAT.md §1.4): the bytes as little-endian u64 words
 * (last partial word zero-padded); for word i, {@code acc ^= fmix64(word) ^ (i * 0x9E3779B97F4A7C15)};
 * then {@code acc ^= byteLength}; result {@code fmix64(acc)}. The salt is XORed after fmix64, as the
 * reference code and the Python reader do.
 *
 * <p>Hashing a tensor is a single sequential pass, bound by memory bandwidth; {@link Streaming} lets a
 * writer hash payloads as they stream past without holding them.
 */
public final class Hash64 {
    private Hash64() {}

    static final long GOLDEN = 0x9E3779B97F4A7C15L;
    private static final ValueLayout.OfLong U64 =
            ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** The murmur3 64-bit finalizer. */
    public static long fmix64(long k) {
        k ^= k >>> 33;
        k *= 0xFF51AFD7ED558CCDL;
        k ^= k >>> 33;
        k *= 0xC4CEB9FE1A85EC53L;
        k ^= k >>> 33;
        return k;
    }

    /** Words copied per block: small enough for L1/L2, large enough to amortize the copy call. */
    private static final int BLOCK_WORDS = 4096;
    private static final ThreadLocal<long[]> BLOCK = ThreadLocal.withInitial(() -> new long[BLOCK_WORDS]);
    private static final boolean LITTLE = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN;

    /** hash64 of all bytes of {@code seg}. */
    public static long of(MemorySegment seg) {
        long n = seg.byteSize();
        long words = n >>> 3;
        long acc = 0;
        if (LITTLE && words >= 64) {
            // Bulk-copy blocks into a long[] (one memcpy, no per-load segment checks), then hash the
            // array in a tight loop the JIT unrolls: bound by the multiplies, several GB/s per core.
            long[] block = BLOCK.get();
            for (long w0 = 0; w0 < words; w0 += BLOCK_WORDS) {
                int k = (int) Math.min(BLOCK_WORDS, words - w0);
                MemorySegment.copy(seg, ValueLayout.JAVA_LONG_UNALIGNED, w0 << 3, block, 0, k);
                long salt = w0 * GOLDEN;
                for (int j = 0; j < k; j++, salt += GOLDEN) acc ^= fmix64(block[j]) ^ salt;
            }
        } else {
            for (long i = 0; i < words; i++) acc ^= fmix64(seg.get(U64, i << 3)) ^ (i * GOLDEN);
        }
        int tail = (int) (n & 7);
        if (tail != 0) {
            long w = 0;
            long base = words << 3;
            for (int b = 0; b < tail; b++) w |= (seg.get(ValueLayout.JAVA_BYTE, base + b) & 0xFFL) << (8 * b);
            acc ^= fmix64(w) ^ (words * GOLDEN);
        }
        return fmix64(acc ^ n);
    }

    /** hash64 of a byte array. */
    public static long of(byte[] bytes) { return of(MemorySegment.ofArray(bytes)); }

    /** The 16-character lowercase hex form used in {@code section_hashes}. */
    public static String hex(long h) { return String.format("%016x", h); }

    /**
     * hash64 over bytes fed in pieces of any size; the result equals {@link #of} over their
     * concatenation.
     */
    public static final class Streaming {
        private long acc;
        private long words;
        private long total;
        private long pending;     // bytes of the unfinished word, little-endian
        private int pendingBytes;

        public void update(MemorySegment seg) {
            long n = seg.byteSize();
            long p = 0;
            while (pendingBytes != 0 && p < n) {        // finish a word left open by the last call
                pending |= (seg.get(ValueLayout.JAVA_BYTE, p++) & 0xFFL) << (8 * pendingBytes);
                if (++pendingBytes == 8) { word(pending); pending = 0; pendingBytes = 0; }
            }
            long full = (n - p) >>> 3;
            long a = acc, i = words;
            for (long k = 0; k < full; k++, p += 8, i++) a ^= fmix64(seg.get(U64, p)) ^ (i * GOLDEN);
            acc = a;
            words = i;
            while (p < n) pending |= (seg.get(ValueLayout.JAVA_BYTE, p++) & 0xFFL) << (8 * pendingBytes++);
            total += n;
        }

        public void update(byte[] b, int off, int len) { update(MemorySegment.ofArray(b).asSlice(off, len)); }

        private void word(long w) { acc ^= fmix64(w) ^ (words * GOLDEN); words++; }

        /** The hash of everything fed so far (the stream may continue afterwards). */
        public long value() {
            long a = acc;
            if (pendingBytes != 0) a ^= fmix64(pending) ^ (words * GOLDEN);
            return fmix64(a ^ total);
        }
    }
}
