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
}
