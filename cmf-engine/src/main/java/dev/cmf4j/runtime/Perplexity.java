package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.Overlay;

/**
 * Teacher-forced perplexity: the ids cut into windows of {@code windowLen} tokens, each run from a fresh context; in
 * each window the first {@code promptLen} tokens are the prompt (exact attention; sealed layers seal after it) and
 * every later token is scored by the logits of the one before it. Scoring only past the prompt makes runs with and
 * without {@code --o1} compare the same tokens, the ones a sealed layer streams.
 */
public final class Perplexity {
    private Perplexity() {}

    /** Mean negative log-likelihood (nats) over {@code tokens} scored tokens in {@code windows} windows. */
    public record Result(double nll, long tokens, int windows) {
        public double perplexity() { return Math.exp(nll); }
    }

    /**
     * Two runs of the same tokens (e.g. f16 and q8 KV): each one's perplexity, the mean and largest KL divergence
     * KL(base ‖ test) of the scored tokens' next-token distributions (nats), and the fraction of them whose most
     * likely token is the same — what llama.cpp's {@code llama-perplexity --kl-divergence} reports.
     */
    public record Comparison(Result base, Result test, double meanKl, double maxKl, double sameTop) {}

    /**
     * @param maxWindows at most this many windows (0: every whole window of the ids)
     */
    public static Result measure(Graph graph, int[] ids, int windowLen, int promptLen, int maxWindows) {
        return measure(graph, Overlay.NONE, ids, windowLen, promptLen, maxWindows);
    }

    /** As above, every window read through {@code overlay} (a skill, an adapter, a task mask). */
    public static Result measure(Graph graph, Overlay overlay, int[] ids, int windowLen, int promptLen, int maxWindows) {
        int windows = windows(ids, windowLen, promptLen, maxWindows);
        int v = graph.vocab();
        double sum = 0;
        long n = 0;
        for (int w = 0; w < windows; w++) {
            int[] win = java.util.Arrays.copyOfRange(ids, w * windowLen, (w + 1) * windowLen);
            float[] rows = scoredRows(graph, overlay, win, promptLen);
            for (int j = 0; j < windowLen - promptLen; j++, n++) sum += nll(rows, j * v, v, win[promptLen + j]);
        }
        return new Result(sum / n, n, windows);
    }

    /** {@link #measure} of both graphs over the same windows, and how far {@code test}'s distributions are from {@code base}'s. */
    public static Comparison compare(Graph base, Graph test, int[] ids, int windowLen, int promptLen, int maxWindows) {
        return compare(base, Overlay.NONE, test, Overlay.NONE, ids, windowLen, promptLen, maxWindows);
    }

    /** As above, each graph read through its overlay. */
    public static Comparison compare(Graph base, Overlay baseOverlay, Graph test, Overlay testOverlay, int[] ids, int windowLen,
                                     int promptLen, int maxWindows) {
        if (base.vocab() != test.vocab())
            throw new IllegalArgumentException("the two runs have different vocabularies: " + base.vocab() + " and " + test.vocab());
        int windows = windows(ids, windowLen, promptLen, maxWindows);
        int v = base.vocab();
        double sumBase = 0, sumTest = 0, sumKl = 0, maxKl = 0;
        long n = 0, same = 0;
        for (int w = 0; w < windows; w++) {
            int[] win = java.util.Arrays.copyOfRange(ids, w * windowLen, (w + 1) * windowLen);
            float[] rb = scoredRows(base, baseOverlay, win, promptLen), rt = scoredRows(test, testOverlay, win, promptLen);
            for (int j = 0; j < windowLen - promptLen; j++, n++) {
                int target = win[promptLen + j];
                sumBase += nll(rb, j * v, v, target);
                sumTest += nll(rt, j * v, v, target);
                double kl = kl(rb, rt, j * v, v);
                sumKl += kl;
                maxKl = Math.max(maxKl, kl);
                if (argmax(rb, j * v, v) == argmax(rt, j * v, v)) same++;
            }
        }
        return new Comparison(new Result(sumBase / n, n, windows), new Result(sumTest / n, n, windows), sumKl / n, maxKl,
                (double) same / n);
    }

    private static int windows(int[] ids, int windowLen, int promptLen, int maxWindows) {
        if (windowLen < 2) throw new IllegalArgumentException("--window-len must be at least 2, got " + windowLen);
        if (promptLen < 1 || promptLen >= windowLen)
            throw new IllegalArgumentException("the prompt part (" + promptLen + ") must be in [1, window length " + windowLen + ")");
        int windows = ids.length / windowLen;
        if (maxWindows > 0) windows = Math.min(windows, maxWindows);
        if (windows == 0)
            throw new IllegalArgumentException("the text is " + ids.length + " tokens, shorter than one window of " + windowLen);
        return windows;
    }

    /** One window from a fresh context: row j (of windowLen − promptLen) is the logits that score token promptLen + j. */
    private static float[] scoredRows(Graph graph, Overlay overlay, int[] win, int promptLen) {
        int v = graph.vocab(), windowLen = win.length;
        float[] rows = new float[(windowLen - promptLen) * v];
        try (Session s = new Session(graph, windowLen, Math.min(512, windowLen))) {
            s.useOverlay(overlay);
            float[] prompt = s.logitsAll(java.util.Arrays.copyOf(win, promptLen));
            s.state().seal();   // a no-op without sealed layers
            float[] rest = s.logitsAll(java.util.Arrays.copyOfRange(win, promptLen, windowLen - 1));
            System.arraycopy(prompt, (promptLen - 1) * v, rows, 0, v);
            System.arraycopy(rest, 0, rows, v, rest.length);
        }
        return rows;
    }

    /** −log softmax(row)[target], in double. */
    static double nll(float[] logits, int off, int v, int target) {
        return -logSoftmax(logits, off, v)[target];
    }

    /** KL(softmax(p) ‖ softmax(q)) of the rows at {@code off}, in nats. */
    public static double kl(float[] p, float[] q, int off, int v) {
        double[] lp = logSoftmax(p, off, v), lq = logSoftmax(q, off, v);
        double kl = 0;
        for (int i = 0; i < v; i++) kl += Math.exp(lp[i]) * (lp[i] - lq[i]);
        return Math.max(0, kl);
    }

    private static double[] logSoftmax(float[] logits, int off, int v) {
        double max = Double.NEGATIVE_INFINITY;
        for (int i = 0; i < v; i++) max = Math.max(max, logits[off + i]);
        double z = 0;
        for (int i = 0; i < v; i++) z += Math.exp(logits[off + i] - max);
        double lz = Math.log(z) + max;
        double[] out = new double[v];
        for (int i = 0; i < v; i++) out[i] = logits[off + i] - lz;
        return out;
    }

    private static int argmax(float[] logits, int off, int v) {
        int best = 0;
        for (int i = 1; i < v; i++) if (logits[off + i] > logits[off + best]) best = i;
        return best;
    }
}
