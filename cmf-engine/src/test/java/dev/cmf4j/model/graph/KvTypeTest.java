package dev.cmf4j.model.graph;

import dev.cmf4j.backend.KvType;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.runtime.Perplexity;
import org.junit.jupiter.api.Test;

import static dev.cmf4j.model.graph.SealedAttentionTest.decodeLogits;
import static dev.cmf4j.model.graph.SealedAttentionTest.ids;
import static dev.cmf4j.model.graph.SealedAttentionTest.maxDiff;
import static dev.cmf4j.model.graph.SealedAttentionTest.withModel;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * {@code --kv f16|q8} on the llama fixture (GQA, head_dim 32): decode logits read the prompt's keys and values back from the
 * stored form; they stay within a stated bound of float32's, and the store takes ½ and ~¼ of its bytes.
 */
class KvTypeTest {
    @Test
    void f16AndQ8StayCloseToF32AndTakeFewerBytes() {
        int[] ids = ids(64, 1024, 11);
        float[] f32 = withModel("llama", AttentionMemory.EXACT, 0, g -> decodeLogits(g, ids, 40, false, 1));
        double[] d = new double[2], kl = new double[2];
        long[] bytes = new long[3];
        KvType[] types = {KvType.F32, KvType.F16, KvType.Q8};
        for (int i = 0; i < 3; i++) {
            KvType t = types[i];
            int k = i;
            withModel("llama", new AttentionMemory(null, t), 0, g -> {
                if (t != KvType.F32) {
                    float[] got = decodeLogits(g, ids, 40, false, 1);
                    d[k - 1] = maxDiff(f32, got);
                    kl[k - 1] = meanKl(f32, got, g.vocab());
                }
                State st = g.newState(64, 64);
                g.forward(st, ids, 0, 64, null, false, null);
                bytes[k] = st.heldBytes();
                return null;
            });
        }
        System.out.printf("llama fixture, 24 decode steps after 40: max|logit| %.3g; f16 max|d| %.3g KL %.3g; q8 max|d| %.3g KL %.3g;"
                + " bytes f32 %d f16 %d q8 %d%n", maxDiff(f32, new float[f32.length]), d[0], kl[0], d[1], kl[1], bytes[0], bytes[1], bytes[2]);
        // bounds: f16 keeps 11 bits (max|d| 4e-3 measured), q8 7 bits of each head's absmax (0.1 measured, KL 1.6e-4)
        assertThat(d[0]).isGreaterThan(0).isLessThan(1e-2);
        assertThat(d[1]).isGreaterThan(d[0]).isLessThan(0.25);
        assertThat(kl[0]).isLessThan(1e-5);
        assertThat(kl[1]).isLessThan(1e-3);
        assertThat(bytes[1] * 2).isEqualTo(bytes[0]);
        // q8: one byte per element plus a float32 scale per head of 32 elements: (32 + 4) / 128 of f32
        assertThat(bytes[2] * 128).isEqualTo(bytes[0] * 36);
    }

    /** Mean over rows of KL(softmax(p) ‖ softmax(q)), in nats. */
    static double meanKl(float[] p, float[] q, int v) {
        double sum = 0;
        int rows = p.length / v;
        for (int r = 0; r < rows; r++) sum += Perplexity.kl(p, q, r * v, v);
        return sum / rows;
    }

    @Test
    void perplexityComparisonReportsTheKlOfQ8FromF32() {
        int[] ids = ids(96, 1024, 5);
        Perplexity.Comparison[] c = new Perplexity.Comparison[2];
        Perplexity.Result[] alone = new Perplexity.Result[2];
        withModel("llama", AttentionMemory.EXACT, 0, f32 -> {
            c[0] = Perplexity.compare(f32, f32, ids, 48, 16, 0);
            alone[0] = Perplexity.measure(f32, ids, 48, 16, 0);
            return withModel("llama", new AttentionMemory(null, KvType.Q8), 0, q8 -> {
                c[1] = Perplexity.compare(f32, q8, ids, 48, 16, 0);
                alone[1] = Perplexity.measure(q8, ids, 48, 16, 0);
                return null;
            });
        });
        System.out.printf("llama fixture, 2 windows of 48 (prompt 16): ppl f32 %.6f q8 %.6f, KL mean %.3g max %.3g, same top %.3f%n",
                c[1].base().perplexity(), c[1].test().perplexity(), c[1].meanKl(), c[1].maxKl(), c[1].sameTop());
        // a run against itself: no divergence (up to the float noise of the JIT's reduction order), every top token the same
        assertThat(c[0].meanKl()).isLessThan(1e-9);
        assertThat(c[0].sameTop()).isEqualTo(1.0);
        assertThat(c[0].test().nll()).isCloseTo(c[0].base().nll(), within(1e-6));
        // each side of the comparison is the perplexity that run gives alone, over the same 2 × 32 tokens
        assertThat(c[1].base().nll()).isCloseTo(alone[0].nll(), within(1e-6));
        assertThat(c[1].test().nll()).isCloseTo(alone[1].nll(), within(1e-6));
        assertThat(c[1].test().tokens()).isEqualTo(64);
        assertThat(c[1].test().nll()).isNotCloseTo(c[1].base().nll(), within(1e-9));
        // q8 KV: a small divergence (1.6e-4 mean in the decode test above)
        assertThat(c[1].meanKl()).isGreaterThan(0).isLessThan(1e-3);
        assertThat(c[1].maxKl()).isGreaterThanOrEqualTo(c[1].meanKl()).isLessThan(1e-2);
        assertThat(c[1].sameTop()).isGreaterThan(0.9);
    }
}
