package dev.cmf4j.runtime;

import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * The fixed sampling chain: repetition penalty → presence penalty → temperature → softmax → min-p →
 * top-k → top-p → draw (seeded). At temperature 0 it returns the argmax of the penalized logits
 * (lowest id on ties). Keeps its buffers; not thread-safe.
 */
public final class Sampler {
    private final SamplingParams p;
    private final SplittableRandom rng;
    private float[] work = new float[0];
    private int[] order = new int[0];
    private boolean[] seen = new boolean[0];

    public Sampler(SamplingParams p) {
        this.p = p;
        this.rng = new SplittableRandom(p.seed() != null ? p.seed() : System.nanoTime() ^ 0x5DEECE66DL);
    }

    public SamplingParams params() { return p; }

    /**
     * Picks the next token.
     *
     * @param logits  [vocab] (not modified)
     * @param history ids seen so far (prompt and generated), first {@code n} of the array
     */
    public int sample(float[] logits, int[] history, int n) { return sample(logits, 0, logits.length, history, n); }

    /** As {@link #sample(float[], int[], int)} over the row {@code logits[off, off + v)} (a batch's logits). */
    public int sample(float[] logits, int off, int v, int[] history, int n) {
        if (p.plainGreedy()) return dev.cmf4j.backend.cpu.VectorMath.argmax(logits, off, v);   // no copy to penalize
        int kept = chain(logits, off, v, history, n);
        if (kept < 0) return -kept - 1;
        // 7. draw
        double mass = 0;
        for (int i = 0; i < kept; i++) mass += work[order[i]];
        double r = rng.nextDouble() * mass;
        for (int i = 0; i < kept; i++) {
            r -= work[order[i]];
            if (r < 0) return order[i];
        }
        return order[kept - 1];
    }

    /**
     * The distribution {@link #sample} draws from, into {@code out[0, v)} (zero for every token the chain drops; one
     * 1 at the pick when greedy); for speculative decoding, which accepts a draft's token with the ratio of two such
     * distributions.
     */
    public void probabilities(float[] logits, int off, int v, int[] history, int n, float[] out) {
        java.util.Arrays.fill(out, 0, v, 0f);
        if (p.plainGreedy()) { out[dev.cmf4j.backend.cpu.VectorMath.argmax(logits, off, v)] = 1f; return; }
        int kept = chain(logits, off, v, history, n);
        if (kept < 0) { out[-kept - 1] = 1f; return; }
        double mass = 0;
        for (int i = 0; i < kept; i++) mass += work[order[i]];
        for (int i = 0; i < kept; i++) out[order[i]] = (float) (work[order[i]] / mass);
    }

    /** A uniform draw in [0, 1) from this sampler's seeded stream. */
    public double uniform() { return rng.nextDouble(); }

    /** A draw from the (not necessarily normalised, non-negative) weights {@code w[0, v)}; the argmax when they are all 0. */
    public int draw(float[] w, int v) {
        double mass = 0;
        for (int i = 0; i < v; i++) mass += w[i];
        if (!(mass > 0)) return argmax(w, v);
        double r = rng.nextDouble() * mass;
        int last = -1;
        for (int i = 0; i < v; i++) {
            if (w[i] <= 0) continue;
            last = i;
            r -= w[i];
            if (r < 0) return i;
        }
        return last;
    }

