package dev.cmf4j.convert.gguf;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Test-only GGUF v3 writer with ports of ggml's reference quantizers ({@code quantize_row_*_ref} in
 * ggml-quants.c) for Q8_0, Q4_0, Q4_K and Q6_K, plus an independent, array-style implementation of
 * ggml's dequantization formulas ({@link #dequant}) to check the reader against.
 */
final class GgufFiles {
    private record Kv(String key, int type, Object value) {}

    private record T(String name, GgmlType type, long[] ne, byte[] data) {}

    private final List<Kv> kvs = new ArrayList<>();
    private final List<T> tensors = new ArrayList<>();
    int alignment = 32;

    GgufFiles str(String k, String v) { kvs.add(new Kv(k, 8, v)); return this; }
    GgufFiles u32(String k, long v) { kvs.add(new Kv(k, 4, v)); return this; }
    GgufFiles f32(String k, float v) { kvs.add(new Kv(k, 6, v)); return this; }
    GgufFiles bool(String k, boolean v) { kvs.add(new Kv(k, 7, v)); return this; }
    GgufFiles strings(String k, List<String> v) { kvs.add(new Kv(k, 9, new Object[] {8, v})); return this; }
    GgufFiles i32s(String k, List<Integer> v) { kvs.add(new Kv(k, 9, new Object[] {5, v})); return this; }
    GgufFiles f32s(String k, List<Float> v) { kvs.add(new Kv(k, 9, new Object[] {6, v})); return this; }

    /** Adds a tensor of shape {@code ne} (ggml order) encoded as {@code type} from {@code values}. */
    GgufFiles tensor(String name, GgmlType type, long[] ne, float[] values) {
        tensors.add(new T(name, type, ne, encode(type, values)));
        return this;
    }

    GgufFiles raw(String name, GgmlType type, long[] ne, byte[] data) {
        tensors.add(new T(name, type, ne, data));
        return this;
    }

    byte[] bytes() {
        Out o = new Out();
        o.u32(GgufReader.MAGIC).u32(3).u64(tensors.size()).u64(kvs.size() + (alignment != 32 ? 1 : 0));
        if (alignment != 32) o.str("general.alignment").u32(4).u32(alignment);
        for (Kv kv : kvs) {
            o.str(kv.key()).u32(kv.type());
            value(o, kv.type(), kv.value());
        }
        long off = 0;
        List<Long> offs = new ArrayList<>();
        for (T t : tensors) {
            o.str(t.name()).u32(t.ne().length);
            for (long d : t.ne()) o.u64(d);
            o.u32(t.type().id).u64(off);
            offs.add(off);
            off = (off + t.data().length + alignment - 1) / alignment * alignment;
        }
        o.pad(alignment);
        long start = o.size();
        for (int i = 0; i < tensors.size(); i++) {
            while (o.size() - start < offs.get(i)) o.b.write(0);
            o.b.writeBytes(tensors.get(i).data());
        }
        return o.b.toByteArray();
    }

    @SuppressWarnings("unchecked")
    private static void value(Out o, int type, Object v) {
        switch (type) {
            case 4 -> o.u32((int) (long) (Long) v);
            case 5 -> o.u32((Integer) v);
            case 6 -> o.f32((Float) v);
            case 7 -> o.b.write((Boolean) v ? 1 : 0);
            case 8 -> o.str((String) v);
            case 9 -> {
                Object[] a = (Object[]) v;
                int et = (Integer) a[0];
                List<Object> items = (List<Object>) a[1];
                o.u32(et).u64(items.size());
                for (Object x : items) value(o, et, x);
            }
            default -> throw new IllegalArgumentException("type " + type);
        }
    }

    static final class Out {
        final ByteArrayOutputStream b = new ByteArrayOutputStream();

