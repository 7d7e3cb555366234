package dev.cmf4j.model.graph;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.convert.HfArch;
import dev.cmf4j.convert.HfConfig;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.format.DType;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.SpecBuilder;
import dev.cmf4j.model.Tensor;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.model.Weights;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Skills as tensor-source indirection, on the llama fixture with three synthetic skills (perturbed copies of a few
 * backbone tensors, stored as {@code skill.ID.NAME}): each skill run alone gives the logits of the model whose
 * tensors are really replaced; one batch holding rows of the three skills and the backbone gives each row its
 * single-run logits; a product no skill replaces runs once per step for all rows, a replaced one once per skill
 * present. Reference matmul (its products do not depend on the row count), so the comparisons are tight. The fixture
 * is public: {@code CudaSkillsTest} runs the same skills on the GPU-resident forward.
 */
public class SkillBatchTest {
    static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    /** What each skill replaces. */
    public static final Map<String, List<String>> SKILLS = Map.of(
            "a", List.of("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"),
            "b", List.of("model.embed_tokens.weight", "lm_head.weight", "model.layers.1.self_attn.v_proj.weight"),
            "c", List.of("model.layers.0.mlp.gate_proj.weight", "model.layers.1.self_attn.o_proj.weight"));

    public record Fixture(SafetensorsReader reader, ObjectNode header, Map<String, Tensor> base, Map<String, Tensor> skills) {}

    public static Fixture fixture() {
        Path dir = Fixtures.require("models/llama");
        ObjectNode header = JsonNodeFactory.instance.objectNode();
        header.set("arch", HfArch.fromConfig(HfConfig.read(dir.resolve("config.json"))));
        SafetensorsReader r = SafetensorsReader.open(dir.resolve("model.safetensors"));
        Weights w = TestFiles.weights(r);
        Map<String, Tensor> base = new HashMap<>();
        for (String n : w.names()) base.put(n, w.get(n));
        Map<String, Tensor> skills = new HashMap<>();
        int seed = 1;
        for (var e : SKILLS.entrySet())
            for (String name : e.getValue()) skills.put("skill." + e.getKey() + "." + name, perturbed(base.get(name), "skill." + e.getKey() + "." + name, seed++));
        return new Fixture(r, header, base, skills);
    }

    /** A float32 copy of {@code t} with every value moved (a "fine-tuned" version of it). */
    static Tensor perturbed(Tensor t, String name, int seed) {
        long n = t.size();
        MemorySegment seg = Arena.ofAuto().allocate(4 * n, 64);
        for (long i = 0; i < n; i++) {
            float v = t.data().getAtIndex(F32, i);
            seg.setAtIndex(F32, i, v * (1f + 0.3f * (float) Math.sin(i * 0.37 + seed)) + 0.02f * (float) Math.cos(i * 0.11 * seed));
        }
        return new Tensor(name, DType.F32, t.shape(), seg);
    }

    public static Weights weights(Map<String, Tensor> map, List<String> skillIds) {
        return new Weights() {
            @Override public Tensor find(String name) { return map.get(name); }

            @Override public Set<String> names() { return map.keySet(); }

            @Override public List<String> skillIds() { return skillIds; }
        };
    }

    /** Counts each matrix's products (by tensor name). */
    static final class Counting implements MatMul {
        final MatMul inner = new CpuMatMul();
        final Map<String, Integer> calls = new ConcurrentHashMap<>();

        @Override public void apply(Matrix w, float[] x, int tokens, float[] y) {
            calls.merge(w.name(), 1, Integer::sum);
            inner.apply(w, x, tokens, y);
        }
    }

    static Graph graph(Fixture f, Map<String, Tensor> tensors, List<String> skillIds, MatMul mm) {
        Weights w = weights(tensors, skillIds);
        ModelSpec spec = SpecBuilder.build(f.header(), w);
        return new Graph(spec, w, new CpuBackend(mm, CpuBackend.pool(), null));
    }

    /** The logits of every position of {@code ids} run alone (chunks of 8). */
    public static float[] alone(Graph g, Overlay o, int[] ids) {
        State st = g.newState(8, 64);
        st.useOverlay(o);
        int V = g.vocab();
        float[] all = new float[ids.length * V], buf = new float[8 * V];
        for (int p = 0; p < ids.length; p += 8) {
            int n = Math.min(8, ids.length - p);
            g.forward(st, ids, p, n, buf, true, null);
            System.arraycopy(buf, 0, all, p * V, n * V);
        }
        return all;
    }

    @Test void eachSkillAloneGivesTheLogitsOfTheModelWithItsTensorsReplaced() throws Exception {
        Fixture f = fixture();
        try (SafetensorsReader ignored = f.reader()) {
            Map<String, Tensor> all = new HashMap<>(f.base());
            all.putAll(f.skills());
            Graph g = graph(f, all, List.of("a", "b", "c"), new CpuMatMul());
            int[] ids = java.util.Arrays.copyOf(Golden.load(Fixtures.require("models/llama")).inputIds(), 20);
            float[] backbone = alone(g, Overlay.NONE, ids);
            for (String id : List.of("a", "b", "c")) {
                Map<String, Tensor> donor = new HashMap<>(f.base());
                for (String name : SKILLS.get(id)) {
                    Tensor t = f.skills().get("skill." + id + "." + name);
                    donor.put(name, new Tensor(name, t.dtype(), t.shape(), t.data()));
                }
                float[] want = alone(graph(f, donor, List.of(), new CpuMatMul()), Overlay.NONE, ids);
                float[] got = alone(g, g.overlay(id, null, 1f), ids);
                assertThat(Golden.maxDiff(got, 0, want, 0, want.length)).as("skill " + id).isLessThanOrEqualTo(1e-5);
                assertThat(Golden.maxDiff(got, 0, backbone, 0, want.length)).as("skill " + id + " moves the logits").isGreaterThan(0.05);
            }
        }
    }

