package dev.cmf4j.convert.gguf;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * ggml's dequantization formulas (ggml-quants.c, {@code dequantize_row_*}) for the block types GGUF
 * import supports. Blocks cover consecutive elements of the flat tensor; a read of any element range
 * decodes the blocks it touches into a small buffer (one block of at most 256 values).
 */
public final class GgmlDequant {
    private GgmlDequant() {}

    private static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** Elements {@code [first, first+len)} of a tensor of type {@code t} whose bytes are {@code data}. */
    public static void read(GgmlType t, MemorySegment data, long first, float[] dst, int off, int len) {
        switch (t) {
            case F32 -> MemorySegment.copy(data, F32, first * 4, dst, off, len);
            case F16 -> { for (int i = 0; i < len; i++) dst[off + i] = Float.float16ToFloat(data.get(I16, (first + i) * 2)); }
            case BF16 -> { for (int i = 0; i < len; i++) dst[off + i] = Float.intBitsToFloat((data.get(I16, (first + i) * 2) & 0xFFFF) << 16); }
            default -> {
                int bs = t.blockSize;
                float[] block = new float[bs];
                long end = first + len;
                long b = first / bs;
                while (first < end) {
                    decodeBlock(t, data, b * t.blockBytes, block);
                    int from = (int) (first - b * bs);
                    int take = (int) Math.min(bs - from, end - first);
                    System.arraycopy(block, from, dst, off, take);
                    off += take;
                    first += take;
                    b++;
                }
            }
        }
    }

    /** Decodes one block starting at byte {@code at} into {@code y} (blockSize values). */
    public static void decodeBlock(GgmlType t, MemorySegment m, long at, float[] y) {
        switch (t) {
            case Q8_0 -> {           // f16 d; i8 qs[32]: y = d * q
                float d = f16(m, at);
                for (int j = 0; j < 32; j++) y[j] = d * m.get(ValueLayout.JAVA_BYTE, at + 2 + j);
            }
            case Q4_0 -> {           // f16 d; u8 qs[16]: y[j] = d*((qs[j]&15)-8), y[j+16] = d*((qs[j]>>4)-8)
                float d = f16(m, at);
                for (int j = 0; j < 16; j++) {
                    int q = u8(m, at + 2 + j);
                    y[j] = ((q & 0xF) - 8) * d;
                    y[j + 16] = ((q >> 4) - 8) * d;
                }
            }
            case Q4_K -> {           // f16 d; f16 dmin; u8 scales[12]; u8 qs[128]
                float d = f16(m, at), dmin = f16(m, at + 2);
                long sc = at + 4, q = at + 16;
                int is = 0, yi = 0;
                for (int j = 0; j < 256; j += 64) {
                    int s1 = scaleK4(m, sc, is, false), m1 = scaleK4(m, sc, is, true);
                    int s2 = scaleK4(m, sc, is + 1, false), m2 = scaleK4(m, sc, is + 1, true);
                    float d1 = d * s1, mm1 = dmin * m1, d2 = d * s2, mm2 = dmin * m2;
                    for (int l = 0; l < 32; l++) y[yi + l] = d1 * (u8(m, q + l) & 0xF) - mm1;
                    for (int l = 0; l < 32; l++) y[yi + 32 + l] = d2 * (u8(m, q + l) >> 4) - mm2;
                    q += 32;
                    is += 2;
                    yi += 64;
                }
            }
            case Q6_K -> {           // u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
                float d = f16(m, at + 208);
                long ql = at, qh = at + 128, sc = at + 192;
                int yi = 0;
                for (int n = 0; n < 256; n += 128) {
                    for (int l = 0; l < 32; l++) {
                        int is = l / 16;
                        int h = u8(m, qh + l);
                        int q1 = ((u8(m, ql + l) & 0xF) | ((h & 3) << 4)) - 32;
                        int q2 = ((u8(m, ql + l + 32) & 0xF) | (((h >> 2) & 3) << 4)) - 32;
                        int q3 = ((u8(m, ql + l) >> 4) | (((h >> 4) & 3) << 4)) - 32;
                        int q4 = ((u8(m, ql + l + 32) >> 4) | (((h >> 6) & 3) << 4)) - 32;
                        y[yi + l] = d * m.get(ValueLayout.JAVA_BYTE, sc + is) * q1;
                        y[yi + l + 32] = d * m.get(ValueLayout.JAVA_BYTE, sc + is + 2) * q2;
                        y[yi + l + 64] = d * m.get(ValueLayout.JAVA_BYTE, sc + is + 4) * q3;
                        y[yi + l + 96] = d * m.get(ValueLayout.JAVA_BYTE, sc + is + 6) * q4;
                    }
                    yi += 128;
                    ql += 64;
                    qh += 32;
                    sc += 8;
                }
            }
            default -> throw new IllegalArgumentException("no decoder for " + t);
        }
    }

    /** ggml's get_scale_min_k4: the 6-bit scale (or min) {@code j} of a Q4_K/Q5_K block's packed scales. */
    static int scaleK4(MemorySegment m, long q, int j, boolean min) {
        if (j < 4) return min ? u8(m, q + j + 4) & 63 : u8(m, q + j) & 63;
        return min ? (u8(m, q + j + 4) >> 4) | ((u8(m, q + j) >> 6) << 4)
                : (u8(m, q + j + 4) & 0xF) | ((u8(m, q + j - 4) >> 6) << 4);
    }

    private static int u8(MemorySegment m, long at) { return m.get(ValueLayout.JAVA_BYTE, at) & 0xFF; }

    private static float f16(MemorySegment m, long at) { return Float.float16ToFloat(m.get(I16, at)); }
}
