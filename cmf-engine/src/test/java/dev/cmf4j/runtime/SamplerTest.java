package dev.cmf4j.runtime;

import org.junit.jupiter.api.Test;

import java.util.HashSet;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class SamplerTest {
    static final float[] LOGITS = {1f, 3f, 2.9f, -1f, 0.5f, 2.95f};

    static SamplingParams params(float t, int k, float p, float minP, float rep, float pres, long seed) {
        return new SamplingParams(t, k, p, minP, rep, pres, seed);
    }

    @Test void greedyIsArgmax() {
        assertThat(new Sampler(SamplingParams.GREEDY).sample(LOGITS, new int[0], 0)).isEqualTo(1);
    }

    @Test void repetitionPenaltyAppliesBeforeGreedy() {
        // 3/1.5 = 2 < 2.95: the seen token 1 loses to 5
        Sampler s = new Sampler(params(0f, 0, 1f, 0f, 1.5f, 0f, 1));
        assertThat(s.sample(LOGITS, new int[] {1, 1, 1}, 3)).isEqualTo(5);
        // negative logits get multiplied: seen token 3 stays last
        Sampler s2 = new Sampler(params(0f, 0, 1f, 0f, 1.5f, 0f, 1));
        assertThat(s2.sample(new float[] {-1f, -2f}, new int[] {0}, 1)).isEqualTo(0);
    }

    @Test void presencePenaltySubtracts() {
        Sampler s = new Sampler(params(0f, 0, 1f, 0f, 1f, 0.2f, 1));
        assertThat(s.sample(LOGITS, new int[] {1}, 1)).isEqualTo(5);
        assertThat(LOGITS[1]).isEqualTo(3f);   // input untouched
    }

    @Test void topKOneIsGreedy() {
        Sampler s = new Sampler(params(1.5f, 1, 1f, 0f, 1f, 0f, 7));
        for (int i = 0; i < 50; i++) assertThat(s.sample(LOGITS, new int[0], 0)).isEqualTo(1);
    }

    @Test void topKLimitsTheSupport() {
        Sampler s = new Sampler(params(5f, 3, 1f, 0f, 1f, 0f, 3));
        Set<Integer> got = new HashSet<>();
        for (int i = 0; i < 2000; i++) got.add(s.sample(LOGITS, new int[0], 0));
        assertThat(got).containsExactlyInAnyOrder(1, 5, 2);
    }

    @Test void topKOverAWholeVocabularyKeepsExactlyTheKLargest() {
        // min-p off, so top-k selects among all 5000 (a partial selection, not a sort): at T = 50 the 37 kept are
        // nearly equally likely, and every one of them, and none other, shows up
        java.util.Random r = new java.util.Random(3);
        float[] l = new float[5000];
        for (int i = 0; i < l.length; i++) l[i] = (float) r.nextGaussian();
        Integer[] byLogit = new Integer[l.length];
        for (int i = 0; i < l.length; i++) byLogit[i] = i;
        java.util.Arrays.sort(byLogit, (a, b) -> Float.compare(l[b], l[a]));
        Set<Integer> want = new HashSet<>(java.util.Arrays.asList(byLogit).subList(0, 37));
        Sampler s = new Sampler(params(50f, 37, 1f, 0f, 1f, 0f, 9));
        Set<Integer> got = new HashSet<>();
        for (int i = 0; i < 4000; i++) got.add(s.sample(l, new int[0], 0));
        assertThat(got).isEqualTo(want);
    }

    @Test void topKThenTopPCutsTheSelectedKInProbabilityOrder() {
        // the k selected by the quickselect must come out sorted, or top-p cuts an arbitrary prefix of them
        float[] l = new float[200];
        for (int i = 0; i < l.length; i++) l[i] = (float) (((i * 7919L) % 200) / 20.0);   // distinct, shuffled
        Integer[] by = new Integer[l.length];
        for (int i = 0; i < l.length; i++) by[i] = i;
        java.util.Arrays.sort(by, (a, b) -> Float.compare(l[b], l[a]));
        double mass = 0, acc = 0;
        for (int i = 0; i < 20; i++) mass += Math.exp(l[by[i]] - l[by[0]]);
        Set<Integer> want = new HashSet<>();
        for (int i = 0; i < 20 && acc < 0.5 * mass; i++) { acc += Math.exp(l[by[i]] - l[by[0]]); want.add(by[i]); }
        Sampler s = new Sampler(params(1f, 20, 0.5f, 0f, 1f, 0f, 11));
        Set<Integer> got = new HashSet<>();
        for (int i = 0; i < 3000; i++) got.add(s.sample(l, new int[0], 0));
        assertThat(got).isEqualTo(want);
    }

    @Test void minPKeepsExactlyTheTokensWithinItsRatioOfTheMax() {
        // p/p_max = e^(l − l_max) at T = 1: with min-p e^-2, logits 2 below the max stay and 2.01 below go
        float[] l = {0f, -1.99f, -2.01f, -5f, -1f};
        Sampler s = new Sampler(params(1f, 0, 1f, (float) Math.exp(-2), 1f, 0f, 4));
        Set<Integer> got = new HashSet<>();
        for (int i = 0; i < 5000; i++) got.add(s.sample(l, new int[0], 0));
        assertThat(got).containsExactlyInAnyOrder(0, 1, 4);
    }

    @Test void minPDropsUnlikelyTokens() {
        // at T=1 p(3) = e^-1 / Σ ≈ 0.013 of p_max... min-p 0.2 keeps tokens within e^{-1.6} of the max
        Sampler s = new Sampler(params(1f, 0, 1f, 0.2f, 1f, 0f, 3));
        Set<Integer> got = new HashSet<>();
        for (int i = 0; i < 3000; i++) got.add(s.sample(LOGITS, new int[0], 0));
        assertThat(got).containsExactlyInAnyOrder(1, 2, 5);
    }

    @Test void topPKeepsTheSmallestSetReachingP() {
        float[] l = {0f, (float) Math.log(6), (float) Math.log(3)};   // p = 0.1, 0.6, 0.3
        Sampler s = new Sampler(params(1f, 0, 0.85f, 0f, 1f, 0f, 5));
        Set<Integer> got = new HashSet<>();
        for (int i = 0; i < 2000; i++) got.add(s.sample(l, new int[0], 0));
        assertThat(got).containsExactlyInAnyOrder(1, 2);
    }

    @Test void drawsFollowTheDistribution() {
        float[] l = {0f, (float) Math.log(3)};   // p = 0.25, 0.75
        Sampler s = new Sampler(params(1f, 0, 1f, 0f, 1f, 0f, 11));
        int ones = 0, n = 20000;
        for (int i = 0; i < n; i++) ones += s.sample(l, new int[0], 0);
        assertThat(ones / (double) n).isBetween(0.73, 0.77);
    }

    @Test void sameSeedSameSequence() {
        int[] a = new int[100], b = new int[100];
        Sampler s1 = new Sampler(params(1f, 0, 1f, 0f, 1f, 0f, 42)), s2 = new Sampler(params(1f, 0, 1f, 0f, 1f, 0f, 42));
        for (int i = 0; i < 100; i++) { a[i] = s1.sample(LOGITS, new int[0], 0); b[i] = s2.sample(LOGITS, new int[0], 0); }
        assertThat(a).containsExactly(b);
    }

    @Test void badParametersAreRefused() {
        assertThatThrownBy(() -> params(-1f, 0, 1f, 0f, 1f, 0f, 1)).hasMessageContaining("temperature");
        assertThatThrownBy(() -> params(1f, 0, 0f, 0f, 1f, 0f, 1)).hasMessageContaining("top-p");
        assertThatThrownBy(() -> params(1f, 0, 1f, 1f, 1f, 0f, 1)).hasMessageContaining("min-p");
        assertThatThrownBy(() -> params(1f, -1, 1f, 0f, 1f, 0f, 1)).hasMessageContaining("top-k");
        assertThatThrownBy(() -> params(1f, 0, 1f, 0f, 0f, 0f, 1)).hasMessageContaining("repetition");
    }
}