        Out u32(int v) { b.writeBytes(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(v).array()); return this; }
        Out u64(long v) { b.writeBytes(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(v).array()); return this; }
        Out f32(float v) { b.writeBytes(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putFloat(v).array()); return this; }
        Out str(String s) { byte[] x = s.getBytes(StandardCharsets.UTF_8); u64(x.length); b.writeBytes(x); return this; }
        long size() { return b.size(); }
        void pad(int a) { while (b.size() % a != 0) b.write(0); }
    }

    // ---- ggml reference quantizers ----------------------------------------------------------------

    static byte[] encode(GgmlType type, float[] x) {
        ByteBuffer o = ByteBuffer.allocate((int) ((long) x.length / type.blockSize * type.blockBytes)).order(ByteOrder.LITTLE_ENDIAN);
        switch (type) {
            case F32 -> { for (float v : x) o.putFloat(v); }
            case F16 -> { for (float v : x) o.putShort(Float.floatToFloat16(v)); }
            case BF16 -> { for (float v : x) o.putShort(bf16(v)); }
            case Q8_0 -> { for (int i = 0; i < x.length; i += 32) q8_0(x, i, o); }
            case Q4_0 -> { for (int i = 0; i < x.length; i += 32) q4_0(x, i, o); }
            case Q4_K -> { for (int i = 0; i < x.length; i += 256) q4_K(x, i, o); }
            case Q6_K -> { for (int i = 0; i < x.length; i += 256) q6_K(x, i, o); }
            default -> throw new IllegalArgumentException(type.name());
        }
        return o.array();
    }

    /** ggml_compute_fp32_to_bf16: round to nearest even, NaN kept quiet. */
    static short bf16(float f) {
        int u = Float.floatToRawIntBits(f);
        if ((u & 0x7fffffff) > 0x7f800000) return (short) ((u >>> 16) | 64);
        return (short) ((u + (0x7fff + ((u >>> 16) & 1))) >>> 16);
    }

    static int nearestInt(float f) { return (int) Math.rint(f); }

    private static float roundf(float v) { return (float) (v < 0 ? -Math.floor(-v + 0.5) : Math.floor(v + 0.5)); }

