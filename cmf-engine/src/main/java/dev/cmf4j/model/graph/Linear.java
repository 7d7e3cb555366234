package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;

/** A weight matrix with an optional bias: y = W·x + b for each token of a chunk. */
record Linear(Matrix w, float[] bias) {
    int out() { return w.outDim(); }

    int in() { return w.inDim(); }

    void apply(MatMul mm, float[] x, int tokens, float[] y) {
        mm.apply(w, x, tokens, y);
        addBias(tokens, y);
    }

    /**
     * Products sharing one input (q/k/v, gate/up), resolved once when the step is built so a token allocates
     * nothing: {@code ys[i] = ls[i]·x (+ bias)}, submitted together ({@link MatMul#applyShared}).
     */
    static final class Shared {
        private final Linear[] ls;
        private final Matrix[] ws;

        Shared(Linear... ls) {
            this.ls = ls.clone();
            this.ws = new Matrix[ls.length];
            for (int i = 0; i < ls.length; i++) ws[i] = ls[i].w;
        }

        /** {@code ys} holds one output per product, in order (the caller keeps the array between calls). */
        void apply(MatMul mm, float[] x, int tokens, float[][] ys) {
            mm.applyShared(ws, x, tokens, ys);
            for (int i = 0; i < ls.length; i++) ls[i].addBias(tokens, ys[i]);
        }
    }

    private void addBias(int tokens, float[] y) {
        if (bias != null) {
            int n = w.outDim();
            for (int t = 0; t < tokens; t++) for (int i = 0; i < n; i++) y[t * n + i] += bias[i];
        }
    }
}
