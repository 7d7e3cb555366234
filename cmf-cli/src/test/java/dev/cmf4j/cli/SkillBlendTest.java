package dev.cmf4j.cli;

import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.model.BlendedWeights;
import dev.cmf4j.model.CmfWeights;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.function.BiFunction;

import static dev.cmf4j.cli.Run.run;
import static dev.cmf4j.cli.SkillCommandTest.F32;
import static dev.cmf4j.cli.SkillCommandTest.logits;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code --blend}: two skills grafted from donors that move overlapping sets of tensors; the blend a:0.3,b:0.7 gives the
 * logits of a third skill whose tensors are really 0.3·A + 0.7·B (the backbone's where a skill keeps it), built here
 * independently; weights are normalised; {@code --blend auto} needs a calibrated file, then blends by the route's
 * confidences; bad specs are refused by name.
 */
class SkillBlendTest {
    static final Set<String> A = Set.of("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"),
            B = Set.of("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight");

    /** {@code base} with the tensors of {@code names} rewritten element-wise by {@code f(value, index)} (all f32). */
    static void moved(Path base, Path out, Set<String> names, BiFunction<Float, Long, Float> f) {
        try (CmfFile src = CmfFile.open(base); CmfWriter w = CmfWriter.create(out, src.header())) {
            for (TensorEntry t : src.tensors()) {
                if (!names.contains(t.name())) { w.addTensor(t.name(), t.dtype(), t.shape(), t.data()); continue; }
                long n = t.elements();
                MemorySegment m = MemorySegment.ofArray(new byte[(int) (4 * n)]);
                for (long i = 0; i < n; i++) m.setAtIndex(F32, i, f.apply(t.data().getAtIndex(F32, i), i));
                w.addTensor(t.name(), t.dtype(), t.shape(), m);
            }
            src.vocab().ifPresent(w::setVocab);
            w.finish();
        }
    }

    static float fa(float v, long i) { return v * (1f + 0.25f * (float) Math.sin(i)); }

    static float fb(float v, long i) { return v * (1f - 0.3f * (float) Math.cos(i)) + 0.01f; }

    /** The tiny fixture with skills a (donor A), b (donor B) and c (0.3·A + 0.7·B built by hand). */
    static Path withThreeSkills(Path tmp) throws Exception {
        Path base = tmp.resolve("tiny.cmf"), da = tmp.resolve("a.cmf"), db = tmp.resolve("b.cmf"), dc = tmp.resolve("c.cmf");
        Files.copy(Fixtures.require("cmf/tiny/tiny-F32.cmf"), base);
        moved(base, da, A, SkillBlendTest::fa);
        moved(base, db, B, SkillBlendTest::fb);
        // the blend built by hand: 0.3·A + 0.7·B in float, A or B the backbone's where that donor kept it
        Set<String> union = new java.util.HashSet<>(A);
        union.addAll(B);
        try (CmfFile src = CmfFile.open(base); CmfWriter w = CmfWriter.create(dc, src.header())) {
            for (TensorEntry t : src.tensors()) {
                if (!union.contains(t.name())) { w.addTensor(t.name(), t.dtype(), t.shape(), t.data()); continue; }
                long n = t.elements();
                MemorySegment m = MemorySegment.ofArray(new byte[(int) (4 * n)]);
                for (long i = 0; i < n; i++) {
                    float v = t.data().getAtIndex(F32, i);
                    float acc = 0f;
                    acc += 0.3f * (A.contains(t.name()) ? fa(v, i) : v);
                    acc += 0.7f * (B.contains(t.name()) ? fb(v, i) : v);
                    m.setAtIndex(F32, i, acc);
                }
                w.addTensor(t.name(), t.dtype(), t.shape(), m);
            }
            src.vocab().ifPresent(w::setVocab);
            w.finish();
        }
        for (String[] s : new String[][] {{"a", da.toString()}, {"b", db.toString()}, {"c", dc.toString()}}) {
            Run add = run("skill", "add", base.toString(), "--from", s[1], "--id", s[0]);
            assertThat(add.code()).as(add.err()).isZero();
        }
        return base;
    }

    @Test void aBlendIsTheModelWithTheWeightedTensors(@TempDir Path tmp) throws Exception {
        Path base = withThreeSkills(tmp);
        Set<String> union = new java.util.HashSet<>(A);
        union.addAll(B);
        // the blended tensors themselves: exactly the hand-built ones, only for names a blended skill replaces
        try (CmfFile f = CmfFile.open(base)) {
            Map<String, Double> w = new LinkedHashMap<>();
            w.put("a", 3.0);
            w.put("b", 7.0);
            BlendedWeights bw = new BlendedWeights(new CmfWeights(f), w);
            assertThat(bw.weights()).containsEntry("a", 0.3).containsEntry("b", 0.7);
            for (String n : union)
                assertThat(bw.find("skill._blend." + n).data().mismatch(f.tensor("skill.c." + n).data())).as(n).isEqualTo(-1L);
            assertThat(bw.find("skill._blend.model.layers.1.self_attn.k_proj.weight")).isNull();
            assertThat(bw.skillIds()).endsWith("_blend");
            assertThatThrownBy(() -> new BlendedWeights(new CmfWeights(f), Map.of("zz", 1.0))).hasMessageContaining("unknown skill 'zz'");
            assertThatThrownBy(() -> new BlendedWeights(new CmfWeights(f), Map.of("a", -1.0))).hasMessageContaining(">= 0");
            assertThatThrownBy(() -> new BlendedWeights(new CmfWeights(f), Map.of("a", 0.0))).hasMessageContaining("a weight > 0");
        }
        String ids = "5,17,30,2,99,41,7,60,12,3";
        Path x = tmp.resolve("x.npy"), y = tmp.resolve("y.npy"), z = tmp.resolve("z.npy");
        Run blend = run("logits", base.toString(), "--blend", "a:0.3,b:0.7", "--ids", ids, "--out", x.toString());
        assertThat(blend.code()).as(blend.err()).isZero();
        assertThat(blend.err()).contains("cmf: blending a 0.300 b 0.700");
        assertThat(run("logits", base.toString(), "--skill", "c", "--ids", ids, "--out", y.toString()).code()).isZero();
        assertThat(maxDiff(logits(x), logits(y))).isLessThanOrEqualTo(1e-5);
        // weights are normalised, and a blend of one skill is that skill
        assertThat(run("logits", base.toString(), "--blend", "a:3,b:7", "--ids", ids, "--out", z.toString()).code()).isZero();
        assertThat(maxDiff(logits(z), logits(y))).isLessThanOrEqualTo(1e-5);
        assertThat(run("logits", base.toString(), "--blend", "a:1,none:0", "--ids", ids, "--out", z.toString()).code()).isZero();
        assertThat(run("logits", base.toString(), "--skill", "a", "--ids", ids, "--out", y.toString()).code()).isZero();
        assertThat(maxDiff(logits(z), logits(y))).isLessThanOrEqualTo(1e-5);
        // ppl reads through a skill or a blend too
        Path text = tmp.resolve("t.txt");
        Files.writeString(text, "the quick brown fox jumps over the lazy dog and then the dog sleeps in the warm sun all day long. ".repeat(4));
        double pc = ppl(base, text, "--skill", "c"), pb = ppl(base, text, "--blend", "a:0.3,b:0.7"), p0 = ppl(base, text, "--skill", "none");
        assertThat(pb).isCloseTo(pc, org.assertj.core.data.Offset.offset(1e-4 * pc));
        assertThat(p0).isNotCloseTo(pc, org.assertj.core.data.Offset.offset(1e-3 * pc));
        assertThat(run("ppl", base.toString(), "--file", text.toString(), "--skill", "auto").err()).contains("ppl scores a whole file");
        // refusals
        assertThat(run("logits", base.toString(), "--blend", "a", "--ids", ids, "--out", z.toString()).err()).contains("is not ID:WEIGHT");
        assertThat(run("logits", base.toString(), "--blend", "a:x", "--ids", ids, "--out", z.toString()).err()).contains("is not a number");
        assertThat(run("logits", base.toString(), "--blend", "q:1", "--ids", ids, "--out", z.toString()).err()).contains("unknown skill 'q'");
        assertThat(run("logits", base.toString(), "--blend", "a:1", "--skill", "b", "--ids", ids, "--out", z.toString()).err())
                .contains("exclude each other");
        assertThat(run("chat", base.toString(), "--blend", "a:1").err()).contains("--blend runs single sequences only");
        // auto: needs descriptors and a calibration; then the route's confidences weigh the skills
        Path words = tmp.resolve("w.txt"), digits = tmp.resolve("d.txt");
        Files.writeString(words, "the cat sat on the mat\na dog ran to the park\nbirds sing in the tall trees\nwe read books at night\n");
        Files.writeString(digits, "1 2 3 4 5 6\n42 17 99 3\n7 7 7 8 8 9\n100 200 300\n");
        assertThat(run("skill", "describe", base.toString(), "--id", "a", "--prompts", words.toString(), "--rank", "2").code()).isZero();
        assertThat(run("skill", "describe", base.toString(), "--id", "b", "--prompts", digits.toString(), "--rank", "2").code()).isZero();
        assertThat(run("generate", base.toString(), "--blend", "auto", "--ids", ids, "-n", "2").err()).contains("cmf skill calibrate");
        assertThat(run("skill", "calibrate", base.toString(), "--target-fpr", "0").code()).isZero();
        Run auto = run("generate", base.toString(), "--blend", "auto", "--ids", ids, "-n", "2");
        assertThat(auto.code()).as(auto.err()).isZero();
        assertThat(auto.err()).containsAnyOf("cmf: blending a ", "cmf: routed to the backbone");
    }

    /**
     * What a device that runs whole models gets (the CLI's openOne there): a skill, or a blend, applied to the weights
     * themselves, run as the backbone, gives the logits of the per-row overlay.
     */
    @Test void aSkillOrBlendAppliedToTheWeightsIsTheOverlay(@TempDir Path tmp) throws Exception {
        Path base = withThreeSkills(tmp);
        int[] ids = {5, 17, 30, 2, 99, 41, 7, 60, 12, 3};
        float[] overlay, applied, blended;
        try (var m = dev.cmf4j.model.Model.open(base)) {
            overlay = logitsOf(m.graph(), m.graph().overlay("c", null, 0f), ids);
        }
        try (var m = dev.cmf4j.model.Model.open(base, null, new dev.cmf4j.backend.cpu.CpuBackend(), java.util.List.of(),
                h -> dev.cmf4j.model.AttentionMemory.EXACT, ws -> new dev.cmf4j.model.SkillWeights(ws, "c"))) {
            assertThat(m.graph().skills()).isEmpty();
            applied = logitsOf(m.graph(), dev.cmf4j.model.graph.Overlay.NONE, ids);
        }
        Map<String, Double> w = new LinkedHashMap<>();
        w.put("a", 0.3);
        w.put("b", 0.7);
        try (var m = dev.cmf4j.model.Model.open(base, null, new dev.cmf4j.backend.cpu.CpuBackend(), java.util.List.of(),
                h -> dev.cmf4j.model.AttentionMemory.EXACT,
                ws -> new dev.cmf4j.model.SkillWeights(new BlendedWeights(ws, w), BlendedWeights.ID))) {
            blended = logitsOf(m.graph(), dev.cmf4j.model.graph.Overlay.NONE, ids);
        }
        assertThat(maxDiff(applied, overlay)).isLessThanOrEqualTo(1e-5);
        assertThat(maxDiff(blended, overlay)).isLessThanOrEqualTo(1e-5);
        try (CmfFile f = CmfFile.open(base)) {
            assertThatThrownBy(() -> new dev.cmf4j.model.SkillWeights(new CmfWeights(f), "zz")).hasMessageContaining("unknown skill 'zz'");
        }
    }

    static float[] logitsOf(dev.cmf4j.model.graph.Graph g, dev.cmf4j.model.graph.Overlay o, int[] ids) {
        try (var s = new dev.cmf4j.runtime.Session(g, ids.length)) {
            s.useOverlay(o);
            return s.logitsAll(ids);
        }
    }

    static double ppl(Path model, Path text, String... more) throws Exception {
        String[] args = new String[] {"ppl", model.toString(), "--file", text.toString(), "--window-len", "16", "--json"};
        Run r = run(java.util.stream.Stream.concat(java.util.Arrays.stream(args), java.util.Arrays.stream(more)).toArray(String[]::new));
        assertThat(r.code()).as(r.err()).isZero();
        return new com.fasterxml.jackson.databind.ObjectMapper().readTree(r.out()).get("perplexity").asDouble();
    }

    static double maxDiff(float[] a, float[] b) {
        assertThat(a).hasSameSizeAs(b);
        double d = 0;
        for (int i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
        return d;
    }
}
