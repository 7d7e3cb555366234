package dev.cmf4j.cli;

import dev.cmf4j.format.CmfFile;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.Npy;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Files;
import java.nio.file.Path;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf convert} end to end, and the provenance line of {@code cmf info}. */
class ConvertCommandTest {
    @TempDir Path tmp;

    @Test void convertsThenInfoShowsProvenance() {
        Path src = Fixtures.require("models/qwen3_moe");
        Path out = tmp.resolve("m.cmf");
        Run r = run("convert", src.toString(), "-o", out.toString(), "--quant", "q8_2f", "--keep", "*.mlp.gate.weight=f32",
                "--progress", "none", "--threads", "2");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).contains("wrote").contains("q8_2f=");
        try (CmfFile f = CmfFile.open(out)) {
            assertThat(f.tensor("model.layers.0.mlp.gate.weight").dtype()).isEqualTo(DType.F32);
            assertThat(f.tensor("model.layers.0.mlp.experts.3.up_proj.weight").dtype()).isEqualTo(DType.Q8_2F);
        }
        Run info = run("info", "--verify", out.toString());
        assertThat(info.code()).isZero();
        assertThat(info.out()).contains("provenance source " + src).contains("(safetensors)").contains("quant q8_2f")
                .contains("keep *.mlp.gate.weight=f32").contains("by cmf4j convert").contains("verify     OK");
    }

    /**
     * The converter/engine contract: each fixture model converted at f32 by {@code cmf convert} runs in
     * the engine and gives transformers' logits (golden.safetensors) within the fixtures' bound 1e-3.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "gemma4", "gemma4_moe", "qwen3_next", "gpt_oss", "qwen3_moe", "qwen3_e2e"})
    void convertedModelsReproduceTransformersLogits(String model) throws Exception {
        Path src = Fixtures.require("models/" + model);
        Path cmf = tmp.resolve(model + ".cmf"), npy = tmp.resolve(model + ".npy");
        assertThat(run("convert", src.toString(), "-o", cmf.toString(), "--quant", "f32", "--progress", "none").code()).isZero();
        try (SafetensorsReader g = SafetensorsReader.open(src.resolve("golden.safetensors"))) {
            long[] ids = g.readLongs("input_ids");
            StringBuilder sb = new StringBuilder();
            for (long id : ids) sb.append(sb.isEmpty() ? "" : ",").append(id);
            Run r = run("logits", cmf.toString(), "--ids", sb.toString(), "-o", npy.toString());
            assertThat(r.code()).as(r.err()).isZero();
            float[] got;
            try (var in = Files.newInputStream(npy)) {
                got = Npy.read(in).toFloats();
            }
            int vocab = got.length / ids.length;
            double maxDiff = 0;
            if (g.has("logits")) {
                float[] want = g.readFloats("logits");
                for (int i = 0; i < want.length; i++) maxDiff = Math.max(maxDiff, Math.abs(got[i] - want[i]));
            } else {            // qwen3_e2e keeps full rows only at a few positions
                long[] pos = g.readLongs("logits_positions");
                float[] want = g.readFloats("logits_at");
                for (int k = 0; k < pos.length; k++)
                    for (int v = 0; v < vocab; v++)
                        maxDiff = Math.max(maxDiff, Math.abs(got[(int) pos[k] * vocab + v] - want[k * vocab + v]));
            }
            assertThat(maxDiff).as("%s max |logit - golden|", model).isLessThanOrEqualTo(1e-3);
        }
    }

    /**
     * {@code --dry-run}: the plan of a GGUF import (its quantized blocks to q8_2f but the norms, which stay f32) with the
     * counts and bytes the real conversion then writes, and no file; without -o or --dry-run, a usage error.
     */
    @Test void dryRunPrintsWhatAConversionWritesAndWritesNothing() {
        Path src = Fixtures.require("gguf/llama3rope-q8_0.gguf");
        Path out = tmp.resolve("d.cmf");
        Run dry = run("convert", src.toString(), "-o", out.toString(), "--quant", "q8_2f", "--dry-run");
        assertThat(dry.code()).as(dry.err()).isZero();
        assertThat(out).doesNotExist();
        Run real = run("convert", src.toString(), "-o", out.toString(), "--quant", "q8_2f", "--progress", "none");
        assertThat(real.code()).as(real.err()).isZero();
        try (CmfFile f = CmfFile.open(out)) {
            long q8 = f.tensors().stream().filter(e -> e.dtype() == DType.Q8_2F).count();
            long f32 = f.tensors().stream().filter(e -> e.dtype() == DType.F32).count();
            long q8Bytes = f.tensors().stream().filter(e -> e.dtype() == DType.Q8_2F).mapToLong(e -> e.data().byteSize()).sum();
            assertThat(q8).isPositive();
            assertThat(f32).isPositive();
            assertThat(dry.out()).contains("arch llama, quant type Q8_2F").contains("would write " + f.tensors().size() + " tensors")
                    .containsPattern("q8_2f +" + q8 + " tensors +" + String.format(java.util.Locale.ROOT, "%.1f", q8Bytes / 1e6) + " MB")
                    .containsPattern("f32 +" + f32 + " tensors");
        }
        Run none = run("convert", src.toString());
        assertThat(none.code()).isEqualTo(2);
        assertThat(none.err()).contains("-o OUT.cmf (or --dry-run)");
    }

    @Test void refusesBadArgumentsAndExistingOutput() {
        Path src = Fixtures.require("models/llama");
        Path out = tmp.resolve("x.cmf");
        assertThat(run("convert", src.toString(), "-o", out.toString(), "--quant", "q3").code()).isEqualTo(2);
        assertThat(run("convert", src.toString(), "-o", out.toString(), "--keep", "nodtype").code()).isEqualTo(2);
        Run missing = run("convert", tmp.resolve("nope").toString(), "-o", out.toString());
        assertThat(missing.code()).isEqualTo(1);
        assertThat(missing.err()).contains("no such file or folder");
        assertThat(run("convert", src.toString(), "-o", out.toString(), "--progress", "none").code()).isZero();
        Run again = run("convert", src.toString(), "-o", out.toString(), "--progress", "none");
        assertThat(again.code()).isEqualTo(2);
        assertThat(again.err()).contains("--force");
    }
}
