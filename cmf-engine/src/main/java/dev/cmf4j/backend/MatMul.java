package dev.cmf4j.backend;

/**
 * The weight product every layer spends its time in: y = W·x for a chunk of {@code tokens} activation rows.
 * Behind an interface so faster kernels (tiled, int8, GPU) replace the reference one without touching the
 * graph.
 */
public interface MatMul {
    /**
     * For t < tokens: y[t·out + o] = Σ_i W[o, i] · x[t·in + i], with out = {@link Matrix#outDim()} and
     * in = {@link Matrix#inDim()}. {@code y} is overwritten.
     */
    void apply(Matrix w, float[] x, int tokens, float[] y);

    /**
     * Several products that read the same activations (q/k/v, gate/up): {@code ys[i] = ws[i]·x} for each i,
     * as {@link #apply} would compute them. A GPU backend overrides this to move {@code x} once and hand the
     * products to its device in one submission; the default just loops.
     */
    default void applyShared(Matrix[] ws, float[] x, int tokens, float[][] ys) {
        if (ws.length != ys.length) throw new IllegalArgumentException(ws.length + " matrices, " + ys.length + " outputs");
        for (int i = 0; i < ws.length; i++) apply(ws[i], x, tokens, ys[i]);
    }
}
