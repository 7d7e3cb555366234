package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.model.ModelException;

/**
 * Embryo's hierarchical clustered head: C contiguous clusters of cs = V/C tokens, and
 * <pre>
 *   log p(v) = (lc[c] − logsumexp(lc)) + (z[v] − logsumexp_{s in c} z[s]),   lc = clusters·h, z = head·h, c = v / cs
 * </pre>
 * With a gate g the cluster log-probabilities come first and a cluster below g reads none of its rows: its tokens
 * get its mass spread evenly, log P(c) − ln cs (below g, so none can enter a top-p nucleus whenever V·e^g ≤ 1 − p,
 * and the distribution still sums to 1, so a sampler that normalizes sees the kept tokens' exact probabilities).
 */
final class HierarchicalHead {
    private final Matrix head, clusters;
    private final Matrix[] clusterRows;
    private final int count, size, vocab, hidden;

    HierarchicalHead(Matrix head, Matrix clusters, int count, int vocab, int hidden) {
        if (count < 1 || vocab % count != 0)
            throw new ModelException("head_clusters " + count + " does not divide the vocabulary " + vocab);
        this.head = head;
        this.clusters = clusters;
        this.count = count;
        this.size = vocab / count;
        this.vocab = vocab;
        this.hidden = hidden;
        clusterRows = new Matrix[count];
        for (int c = 0; c < count; c++) clusterRows[c] = head.slice((long) c * size, size, false);
    }

    int clusters() { return count; }

    /** Per-step buffers: the cluster logits of every row, one row's input and one cluster's logits. */
    static final class Scratch {
        final float[] lc, row, part;

        Scratch(int maxRows, int clusters, int hidden, int clusterSize) {
            lc = new float[maxRows * clusters];
            row = new float[hidden];
            part = new float[clusterSize];
        }
    }

    Scratch newScratch(int maxRows) { return new Scratch(maxRows, count, hidden, size); }

    /**
     * The logits rows the batch's spans ask for ({@code in} holds them in span order): each sequence's rows with its
     * own {@link State#headGate() gate}; records the head rows each sequence's last step read.
     */
    void apply(MatMul mm, Batch batch, float[] in, float[] out, Scratch s) {
        boolean gated = false;
        for (int i = 0; i < batch.size(); i++) gated |= batch.span(i).logitRows() > 0 && batch.state(i).headGate > Double.NEGATIVE_INFINITY;
        if (!gated) {
            full(mm, in, batch.logitRows(), out, s);
            for (int i = 0; i < batch.size(); i++) batch.state(i).headRowsRead = (long) batch.span(i).logitRows() * vocab;
            return;
        }
        for (int i = 0, r = 0; i < batch.size(); i++) {
            State st = batch.state(i);
            long read = 0;
            for (int k = 0; k < batch.span(i).logitRows(); k++, r++) read += gated(mm, in, r, st.headGate, out, r * vocab, s);
            st.headRowsRead = read;
        }
    }

    /** lc[r] = the cluster log-probabilities lc − logsumexp(lc) of each of the {@code rows} rows of {@code in}. */
    void clusterLogProbs(MatMul mm, float[] in, int rows, float[] lc) {
        mm.apply(clusters, in, rows, lc);
        for (int r = 0; r < rows; r++) logSoftmax(lc, r * count, count);
    }

    /** out[r] = log p of every token for the {@code rows} rows of {@code in} ([rows, hidden]); every row read. */
    void full(MatMul mm, float[] in, int rows, float[] out, Scratch s) {
        mm.apply(head, in, rows, out);
        clusterLogProbs(mm, in, rows, s.lc);
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < count; c++) {
                int o = r * vocab + c * size;
                float lse = logSumExp(out, o, size), lp = s.lc[r * count + c];
                for (int i = 0; i < size; i++) out[o + i] = out[o + i] - lse + lp;
            }
        }
    }

    /**
     * Row {@code r} of {@code in} with gate {@code gate}: log p on clusters whose log-probability is at least the gate,
     * the dropped clusters' mass spread evenly elsewhere. Writes {@code out[o, o + V)}; returns the head rows read.
     */
    int gated(MatMul mm, float[] in, int r, double gate, float[] out, int o, Scratch s) {
        System.arraycopy(in, r * hidden, s.row, 0, hidden);
        mm.apply(clusters, s.row, 1, s.lc);
        logSoftmax(s.lc, 0, count);
        int read = 0;
        float spread = (float) Math.log(size);
        for (int c = 0; c < count; c++) {
            float lp = s.lc[c];
            int co = o + c * size;
            if (lp >= gate) {
                mm.apply(clusterRows[c], s.row, 1, s.part);
                float lse = logSumExp(s.part, 0, size);
                for (int i = 0; i < size; i++) out[co + i] = s.part[i] - lse + lp;
                read += size;
            } else {
                java.util.Arrays.fill(out, co, co + size, lp - spread);
            }
        }
        return read;
    }

    private static void logSoftmax(float[] x, int off, int n) {
        float lse = logSumExp(x, off, n);
        for (int i = 0; i < n; i++) x[off + i] -= lse;
    }

    private static float logSumExp(float[] x, int off, int n) {
        float max = Float.NEGATIVE_INFINITY;
        for (int i = 0; i < n; i++) max = Math.max(max, x[off + i]);
        double sum = 0;
        for (int i = 0; i < n; i++) sum += Math.exp(x[off + i] - max);
        return max + (float) Math.log(sum);
    }
}
