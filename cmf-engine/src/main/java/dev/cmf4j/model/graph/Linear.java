package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.model.LowRankAdapter;

/**
 * A weight matrix with an optional bias, y = W·x + b for each row of a step, and the one place skills and LoRA
 * adapters enter a product (llama.cpp's {@code build_lora_mm}): a skill that replaces W (or b) has its rows run
 * through its own matrix, once per skill present on the step's rows, while the rows of every other skill and the
 * backbone share one product; an un-merged adapter adds scale·B·(A·x) to the rows that ask for it.
 */
final class Linear {
    final Matrix w;
    final float[] bias;
    /** By skill slot (index 0 unused): the skill's replacement matrix / bias, or null where it keeps the backbone's. */
    private final Matrix[] skillW;
    private final float[][] skillBias;
    /** By adapter slot (index 0 unused): the adapter's delta for this weight, or null. */
    private final LowRankAdapter.Delta[] deltas;

    Linear(Matrix w, float[] bias) { this(w, bias, null, null, null); }

    Linear(Matrix w, float[] bias, Matrix[] skillW, float[][] skillBias, LowRankAdapter.Delta[] deltas) {
        this.w = w;
        this.bias = bias;
        this.skillW = skillW;
        this.skillBias = skillBias;
        this.deltas = deltas;
    }

    Matrix w() { return w; }

    int out() { return w.outDim(); }

    int in() { return w.inDim(); }

    /** The backbone product over every row. */
    void apply(MatMul mm, float[] x, int tokens, float[] y) {
        mm.apply(w, x, tokens, y);
        addBias(bias, 0, tokens, y);
    }

    /** The product of each row through its own overlay ({@code ro} null: the backbone for every row). */
    void apply(MatMul mm, float[] x, int rows, float[] y, RowOverlay ro) {
        if (ro == null || !touches(ro)) {
            apply(mm, x, rows, y);
            return;
        }
        if (!replacedOn(ro)) {
            apply(mm, x, rows, y);
        } else {
            runGroup(mm, w, bias, 0, x, rows, y, ro);   // the backbone's rows (and those of skills that keep W)
            for (int k = 0; k < ro.nSkills; k++) {
                int s = ro.skills[k];
                if (replaces(s))
                    runGroup(mm, skillW[s] != null ? skillW[s] : w, skillBias[s] != null ? skillBias[s] : bias, s, x, rows, y, ro);
            }
        }
        for (int k = 0; k < ro.nAdapters; k++) {
            int a = ro.adapters[k];
            if (deltas != null && a < deltas.length && deltas[a] != null) addLowRank(deltas[a], a, x, rows, y, ro);
        }
    }

    /** True when some row of the step reads this product through a skill or adapter of its own. */
    boolean touches(RowOverlay ro) {
        if (ro.plain()) return false;
        if (replacedOn(ro)) return true;
        if (deltas != null)
            for (int k = 0; k < ro.nAdapters; k++) {
                int a = ro.adapters[k];
                if (a < deltas.length && deltas[a] != null) return true;
            }
        return false;
    }

    private boolean replacedOn(RowOverlay ro) {
        for (int k = 0; k < ro.nSkills; k++) if (replaces(ro.skills[k])) return true;
        return false;
    }

    private boolean replaces(int skill) {
        return skillW != null && skill < skillW.length && (skillW[skill] != null || skillBias[skill] != null);
    }

    /**
     * y = m·x + b over the rows of group {@code key}: the rows of skill {@code key}, or (key 0) every row whose skill
     * does not replace this product. Gathered into one block so the product runs once for the group.
     */
    private void runGroup(MatMul mm, Matrix m, float[] b, int key, float[] x, int rows, float[] y, RowOverlay ro) {
        int n = 0;
        for (int r = 0; r < rows; r++) {
            int s = ro.skill[r];
            if (key == 0 ? !replaces(s) : s == key) ro.group[n++] = r;
        }
        if (n == 0) return;
        int in = in(), out = out();
        float[] xg = ro.xg(n * in), yg = ro.yg(n * out);
        for (int i = 0; i < n; i++) System.arraycopy(x, ro.group[i] * in, xg, i * in, in);
        mm.apply(m, xg, n, yg);
        addBias(b, 0, n, yg);
        for (int i = 0; i < n; i++) System.arraycopy(yg, i * out, y, ro.group[i] * out, out);
    }

    /** y[r] += scale_r · B·(A·x[r]) for the rows using adapter {@code a}; A and B are small (rank ≪ in, out). */
    private static void addLowRank(LowRankAdapter.Delta d, int a, float[] x, int rows, float[] y, RowOverlay ro) {
        int rank = d.rank(), in = d.in(), out = d.out();
        float[] t = ro.t(rank), A = d.a(), B = d.b();
        for (int r = 0; r < rows; r++) {
            if (ro.adapter[r] != a) continue;
            int xo = r * in, yo = r * out;
            for (int k = 0; k < rank; k++) {
                float acc = 0f;
                int ao = k * in;
                for (int i = 0; i < in; i++) acc += A[ao + i] * x[xo + i];
                t[k] = acc;
            }
            float s = d.scale() * ro.scale[r];
            for (int o = 0; o < out; o++) {
                float acc = 0f;
                int bo = o * rank;
                for (int k = 0; k < rank; k++) acc += B[bo + k] * t[k];
                y[yo + o] += s * acc;
            }
        }
    }

    /**
     * Products sharing one input (q/k/v, gate/up), resolved once when the step is built so a token allocates
     * nothing: {@code ys[i] = ls[i]·x (+ bias)}, submitted together ({@link MatMul#applyShared}) unless a row's
     * overlay touches one of them.
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
        void apply(MatMul mm, float[] x, int tokens, float[][] ys) { apply(mm, x, tokens, ys, null); }

        void apply(MatMul mm, float[] x, int tokens, float[][] ys, RowOverlay ro) {
            if (ro != null && !ro.plain()) {
                boolean touched = false;
                for (Linear l : ls) touched |= l.touches(ro);
                if (touched) {
                    for (int i = 0; i < ls.length; i++) ls[i].apply(mm, x, tokens, ys[i], ro);
                    return;
                }
            }
            mm.applyShared(ws, x, tokens, ys);
            for (int i = 0; i < ls.length; i++) addBias(ls[i].bias, 0, tokens, ys[i]);
        }
    }

    private static void addBias(float[] bias, int from, int tokens, float[] y) {
        if (bias != null) {
            int n = bias.length;
            for (int t = from; t < tokens; t++) for (int i = 0; i < n; i++) y[t * n + i] += bias[i];
        }
    }
}
