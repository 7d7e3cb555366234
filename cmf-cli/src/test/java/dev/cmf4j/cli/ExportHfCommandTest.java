package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;

import static dev.cmf4j.cli.Run.run;
import static dev.cmf4j.cli.SkillBlendTest.maxDiff;
import static dev.cmf4j.cli.SkillCommandTest.logits;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code cmf export-hf}: the qwen3 HF fixture converted to CMF (f32) and exported back gives its tensors bit for bit and
 * its config.json; the export converts again into a model with the same logits; bf16 rounds each value to nearest;
 * {@code --skill} writes the skill's tensors; a file without the HF config is refused.
 */
class ExportHfCommandTest {
    @Test void exportGivesBackTheCheckpoint(@TempDir Path tmp) throws Exception {
        Path hf = Fixtures.require("models/qwen3"), cmf = tmp.resolve("q.cmf"), out = tmp.resolve("hf"), again = tmp.resolve("again.cmf");
        assertThat(run("convert", hf.toString(), "-o", cmf.toString(), "--quant", "f32", "--progress", "none").code()).isZero();
        Run ex = run("export-hf", cmf.toString(), "-o", out.toString());
        assertThat(ex.code()).as(ex.err()).isZero();
        ObjectMapper json = new ObjectMapper();
        assertThat(json.readTree(out.resolve("config.json").toFile())).isEqualTo(json.readTree(hf.resolve("config.json").toFile()));
        try (SafetensorsReader orig = SafetensorsReader.open(hf.resolve("model.safetensors"));
             SafetensorsReader back = SafetensorsReader.open(out.resolve("model.safetensors"))) {
            assertThat(back.names()).containsExactlyInAnyOrderElementsOf(orig.names());
            for (String n : orig.names()) {
                assertThat(back.tensor(n).shape()).as(n).isEqualTo(orig.tensor(n).shape());
                assertThat(back.readFloats(n)).as(n).isEqualTo(orig.readFloats(n));
            }
        }
        // our converter reads the export: the same model
        assertThat(run("convert", out.toString(), "-o", again.toString(), "--quant", "f32", "--progress", "none").code()).isZero();
        String ids = "5,17,300,2,99,41,7,600,12,3";
        Path a = tmp.resolve("a.npy"), b = tmp.resolve("b.npy");
        assertThat(run("logits", cmf.toString(), "--ids", ids, "--out", a.toString()).code()).isZero();
        assertThat(run("logits", again.toString(), "--ids", ids, "--out", b.toString()).code()).isZero();
        assertThat(maxDiff(logits(a), logits(b))).isLessThanOrEqualTo(1e-5);
        // bf16: each value rounded to nearest (relative error at most 2^-8, half of bf16's 7-bit step)
        Path half = tmp.resolve("bf16");
        assertThat(run("export-hf", cmf.toString(), "-o", half.toString(), "--dtype", "bf16").code()).isZero();
        try (SafetensorsReader orig = SafetensorsReader.open(hf.resolve("model.safetensors"));
             SafetensorsReader back = SafetensorsReader.open(half.resolve("model.safetensors"))) {
            String n = "model.layers.0.mlp.down_proj.weight";
            assertThat(back.tensor(n).dtype()).isEqualTo(SafetensorsReader.Dtype.BF16);
            float[] x = orig.readFloats(n), y = back.readFloats(n);
            for (int i = 0; i < x.length; i++) assertThat((double) Math.abs(y[i] - x[i])).isLessThanOrEqualTo(Math.abs(x[i]) / 256.0);
        }
        // --skill: the fine-tune as the skill runs it
        Path donor = tmp.resolve("donor.cmf"), ft = tmp.resolve("ft");
        SkillCommandTest.donor(cmf, donor);
        assertThat(run("skill", "add", cmf.toString(), "--from", donor.toString(), "--id", "ft").code()).isZero();
        assertThat(run("export-hf", cmf.toString(), "-o", ft.toString(), "--skill", "ft").code()).isZero();
        try (SafetensorsReader back = SafetensorsReader.open(ft.resolve("model.safetensors")); CmfFile d = CmfFile.open(donor)) {
            assertThat(back.names()).noneMatch(n -> n.startsWith("skill."));
            for (String n : SkillCommandTest.CHANGED) {
                float[] want = new float[(int) d.tensor(n).elements()];
                for (int i = 0; i < want.length; i++) want[i] = d.tensor(n).data().getAtIndex(SkillCommandTest.F32, i);
                assertThat(back.readFloats(n)).as(n).isEqualTo(want);
            }
        }
        assertThat(run("export-hf", cmf.toString(), "-o", ft.toString(), "--skill", "nope").err()).contains("no skill 'nope'");
        assertThat(run("export-hf", Fixtures.require("cmf/tiny/tiny-F32.cmf").toString(), "-o", ft.toString()).err())
                .contains("carries no provenance.hf_config");
    }
}