    @Test void oneBatchOfThreeSkillsAndTheBackboneGivesEachRowItsSingleRunLogits() throws Exception {
        Fixture f = fixture();
        try (SafetensorsReader ignored = f.reader()) {
            Map<String, Tensor> all = new HashMap<>(f.base());
            all.putAll(f.skills());
            Counting mm = new Counting();
            Graph g = graph(f, all, List.of("a", "b", "c"), mm);
            int V = g.vocab();
            int[] src = Golden.load(Fixtures.require("models/llama")).inputIds();
            String[] who = {null, "a", "b", "c"};
            int[][] prompts = {java.util.Arrays.copyOfRange(src, 0, 9), java.util.Arrays.copyOfRange(src, 5, 12),
                    java.util.Arrays.copyOfRange(src, 11, 24), java.util.Arrays.copyOfRange(src, 20, 23)};
            int decode = 4;
            // alone: prompt then `decode` fixed continuation ids, logits of every position
            int[][] seqs = new int[4][];
            float[][] want = new float[4][];
            for (int i = 0; i < 4; i++) {
                seqs[i] = new int[prompts[i].length + decode];
                System.arraycopy(prompts[i], 0, seqs[i], 0, prompts[i].length);
                for (int d = 0; d < decode; d++) seqs[i][prompts[i].length + d] = src[(30 + 3 * i + d) % src.length];
                want[i] = alone(g, g.overlay(who[i], null, 1f), seqs[i]);
            }
            // together: all four prompts in one step, then one decode row each per step
            State[] st = new State[4];
            for (int i = 0; i < 4; i++) {
                st[i] = g.newState(16, 64);
                st[i].useOverlay(g.overlay(who[i], null, 1f));
            }
            Workspace ws = g.newWorkspace(64, 64);
            Batch b = new Batch();
            float[] logits = new float[4 * V];
            double worst = 0;
            for (int step = 0; step <= decode; step++) {
                b.clear();
                for (int i = 0; i < 4; i++) {
                    int off = step == 0 ? 0 : prompts[i].length + step - 1, n = step == 0 ? prompts[i].length : 1;
                    b.add(st[i], seqs[i], off, n, Batch.Logits.LAST);
                }
                mm.calls.clear();
                g.forward(b, ws, logits, null);
                for (int i = 0; i < 4; i++) {
                    int pos = (step == 0 ? prompts[i].length : prompts[i].length + step) - 1;
                    worst = Math.max(worst, Golden.maxDiff(logits, i * V, want[i], pos * V, V));
                }
                // a product no skill replaces: once for all rows; a replaced one: once for the backbone's rows and
                // once per skill present
                assertThat(mm.calls.get("model.layers.0.self_attn.k_proj.weight")).isEqualTo(1);
                assertThat(mm.calls.get("model.layers.1.mlp.up_proj.weight")).isEqualTo(1);
                assertThat(mm.calls.get("model.layers.0.self_attn.q_proj.weight")).isEqualTo(1);
                assertThat(mm.calls.get("skill.a.model.layers.0.self_attn.q_proj.weight")).isEqualTo(1);
                assertThat(mm.calls.get("lm_head.weight")).isEqualTo(1);
                assertThat(mm.calls.get("skill.b.lm_head.weight")).isEqualTo(1);
                assertThat(mm.calls.get("skill.c.model.layers.1.self_attn.o_proj.weight")).isEqualTo(1);
                int products = mm.calls.values().stream().mapToInt(Integer::intValue).sum();
                // 2 layers × 7 products + head, plus one extra per replaced product whose skill is present
                assertThat(products).isEqualTo(2 * 7 + 1 + 6);
            }
            System.out.printf("mixed-skill batch: 4 rows (backbone, a, b, c), %d steps, max |Δ| %.3g%n", decode + 1, worst);
            assertThat(worst).isLessThanOrEqualTo(1e-5);
        }
    }

    @Test void unknownAndUnswitchableSkillsAreRefusedClearly() throws Exception {
        Fixture f = fixture();
        try (SafetensorsReader ignored = f.reader()) {
            Map<String, Tensor> all = new HashMap<>(f.base());
            all.putAll(f.skills());
            // skill "n" replaces a norm weight: the CPU graph cannot switch it per row
            all.put("skill.n.model.norm.weight", perturbed(f.base().get("model.norm.weight"), "skill.n.model.norm.weight", 9));
            Graph g = graph(f, all, List.of("a", "b", "c", "n"), new CpuMatMul());
            assertThatThrownBy(() -> g.overlay("zzz", null, 1f)).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("unknown skill 'zzz'").hasMessageContaining("a, b, c, n");
            assertThatThrownBy(() -> g.overlay("n", null, 1f)).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("model.norm.weight");
            assertThat(g.skillProblem("a")).isNull();
            assertThat(g.overlay("none", null, 1f).isBackbone()).isTrue();
            assertThatThrownBy(() -> g.overlay(null, "nope", 1f)).hasMessageContaining("unknown LoRA adapter 'nope'");
        }
    }
}