    /**
     * Steps 1-6 of the chain over the row: the survivors' ids in {@code order[0, kept)} (by probability, descending) and
     * their unnormalised probabilities in {@code work} at their ids; returns kept, or {@code -(id + 1)} when greedy.
     */
    private int chain(float[] logits, int off, int v, int[] history, int n) {
        if (work.length < v) { work = new float[v]; order = new int[v]; seen = new boolean[v]; }
        float[] x = work;
        System.arraycopy(logits, off, x, 0, v);
        // 1. penalties, once per distinct seen token
        if (p.repetitionPenalty() != 1f || p.presencePenalty() != 0f) {
            for (int i = 0; i < n; i++) {
                int id = history[i];
                if (id < 0 || id >= v || seen[id]) continue;
                seen[id] = true;
                float l = x[id];
                if (p.repetitionPenalty() != 1f) l = l > 0 ? l / p.repetitionPenalty() : l * p.repetitionPenalty();
                x[id] = l - p.presencePenalty();
            }
            for (int i = 0; i < n; i++) if (history[i] >= 0 && history[i] < v) seen[history[i]] = false;
        }
        // 2. greedy
        if (p.greedy()) return -argmax(x, v) - 1;
        // 3. temperature, and the max of the scaled logits
        float max = Float.NEGATIVE_INFINITY;
        for (int i = 0; i < v; i++) { x[i] /= p.temperature(); max = Math.max(max, x[i]); }
        // 4. softmax numerators e = exp(z − max), and min-p: keep p ≥ minP·p_max, i.e. e ≥ minP. The softmax's
        // normalisation cancels out of every later step (top-p's mass and the draw are relative to the survivors'
        // mass), so it is never formed, and with min-p on only the tokens near the max get an exponential: one pass
        // over the logits instead of three and an exp() per token (a 128k vocabulary: ~570 µs per token before,
        // beside a GPU decode step of ~2.9 ms). Survivors' ids go to order[0, kept), their e into x.
        int kept = 0;
        if (p.minP() > 0) {
            float cut = max + (float) Math.log(p.minP()) - 1e-3f;   // below it e < minP for certain (a margin for rounding)
            for (int i = 0; i < v; i++) {
                if (x[i] < cut) continue;
                float e = (float) Math.exp(x[i] - max);
                if (e >= p.minP()) { x[i] = e; order[kept++] = i; }
            }
        } else {
            for (int i = 0; i < v; i++) { x[i] = (float) Math.exp(x[i] - max); order[i] = i; }
            kept = v;
        }
        // 5. the survivors by probability (descending, lower id first on ties), top-k
        if (p.topK() > 0 && p.topK() < kept) {
            topDescending(x, order, kept, p.topK());
            kept = p.topK();
        } else {
            sortDescending(x, order, kept);
        }
        // 6. top-p: the smallest prefix whose mass reaches topP (of the survivors' mass)
        if (p.topP() < 1f) {
            double mass = 0;
            for (int i = 0; i < kept; i++) mass += x[order[i]];
            double acc = 0;
            int cut = kept;
            for (int i = 0; i < kept; i++) {
                acc += x[order[i]];
                if (acc >= p.topP() * mass) { cut = i + 1; break; }
            }
            kept = cut;
        }
        return kept;
    }

    static int argmax(float[] x, int n) { return dev.cmf4j.backend.cpu.VectorMath.argmax(x, 0, n); }

    private long[] keys = new long[0];

    /**
     * Orders idx[0, n) by probability, largest first, lower id first on ties: one primitive sort of
     * (probability, id) packed into longs (probabilities are non-negative, so their bits sort as ints).
     */
    private void sortDescending(float[] prob, int[] idx, int n) {
        pack(prob, idx, n);
        Arrays.sort(keys, 0, n);
        for (int i = 0; i < n; i++) idx[i] = (int) keys[i];
    }

    /**
     * The first k of {@link #sortDescending}'s order into idx[0, k) (k < n), without sorting the other n − k: a
     * quickselect of the k smallest keys, then a sort of those (top-k over a whole vocabulary when min-p is off).
     */
    private void topDescending(float[] prob, int[] idx, int n, int k) {
        pack(prob, idx, n);
        int lo = 0, hi = n - 1;
        while (lo < hi) {   // until keys[0, k) are the k smallest: Hoare partitions around a middle pivot
            long pivot = keys[(lo + hi) >>> 1];
            int i = lo, j = hi;
            while (i <= j) {
                while (keys[i] < pivot) i++;
                while (keys[j] > pivot) j--;
                if (i <= j) { long t = keys[i]; keys[i] = keys[j]; keys[j] = t; i++; j--; }
            }
            if (k - 1 <= j) hi = j;
            else if (k - 1 >= i) lo = i;
            else break;
        }
        Arrays.sort(keys, 0, k);
        for (int i = 0; i < k; i++) idx[i] = (int) keys[i];
    }

    private void pack(float[] prob, int[] idx, int n) {
        if (keys.length < n) keys = new long[n];
        for (int i = 0; i < n; i++) {
            int id = idx[i];
            keys[i] = ((long) (Integer.MAX_VALUE - Float.floatToRawIntBits(prob[id])) << 32) | id;
        }
    }
}
