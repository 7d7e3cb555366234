package dev.cmf4j.cli;

import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.Npy;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.InputStream;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Set;
import java.util.stream.Collectors;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf skill add/list} and {@code --skill}/{@code --lora} on logits. */
class SkillCommandTest {
    static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final Set<String> CHANGED = Set.of("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
            "model.embed_tokens.weight");

    static float[] logits(Path npy) throws Exception {
        try (InputStream in = Files.newInputStream(npy)) { return Npy.read(in).toFloats(); }
    }

    static String csv(long[] ids) { return Arrays.stream(ids).mapToObj(Long::toString).collect(Collectors.joining(",")); }

    /** A "fine-tune" of {@code base}: three tensors moved, everything else as it is. */
    static void donor(Path base, Path out) {
        try (CmfFile f = CmfFile.open(base); CmfWriter w = CmfWriter.create(out, f.header())) {
            for (TensorEntry t : f.tensors()) {
                if (!CHANGED.contains(t.name())) { w.addTensor(t.name(), t.dtype(), t.shape(), t.data()); continue; }
                assertThat(t.dtype()).isEqualTo(DType.F32);
                long n = t.elements();
                MemorySegment m = MemorySegment.ofArray(new byte[(int) (4 * n)]);
                for (long i = 0; i < n; i++) m.setAtIndex(F32, i, t.data().getAtIndex(F32, i) * (1f + 0.25f * (float) Math.sin(i)));
                w.addTensor(t.name(), t.dtype(), t.shape(), m);
            }
            f.vocab().ifPresent(w::setVocab);
            w.finish();
        }
    }

    @Test void aSkillGraftedFromADonorGivesExactlyTheDonorsLogits(@TempDir Path tmp) throws Exception {
        Path base = Fixtures.require("cmf/refconv/qwen3-F32.cmf"), donor = tmp.resolve("donor.cmf"), with = tmp.resolve("with.cmf");
        donor(base, donor);
        Run add = run("skill", "add", base.toString(), "--from", donor.toString(), "--id", "ft", "--name", "fine-tune", "-o", with.toString());
        assertThat(add.code()).as(add.err()).isZero();
        assertThat(add.err()).contains("skill ft: 3 tensors");
        Run list = run("skill", "list", with.toString());
        assertThat(list.out()).contains("ft").contains("fine-tune").contains("[0, 1]");
        String ids = "5,17,300,2,99,41,7,600,12,3";
        Path a = tmp.resolve("a.npy"), b = tmp.resolve("b.npy"), c = tmp.resolve("c.npy");
        assertThat(run("logits", with.toString(), "--skill", "ft", "--ids", ids, "--out", a.toString()).code()).isZero();
        assertThat(run("logits", donor.toString(), "--ids", ids, "--out", b.toString()).code()).isZero();
        assertThat(run("logits", with.toString(), "--ids", ids, "--out", c.toString()).code()).isZero();
        float[] skill = logits(a), own = logits(b), backbone = logits(c);
        // the grafted tensors are the donor's bytes; the logits are the donor's (1e-5: the CPU kernels are not bit-reproducible from run to run; 6e-6 seen)
        try (CmfFile w = CmfFile.open(with); CmfFile d = CmfFile.open(donor)) {
            for (String n : CHANGED)
                assertThat(w.tensor("skill.ft." + n).data().mismatch(d.tensor(n).data())).as(n).isEqualTo(-1L);
        }
        double diff = 0;
        for (int i = 0; i < own.length; i++) diff = Math.max(diff, Math.abs(skill[i] - own[i]));
        assertThat(diff).isLessThanOrEqualTo(1e-5);
        assertThat(backbone).isNotEqualTo(own);
        // the same id twice, an unknown skill, a donor of another base
        assertThat(run("skill", "add", with.toString(), "--from", donor.toString(), "--id", "ft").err()).contains("already has a skill 'ft'");
        Run unknown = run("logits", with.toString(), "--skill", "nope", "--ids", ids, "--out", a.toString());
        assertThat(unknown.code()).isEqualTo(1);
        assertThat(unknown.err()).contains("unknown skill 'nope'").contains("ft");
        Run other = run("skill", "add", base.toString(), "--from", Fixtures.require("cmf/tiny/tiny-F32.cmf").toString(), "--id", "x",
                "-o", tmp.resolve("x.cmf").toString());
        assertThat(other.code()).isEqualTo(1);
        assertThat(other.err()).contains("not a fine-tune");
    }

    @Test void loraMergedAsASkillAndUnmergedGiveTheGolden(@TempDir Path tmp) throws Exception {
        Path lora = Fixtures.require("lora"), llama = tmp.resolve("llama.cmf");
        Run conv = run("convert", Fixtures.require("models/llama").toString(), "-o", llama.toString(), "--quant", "f32");
        assertThat(conv.code()).as(conv.err()).isZero();
        long[] ids;
        float[] want;
        try (SafetensorsReader g = SafetensorsReader.open(lora.resolve("golden.safetensors"))) {
            ids = g.readLongs("input_ids");
            want = g.readFloats("logits_skill_b");
        }
        Run add = run("skill", "add", llama.toString(), "--lora", lora.resolve("skill_b").toString(), "--id", "b");
        assertThat(add.code()).as(add.err()).isZero();
        Path merged = tmp.resolve("m.npy"), unmerged = tmp.resolve("u.npy");
        Run m = run("logits", llama.toString(), "--skill", "b", "--ids", csv(ids), "--out", merged.toString());
        assertThat(m.code()).as(m.err()).isZero();
        Run u = run("logits", llama.toString(), "--lora", lora.resolve("skill_b").toString(), "--ids", csv(ids), "--out", unmerged.toString());
        assertThat(u.code()).as(u.err()).isZero();
        for (Path p : new Path[] {merged, unmerged}) {
            float[] got = logits(p);
            double d = 0;
            for (int i = 0; i < got.length; i++) d = Math.max(d, Math.abs(got[i] - want[i]));
            assertThat(d).as(p.getFileName().toString()).isLessThanOrEqualTo(1e-3);
        }
    }
}
