package dev.cmf4j.model.graph;

import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.HfFixture;
import dev.cmf4j.model.TestFiles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.Arrays;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.within;

/**
 * Batched steps against each sequence run alone ({@link BatchConformance}): 8 sequences of different prompt lengths
 * start at different steps, so most steps mix prompt chunks of some sequences with decode tokens of others; every
 * row's logits must match the same sequence's logits run alone with the same chunks (f32 weights: max |Δ| ≤ 1e-4
 * through the reference matmul, whose products do not depend on the row count; 2e-4 through the fast kernels, which
 * sum one row's product in another order than a tile of rows' and move qwen3_next's logits by ~1e-4 that way alone),
 * and the greedy ids each sequence picks inside the batch must equal the ones it picks alone.
 */
class BatchTest {

    @ParameterizedTest(name = "{0}, {1} matmul")
    @CsvSource({"llama,kernels", "llama,reference", "qwen3,kernels", "qwen3_moe,kernels", "gemma3,kernels",
            "gemma4,kernels", "gemma4_moe,kernels", "gpt_oss,kernels", "qwen3_next,kernels", "qwen3_next,reference"})
    void mixedBatchesMatchEachSequenceAlone(String model, String matmul) throws Exception {
        try (HfFixture hf = HfFixture.open(model)) {
            CpuBackend cpu = matmul.equals("reference") ? new CpuBackend(new CpuMatMul(), CpuBackend.pool(), null) : new CpuBackend();
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), cpu);
            BatchConformance.Result r = BatchConformance.run(g, Golden.load(hf.dir()).inputIds());
            System.out.printf("%s (%s): 8 sequences, %d mixed steps, max |Δ| %.3g at %s%n", model, matmul, r.mixedSteps(),
                    r.maxDiff(), r.worstAt());
            assertThat(r.maxDiff()).as(model + " worst at " + r.worstAt()).isLessThanOrEqualTo(matmul.equals("reference") ? 1e-4 : 2e-4);
            assertThat(r.greedySame()).as(model + " greedy ids inside the batch").isTrue();
            assertThat(r.mixedSteps()).as("steps mixing prompt chunks and decode rows").isGreaterThanOrEqualTo(3);
        }
    }

    /** Embryo (bounded anchor rings, delta-net states, resonance MoE, hierarchical head): the same check on its fixtures. */
    @ParameterizedTest(name = "{0}")
    @org.junit.jupiter.params.provider.ValueSource(strings = {"embryo_a", "embryo_b", "embryo_c"})
    void embryoBatchesMatchEachSequenceAlone(String name) throws Exception {
        java.nio.file.Path dir = dev.cmf4j.testkit.Fixtures.require("embryo/" + name);
        try (dev.cmf4j.model.Model m = dev.cmf4j.model.Model.open(dir.resolve("model.cmf"))) {
            BatchConformance.Result r = BatchConformance.run(m.graph(), Golden.load(dir).inputIds());
            System.out.printf("%s: 8 sequences, %d mixed steps, max |Δ| %.3g at %s%n", name, r.mixedSteps(), r.maxDiff(), r.worstAt());
            assertThat(r.maxDiff()).as(name + " worst at " + r.worstAt()).isLessThanOrEqualTo(2e-4);
            assertThat(r.greedySame()).as(name + " greedy ids inside the batch").isTrue();
            assertThat(r.mixedSteps()).isGreaterThanOrEqualTo(3);
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

}
