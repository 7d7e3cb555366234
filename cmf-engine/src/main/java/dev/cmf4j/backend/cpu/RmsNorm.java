package dev.cmf4j.backend.cpu;

/**
 * RMSNorm: y = x / sqrt(mean(x²) + eps) · s, with s = w (plain), 1 + w (offset, Gemma) or 1 (no weight).
 * The mean is accumulated in double; the rest in float32 like transformers.
 */
public final class RmsNorm {
    private RmsNorm() {}

    /**
     * Normalizes {@code x[xo, xo+n)} into {@code out[oo, oo+n)} (may alias x).
     *
     * @param w      weight of length n, or null for no scale
     * @param offset true for the x̂·(1+w) style
     */
    public static void apply(float[] x, int xo, float[] out, int oo, int n, float[] w, boolean offset, float eps) {
        double ss = 0;
        for (int i = 0; i < n; i++) { float v = x[xo + i]; ss += (double) v * v; }
        float inv = (float) (1.0 / Math.sqrt((float) (ss / n) + eps));
        if (w == null) {
            for (int i = 0; i < n; i++) out[oo + i] = x[xo + i] * inv;
        } else if (offset) {
            for (int i = 0; i < n; i++) out[oo + i] = (x[xo + i] * inv) * (1f + w[i]);
        } else {
            for (int i = 0; i < n; i++) out[oo + i] = w[i] * (x[xo + i] * inv);
        }
    }

    /** Normalizes each of {@code rows} consecutive rows of width n in place. */
    public static void rows(float[] x, int rows, int n, float[] w, boolean offset, float eps) {
        for (int r = 0; r < rows; r++) apply(x, r * n, x, r * n, n, w, offset, eps);
    }
}
