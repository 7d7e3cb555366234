package dev.cmf4j.convert.quant;

import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/** Shared encoder arithmetic: f16 rounding of scales and the checks every quantizer makes. */
final class Scales {
    private Scales() {}

    static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfByte I8 = ValueLayout.JAVA_BYTE;
    static final float F16_MAX = 65504f;
    static final float F16_MIN_SUBNORMAL = 0x1p-24f;

    /** f32 → f16 bits, IEEE round-to-nearest-even. */
    static short f16(float x) { return Float.floatToFloat16(x); }

    /** x rounded to the nearest f16 value. */
    static float roundF16(float x) { return Float.float16ToFloat(Float.floatToFloat16(x)); }

    /**
     * The f16 value a reader will multiply by, for an ideal scale {@code x ≥ 0}: x rounded to f16,
     * never 0 for a positive x (the smallest subnormal instead), so a tiny but non-zero row keeps
     * its sign pattern. 0 stays 0 (an all-zero row or group; its codes are 0 and decode to 0).
     */
    static float scale(float x, TensorShape s, String unit, long index) {
        if (!(x <= F16_MAX)) throw s.fail(unit + " " + index + ": scale " + x + " exceeds the f16 range (weights too large to quantize)");
        float r = roundF16(x);
        return r == 0f && x > 0f ? F16_MIN_SUBNORMAL : r;
    }

    /** Refuses NaN and infinities: a quantized payload cannot carry them meaningfully. */
    static void requireFinite(float[] v, int off, int len, long firstElement, TensorShape s) {
        for (int i = 0; i < len; i++)
            if (!Float.isFinite(v[off + i]))
                throw s.fail("source element " + (firstElement + i) + " is " + v[off + i] + "; quantized dtypes need finite weights");
    }

    static float absmax(float[] v, int off, int len) {
        float m = 0f;
        for (int i = 0; i < len; i++) m = Math.max(m, Math.abs(v[off + i]));
        return m;
    }

    /** round-half-to-even(x / s) clamped to [lo, hi]; 0 when s == 0. */
    static int quantize(float x, float s, int lo, int hi) {
        if (s == 0f) return 0;
        float q = (float) Math.rint(x / s);
        return (int) Math.max(lo, Math.min(hi, q));
    }

    static int toIntSize(long n, TensorShape s, String what) {
        if (n > Integer.MAX_VALUE - 16) throw s.fail(what + " of " + n + " elements is too long to encode");
        return (int) n;
    }
}
