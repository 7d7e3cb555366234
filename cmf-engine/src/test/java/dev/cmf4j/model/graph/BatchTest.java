package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.HfFixture;
import dev.cmf4j.model.TestFiles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.within;

/**
 * Batched steps against each sequence run alone: 8 sequences of different prompt lengths start at different steps,
 * so most steps mix prompt chunks of some sequences with decode tokens of others; every row's logits must match
 * the same sequence's logits run alone with the same chunks (f32 weights: max |Δ| ≤ 1e-4 through the reference
 * matmul, whose products do not depend on the row count; 2e-4 through the fast kernels, which sum one row's product in
 * another order than a tile of rows' and move qwen3_next's logits by ~1e-4 that way alone), and the greedy ids each
 * sequence picks inside the batch must equal the ones it picks alone.
 */
class BatchTest {
    private static final int SEQUENCES = 8, DECODE = 6;
    /** Prompt length, prompt chunk and first step of each sequence. */
    private static final int[] LENGTH = {3, 40, 17, 1, 25, 9, 33, 12}, CHUNK = {3, 16, 5, 1, 64, 4, 7, 12},
            FIRST = {0, 0, 1, 2, 2, 3, 5, 6};

    @ParameterizedTest(name = "{0}, {1} matmul")
    @CsvSource({"llama,kernels", "llama,reference", "qwen3,kernels", "qwen3_moe,kernels", "gemma3,kernels",
            "gemma4,kernels", "gemma4_moe,kernels", "gpt_oss,kernels", "qwen3_next,kernels", "qwen3_next,reference"})
    void mixedBatchesMatchEachSequenceAlone(String model, String matmul) throws Exception {
        try (HfFixture hf = HfFixture.open(model)) {
            MatMul mm = matmul.equals("reference") ? new CpuMatMul() : CpuBackend.newMatMul();
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), mm);
            int[] golden = Golden.load(hf.dir()).inputIds();
            int V = g.vocab();
            int[][] prompts = new int[SEQUENCES][];
            for (int i = 0; i < SEQUENCES; i++) {
                prompts[i] = new int[LENGTH[i]];
                for (int t = 0; t < LENGTH[i]; t++) prompts[i][t] = golden[(7 * i + t) % golden.length];
            }
            // alone: each sequence's prompt in its chunks, then greedy decode; the logits of every position
            float[][] alone = new float[SEQUENCES][];
            int[][] greedy = new int[SEQUENCES][DECODE];
            for (int i = 0; i < SEQUENCES; i++) {
                State st = g.newState(64, 64);
                alone[i] = new float[(LENGTH[i] + DECODE) * V];
                float[] buf = new float[64 * V];
                for (int p = 0; p < LENGTH[i]; p += CHUNK[i]) {
                    int n = Math.min(CHUNK[i], LENGTH[i] - p);
                    g.forward(st, prompts[i], p, n, buf, true, null);
                    System.arraycopy(buf, 0, alone[i], p * V, n * V);
                }
                for (int d = 0; d < DECODE; d++) {
                    int pos = LENGTH[i] + d;
                    greedy[i][d] = argmax(alone[i], (pos - 1) * V, V);
                    g.forward(st, new int[] {greedy[i][d]}, 0, 1, buf, true, null);
                    System.arraycopy(buf, 0, alone[i], pos * V, V);
                }
            }
            // together: one workspace, one batch per step, each sequence joining at its first step
            State[] seq = new State[SEQUENCES];
            for (int i = 0; i < SEQUENCES; i++) seq[i] = g.newState(64, 64);
            Workspace ws = g.newWorkspace(SEQUENCES * 64, 64);
            Batch batch = new Batch();
            float[] logits = new float[SEQUENCES * 64 * V];
            int[] fed = new int[SEQUENCES];
            int[][] picked = new int[SEQUENCES][DECODE];
            int mixedSteps = 0;
            double worst = 0, tol = matmul.equals("reference") ? 1e-4 : 2e-4;
            for (int step = 0; ; step++) {
                batch.clear();
                List<Integer> members = new ArrayList<>();
                boolean prompt = false, decode = false;
                for (int i = 0; i < SEQUENCES; i++) {
                    if (step < FIRST[i] || fed[i] == LENGTH[i] + DECODE) continue;
                    if (fed[i] < LENGTH[i]) {
                        int n = Math.min(CHUNK[i], LENGTH[i] - fed[i]);
                        batch.add(seq[i], prompts[i], fed[i], n, Batch.Logits.ALL);
                        prompt = true;
                    } else {
                        int d = fed[i] - LENGTH[i];
                        batch.add(seq[i], new int[] {picked[i][d]}, 0, 1, Batch.Logits.ALL);
                        decode = true;
                    }
                    members.add(i);
                }
                if (members.isEmpty()) break;
                if (prompt && decode) mixedSteps++;
                g.forward(batch, ws, logits, null);
                for (int k = 0; k < members.size(); k++) {
                    int i = members.get(k), n = batch.span(k).tokens(), row = batch.logitRow(k);
                    for (int t = 0; t < n; t++)
                        for (int c = 0; c < V; c++) {
                            double d = Math.abs(logits[(row + t) * V + c] - alone[i][(fed[i] + t) * V + c]);
                            if (!(d <= tol))
                                throw new AssertionError(model + " sequence " + i + " position " + (fed[i] + t) + " logit " + c
                                        + ": batched " + logits[(row + t) * V + c] + " alone " + alone[i][(fed[i] + t) * V + c]);
                            worst = Math.max(worst, d);
                        }
                    fed[i] += n;
                    int d = fed[i] - LENGTH[i];
                    if (d >= 0 && d < DECODE) picked[i][d] = argmax(logits, (row + n - 1) * V, V);
                }
                assertThat(step).as("steps").isLessThan(200);
            }
            for (int i = 0; i < SEQUENCES; i++) {
                assertThat(picked[i]).as(model + " sequence " + i + " greedy ids").containsExactly(greedy[i]);
                assertThat(seq[i].position()).isEqualTo(LENGTH[i] + DECODE);
            }
            assertThat(mixedSteps).as("steps mixing prompt chunks and decode rows").isGreaterThanOrEqualTo(3);
            System.out.printf("%s (%s): 8 sequences, %d mixed steps, max |Δ| %.3g%n", model, matmul, mixedSteps, worst);
        }
    }

    @Test void aBadSpanFailsTheStepBeforeAnySequenceMoves() {
        try (HfFixture hf = HfFixture.open("llama")) {
            Graph g = hf.graph();
            State a = g.newState(8, 32), b = g.newState(8, 32);
            Workspace ws = g.newWorkspace(16, 32);
            float[] logits = new float[2 * g.vocab()];
            Batch bad = new Batch().add(a, new int[] {1, 2, 3}, 0, 3, Batch.Logits.LAST)
                    .add(b, new int[] {4, g.vocab()}, 0, 2, Batch.Logits.LAST);
            assertThatThrownBy(() -> g.forward(bad, ws, logits, null)).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("span 1").hasMessageContaining("outside the vocabulary");
            assertThat(a.position()).isZero();
            assertThat(b.position()).isZero();
            // the same sequence twice in one step
            Batch twice = new Batch().add(a, new int[] {1}, 0, 1, Batch.Logits.LAST).add(a, new int[] {2}, 0, 1, Batch.Logits.LAST);
            assertThatThrownBy(() -> g.forward(twice, ws, logits, null)).hasMessageContaining("same sequence");
            // more rows than the workspace holds
            Batch big = new Batch().add(a, new int[20], 0, 20, Batch.Logits.NONE);
            assertThatThrownBy(() -> g.forward(big, ws, logits, null)).hasMessageContaining("exceeds the workspace");
            assertThat(a.position()).isZero();
            // a good step runs afterwards, and gives what the sequence gives alone
            Batch ok = new Batch().add(a, new int[] {1, 2, 3}, 0, 3, Batch.Logits.LAST).add(b, new int[] {4}, 0, 1, Batch.Logits.LAST);
            g.forward(ok, ws, logits, null);
            float[] alone = new float[g.vocab()];
            State c = g.newState(8, 32);
            g.forward(c, new int[] {1, 2, 3}, 0, 3, alone, false, null);
            assertThat(Arrays.copyOf(logits, g.vocab())).containsExactly(alone, within(1e-5f));
            assertThat(a.position()).isEqualTo(3);
            assertThat(b.position()).isEqualTo(1);
        }
    }

    private static int argmax(float[] x, int off, int n) {
        int best = 0;
        for (int i = 1; i < n; i++) if (x[off + i] > x[off + best]) best = i;
        return best;
    }
}
