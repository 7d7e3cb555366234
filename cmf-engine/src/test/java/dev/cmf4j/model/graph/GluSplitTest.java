package dev.cmf4j.model.graph;

import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.model.HfFixture;
import dev.cmf4j.model.TestFiles;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * A prompt chunk's gate activation split over the pool's threads (forced on this small model) against the same chunk
 * with it on the calling thread. Each value is computed on its own, so the split cannot change a bit; what is checked is
 * the wiring (every value done once). As in AttentionSplitTest the JIT may compile the other vector kernels between
 * the two calls, so logits are compared to 1e-4 (a skipped range moves them by O(1)).
 */
class GluSplitTest {
    private final int defaultFrom = MlpStep.gluSplitFrom;

    @AfterEach void restore() { MlpStep.gluSplitFrom = defaultFrom; }

    @Test
    void splittingTheGateActivationAcrossThreadsGivesTheSameLogits() throws Exception {
        try (HfFixture hf = HfFixture.open("llama"); WorkerPool two = new WorkerPool(2)) {
            CpuBackend cpu = new CpuBackend(new CpuMatMul(), two, null);
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), cpu);
            int n = 37, vocab = g.vocab();
            int[] ids = new int[n];
            Random r = new Random(5);
            for (int i = 0; i < n; i++) ids[i] = r.nextInt(vocab);
            float[] whole = new float[n * vocab], split = new float[n * vocab];
            MlpStep.gluSplitFrom = Integer.MAX_VALUE;
            g.forward(g.newState(64, n), ids, 0, n, whole, true, null);
            MlpStep.gluSplitFrom = 0;
            g.forward(g.newState(64, n), ids, 0, n, split, true, null);
            for (int i = 0; i < n * vocab; i++)
                assertThat(split[i]).as("logit " + i % vocab + " of row " + i / vocab).isCloseTo(whole[i], within(1e-4f));
        }
    }
}
