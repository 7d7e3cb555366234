package dev.cmf4j.backend.cpu;

/**
 * Rotary position embedding in transformers' rotate_half form: for i < rotaryDim/2 the pair
 * (x[i], x[i + rotaryDim/2]) turns by pos·invFreq[i]; dims past rotaryDim pass through.
 */
public final class Rotary {
    private Rotary() {}

    /**
     * Fills cos/sin (length invFreq.length) for one position; the angle is the float32 product
     * pos·invFreq like transformers, and both are multiplied by {@code scaling}.
     */
    public static void table(int pos, float[] invFreq, float scaling, float[] cos, float[] sin) {
        for (int i = 0; i < invFreq.length; i++) {
            float angle = (float) pos * invFreq[i];
            cos[i] = (float) Math.cos(angle) * scaling;
            sin[i] = (float) Math.sin(angle) * scaling;
        }
    }

    /** Rotates {@code heads} consecutive heads of width headDim starting at x[off], using a cos/sin table. */
    public static void apply(float[] x, int off, int heads, int headDim, int rotaryDim, float[] cos, float[] sin) {
        int half = rotaryDim / 2;
        for (int h = 0; h < heads; h++) {
            int b = off + h * headDim;
            for (int i = 0; i < half; i++) {
                float x1 = x[b + i], x2 = x[b + i + half];
                x[b + i] = x1 * cos[i] - x2 * sin[i];
                x[b + i + half] = x2 * cos[i] + x1 * sin[i];
            }
        }
    }
}
