package dev.cmf4j.model.graph;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The batch-correctness check of a graph on its own device (the CPU engine's tests and {@code cmf selftest}): 8
 * sequences of different prompt lengths join at different steps, so most steps mix prompt chunks of some sequences
 * with decode tokens of others, and each continues greedily inside the batch; every row's logits are compared with
 * the same sequence run alone with the same chunks, and each greedy id with the one it picks alone.
 */
public final class BatchConformance {
    private BatchConformance() {}

    /** Prompt length, prompt chunk and first step of each sequence; greedy decode steps after each prompt. */
    private static final int[] LENGTH = {3, 40, 17, 1, 25, 9, 33, 12}, CHUNK = {3, 16, 5, 1, 64, 4, 7, 12},
            FIRST = {0, 0, 1, 2, 2, 3, 5, 6};
    private static final int DECODE = 6;

    /**
     * What the check measured: the largest |Δ| of any logit, where it was, whether every greedy id matched, and the
     * number of steps that mixed prompt chunks with decode rows.
     */
    public record Result(double maxDiff, String worstAt, boolean greedySame, int mixedSteps) {}

    /** Runs the check on {@code g} with prompts cut from {@code ids} (any ids of its vocabulary). */
    public static Result run(Graph g, int[] ids) {
        int n = LENGTH.length, V = g.vocab(), ctx = 64 + DECODE;
        int[][] prompts = new int[n][];
        for (int i = 0; i < n; i++) {
            prompts[i] = new int[LENGTH[i]];
            for (int t = 0; t < LENGTH[i]; t++) prompts[i][t] = ids[(7 * i + t) % ids.length];
        }
        // alone: each prompt in its chunks, then greedy decode; the logits of every position
        float[][] alone = new float[n][];
        int[][] greedy = new int[n][DECODE];
        float[] buf = new float[64 * V];
        for (int i = 0; i < n; i++) {
            State st = g.newState(64, ctx);
            try {
                alone[i] = new float[(LENGTH[i] + DECODE) * V];
                for (int p = 0; p < LENGTH[i]; p += CHUNK[i]) {
                    int c = Math.min(CHUNK[i], LENGTH[i] - p);
                    g.forward(st, prompts[i], p, c, buf, true, null);
                    System.arraycopy(buf, 0, alone[i], p * V, c * V);
                }
                for (int d = 0; d < DECODE; d++) {
                    greedy[i][d] = argmax(alone[i], (LENGTH[i] + d - 1) * V, V);
                    g.forward(st, new int[] {greedy[i][d]}, 0, 1, buf, true, null);
                    System.arraycopy(buf, 0, alone[i], (LENGTH[i] + d) * V, V);
                }
            } finally {
                st.close();
            }
        }
        // together: one workspace, one batch per step, each sequence joining at its first step
        State[] seq = new State[n];
        for (int i = 0; i < n; i++) seq[i] = g.newState(64, ctx);
        try {
            int rows = Arrays.stream(CHUNK).sum();   // the most rows a step holds
            Workspace ws = g.newWorkspace(rows, ctx);
            Batch batch = new Batch();
            float[] logits = new float[rows * V];
            int[] fed = new int[n];
            int[][] picked = new int[n][DECODE];
            double worst = 0;
            String worstAt = "-";
            boolean same = true;
            int mixed = 0;
            for (int step = 0; step < 200; step++) {
                batch.clear();
                List<Integer> members = new ArrayList<>();
                boolean prompt = false, decode = false;
                for (int i = 0; i < n; i++) {
                    if (step < FIRST[i] || fed[i] == LENGTH[i] + DECODE) continue;
                    if (fed[i] < LENGTH[i]) {
                        batch.add(seq[i], prompts[i], fed[i], Math.min(CHUNK[i], LENGTH[i] - fed[i]), Batch.Logits.ALL);
                        prompt = true;
                    } else {
                        batch.add(seq[i], new int[] {picked[i][fed[i] - LENGTH[i]]}, 0, 1, Batch.Logits.ALL);
                        decode = true;
                    }
                    members.add(i);
                }
                if (members.isEmpty()) break;
                if (prompt && decode) mixed++;
                g.forward(batch, ws, logits, null);
                for (int k = 0; k < members.size(); k++) {
                    int i = members.get(k), c = batch.span(k).tokens(), row = batch.logitRow(k);
                    for (int j = 0; j < c * V; j++) {
                        double d = Math.abs((double) logits[row * V + j] - alone[i][fed[i] * V + j]);
                        if (!(d <= worst)) {   // a NaN is the worst of all and stays so
                            worst = Double.isNaN(d) ? Double.POSITIVE_INFINITY : d;
                            worstAt = "sequence " + i + " position " + (fed[i] + j / V) + " logit " + j % V;
                        }
                    }
                    fed[i] += c;
                    int d = fed[i] - LENGTH[i];
                    if (d >= 0 && d < DECODE) {
                        picked[i][d] = argmax(logits, (row + c - 1) * V, V);
                        same &= picked[i][d] == greedy[i][d];
                    }
                }
            }
            return new Result(worst, worstAt, same, mixed);
        } finally {
            for (State st : seq) st.close();
        }
    }

    private static int argmax(float[] x, int off, int n) {
        int best = 0;
        for (int i = 1; i < n; i++) if (x[off + i] > x[off + best]) best = i;
        return best;
    }
}
