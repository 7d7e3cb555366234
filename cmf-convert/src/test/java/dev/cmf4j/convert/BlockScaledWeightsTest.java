package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * FP8 (e4m3fn with block scales) and MXFP4 safetensors weights decode exactly: against torch's own float8_e4m3fn
 * conversion and transformers' MXFP4 dequantization ({@code blockscaled-ref.safetensors}, 20 KB, made by torch
 * 2.13 and transformers 5.18 outside the repository), and, with the default 128×128 blocks, against the format's
 * definition on seeded data.
 */
class BlockScaledWeightsTest {
    @TempDir Path tmp;

    private Path reference() throws IOException {
        Path p = tmp.resolve("ref.safetensors");
        try (InputStream in = getClass().getResourceAsStream("blockscaled-ref.safetensors")) { Files.write(p, in.readAllBytes()); }
        return p;
    }

    private static HfConfig config(String json) {
        try {
            return HfConfig.of((ObjectNode) new ObjectMapper().readTree(json), "test config");
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void assertBits(String what, float[] got, float[] want) {
        assertThat(got.length).as(what).isEqualTo(want.length);
        for (int i = 0; i < got.length; i++)
            if (Float.floatToIntBits(got[i]) != Float.floatToIntBits(want[i]))
                throw new AssertionError(what + "[" + i + "] = " + got[i] + ", torch says " + want[i]);
    }

    private static float[] read(BlockScaledWeights.Decoded d) {
        float[] v = new float[(int) d.tensor().numel()];
        d.data().read(0, v, 0, v.length);
        return v;
    }

    @Test void everyE4m3CodeIsTorchsValue() throws IOException {
        try (SafetensorsReader r = SafetensorsReader.open(reference())) {
            float[] want = r.readFloats("all_codes_f32");
            float[] got = new float[256];
            for (int b = 0; b < 256; b++) got[b] = BlockScaledWeights.e4m3(b);
            assertBits("e4m3fn", got, want);
        }
    }

    @Test void fp8BlockScalesAsTorch() throws IOException {
        try (SafetensorsReader r = SafetensorsReader.open(reference())) {
            var w = new BlockScaledWeights(r, config("{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [16, 16]}}"));
            var d = w.decoded().get("model.layers.0.mlp.down_proj.weight");
            assertThat(d.encoding()).isEqualTo("F8_E4M3");
            assertThat(d.tensor().shape()).containsExactly(40, 72);
            assertBits("fp8 [40, 72] in 16×16 blocks", read(d), r.readFloats("expected.fp8"));
            assertThat(w.isPart("model.layers.0.mlp.down_proj.weight_scale_inv")).isTrue();
        }
    }

    @Test void mxfp4AsTransformers() throws IOException {
        try (SafetensorsReader r = SafetensorsReader.open(reference())) {
            var w = new BlockScaledWeights(r, config("{\"quantization_config\": {\"weight_block_size\": [16, 16]}}"));
            var d = w.decoded().get("model.layers.0.mlp.experts.down_proj");
            assertThat(d.tensor().shape()).containsExactly(2, 64, 6);
            assertBits("mxfp4 [2, 6, 2, 16] incl. scales 2^-127 and 2^127", read(d), r.readFloats("expected.mxfp4"));
            assertThat(w.isPart("model.layers.0.mlp.experts.down_proj_blocks")).isTrue();
            assertThat(w.isPart("model.layers.0.mlp.experts.down_proj_scales")).isTrue();
        }
    }

    /** Default blocks (128×128, the last ones partial): value = e4m3 · scale of its block, by the format's definition. */
    @Test void fp8DefaultBlocksOnSeededData() throws IOException {
        int rows = 300, cols = 140;
        Random g = new Random(27);
        byte[] q = new byte[rows * cols];
        g.nextBytes(q);
        for (int i = 0; i < q.length; i++) if ((q[i] & 0x7F) == 0x7F) q[i] = 0;   // no NaN codes
        float[] s = new float[3 * 2];
        for (int i = 0; i < s.length; i++) s[i] = (float) Math.exp(g.nextGaussian());
        Path p = tmp.resolve("fp8.safetensors");
        Files.write(p, new SafetensorsFiles().add("x.weight", "F8_E4M3", new long[] {rows, cols}, q)
                .bf16("x.weight_scale_inv", new long[] {3, 2}, s).bytes());
        try (SafetensorsReader r = SafetensorsReader.open(p)) {
            float[] sb = r.readFloats("x.weight_scale_inv");
            float[] want = new float[rows * cols];
            for (int i = 0; i < want.length; i++) {
                int b = q[i] & 0xFF, e = (b >> 3) & 15, m = b & 7;
                double v = e == 0 ? m / 8.0 * Math.pow(2, -6) : (1 + m / 8.0) * Math.pow(2, e - 7);
                want[i] = (float) ((b >> 7) == 1 ? -v : v) * sb[(i / cols / 128) * 2 + (i % cols) / 128];
            }
            var w = new BlockScaledWeights(r, config("{}"));
            assertBits("fp8 [300, 140] in 128×128 blocks", read(w.decoded().get("x.weight")), want);
        }
    }

    @Test void fp8WithoutScalesAndOtherDtypesAreRefusedByName() throws IOException {
        Path dir = tmp.resolve("m");
        Files.createDirectories(dir);
        Files.writeString(dir.resolve("config.json"), "{\"model_type\": \"llama\", \"hidden_size\": 4, \"num_hidden_layers\": 1, "
                + "\"num_attention_heads\": 1, \"intermediate_size\": 4, \"vocab_size\": 4, \"tie_word_embeddings\": true}");
        Files.write(dir.resolve("model.safetensors"), new SafetensorsFiles()
                .add("model.embed_tokens.weight", "F8_E4M3", new long[] {4, 4}, new byte[16]).bytes());
        assertThatThrownBy(() -> HfCheckpoint.open(dir).close()).isInstanceOf(ConvertException.class)
                .hasMessageContaining("model.embed_tokens.weight").hasMessageContaining("F8_E4M3");
        Files.write(dir.resolve("model.safetensors"), new SafetensorsFiles()
                .add("model.embed_tokens.weight", "I32", new long[] {4, 4}, new byte[64]).bytes());
        assertThatThrownBy(() -> HfCheckpoint.open(dir).close()).isInstanceOf(ConvertException.class)
                .hasMessageContaining("model.embed_tokens.weight").hasMessageContaining("I32");
    }
}
