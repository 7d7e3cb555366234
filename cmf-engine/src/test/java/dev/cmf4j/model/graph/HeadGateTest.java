package dev.cmf4j.model.graph;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The gated hierarchical head: against fixtures/embryo/NAME/head_gate.json, and the proof that the gate top-p
 * sampling uses is exact — on the models' own final-norm states at several sharpness scales and top-p values, no
 * token of a dropped cluster enters the nucleus, the nucleus equals the full head's, and a seeded sampler draws the
 * same ids; the test prints the fraction of head rows the gated steps read.
 */
class HeadGateTest {
    private static final CpuMatMul MM = new CpuMatMul();

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"embryo_a", "embryo_b", "embryo_c"})
    void gatedHeadMatchesTheGoldenAndTopPIsExact(String name) throws Exception {
        Path dir = Fixtures.require("embryo/" + name);
        JsonNode gate = new ObjectMapper().readTree(dir.resolve("head_gate.json").toFile());
        try (Model m = Model.open(dir.resolve("model.cmf"))) {
            Graph g = m.graph();
            HierarchicalHead head = g.clusterHead();
            int V = g.vocab(), H = g.hidden(), C = head.clusters();
            HierarchicalHead.Scratch s = head.newScratch(1);
            float[] full = new float[V], gated = new float[V], lc = new float[C];

            // 1. the golden examples: log p, cluster log p, the gate's clusters, both top-p sets
            double g0 = gate.get("gate_logp").asDouble(), p0 = gate.get("top_p").asDouble();
            assertThat(V * Math.exp(g0)).as("the golden's gate meets V·e^g ≤ 1 − p").isLessThanOrEqualTo(1 - p0);
            for (JsonNode ex : gate.get("examples")) {
                float[] x = floats(ex.get("head_input"));
                head.full(MM, x, 1, full, s);
                head.clusterLogProbs(MM, x, 1, lc);
                assertThat(EmbryoGoldenTest.maxDiff(full, floats(ex.get("logprob")))).isLessThanOrEqualTo(1e-4);
                assertThat(EmbryoGoldenTest.maxDiff(lc, floats(ex.get("cluster_logprob")))).isLessThanOrEqualTo(1e-4);
                int read = head.gated(MM, x, 0, g0, gated, 0, s);
                List<Integer> kept = new ArrayList<>();
                for (int c = 0; c < C; c++) if (lc[c] >= g0) kept.add(c);
                assertThat(kept).isEqualTo(ints(ex.get("kept_clusters")));
                assertThat(read).isEqualTo(kept.size() * (V / C));
                for (int c : kept)
                    for (int v = c * (V / C); v < (c + 1) * (V / C); v++) assertThat(gated[v]).isEqualTo(full[v]);
                assertThat(topP(full, p0)).isEqualTo(ints(ex.get("top_p_ungated")));
                assertThat(topP(gated, p0)).isEqualTo(ints(ex.get("top_p_gated")));
            }

            // 2. the proof on the model's own states, sharpened: dropped tokens never enter the nucleus
            List<float[]> finals = new ArrayList<>();
            int[] ids = dev.cmf4j.model.Golden.load(dir).inputIds();
            State st = g.newState(ids.length, ids.length);
            g.forward(st, ids, 0, ids.length, null, false, (idx, x, tokens, h) -> {
                if (idx == g.numLayers() + 1) for (int t = 0; t < tokens; t++) finals.add(Arrays.copyOfRange(x, t * h, (t + 1) * h));
            });
            for (double p : new double[] {0.5, 0.9, 0.95, 0.99}) {
                st.gateHeadForTopP(p);
                double gp = st.headGate();
                assertThat(V * Math.exp(gp)).isLessThanOrEqualTo(1 - p);
                for (double scale : new double[] {1, 4, 16}) {
                    long rows = 0, dropped = 0, n = 0;
                    for (float[] f : finals) {
                        float[] x = f.clone();
                        for (int i = 0; i < H; i++) x[i] *= (float) scale;
                        head.full(MM, x, 1, full, s);
                        head.clusterLogProbs(MM, x, 1, lc);
                        rows += head.gated(MM, x, 0, gp, gated, 0, s);
                        n++;
                        List<Integer> nucleus = topP(full, p);
                        for (int v : nucleus)
                            assertThat(lc[v / (V / C)]).as("token %d of the nucleus is in a kept cluster", v).isGreaterThanOrEqualTo((float) gp);
                        for (int c = 0; c < C; c++) if (lc[c] < gp) dropped++;
                        assertThat(topP(gated, p)).as("p %s, scale %s", p, scale).isEqualTo(nucleus);
                        Sampler a = new Sampler(new SamplingParams(1f, 0, (float) p, 0f, 1f, 0f, 7L));
                        Sampler b = new Sampler(new SamplingParams(1f, 0, (float) p, 0f, 1f, 0f, 7L));
                        for (int d = 0; d < 4; d++) assertThat(b.sample(gated, new int[0], 0)).isEqualTo(a.sample(full, new int[0], 0));
                    }
                    System.out.printf("%s top-p %.2f, head input ×%.0f: gate %.2f, %.1f%% of head rows read, %.1f of %d clusters dropped%n",
                            name, p, scale, gp, 100.0 * rows / (n * V), (double) dropped / n, C);
                }
            }
        }
    }

    /** Through the graph: a gated sequence beside an ungated one in one batch; each gets its own head. */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"embryo_a", "embryo_c"})
    void eachSequenceOfABatchHasItsOwnGate(String name) throws Exception {
        Path dir = Fixtures.require("embryo/" + name);
        try (Model m = Model.open(dir.resolve("model.cmf"))) {
            Graph g = m.graph();
            int V = g.vocab();
            int[] ids = dev.cmf4j.model.Golden.load(dir).inputIds();
            State full = g.newState(64, 64), gated = g.newState(64, 64);
            gated.gateHeadForTopP(0.5);
            Workspace ws = g.newWorkspace(2 * ids.length, 64);
            float[] logits = new float[2 * V];
            g.forward(new Batch().add(full, ids, 0, ids.length, Batch.Logits.LAST).add(gated, ids, 0, ids.length, Batch.Logits.LAST),
                    ws, logits, null);
            float[] a = Arrays.copyOfRange(logits, 0, V), b = Arrays.copyOfRange(logits, V, 2 * V);
            assertThat(full.headRowsRead()).isEqualTo(V);
            assertThat(gated.headRowsRead()).isBetween(1L, (long) V);
            assertThat(topP(b, 0.5)).isEqualTo(topP(a, 0.5));
            double mass = 0;
            for (float x : b) mass += Math.exp(x);
            assertThat(mass).as("the gated head still sums to 1").isCloseTo(1.0, org.assertj.core.api.Assertions.within(1e-4));
            System.out.printf("%s: a gated step at top-p 0.5 read %d of %d head rows%n", name, gated.headRowsRead(), V);
        }
    }

    /** A Generator with a plain nucleus draw gates the head, reads fewer rows and draws what the full head draws. */
    @org.junit.jupiter.api.Test
    void generatorGatesTheHeadAndDrawsTheSameTokens() throws Exception {
        Path dir = Fixtures.require("embryo/embryo_a");
        try (Model m = Model.open(dir.resolve("model.cmf"))) {
            Graph g = m.graph();
            int[] prompt = dev.cmf4j.model.Golden.load(dir).inputIds();
            SamplingParams p = new SamplingParams(1f, 0, 0.5f, 0f, 1f, 0f, 11L);
            dev.cmf4j.runtime.Session gated = new dev.cmf4j.runtime.Session(g, 128);
            long[] rows = {0};
            var gen = new dev.cmf4j.runtime.Generator(gated, new Sampler(p), java.util.Set.of(), List.of());
            assertThat(gated.state().headGate()).isGreaterThan(Double.NEGATIVE_INFINITY);
            int[] got = gen.generate(prompt, 24, null, new dev.cmf4j.runtime.Generator.Listener() {
                @Override public void token(int id) { rows[0] += gated.state().headRowsRead(); }
            }).tokens();
            // the same draw on the full head: a session of its own, never gated
            dev.cmf4j.runtime.Session full = new dev.cmf4j.runtime.Session(g, 128);
            Sampler s = new Sampler(p);
            float[] logits = full.prefill(prompt);
            for (int i = 0; i < got.length; i++) {
                int id = s.sample(logits, new int[0], 0);
                assertThat(id).as("token " + i).isEqualTo(got[i]);
                logits = full.decode(id);
            }
            assertThat(full.state().headRowsRead()).isEqualTo(g.vocab());
            assertThat(rows[0]).as("head rows the gated steps read").isLessThan((long) got.length * g.vocab());
            System.out.printf("embryo_a generation at top-p 0.5: %.1f%% of head rows read%n", 100.0 * rows[0] / ((long) got.length * g.vocab()));
            // any other filter reads every row again
            new dev.cmf4j.runtime.Generator(gated, new Sampler(SamplingParams.defaults()), java.util.Set.of(), List.of());
            assertThat(gated.state().headGate()).isEqualTo(Double.NEGATIVE_INFINITY);
        }
    }

    /** The README's top-p set: by log p descending (lower id first on ties), the shortest prefix whose mass reaches p. */
    static List<Integer> topP(float[] logp, double p) {
        Integer[] order = new Integer[logp.length];
        for (int i = 0; i < order.length; i++) order[i] = i;
        Arrays.sort(order, (a, b) -> logp[a] != logp[b] ? Float.compare(logp[b], logp[a]) : Integer.compare(a, b));
        List<Integer> out = new ArrayList<>();
        double acc = 0;
        for (int v : order) {
            out.add(v);
            acc += Math.exp(logp[v]);
            if (acc >= p) break;
        }
        return out;
    }

    private static float[] floats(JsonNode n) {
        float[] a = new float[n.size()];
        for (int i = 0; i < a.length; i++) a[i] = (float) n.get(i).asDouble();
        return a;
    }

    private static List<Integer> ints(JsonNode n) {
        List<Integer> out = new ArrayList<>();
        for (JsonNode c : n) out.add(c.asInt());
        return out;
    }
}
