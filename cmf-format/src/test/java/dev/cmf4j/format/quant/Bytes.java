package dev.cmf4j.format.quant;

import java.io.ByteArrayOutputStream;
import java.lang.foreign.MemorySegment;

/** Little-endian payload builder for hand-made test tensors. */
final class Bytes {
    private final ByteArrayOutputStream out = new ByteArrayOutputStream();

    Bytes u8(int... v) { for (int x : v) out.write(x); return this; }

    Bytes i8(int... v) { for (int x : v) out.write(x & 0xFF); return this; }

    Bytes u16(int v) { out.write(v & 0xFF); out.write((v >>> 8) & 0xFF); return this; }

    Bytes f16(float... v) { for (float x : v) u16(Float.floatToFloat16(x)); return this; }

    Bytes u32(long v) { for (int i = 0; i < 4; i++) out.write((int) (v >>> (8 * i)) & 0xFF); return this; }

    Bytes f32(float... v) { for (float x : v) u32(Float.floatToRawIntBits(x) & 0xFFFFFFFFL); return this; }

    Bytes zeros(int n) { for (int i = 0; i < n; i++) out.write(0); return this; }

    byte[] array() { return out.toByteArray(); }

    MemorySegment seg() { return MemorySegment.ofArray(array()); }

    static MemorySegment seg(byte[] b) { return MemorySegment.ofArray(b); }
}
