package dev.cmf4j.model;

import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.State;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A model's transformers reference outputs (fixtures/models/NAME/golden.safetensors) and the check of a
 * graph against them: full-forward logits, greedy ids and per-step logits, and on failure the first
 * layer whose hidden state diverges.
 */
public record Golden(String name, int[] inputIds, float[] logits, int vocab, int[] greedyIds, float[] stepLogits,
                     float[] hidden, int hiddenRows, int hiddenSize) {

    public static Golden load(Path modelDir) throws IOException {
        try (SafetensorsReader g = SafetensorsReader.open(modelDir.resolve("golden.safetensors"))) {
            int[] ids = TestFiles.ints(g.readLongs("input_ids"));
            boolean hasLogits = g.has("logits"), hasHidden = g.has("hidden_states");
            long[] hs = hasHidden ? g.tensor("hidden_states").shape() : null;
            return new Golden(modelDir.getFileName().toString(), ids, hasLogits ? g.readFloats("logits") : null,
                    hasLogits ? (int) g.tensor("logits").dim(1) : 0, TestFiles.ints(g.readLongs("greedy_ids")),
                    g.has("greedy_step_logits") ? g.readFloats("greedy_step_logits") : null,
                    hasHidden ? g.readFloats("hidden_states") : null, hasHidden ? (int) hs[0] : 0, hasHidden ? (int) hs[2] : 0);
        }
    }

    /** What a check measured. */
    public record Result(double logitsMaxDiff, double stepLogitsMaxDiff, int[] greedy, boolean greedyMatches,
                         String firstDivergence) {
        @Override public String toString() {
            return String.format("logits max|Δ| %.3g, step logits max|Δ| %.3g, greedy %s%s", logitsMaxDiff,
                    stepLogitsMaxDiff, greedyMatches ? "exact" : "DIFFERS " + java.util.Arrays.toString(greedy),
                    firstDivergence == null ? "" : ", " + firstDivergence);
        }
    }

    /** Runs the full forward and the greedy generation with chunks of {@code chunk} tokens. */
    public Result check(Graph graph, int chunk) { return check(graph, chunk, 1e-3); }

    /** As {@link #check(Graph, int)}; the hidden states are compared (to name the layer) only when logits miss {@code tol}. */
    public Result check(Graph graph, int chunk, double tol) {
        int T = inputIds.length, V = graph.vocab();
        // 1. full forward, all logits
        State st = graph.newState(chunk, T + greedyIds.length + 1);
        float[] all = new float[T * V];
        float[] buf = new float[chunk * V];
        for (int p = 0; p < T; p += chunk) {
            int n = Math.min(chunk, T - p);
            graph.forward(st, inputIds, p, n, buf, true, null);
            System.arraycopy(buf, 0, all, p * V, n * V);
        }
        double dl = logits == null ? Double.NaN : maxDiff(all, 0, logits, 0, T * V);
        // 2. greedy: prefill, then one token at a time through the cache
        State gs = graph.newState(chunk, T + greedyIds.length + 1);
        float[] last = new float[V];
        for (int p = 0; p < T; p += chunk) graph.forward(gs, inputIds, p, Math.min(chunk, T - p), last, false, null);
        int N = greedyIds.length;
        int[] got = new int[N];
        double ds = 0;
        for (int i = 0; i < N; i++) {
            if (stepLogits != null) ds = Math.max(ds, maxDiff(last, 0, stepLogits, i * V, V));
            got[i] = argmax(last);
            if (i + 1 < N) graph.forward(gs, new int[] {got[i]}, 0, 1, last, false, null);
        }
        boolean ok = java.util.Arrays.equals(got, greedyIds);
        String div = null;
        if (hidden != null && (!(dl <= tol) || !(ds <= tol) || !ok)) {
            div = firstDivergence(graph, chunk);
            if (div == null) div = "hidden states all within bounds";
        }
        return new Result(dl, ds, got, ok, div);
    }

    /** Names the first hidden state (0 = embeddings, i = after layer i−1, L+1 = final norm) off by more than the README bound. */
    public String firstDivergence(Graph graph, int chunk) {
        int T = inputIds.length;
        List<float[]> states = new ArrayList<>();
        for (int i = 0; i < hiddenRows; i++) states.add(new float[T * hiddenSize]);
        State st = graph.newState(chunk, T + 1);
        for (int p = 0; p < T; p += chunk) {
            int start = p;
            graph.forward(st, inputIds, p, Math.min(chunk, T - p), null, false,
                    (idx, x, tokens, h) -> System.arraycopy(x, 0, states.get(idx), start * h, tokens * h));
        }
        for (int i = 0; i < hiddenRows; i++) {
            float[] ref = java.util.Arrays.copyOfRange(hidden, i * T * hiddenSize, (i + 1) * T * hiddenSize);
            double maxAbs = 0;
            for (float v : ref) maxAbs = Math.max(maxAbs, Math.abs(v));
            double d = maxDiff(states.get(i), 0, ref, 0, ref.length);
            double bound = 1e-4 * maxAbs + 1e-5;
            if (d > bound) {
                String where = i == 0 ? "embeddings" : i == hiddenRows - 1 ? "final norm" : "layer " + (i - 1);
                return String.format("first divergence at hidden_states[%d] (%s): max|Δ| %.3g > bound %.3g", i, where, d, bound);
            }
        }
        return null;
    }

    public static double maxDiff(float[] a, int ao, float[] b, int bo, int n) {
        double m = 0;
        for (int i = 0; i < n; i++) {
            double d = Math.abs((double) a[ao + i] - b[bo + i]);
            if (Double.isNaN(d)) return Double.POSITIVE_INFINITY;
            m = Math.max(m, d);
        }
        return m;
    }

    public static int argmax(float[] x) {
        int best = 0;
        for (int i = 1; i < x.length; i++) if (x[i] > x[best]) best = i;
        return best;
    }
}
