package dev.cmf4j.model;

import dev.cmf4j.convert.PeftAdapter;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.convert.SkillGraft;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.model.graph.Batch;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.Overlay;
import dev.cmf4j.model.graph.State;
import dev.cmf4j.model.graph.Workspace;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * fixtures/lora: both PEFT adapters give peft's logits and greedy ids (README bounds: logits ≤ 1e-3, greedy exact)
 * merged into skills of the converted llama ({@code SkillGraft.fromLora}) and applied un-merged as low-rank deltas; and
 * one batch holding a row of each (backbone, two skills, two adapters) gives every row its golden logits.
 */
public class LoraGoldenTest {
    @TempDir static Path tmp;
    static Path lora, base, withSkills;
    static float[] logitsBase;
    static Map<String, float[]> logits = new HashMap<>();
    static Map<String, int[]> greedy = new HashMap<>();
    static int[] ids;

    @BeforeAll static void build() throws Exception {
        lora = Fixtures.require("lora");
        base = ConvertedGoldenTest.convert(Fixtures.require("models/llama"), tmp.resolve("llama.cmf"), TensorPolicy.Mode.F32);
        try (SafetensorsReader g = SafetensorsReader.open(lora.resolve("golden.safetensors"))) {
            ids = TestFiles.ints(g.readLongs("input_ids"));
            logitsBase = g.readFloats("logits_base");
            for (String s : List.of("skill_a", "skill_b")) {
                logits.put(s, g.readFloats("logits_" + s));
                greedy.put(s, TestFiles.ints(g.readLongs("greedy_ids_" + s)));
            }
        }
        withSkills = tmp.resolve("llama-skills.cmf");
        Path step = tmp.resolve("llama-a.cmf");
        try (CmfFile f = CmfFile.open(base)) {
            SkillGraft.add(f, step, "skill_a", "A", SkillGraft.fromLora(f, PeftAdapter.read(lora.resolve("skill_a")), null), null);
        }
        try (CmfFile f = CmfFile.open(step)) {
            SkillGraft.add(f, withSkills, "skill_b", "B", SkillGraft.fromLora(f, PeftAdapter.read(lora.resolve("skill_b")), null), null);
        }
    }

    static List<LowRankAdapter> adapters() {
        return List.of(engine(PeftAdapter.read(lora.resolve("skill_a"))), engine(PeftAdapter.read(lora.resolve("skill_b"))));
    }

    public static LowRankAdapter engine(PeftAdapter a) {
        Map<String, LowRankAdapter.Delta> d = new HashMap<>();
        a.targets().forEach((n, t) -> d.put(n, new LowRankAdapter.Delta(t.rank(), t.in(), t.out(), t.a(), t.b(), t.scale())));
        return new LowRankAdapter(a.name(), d);
    }

    /** Full-forward logits of the prompt and 24 greedy ids through the cache, with overlay {@code o}. */
    static void check(Graph g, Overlay o, String golden) {
        int V = g.vocab(), T = ids.length;
        State st = g.newState(64, T + 30);
        st.useOverlay(o);
        float[] all = new float[T * V];
        g.forward(st, ids, 0, T, all, true, null);
        float[] want = golden == null ? logitsBase : logits.get(golden);
        double d = Golden.maxDiff(all, 0, want, 0, T * V);
        int[] got = new int[24];
        float[] last = java.util.Arrays.copyOfRange(all, (T - 1) * V, T * V);
        for (int i = 0; i < 24; i++) {
            got[i] = Golden.argmax(last);
            if (i < 23) g.forward(st, new int[] {got[i]}, 0, 1, last, false, null);
        }
        System.out.printf("lora %s via %s: logits max|Δ| %.3g%n", golden, o, d);
        assertThat(d).as(o + " logits").isLessThanOrEqualTo(1e-3);
        if (golden != null) assertThat(got).as(o + " greedy ids").containsExactly(greedy.get(golden));
    }

    /** A state snapshot carries its skill: imported under another skill it is refused, under its own it restores. */
    @Test void aStateSnapshotBelongsToItsSkill() throws Exception {
        try (Model m = Model.open(withSkills)) {
            Graph g = m.graph();
            State a = g.newState(64, 64);
            a.useOverlay(g.overlay("skill_a", null, 1f));
            g.forward(a, ids, 0, 4, null, false, null);
            var bytes = new java.io.ByteArrayOutputStream();
            a.exportTo(new java.io.DataOutputStream(bytes));
            State b = g.newState(64, 64);
            b.useOverlay(g.overlay("skill_b", null, 1f));
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> b.importFrom(
                            new java.io.DataInputStream(new java.io.ByteArrayInputStream(bytes.toByteArray()))))
                    .isInstanceOf(java.io.IOException.class).hasMessageContaining("another skill");
            State c = g.newState(64, 64);
            c.useOverlay(g.overlay("skill_a", null, 1f));
            c.importFrom(new java.io.DataInputStream(new java.io.ByteArrayInputStream(bytes.toByteArray())));
            assertThat(c.position()).isEqualTo(4);
        }
    }

    @Test void mergedSkillsGiveTheAdaptersGoldens() {
        try (Model m = Model.open(withSkills)) {
            Graph g = m.graph();
            assertThat(g.skills()).containsExactly("skill_a", "skill_b");
            check(g, Overlay.NONE, null);
            check(g, g.overlay("skill_a", null, 1f), "skill_a");
            check(g, g.overlay("skill_b", null, 1f), "skill_b");
            assertThat(m.file().header().skill("skill_a").layers()).containsExactly(0, 1);
        }
    }

    @Test void unmergedAdaptersGiveTheSameGoldens() {
        try (Model m = Model.open(base, null, new CpuBackend(), adapters())) {
            Graph g = m.graph();
            assertThat(g.adapters()).containsExactly("skill_a", "skill_b");
            check(g, g.overlay(null, "skill_a", 1f), "skill_a");
            check(g, g.overlay(null, "skill_b", 1f), "skill_b");
            check(g, g.overlay(null, "skill_b", 0f), null);   // scale 0: the backbone
        }
    }

    @Test void oneBatchOfSkillsAndAdaptersGivesEveryRowItsGolden() {
        try (Model m = Model.open(withSkills, null, new CpuBackend(), adapters())) {
            Graph g = m.graph();
            Overlay[] os = {Overlay.NONE, g.overlay("skill_a", null, 1f), g.overlay("skill_b", null, 1f),
                    g.overlay(null, "skill_a", 1f), g.overlay(null, "skill_b", 1f)};
            String[] want = {null, "skill_a", "skill_b", "skill_a", "skill_b"};
            int V = g.vocab(), T = ids.length;
            Batch b = new Batch();
            for (Overlay o : os) {
                State st = g.newState(64, T);
                st.useOverlay(o);
                b.add(st, ids, 0, T, Batch.Logits.ALL);
            }
            Workspace ws = g.newWorkspace(os.length * T, T);
            float[] out = new float[os.length * T * V];
            g.forward(b, ws, out, null);
            for (int i = 0; i < os.length; i++) {
                float[] w = want[i] == null ? logitsBase : logits.get(want[i]);
                double d = Golden.maxDiff(out, i * T * V, w, 0, T * V);
                assertThat(d).as(os[i] + " in the mixed batch").isLessThanOrEqualTo(1e-3);
            }
        }
    }
}
