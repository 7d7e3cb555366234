package dev.cmf4j.runtime;

import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.HfFixture;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.model.graph.Graph;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.Arrays;
import java.util.List;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Speculative decoding against plain decoding on every fixture architecture: greedy output token-exact with a draft
 * that mostly agrees (the same model with an int8 KV cache) and with one that mostly does not (another model of the
 * same vocabulary), which exercises every rewind (full and sliding KV caches, KV sharing, recurrent delta-net states);
 * the sessions hold afterwards exactly what plain decoding leaves; and sampled output keeps the target's distribution
 * (chi-square of the first three tokens against the exact distribution, computed by enumeration).
 */
class SpeculationTest {
    static final int[] PROMPT = SessionTest.randomIds(11, 1024, 5);

    static Generator.Result plain(Graph g, SamplingParams sp, int n, Set<Integer> eos) {
        return new Generator(new Session(g, 128), new Sampler(sp), eos, List.of()).generate(PROMPT, n, null, null);
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "qwen3", "qwen3_moe", "gemma3", "gemma4", "gemma4_moe", "gpt_oss", "qwen3_next"})
    void greedyIsTokenExactWithCloseAndUnrelatedDrafts(String model) {
        try (HfFixture hf = HfFixture.open(model); HfFixture other = HfFixture.open(model.equals("llama") ? "qwen3" : "llama")) {
            Graph target = hf.graph();
            Graph close = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new CpuBackend(), List.of(),
                    new AttentionMemory(null, KvType.Q8));
            int n = 40;
            Generator.Result want = plain(target, SamplingParams.GREEDY, n, Set.of());
            for (var draft : List.of(close, other.graph())) {
                for (int k : new int[] {1, 3, 6}) {
                    Session t = new Session(target, 128), d = new Session(draft, 128);
                    Speculation spec = new Speculation(d, k, SamplingParams.GREEDY);
                    Generator.Result got = spec.generate(new Generator(t, new Sampler(SamplingParams.GREEDY), Set.of(), List.of()),
                            PROMPT, n, null, null);
                    Speculation.Stats st = spec.stats(got.tokens().length);
                    System.out.printf("%s draft %s k %d: acceptance %.2f, %.2f tokens per target step (%d rounds, %d plain)%n", model,
                            draft == close ? "q8-kv" : other.name(), k, st.acceptance(), st.tokensPerStep(), st.rounds(), st.plainSteps());
                    assertThat(got.tokens()).as(model + " k " + k).containsExactly(want.tokens());
                    assertThat(got.reason()).isEqualTo(want.reason());
                    // the target holds what plain decoding leaves: the prompt and every token but the last
                    assertThat(t.position()).isEqualTo(PROMPT.length + n - 1);
                    assertThat(t.history()).startsWith(PROMPT);
                    assertThat(Arrays.copyOfRange(t.history(), PROMPT.length, t.position()))
                            .containsExactly(Arrays.copyOf(want.tokens(), n - 1));
                    if (draft == close) assertThat(st.accepted()).as("a close draft has drafts accepted").isPositive();
                    // and continues as plain decoding does from there
                    float[] next = t.decode(want.tokens()[n - 1]).clone();
                    Session ref = new Session(target, 128);
                    ref.prefill(PROMPT);
                    float[] refNext = null;
                    for (int id : want.tokens()) refNext = ref.decode(id);
                    for (int i = 0; i < next.length; i++)
                        assertThat(Math.abs(next[i] - refNext[i])).as(model + " logits after the generation").isLessThan(2e-4f);
                }
            }
        }
    }

    @Test void greedyWithARepetitionPenaltyAndAnEosStaysExact() {
        try (HfFixture hf = HfFixture.open("qwen3"); HfFixture other = HfFixture.open("llama")) {
            SamplingParams sp = new SamplingParams(0f, 0, 1f, 0f, 1.3f, 0.2f, null);
            Generator.Result free = plain(hf.graph(), sp, 30, Set.of());
            Set<Integer> eos = Set.of(free.tokens()[17]);
            Generator.Result want = plain(hf.graph(), sp, 30, eos);
            for (Graph draft : List.of(hf.graph(), other.graph())) {
                Session t = new Session(hf.graph(), 128);
                Generator.Result got = new Speculation(new Session(draft, 128), 4, sp)
                        .generate(new Generator(t, new Sampler(sp), eos, List.of()), PROMPT, 30, null, null);
                assertThat(got.tokens()).containsExactly(want.tokens());
                assertThat(got.reason()).isEqualTo(Generator.StopReason.EOS);
                assertThat(t.position()).isEqualTo(PROMPT.length + want.tokens().length);
            }
        }
    }

    /**
     * Sampled: 2,000 seeded generations of three tokens at temperature 1 with top-k 4 (a small support, so the exact
     * joint distribution of the first two tokens is 16 cells and is computed from the target's own logits), drafted
     * by an unrelated model (many rejections); chi-square of the (t1, t2) pairs and of t3's marginal against the exact
     * distribution, and of the plain sampler's draws as a control.
     */
    @Test void sampledOutputKeepsTheTargetsDistribution() {
        try (HfFixture hf = HfFixture.open("qwen3"); HfFixture other = HfFixture.open("llama")) {
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new CpuBackend());   // the fast kernels: 4,000 generations
            Graph draftGraph = new Graph(other.spec(), TestFiles.weights(other.reader()), new CpuBackend());
            SamplingParams sp = new SamplingParams(1f, 4, 1f, 0f, 1f, 0f, null);
            java.util.Map<List<Integer>, Double> exact = exactDistribution(g, sp);
            int draws = 2000;
            java.util.Map<List<Integer>, Integer> spec = new java.util.HashMap<>(), ctl = new java.util.HashMap<>();
            long drafted = 0, accepted = 0;
            for (int i = 0; i < draws; i++) {
                SamplingParams seeded = sp.withSeed(1000L + i);
                Speculation sd = new Speculation(new Session(draftGraph, 64), 2, seeded);
                int[] t = sd.generate(new Generator(new Session(g, 64), new Sampler(seeded), Set.of(), List.of()), PROMPT, 3, null, null).tokens();
                spec.merge(List.of(t[0], t[1], t[2]), 1, Integer::sum);
                drafted += sd.stats(3).drafted();
                accepted += sd.stats(3).accepted();
                int[] c = new Generator(new Session(g, 64), new Sampler(seeded.withSeed(99_000L + i)), Set.of(), List.of())
                        .generate(PROMPT, 3, null, null).tokens();
                ctl.merge(List.of(c[0], c[1], c[2]), 1, Integer::sum);
            }
            System.out.printf("sampled: %d drafted, %d accepted (%.2f)%n", drafted, accepted, (double) accepted / drafted);
            assertThat(accepted).as("rejections happen").isLessThan(drafted);
            assertThat(accepted).as("acceptances happen").isGreaterThan(0);
            for (int depth : new int[] {2, 3}) {
                double chiSpec = chiSquare(exact, spec, draws, depth), chiCtl = chiSquare(exact, ctl, draws, depth);
                System.out.printf("chi-square of the first %d tokens: speculative %.1f, plain %.1f%n", depth, chiSpec, chiCtl);
                assertThat(chiCtl).as("the plain sampler (control)").isLessThan(critical(exact, draws, depth));
                assertThat(chiSpec).as("speculative sampling").isLessThan(critical(exact, draws, depth));
            }
        }
    }

    /**
     * The exact distribution of the first three tokens after {@link #PROMPT} under {@code sp} (a small support: top-k),
     * by enumeration over the model's own logits.
     */
    static java.util.Map<List<Integer>, Double> exactDistribution(Graph g, SamplingParams sp) {
        java.util.Map<List<Integer>, Double> exact = new java.util.HashMap<>();
        Sampler probe = new Sampler(sp);
        int v = g.vocab();
        float[] p1 = new float[v], p2 = new float[v], p3 = new float[v];
        probe.probabilities(new Session(g, 64).prefill(PROMPT), 0, v, new int[0], 0, p1);
        for (int a = 0; a < v; a++) {
            if (p1[a] == 0) continue;
            Session sa = new Session(g, 64);
            sa.prefill(PROMPT);
            probe.probabilities(sa.decode(a), 0, v, new int[0], 0, p2);
            for (int b = 0; b < v; b++) {
                if (p2[b] == 0) continue;
                Session sb = new Session(g, 64);
                sb.prefill(PROMPT);
                sb.decode(a);
                probe.probabilities(sb.decode(b), 0, v, new int[0], 0, p3);
                for (int c = 0; c < v; c++) if (p3[c] > 0) exact.merge(List.of(a, b, c), (double) p1[a] * p2[b] * p3[c], Double::sum);
            }
        }
        return exact;
    }

    /** Pearson's statistic over the prefixes of {@code depth} tokens (cells expected below 5 merged into one). */
    static double chiSquare(java.util.Map<List<Integer>, Double> exact, java.util.Map<List<Integer>, Integer> seen, int draws, int depth) {
        var e = marginal(exact, depth);
        var o = new java.util.HashMap<List<Integer>, Double>();
        seen.forEach((k, n) -> o.merge(k.subList(0, depth), (double) n, Double::sum));
        double chi = 0, restE = 0, restO = 0;
        for (var cell : e.entrySet()) {
            double want = cell.getValue() * draws, got = o.getOrDefault(cell.getKey(), 0.0);
            if (want < 5) { restE += want; restO += got; continue; }
            chi += (got - want) * (got - want) / want;
        }
        double outside = draws - o.entrySet().stream().filter(x -> e.containsKey(x.getKey())).mapToDouble(java.util.Map.Entry::getValue).sum();
        assertThat(outside).as("draws outside the exact support").isZero();
        if (restE > 0) chi += (restO - restE) * (restO - restE) / restE;
        return chi;
    }

    /** The 0.999 quantile of chi-square with the cells' degrees of freedom (Wilson-Hilferty). */
    static double critical(java.util.Map<List<Integer>, Double> exact, int draws, int depth) {
        var e = marginal(exact, depth);
        long cells = e.values().stream().filter(p -> p * draws >= 5).count();
        boolean rest = e.values().stream().anyMatch(p -> p * draws < 5);
        int df = (int) cells + (rest ? 1 : 0) - 1;
        double z = 3.09, a = 2.0 / (9 * df);
        return df * Math.pow(1 - a + z * Math.sqrt(a), 3);
    }

    static java.util.Map<List<Integer>, Double> marginal(java.util.Map<List<Integer>, Double> exact, int depth) {
        var m = new java.util.HashMap<List<Integer>, Double>();
        exact.forEach((k, p) -> m.merge(k.subList(0, depth), p, Double::sum));
        return m;
    }

    @Test void badDraftsAreRefusedClearly() {
        try (HfFixture hf = HfFixture.open("qwen3")) {
            assertThatThrownBy(() -> new Speculation(new Session(hf.graph(), 64), 0, SamplingParams.GREEDY))
                    .hasMessageContaining("--draft-max");
            Graph sealed = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new CpuBackend(), List.of(),
                    new AttentionMemory(new AttentionMemory.Sealed("all", 4, 8, 2), KvType.F32));
            Session d = new Session(sealed, 64);
            assertThatThrownBy(() -> new Speculation(d, 3, SamplingParams.GREEDY)
                    .generate(new Generator(new Session(hf.graph(), 64), new Sampler(SamplingParams.GREEDY), Set.of(), List.of()), PROMPT, 8, null, null))
                    .isInstanceOf(UnsupportedOperationException.class).hasMessageContaining("sealed");
        }
    }
}
