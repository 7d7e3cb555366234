package dev.cmf4j.model.graph;

import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.model.HfFixture;
import dev.cmf4j.model.TestFiles;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * Decode steps whose attention is split into KV chunks across the pool (forced on these small models; 1 to 3 rows a
 * step, so rows of different lengths share a step) against the same graph stepped with each (row, KV head) whole on
 * one thread. The kernel's chunk partials give the whole unit's bits (AttentionKernelTest); here the step's wiring of
 * them (which row, KV head and chunk a unit is, where its partial goes) is checked. The rest of the model runs the
 * same code on the same pool in both, but the JIT may compile its vector kernels (whose reductions round differently
 * by tier) between the two calls, so logits are compared to 1e-4 (a misplaced partial moves them by O(1)).
 */
class AttentionSplitTest {
    private final long defaultSplit = AttentionStep.splitFromWork;

    @AfterEach void restore() { AttentionStep.splitFromWork = defaultSplit; }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "gpt_oss"})   // gpt_oss: sinks and sliding windows
    void splittingTheKvAcrossThreadsGivesTheWholeUnitsLogits(String model) throws Exception {
        try (HfFixture hf = HfFixture.open(model); WorkerPool two = new WorkerPool(2)) {
            CpuBackend cpu = new CpuBackend(new CpuMatMul(), two, null);
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), cpu);
            int ctx = 500, prompt = 440, vocab = g.vocab();
            State whole = g.newState(128, ctx), split = g.newState(128, ctx);
            int[] ids = new int[ctx];
            Random r = new Random(11);
            for (int i = 0; i < ctx; i++) ids[i] = r.nextInt(vocab);
            float[] lw = new float[3 * vocab], ls = new float[3 * vocab];
            AttentionStep.splitFromWork = Long.MAX_VALUE;
            for (int p = 0; p < prompt; p += 110) {
                g.forward(whole, ids, p, 110, lw, false, null);
                g.forward(split, ids, p, 110, ls, false, null);
            }
            int steps = 0;
            for (int p = prompt, n = 1; p + n <= ctx; p += n, n = n % 3 + 1, steps++) {
                AttentionStep.splitFromWork = Long.MAX_VALUE;
                g.forward(whole, ids, p, n, lw, true, null);
                AttentionStep.splitFromWork = 0;
                g.forward(split, ids, p, n, ls, true, null);
                for (int i = 0; i < n * vocab; i++)
                    assertThat(ls[i]).as(model + " logit " + i % vocab + " of row " + i / vocab + " at position " + p)
                            .isCloseTo(lw[i], within(1e-4f));
            }
            assertThat(steps).isGreaterThan(25);
        }
    }
}
