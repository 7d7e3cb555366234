package dev.cmf4j.model;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The reference converter's Q8_2F files carry quantization error: their argmax should agree with the
 * transformers goldens on most positions of the full forward.
 */
class RefconvQuantTest {

    @ParameterizedTest
    @ValueSource(strings = {"qwen3", "llama", "qwen3_moe", "qwen3_next"})
    void q8TwoFieldAgreesInArgmax(String model) throws Exception {
        Path cmf = Fixtures.require("cmf/refconv/" + model + "-Q8_2F.cmf");
        Path dir = Fixtures.require("models/" + model);
        // the reference converter writes "moe": null for qwen3_moe: top-k comes from the model's config
        var overrides = model.equals("qwen3_moe")
                ? new ObjectMapper().readTree("{\"moe\": {\"top_k\": 2, \"norm_topk_prob\": true}}") : null;
        Golden g = Golden.load(dir);
        int T = g.inputIds().length, V = g.vocab();
        try (Model m = Model.open(cmf, overrides, new CpuBackend())) {
            float[] logits = new dev.cmf4j.runtime.Session(m.graph(), 256).logitsAll(g.inputIds());
            int agree = 0;
            double maxDiff = 0;
            double[] perPos = new double[T];
            for (int t = 0; t < T; t++) {
                if (argmax(logits, t * V, V) == argmax(g.logits(), t * V, V)) agree++;
                for (int v = 0; v < V; v++) perPos[t] = Math.max(perPos[t], Math.abs(logits[t * V + v] - g.logits()[t * V + v]));
                maxDiff = Math.max(maxDiff, perPos[t]);
            }
            java.util.Arrays.sort(perPos);
            double median = perPos[T / 2];
            double rate = agree / (double) T;
            System.out.printf("refconv %s Q8_2F: argmax agreement %d/%d (%.1f%%), logits max|Δ| %.3g (median over positions %.3g)%n",
                    model, agree, T, 100 * rate, maxDiff, median);
            // random tiny models amplify 8-bit noise (MoE routing flips, near-tied logits): our own q8_2f
            // conversion of the same models shows the same profile (max 0.24 llama .. 5.5 qwen3_next)
            assertThat(rate).as(model + " argmax agreement").isGreaterThanOrEqualTo(0.85);
            assertThat(median).as(model + " typical logit error").isLessThan(1.0);
        }
    }

    static int argmax(float[] x, int off, int n) {
        int best = 0;
        for (int i = 1; i < n; i++) if (x[off + i] > x[off + best]) best = i;
        return best;
    }
}
