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
    private static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

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
            case Q4_1 -> {           // f16 d; f16 m; u8 qs[16]: y = q·d + m
                float d = f16(m, at), mn = f16(m, at + 2);
                for (int j = 0; j < 16; j++) {
                    int q = u8(m, at + 4 + j);
                    y[j] = (q & 0xF) * d + mn;
                    y[j + 16] = (q >> 4) * d + mn;
                }
            }
            case Q5_0, Q5_1 -> {     // f16 d; (Q5_1: f16 m;) u8 qh[4]; u8 qs[16]: the 5th bits from qh
                boolean one = t == GgmlType.Q5_1;
                float d = f16(m, at), mn = one ? f16(m, at + 2) : 0f;
                long h = at + (one ? 4 : 2), qs = h + 4;
                int qh = m.get(I32, h);
                for (int j = 0; j < 16; j++) {
                    int q = u8(m, qs + j);
                    int x0 = (q & 0xF) | (((qh >>> j) << 4) & 0x10), x1 = (q >> 4) | ((qh >>> (j + 12)) & 0x10);
                    if (one) {
                        y[j] = x0 * d + mn;
                        y[j + 16] = x1 * d + mn;
                    } else {
                        y[j] = (x0 - 16) * d;
                        y[j + 16] = (x1 - 16) * d;
                    }
                }
            }
            case Q2_K -> {           // u8 scales[16] (4-bit scale | 4-bit min); u8 qs[64]; f16 d; f16 dmin
                float d = f16(m, at + 80), dmin = f16(m, at + 82);
                long q = at + 16;
                int is = 0, yi = 0;
                for (int n = 0; n < 256; n += 128) {
                    for (int shift = 0; shift < 8; shift += 2)
                        for (int half = 0; half < 2; half++) {
                            int sc = u8(m, at + is++);
                            float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
                            for (int l = 0; l < 16; l++) y[yi++] = dl * ((u8(m, q + 16 * half + l) >> shift) & 3) - ml;
                        }
                    q += 32;
                }
            }
            case Q3_K -> {           // u8 hmask[32]; u8 qs[64]; u8 scales[12] (16 6-bit scales); f16 d
                float d = f16(m, at + 108);
                int[] sc = scalesK3(m, at + 96);
                long q = at + 32;
                int is = 0, yi = 0, bit = 1;
                for (int n = 0; n < 256; n += 128) {
                    for (int shift = 0; shift < 8; shift += 2) {
                        for (int half = 0; half < 2; half++) {
                            float dl = d * (sc[is++] - 32);
                            for (int l = 0; l < 16; l++) {
                                int k = 16 * half + l;
                                y[yi++] = dl * (((u8(m, q + k) >> shift) & 3) - ((u8(m, at + k) & bit) != 0 ? 0 : 4));
                            }
                        }
                        bit <<= 1;
                    }
                    q += 32;
                }
            }
            case Q5_K -> {           // f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
                float d = f16(m, at), dmin = f16(m, at + 2);
                long sc = at + 4, qh = at + 16, ql = at + 48;
                int is = 0, yi = 0, u1 = 1, u2 = 2;
                for (int j = 0; j < 256; j += 64) {
                    float d1 = d * scaleK4(m, sc, is, false), m1 = dmin * scaleK4(m, sc, is, true);
                    float d2 = d * scaleK4(m, sc, is + 1, false), m2 = dmin * scaleK4(m, sc, is + 1, true);
                    for (int l = 0; l < 32; l++) y[yi++] = d1 * ((u8(m, ql + l) & 0xF) + ((u8(m, qh + l) & u1) != 0 ? 16 : 0)) - m1;
                    for (int l = 0; l < 32; l++) y[yi++] = d2 * ((u8(m, ql + l) >> 4) + ((u8(m, qh + l) & u2) != 0 ? 16 : 0)) - m2;
                    ql += 32;
                    is += 2;
                    u1 <<= 2;
                    u2 <<= 2;
                }
            }
            case IQ4_NL -> {         // f16 d; u8 qs[16]: y = d·IQ4_NL_VALUES[nibble]
                float d = f16(m, at);
                for (int j = 0; j < 16; j++) {
                    int q = u8(m, at + 2 + j);
                    y[j] = d * IQ4_NL_VALUES[q & 0xF];
                    y[j + 16] = d * IQ4_NL_VALUES[q >> 4];
                }
            }
            case IQ4_XS -> {         // f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]: 8 blocks of 32, 6-bit scales
                float d = f16(m, at);
                int sh = m.get(I16, at + 2) & 0xFFFF;
                long qs = at + 8;
                for (int ib = 0; ib < 8; ib++) {
                    int ls = ((u8(m, at + 4 + ib / 2) >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
                    float dl = d * (ls - 32);
                    for (int j = 0; j < 16; j++) {
                        int q = u8(m, qs + j);
                        y[32 * ib + j] = dl * IQ4_NL_VALUES[q & 0xF];
                        y[32 * ib + j + 16] = dl * IQ4_NL_VALUES[q >> 4];
                    }
                    qs += 16;
                }
            }
            case MXFP4 -> {          // u8 e (E8M0); u8 qs[16] of E2M1: y = 2·e2m1 · 2^(e−128), low nibble first
                float d = e8m0Half(u8(m, at));
                for (int j = 0; j < 16; j++) {
                    int q = u8(m, at + 1 + j);
                    y[j] = MXFP4_VALUES[q & 0xF] * d;
                    y[j + 16] = MXFP4_VALUES[q >> 4] * d;
                }
            }
            default -> throw new IllegalArgumentException("no decoder for " + t);
        }
    }

    /** IQ4_NL's (and IQ4_XS's) 16 non-linear levels. */
    private static final byte[] IQ4_NL_VALUES = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    /** E2M1's 16 values doubled (ggml's kvalues_mxfp4), paired with a halved E8M0 scale. */
    private static final byte[] MXFP4_VALUES = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

    /** 0.5·2^(e−127) exactly, as ggml_e8m0_to_fp32_half (e = 0 and 1 subnormal; e = 255, NaN in E8M0, gives 2^127 as there). */
    static float e8m0Half(int e) {
        return Float.intBitsToFloat(e < 2 ? 0x00200000 << e : (e - 1) << 23);
    }

    /** Q3_K's 16 6-bit scales from their 12 packed bytes (ggml's kmask shuffle: low 4 bits, then 2 high bits). */
    static int[] scalesK3(MemorySegment m, long at) {
        int[] s = new int[16];
        for (int i = 0; i < 16; i++) {
            int low = i < 8 ? u8(m, at + i) & 0xF : u8(m, at + i - 8) >> 4;
            int high = (u8(m, at + 8 + i % 4) >> (2 * (i / 4))) & 3;
            s[i] = low | (high << 4);
        }
        return s;
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
