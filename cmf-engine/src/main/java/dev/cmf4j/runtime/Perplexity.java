package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.Graph;

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
     * @param maxWindows at most this many windows (0: every whole window of the ids)
     */
    public static Result measure(Graph graph, int[] ids, int windowLen, int promptLen, int maxWindows) {
        return measure(graph, dev.cmf4j.model.graph.Overlay.NONE, ids, windowLen, promptLen, maxWindows);
    }

    /** As above, every window read through {@code overlay} (a skill, an adapter, a task mask). */
    public static Result measure(Graph graph, dev.cmf4j.model.graph.Overlay overlay, int[] ids, int windowLen, int promptLen,
                                 int maxWindows) {
        if (windowLen < 2) throw new IllegalArgumentException("--window-len must be at least 2, got " + windowLen);
        if (promptLen < 1 || promptLen >= windowLen)
            throw new IllegalArgumentException("the prompt part (" + promptLen + ") must be in [1, window length " + windowLen + ")");
        int windows = ids.length / windowLen;
        if (maxWindows > 0) windows = Math.min(windows, maxWindows);
        if (windows == 0)
            throw new IllegalArgumentException("the text is " + ids.length + " tokens, shorter than one window of " + windowLen);
        int v = graph.vocab();
        double sum = 0;
        long n = 0;
        for (int w = 0; w < windows; w++) {
            int[] win = java.util.Arrays.copyOfRange(ids, w * windowLen, (w + 1) * windowLen);
            try (Session s = new Session(graph, windowLen, Math.min(512, windowLen))) {
                s.useOverlay(overlay);
                float[] prompt = s.logitsAll(java.util.Arrays.copyOf(win, promptLen));
                s.state().seal();   // a no-op without sealed layers
                float[] rest = s.logitsAll(java.util.Arrays.copyOfRange(win, promptLen, windowLen));
                // token t+1 is scored by row t: the prompt's last row scores the first token after it
                sum += nll(prompt, (promptLen - 1) * v, v, win[promptLen]);
                n++;
                for (int t = promptLen; t < windowLen - 1; t++) {
                    sum += nll(rest, (t - promptLen) * v, v, win[t + 1]);
                    n++;
                }
            }
        }
        return new Result(sum / n, n, windows);
    }

    /** −log softmax(row)[target], in double. */
    static double nll(float[] logits, int off, int v, int target) {
        double max = Double.NEGATIVE_INFINITY;
        for (int i = 0; i < v; i++) max = Math.max(max, logits[off + i]);
        double z = 0;
        for (int i = 0; i < v; i++) z += Math.exp(logits[off + i] - max);
        return Math.log(z) + max - logits[off + target];
    }
}
