package dev.cmf4j.model.graph;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.Model;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The Embryo fixtures (fixtures/embryo/README.md) through the CPU graph: a float64 reference's full-forward
 * log-probabilities, incremental decode and greedy ids, hidden states, cluster log-probabilities, resonance winners
 * and the fixed state size, within the README's tolerances; prompts whole, in chunks that cut the window, and
 * token by token.
 */
class EmbryoGoldenTest {
    static final double LOGP_TOL = 1e-3;

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"embryo_a", "embryo_b", "embryo_c"})
    void matchesTheFloat64Reference(String name) throws Exception {
        Path dir = Fixtures.require("embryo/" + name);
        JsonNode meta = new ObjectMapper().readTree(dir.resolve("golden.json").toFile());
        Golden golden = Golden.load(dir);
        try (Model m = Model.open(dir.resolve("model.cmf"));
             SafetensorsReader gs = SafetensorsReader.open(dir.resolve("golden.safetensors"))) {
            Graph g = m.graph();
            ModelSpec spec = m.spec();
            int T = golden.inputIds().length, L = spec.numLayers(), H = spec.hidden();

            // 1. log-probabilities of the full forward and of the incremental decode, greedy ids: whole prompt, chunks, tokens
            for (int chunk : new int[] {T, 7, 1}) {
                Golden.Result r = golden.check(g, chunk, LOGP_TOL);
                System.out.printf("%s chunk %d: %s%n", name, chunk, r);
                assertThat(r.logitsMaxDiff()).as(name + " logits, chunk " + chunk).isLessThanOrEqualTo(LOGP_TOL);
                assertThat(r.stepLogitsMaxDiff()).as(name + " step logits, chunk " + chunk).isLessThanOrEqualTo(LOGP_TOL);
                assertThat(r.greedyMatches()).as(name + " greedy ids, chunk " + chunk).isTrue();
            }

            // 2. hidden states after every layer, and the head's cluster log-probabilities from the final norm's output
            List<float[]> hidden = new ArrayList<>();
            State st = g.newState(T, T + 1);
            g.forward(st, golden.inputIds(), 0, T, null, false, (idx, x, tokens, h) -> hidden.add(x.clone()));
            float[] ref = gs.readFloats("hidden_states");
            assertThat(hidden).hasSize(L + 2);
            for (int i = 0; i < L + 2; i++) {
                double worst = 0;
                for (int j = 0; j < T * H; j++) {
                    double x = ref[i * T * H + j];
                    worst = Math.max(worst, Math.abs(hidden.get(i)[j] - x) / Math.max(1, Math.abs(x)));
                }
                assertThat(worst).as(name + " hidden_states[" + i + "]").isLessThanOrEqualTo(1e-3);
            }
            HierarchicalHead head = g.clusterHead();
            int C = head.clusters();
            float[] lc = new float[T * C];
            head.clusterLogProbs(new dev.cmf4j.backend.cpu.CpuMatMul(), hidden.get(L + 1), T, lc);
            assertThat(maxDiff(lc, gs.readFloats("cluster_logprobs"))).as(name + " cluster log-probabilities").isLessThanOrEqualTo(1e-3);

            // 3. resonance winners: the prompt as one span, then each fed greedy token
            JsonNode moeLayers = meta.get("moe_layers");
            int N = golden.greedyIds().length, steps = T + N - 1;
            int[] winners = TestFiles.ints(gs.readLongs("router_winners"));
            State rs = g.newState(T, T + N);
            Workspace ws = g.newWorkspace(T, T + N);
            int[][] got = new int[moeLayers.size()][steps];
            g.forward(new Batch().add(rs, golden.inputIds(), 0, T, Batch.Logits.NONE), ws, null, null);
            collectWinners(ws, moeLayers, got, 0, T);
            for (int i = 0; i + 1 < N; i++) {
                g.forward(new Batch().add(rs, golden.greedyIds(), i, 1, Batch.Logits.NONE), ws, null, null);
                collectWinners(ws, moeLayers, got, T + i, 1);
            }
            for (int k = 0; k < moeLayers.size(); k++)
                assertThat(got[k]).as(name + " router winners of layer " + moeLayers.get(k).asInt())
                        .containsExactly(java.util.Arrays.copyOfRange(winners, k * steps, (k + 1) * steps));

            // 4. the fixed state: the spec's formula, per layer, and what a sequence holds after a long decode
            long bytes = meta.get("state_bytes_per_sequence").asLong();
            assertThat(spec.fixedStateBytes()).isEqualTo(bytes);
            for (int l = 0; l < L; l++) {
                long layerBytes = switch (spec.layer(l).mixer()) {
                    case Mixer.GatedDeltaNet d -> d.stateBytes();
                    case Mixer.BoundedAttention b -> b.stateBytes();
                    case Mixer.Attention a -> -1;
                };
                assertThat(layerBytes).as("layer " + l).isEqualTo(meta.get("state_bytes_per_layer").get(l).asLong());
            }
            assertThat(rs.stateBytes()).isEqualTo(bytes);
        }
    }

    /**
     * 320 positions (40 windows of embryo_a): the last logits are the same whether the prompt runs in chunks larger
     * than the window, smaller ones or token by token, and the state holds the same bytes after every step.
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"embryo_a", "embryo_b"})
    void longContextsAreChunkInvariantInAFixedState(String name) throws Exception {
        Path dir = Fixtures.require("embryo/" + name);
        try (Model m = Model.open(dir.resolve("model.cmf"))) {
            Graph g = m.graph();
            int T = 320, V = g.vocab();
            int[] ids = new java.util.Random(5).ints(T, 0, V).toArray();
            long bytes = m.spec().fixedStateBytes();
            float[] ref = null;
            for (int chunk : new int[] {200, 13, 1}) {
                State st = g.newState(chunk, T);
                float[] last = new float[V];
                for (int p = 0; p < T; p += chunk) {
                    g.forward(st, ids, p, Math.min(chunk, T - p), last, false, null);
                    assertThat(st.stateBytes()).isEqualTo(bytes);
                }
                if (ref == null) ref = last;
                else assertThat(maxDiff(last, ref)).as(name + " chunk " + chunk + " vs 200").isLessThanOrEqualTo(1e-4);
            }
        }
    }

    private static void collectWinners(Workspace ws, JsonNode moeLayers, int[][] got, int at, int rows) {
        for (int k = 0; k < moeLayers.size(); k++) {
            MoeStep.Scratch s = (MoeStep.Scratch) ws.ffnScratch[moeLayers.get(k).asInt()];
            System.arraycopy(s.idx, 0, got[k], at, rows);
        }
    }

    static double maxDiff(float[] a, float[] b) {
        assertThat(a).hasSameSizeAs(b);
        return Golden.maxDiff(a, 0, b, 0, a.length);
    }
}
