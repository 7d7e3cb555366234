package dev.cmf4j.format.quant;

/**
 * The per-row geometric scale ladder of q4tp and q2tp, exactly as CMF defines it for
 * bit-exactness: {@code t[0] = exp2(lo)}, {@code t[c] = t[c−1] · exp2(step)}, all in f32 — one
 * exp2 for lo, one for the ratio, 31 multiplies. {@code lo} and {@code step} are f16 values.
 *
 * <p>exp2 is the correctly rounded f32 result, computed as {@code (float) StrictMath.pow(2, x)}
 * (deterministic on every JVM). For every finite f16 input this equals the f32 rounding of the
 * exact 2^x (checked against long-double exp2l over all 63,488 of them); note that glibc's
 * {@code exp2f} is not correctly rounded and differs on 42 of those inputs.
 */
public final class TpLadder {
    private TpLadder() {}

    public static final int RUNGS = 32;

    /** Correctly rounded f32 2^x. */
    public static float exp2(float x) { return (float) StrictMath.pow(2.0, x); }

    /** Fills {@code t[0..32)} with the q4tp ladder of one row. */
    public static void q4tp(float lo, float step, float[] t) {
        float ratio = exp2(step);
        t[0] = exp2(lo);
        for (int c = 1; c < RUNGS; c++) t[c] = t[c - 1] * ratio;
    }

    /** Fills {@code t[0..32)} with the q2tp ladder: rung 0 is exact +0, rung c ≥ 1 is q4tp rung c−1. */
    public static void q2tp(float lo, float step, float[] t) {
        float ratio = exp2(step);
        t[0] = 0f;
        t[1] = exp2(lo);
        for (int c = 2; c < RUNGS; c++) t[c] = t[c - 1] * ratio;
    }

    /** Bytes of one row's 5-bit code stream (LSB-first, padded to a byte). */
    public static long codeStride(long groupsPerRow) { return (groupsPerRow * 5 + 7) / 8; }
}
