package dev.cmf4j.backend.cpu;

/** Numerically stable softmax helpers. */
public final class Softmax {
    private Softmax() {}

    /** In place over x[off, off+n). */
    public static void apply(float[] x, int off, int n) {
        float max = Float.NEGATIVE_INFINITY;
        for (int i = 0; i < n; i++) max = Math.max(max, x[off + i]);
        float sum = 0f;
        for (int i = 0; i < n; i++) { float e = (float) Math.exp(x[off + i] - max); x[off + i] = e; sum += e; }
        for (int i = 0; i < n; i++) x[off + i] /= sum;
    }

    /** Indices of the k largest of x[0, n), largest first; ties go to the lower index. */
    public static void topK(float[] x, int n, int k, int[] idx) {
        for (int j = 0; j < k; j++) {
            int best = -1;
            float bv = Float.NEGATIVE_INFINITY;
            outer:
            for (int i = 0; i < n; i++) {
                for (int p = 0; p < j; p++) if (idx[p] == i) continue outer;
                if (best < 0 || x[i] > bv) { best = i; bv = x[i]; }
            }
            idx[j] = best;
        }
    }
}
