package dev.cmf4j.runtime;

import dev.cmf4j.model.HfFixture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Arrays;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Sessions stepped together through a {@link BatchDriver} (gemma3: sliding and full layers) against each alone. */
class BatchDriverTest {
    static HfFixture gemma3;

    @BeforeAll static void open() { gemma3 = HfFixture.open("gemma3"); }

    @AfterAll static void close() { if (gemma3 != null) gemma3.close(); }

    @Test void prefillInSharedStepsThenDecodeTogetherEqualsEachSessionAlone() {
        var g = gemma3.graph();
        int v = g.vocab(), n = 5;
        int[][] prompts = new int[n][];
        for (int i = 0; i < n; i++) prompts[i] = SessionTest.randomIds(3 + 11 * i, v, 10 + i);
        int[][] next = new int[n][];
        for (int i = 0; i < n; i++) next[i] = SessionTest.randomIds(4, v, 20 + i);

        Session[] together = new Session[n];
        for (int i = 0; i < n; i++) together[i] = new Session(g, 128);
        // 16 rows a step: the 47-token prompt spreads over several steps, shared with the others' chunks
        BatchDriver driver = new BatchDriver(g, 16, 128);
        float[] last = driver.prefill(together, prompts, 8);
        for (int i = 0; i < n; i++) {
            Session alone = new Session(g, 128);
            float[] want = alone.prefill(prompts[i]);
            assertThat(maxDiff(last, i * v, want, 0, v)).as("prompt " + i).isLessThan(1e-4);
        }
        float[][] wantSteps = new float[n][];
        for (int i = 0; i < n; i++) {
            Session alone = new Session(g, 128);
            alone.prefill(prompts[i]);
            wantSteps[i] = new float[next[i].length * v];
            for (int t = 0; t < next[i].length; t++) System.arraycopy(alone.decode(next[i][t]), 0, wantSteps[i], t * v, v);
        }
        for (int t = 0; t < 4; t++) {
            int[][] ids = new int[n][];
            for (int i = 0; i < n; i++) ids[i] = new int[] {next[i][t]};
            float[] got = driver.step(together, ids);
            for (int i = 0; i < n; i++)
                assertThat(maxDiff(got, i * v, wantSteps[i], t * v, v)).as("session " + i + " step " + t).isLessThan(1e-4);
        }
        for (int i = 0; i < n; i++) {
            int[] history = together[i].history();
            assertThat(history).hasSize(prompts[i].length + 4);
            assertThat(Arrays.copyOf(history, prompts[i].length)).containsExactly(prompts[i]);
            assertThat(together[i].position()).isEqualTo(prompts[i].length + 4);
        }
    }

    /** stepGreedy picks each session's argmax of the logits step() gives (CPU: both from the same logits). */
    @Test void greedyStepsPickTheArgmaxOfEachSessionsLogits() {
        var g = gemma3.graph();
        int v = g.vocab(), n = 3;
        Session[] a = new Session[n], b = new Session[n];
        int[][] prompts = new int[n][];
        for (int i = 0; i < n; i++) {
            prompts[i] = SessionTest.randomIds(2 + 5 * i, v, 40 + i);
            a[i] = new Session(g, 64);
            b[i] = new Session(g, 64);
        }
        BatchDriver da = new BatchDriver(g, 16, 64), db = new BatchDriver(g, 16, 64);
        da.prefill(a, prompts, 8);
        float[] last = db.prefill(b, prompts, 8);
        int[][] ids = new int[n][1];
        for (int i = 0; i < n; i++) ids[i][0] = Sampler.argmax(Arrays.copyOfRange(last, i * v, (i + 1) * v), v);
        for (int t = 0; t < 4; t++) {
            float[] logits = db.step(b, ids);
            int[] picks = da.stepGreedy(a, ids).clone();
            for (int i = 0; i < n; i++) {
                int want = Sampler.argmax(Arrays.copyOfRange(logits, i * v, (i + 1) * v), v);
                assertThat(picks[i]).as("session " + i + " step " + t).isEqualTo(want);
                ids[i][0] = want;
            }
        }
        for (int i = 0; i < n; i++) assertThat(a[i].history()).containsExactly(b[i].history());
    }

    @Test void badInputLeavesEverySessionAsItWas() {
        var g = gemma3.graph();
        Session a = new Session(g, 8), b = new Session(g, 8);
        BatchDriver driver = new BatchDriver(g, 8, 8);
        assertThatThrownBy(() -> driver.step(new Session[] {a, b}, new int[][] {{1, 2}, {g.vocab()}}))
                .isInstanceOf(GenerationException.BadInput.class).hasMessageContaining("outside the vocabulary");
        assertThatThrownBy(() -> driver.step(new Session[] {a, b}, new int[][] {{1, 2}, new int[9]}))
                .isInstanceOf(GenerationException.ContextLimit.class);
        assertThatThrownBy(() -> driver.step(new Session[] {a, b}, new int[][] {{1, 2}, new int[7]}))
                .hasMessageContaining("exceeds this driver's 8");
        assertThat(a.position()).isZero();
        assertThat(b.position()).isZero();
        assertThat(a.history()).isEmpty();
        driver.step(new Session[] {a, b}, new int[][] {{1, 2}, {3}});
        assertThat(a.position()).isEqualTo(2);
        assertThat(b.history()).containsExactly(3);
    }

    private static double maxDiff(float[] a, int ao, float[] b, int bo, int n) {
        double d = 0;
        for (int i = 0; i < n; i++) d = Math.max(d, Math.abs(a[ao + i] - b[bo + i]));
        return d;
    }
}
