package dev.cmf4j.format.quant;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/** Little-endian, unaligned value layouts (CMF is little-endian everywhere; payloads are byte-packed). */
final class Le {
    private Le() {}

    static final ValueLayout.OfByte I8 = ValueLayout.JAVA_BYTE;
    static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** IEEE half at {@code off}, widened exactly to float. */
    static float f16(MemorySegment s, long off) { return Float.float16ToFloat(s.get(I16, off)); }

    static int u8(MemorySegment s, long off) { return s.get(I8, off) & 0xFF; }

    static long u32(MemorySegment s, long off) { return s.get(I32, off) & 0xFFFFFFFFL; }
}