    static void q8_0(float[] x, int at, ByteBuffer o) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[at + j]));
        float d = amax / 127, id = d != 0 ? 1 / d : 0;
        o.putShort(Float.floatToFloat16(d));
        for (int j = 0; j < 32; j++) o.put((byte) roundf(x[at + j] * id));
    }

    static void q4_0(float[] x, int at, ByteBuffer o) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            float v = x[at + j];
            if (amax < Math.abs(v)) { amax = Math.abs(v); max = v; }
        }
        float d = max / -8, id = d != 0 ? 1 / d : 0;
        o.putShort(Float.floatToFloat16(d));
        for (int j = 0; j < 16; j++) {
            int x0 = Math.min(15, (byte) (int) (x[at + j] * id + 8.5f));
            int x1 = Math.min(15, (byte) (int) (x[at + 16 + j] * id + 8.5f));
            o.put((byte) (x0 | (x1 << 4)));
        }
    }

    static float makeQkx2Quants(int n, int nmax, float[] x, int xo, float[] w, int[] l, int lo, float[] theMin, int[] laux,
                                float rmin, float rdelta, int nstep) {
        float min = x[xo], max = x[xo], sumW = w[0], sumX = sumW * x[xo];
        for (int i = 1; i < n; i++) {
            if (x[xo + i] < min) min = x[xo + i];
            if (x[xo + i] > max) max = x[xo + i];
            sumW += w[i];
            sumX += w[i] * x[xo + i];
        }
        if (min > 0) min = 0;
        if (max == min) {
            for (int i = 0; i < n; i++) l[lo + i] = 0;
            theMin[0] = -min;
            return 0;
        }
        float iscale = nmax / (max - min), scale = 1 / iscale, best = 0;
        for (int i = 0; i < n; i++) {
            int q = Math.max(0, Math.min(nmax, nearestInt(iscale * (x[xo + i] - min))));
            l[lo + i] = q;
            float diff = scale * q + min - x[xo + i];
            best += w[i] * diff * diff;
        }
        for (int is = 0; is <= nstep; is++) {
            iscale = (rmin + rdelta * is + nmax) / (max - min);
            float sumL = 0, sumL2 = 0, sumXl = 0;
            for (int i = 0; i < n; i++) {
                int q = Math.max(0, Math.min(nmax, nearestInt(iscale * (x[xo + i] - min))));
                laux[i] = q;
                sumL += w[i] * q;
                sumL2 += w[i] * q * q;
                sumXl += w[i] * q * x[xo + i];
            }
            float dd = sumW * sumL2 - sumL * sumL;
            if (dd > 0) {
                float thisScale = (sumW * sumXl - sumX * sumL) / dd;
                float thisMin = (sumL2 * sumX - sumL * sumXl) / dd;
                if (thisMin > 0) {
                    thisMin = 0;
                    thisScale = sumXl / sumL2;
                }
                float cur = 0;
                for (int i = 0; i < n; i++) {
                    float diff = thisScale * laux[i] + thisMin - x[xo + i];
                    cur += w[i] * diff * diff;
                }
                if (cur < best) {
                    for (int i = 0; i < n; i++) l[lo + i] = laux[i];
                    best = cur;
                    scale = thisScale;
                    min = thisMin;
                }
            }
        }
        theMin[0] = -min;
        return scale;
    }

    static void q4_K(float[] x, int at, ByteBuffer o) {
        int[] l = new int[256], laux = new int[32];
        float[] w = new float[32], mins = new float[8], scales = new float[8], tm = new float[1];
        float maxScale = 0, maxMin = 0;
        for (int j = 0; j < 8; j++) {
            float sumX2 = 0;
            for (int i = 0; i < 32; i++) sumX2 += x[at + 32 * j + i] * x[at + 32 * j + i];
            float av = (float) Math.sqrt(sumX2 / 32);
            for (int i = 0; i < 32; i++) w[i] = av + Math.abs(x[at + 32 * j + i]);
            scales[j] = makeQkx2Quants(32, 15, x, at + 32 * j, w, l, 32 * j, tm, laux, -1f, 0.1f, 20);
            mins[j] = tm[0];
            if (scales[j] > maxScale) maxScale = scales[j];
            if (mins[j] > maxMin) maxMin = mins[j];
        }
        float invScale = maxScale > 0 ? 63f / maxScale : 0, invMin = maxMin > 0 ? 63f / maxMin : 0;
        int[] sc = new int[12];
        for (int j = 0; j < 8; j++) {
            int ls = Math.min(63, nearestInt(invScale * scales[j]) & 0xFF), lm = Math.min(63, nearestInt(invMin * mins[j]) & 0xFF);
            if (j < 4) {
                sc[j] = ls;
                sc[j + 4] = lm;
            } else {
                sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
                sc[j - 4] |= (ls >> 4) << 6;
                sc[j] |= (lm >> 4) << 6;
            }
        }
        short dh = Float.floatToFloat16(maxScale / 63f), mh = Float.floatToFloat16(maxMin / 63f);
        float d0 = Float.float16ToFloat(dh), m0 = Float.float16ToFloat(mh);
        for (int j = 0; j < 8; j++) {
            int s, m;
            if (j < 4) { s = sc[j] & 63; m = sc[j + 4] & 63; }
            else { s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4); m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4); }
            float d = d0 * s;
            if (d == 0) continue;
            float dm = m0 * m;
            for (int i = 0; i < 32; i++) l[32 * j + i] = Math.max(0, Math.min(15, nearestInt((x[at + 32 * j + i] + dm) / d)));
        }
        o.putShort(dh).putShort(mh);
        for (int v : sc) o.put((byte) v);
        for (int j = 0; j < 256; j += 64) for (int i = 0; i < 32; i++) o.put((byte) (l[j + i] | (l[j + i + 32] << 4)));
    }

    static float makeQxQuants(int n, int nmax, float[] x, int xo, int[] l, int lo) {
        float max = 0, amax = 0;
        for (int i = 0; i < n; i++) {
            float ax = Math.abs(x[xo + i]);
            if (ax > amax) { amax = ax; max = x[xo + i]; }
        }
        if (amax < 1e-15f) {
            for (int i = 0; i < n; i++) l[lo + i] = 0;
            return 0;
        }
        float iscale = -nmax / max, sumlx = 0, suml2 = 0;
        for (int i = 0; i < n; i++) {
            int q = Math.max(-nmax, Math.min(nmax - 1, nearestInt(iscale * x[xo + i])));
            l[lo + i] = q + nmax;
            float w = x[xo + i] * x[xo + i];
            sumlx += w * x[xo + i] * q;
            suml2 += w * q * q;
        }
        float scale = suml2 != 0 ? sumlx / suml2 : 0, best = scale * sumlx;
        for (int is = -9; is <= 9; is++) {
            if (is == 0) continue;
            iscale = -(nmax + 0.1f * is) / max;
            sumlx = 0;
            suml2 = 0;
            for (int i = 0; i < n; i++) {
                int q = Math.max(-nmax, Math.min(nmax - 1, nearestInt(iscale * x[xo + i])));
                float w = x[xo + i] * x[xo + i];
                sumlx += w * x[xo + i] * q;
                suml2 += w * q * q;
            }
            if (suml2 > 0 && sumlx * sumlx > best * suml2) {
                for (int i = 0; i < n; i++) l[lo + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, nearestInt(iscale * x[xo + i])));
                scale = sumlx / suml2;
                best = scale * sumlx;
            }
        }
        return scale;
    }

    static void q6_K(float[] x, int at, ByteBuffer o) {
        int[] l = new int[256];
        float[] scales = new float[16];
        float maxScale = 0, maxAbs = 0;
        for (int ib = 0; ib < 16; ib++) {
            float s = makeQxQuants(16, 32, x, at + 16 * ib, l, 16 * ib);
            scales[ib] = s;
            if (Math.abs(s) > maxAbs) { maxAbs = Math.abs(s); maxScale = s; }
        }
        byte[] ql = new byte[128], qh = new byte[64], sc = new byte[16];
        short dh = 0;
        if (maxAbs >= 1e-15f) {
            float iscale = -128f / maxScale;
            dh = Float.floatToFloat16(1 / iscale);
            for (int ib = 0; ib < 16; ib++) sc[ib] = (byte) Math.min(127, nearestInt(iscale * scales[ib]));
            for (int j = 0; j < 16; j++) {
                float d = Float.float16ToFloat(dh) * sc[j];
                if (d == 0) continue;
                for (int i = 0; i < 16; i++) l[16 * j + i] = Math.max(-32, Math.min(31, nearestInt(x[at + 16 * j + i] / d))) + 32;
            }
            for (int j = 0, qlo = 0, qho = 0; j < 256; j += 128, qlo += 64, qho += 32) {
                for (int i = 0; i < 32; i++) {
                    int q1 = l[j + i] & 0xF, q2 = l[j + i + 32] & 0xF, q3 = l[j + i + 64] & 0xF, q4 = l[j + i + 96] & 0xF;
                    ql[qlo + i] = (byte) (q1 | (q3 << 4));
                    ql[qlo + i + 32] = (byte) (q2 | (q4 << 4));
                    qh[qho + i] = (byte) ((l[j + i] >> 4) | ((l[j + i + 32] >> 4) << 2) | ((l[j + i + 64] >> 4) << 4) | ((l[j + i + 96] >> 4) << 6));
                }
            }
        }
        o.put(ql).put(qh).put(sc).putShort(dh);
    }

    // ---- independent dequantization (ggml's dequantize_row_* formulas, array style) --------------

    static float[] dequant(GgmlType type, byte[] b, int n) {
        ByteBuffer in = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
        float[] y = new float[n];
        switch (type) {
            case F32 -> { for (int i = 0; i < n; i++) y[i] = in.getFloat(4 * i); }
            case F16 -> { for (int i = 0; i < n; i++) y[i] = Float.float16ToFloat(in.getShort(2 * i)); }
            case BF16 -> { for (int i = 0; i < n; i++) y[i] = Float.intBitsToFloat((in.getShort(2 * i) & 0xFFFF) << 16); }
            case Q8_0 -> {
                for (int blk = 0; blk < n / 32; blk++) {
                    int o = blk * 34;
                    float d = Float.float16ToFloat(in.getShort(o));
                    for (int j = 0; j < 32; j++) y[blk * 32 + j] = b[o + 2 + j] * d;
                }
            }
            case Q4_0 -> {
                for (int blk = 0; blk < n / 32; blk++) {
                    int o = blk * 18;
                    float d = Float.float16ToFloat(in.getShort(o));
                    for (int j = 0; j < 16; j++) {
                        int q = b[o + 2 + j] & 0xFF;
                        y[blk * 32 + j] = ((q & 0x0F) - 8) * d;
                        y[blk * 32 + j + 16] = ((q >> 4) - 8) * d;
                    }
                }
            }
            case Q4_K -> {
                for (int blk = 0; blk < n / 256; blk++) {
                    int o = blk * 144;
                    float d = Float.float16ToFloat(in.getShort(o)), dmin = Float.float16ToFloat(in.getShort(o + 2));
                    int[] s = new int[8], m = new int[8];
                    for (int j = 0; j < 8; j++) {
                        int[] q = new int[12];
                        for (int k = 0; k < 12; k++) q[k] = b[o + 4 + k] & 0xFF;
                        if (j < 4) { s[j] = q[j] & 63; m[j] = q[j + 4] & 63; }
                        else { s[j] = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); m[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
                    }
                    for (int chunk = 0; chunk < 4; chunk++) {
                        float d1 = d * s[2 * chunk], m1 = dmin * m[2 * chunk], d2 = d * s[2 * chunk + 1], m2 = dmin * m[2 * chunk + 1];
                        for (int i = 0; i < 32; i++) {
                            int q = b[o + 16 + 32 * chunk + i] & 0xFF;
                            y[blk * 256 + 64 * chunk + i] = d1 * (q & 0xF) - m1;
                            y[blk * 256 + 64 * chunk + 32 + i] = d2 * (q >> 4) - m2;
                        }
                    }
                }
            }
            case Q6_K -> {
                for (int blk = 0; blk < n / 256; blk++) {
                    int o = blk * 210;
                    float d = Float.float16ToFloat(in.getShort(o + 208));
                    for (int half = 0; half < 2; half++) {
                        int ql = o + 64 * half, qh = o + 128 + 32 * half, sc = o + 192 + 8 * half;
                        for (int i = 0; i < 32; i++) {
                            int h = b[qh + i] & 0xFF, is = i / 16;
                            int[] q = {
                                    ((b[ql + i] & 0xF) | ((h & 3) << 4)) - 32,
                                    ((b[ql + i + 32] & 0xF) | (((h >> 2) & 3) << 4)) - 32,
                                    (((b[ql + i] & 0xFF) >> 4) | (((h >> 4) & 3) << 4)) - 32,
                                    (((b[ql + i + 32] & 0xFF) >> 4) | (((h >> 6) & 3) << 4)) - 32};
                            for (int k = 0; k < 4; k++) y[blk * 256 + 128 * half + 32 * k + i] = d * b[sc + is + 2 * k] * q[k];
                        }
                    }
                }
            }
            default -> throw new IllegalArgumentException(type.name());
        }
        return y;
    }
}
