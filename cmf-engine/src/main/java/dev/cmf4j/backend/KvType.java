package dev.cmf4j.backend;

import java.util.Locale;

/**
 * The element type of a KV cache's committed store: float32, float16, or int8 with one float32 scale per head and
 * position (absmax/127, as llama.cpp's q8_0 with a block of one head). A step's own chunk stays float32 until it commits.
 */
public enum KvType {
    F32(4), F16(2), Q8(1);

    /** Bytes of one stored element (q8's scales come on top: 4 bytes per head and position). */
    public final int elementBytes;

    KvType(int elementBytes) { this.elementBytes = elementBytes; }

    public static KvType parse(String s) {
        return switch (s == null ? "" : s.trim().toLowerCase(Locale.ROOT)) {
            case "f32" -> F32;
            case "f16" -> F16;
            case "q8" -> Q8;
            default -> throw new IllegalArgumentException("--kv must be f32, f16 or q8, got '" + s + "'");
        };
    }

    public String label() { return name().toLowerCase(Locale.ROOT); }

    /**
     * q8's rule, the one every q8 store follows (the CPU's cache, the GPU kernels and their checks): {@code n} values
     * of one head at {@code src[so..]} as codes {@code round(x·127/absmax)} (Java's half-up rounding) at {@code dst[dof..]};
     * returns the scale absmax/127 (0 for a row of zeros, whose codes are 0).
     */
    public static float quantizeQ8(float[] src, int so, byte[] dst, int dof, int n) {
        float amax = 0f;
        for (int i = 0; i < n; i++) amax = Math.max(amax, Math.abs(src[so + i]));
        float inv = amax == 0f ? 0f : 127f / amax;
        for (int i = 0; i < n; i++) dst[dof + i] = (byte) Math.round(src[so + i] * inv);
        return amax / 127f;
    }
}
