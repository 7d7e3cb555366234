package dev.cmf4j.format;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Arrays;

/** A CMF file's bytes in memory, with helpers to corrupt named fields and re-seal the envelope hashes. */
final class Mutable {
    static final ValueLayout.OfLong U64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfInt U32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    byte[] b;

    Mutable(byte[] bytes) { b = bytes.clone(); }

    MemorySegment seg() { return MemorySegment.ofArray(b); }

    long u64(long at) { return seg().get(U64, at); }
    Mutable u64(long at, long v) { seg().set(U64, at, v); return this; }
    int u32(long at) { return seg().get(U32, at); }
    Mutable u32(long at, int v) { seg().set(U32, at, v); return this; }
    Mutable u8(long at, int v) { b[(int) at] = (byte) v; return this; }
    Mutable flip(long at) { b[(int) at] ^= (byte) 0xFF; return this; }
    Mutable truncate(int len) { b = Arrays.copyOf(b, len); return this; }

    long headerOff() { return u64(0x10); }
    long headerLen() { return u64(0x18); }
    long dirOff() { return u64(0x20); }
    long dirLen() { return u64(0x28); }
    long dataOff() { return u64(0x30); }
    /** Absolute offset of field {@code at} (0..55) of directory record {@code i}. */
    long record(int i, int at) { return dirOff() + 16 + 56L * i + at; }

    /** Recomputes the header and directory hashes so a mutation gets past the integrity check. */
    Mutable reseal() {
        MemorySegment s = seg();
        if (b.length < 128) return this;
        if (headerLen() >= 0 && headerOff() >= 0 && headerOff() + headerLen() <= b.length && headerOff() + headerLen() >= 0) {
            s.set(U64, 0x70, Hash64.of(s.asSlice(headerOff(), headerLen())));
        }
        if (dirLen() >= 0 && dirOff() >= 0 && dirOff() + dirLen() <= b.length && dirOff() + dirLen() >= 0) {
            s.set(U64, 0x78, Hash64.of(s.asSlice(dirOff(), dirLen())));
        }
        return this;
    }

    /** Replaces {@code from} by {@code to} (same UTF-8 length) in the header JSON. */
    Mutable replaceInHeader(String from, String to) {
        byte[] f = from.getBytes(), t = to.getBytes();
        if (f.length != t.length) throw new IllegalArgumentException("same length only");
        int start = (int) headerOff(), end = (int) (headerOff() + headerLen());
        for (int i = start; i + f.length <= end; i++) {
            if (Arrays.equals(b, i, i + f.length, f, 0, f.length)) {
                System.arraycopy(t, 0, b, i, t.length);
                return this;
            }
        }
        throw new IllegalArgumentException("not in header: " + from);
    }

    CmfFile open() { return CmfFile.open(seg(), "mutant.cmf"); }
}
