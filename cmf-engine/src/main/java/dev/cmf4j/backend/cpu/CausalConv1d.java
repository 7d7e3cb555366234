package dev.cmf4j.backend.cpu;

/**
 * Depthwise causal 1-D convolution with SiLU, over a chunk of tokens, carrying the last (kernel − 1)
 * inputs of every channel across calls (the conv state of a linear-attention layer).
 */
public final class CausalConv1d {
    private CausalConv1d() {}

    /**
     * @param x      [tokens, channels] input from {@code xo}, replaced by silu(conv(x))
     * @param w      [channels, kernel] weights (tap kernel−1 multiplies the current token)
     * @param bias   [channels] or null
     * @param state  [channels, kernel−1] the previous inputs, oldest first; updated
     * @param window scratch of at least (kernel−1+tokens) floats
     */
    public static void apply(float[] x, int xo, int tokens, int channels, float[] w, float[] bias, int kernel,
                             float[] state, float[] window) {
        int hist = kernel - 1;
        for (int c = 0; c < channels; c++) {
            System.arraycopy(state, c * hist, window, 0, hist);
            for (int t = 0; t < tokens; t++) window[hist + t] = x[xo + t * channels + c];
            for (int t = 0; t < tokens; t++) {
                float s = bias == null ? 0f : bias[c];
                for (int j = 0; j < kernel; j++) s += w[c * kernel + j] * window[t + j];
                x[xo + t * channels + c] = s / (1f + (float) Math.exp(-s));
            }
            System.arraycopy(window, tokens, state, c * hist, hist);
        }
    }
}
