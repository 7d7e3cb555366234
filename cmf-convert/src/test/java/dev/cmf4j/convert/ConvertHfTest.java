package dev.cmf4j.convert;

import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.Envelope;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** HF folder -> CMF at f32: every tensor equals its source exactly, the file verifies, the layout follows the reference's rules. */
class ConvertHfTest {
    @TempDir Path tmp;

    static Path convert(Path src, Path out, TensorPolicy.Mode mode, List<String> keeps) {
        try (HfCheckpoint ck = HfCheckpoint.open(src)) {
            Converter.convert(ck, out, Converter.Options.of(new TensorPolicy(mode, TensorPolicy.parseKeeps(keeps))).withThreads(2));
        }
        return out;
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "gemma4", "gemma4_moe", "qwen3_next", "gpt_oss", "qwen3_moe", "qwen3_e2e"})
    void f32ConversionIsExact(String model) {
        Path src = Fixtures.require("models/" + model);
        Path out = convert(src, tmp.resolve(model + ".cmf"), TensorPolicy.Mode.F32, List.of());
        try (CmfFile f = CmfFile.open(out); SafetensorsReader st = SafetensorsReader.open(src)) {
            assertThat(f.verify()).as("verify problems").isEmpty();
            assertLayout(f);
            long sourceElements = 0, outElements = 0;
            boolean tied = f.header().arch().tieWordEmbeddings();
            for (SafetensorsReader.Tensor t : st.tensors()) if (!(tied && t.name().equals("lm_head.weight"))) sourceElements += t.numel();
            for (TensorEntry e : f.tensors()) {
                assertThat(e.dtype()).as(e.name()).isEqualTo(DType.F32);
                outElements += e.elements();
                float[] got = Dequantizers.of(DType.F32).all(e.data(), e.shape());
                float[] want = expected(model, st, e.name(), e.shape());
                if (want == null) continue;   // checked against the reference converter below (qwen3_next GDN split)
                assertBitsEqual(model + " " + e.name(), got, want);
            }
            assertThat(outElements).as("every source element is written exactly once").isEqualTo(sourceElements);
            assertThat(f.header().arch().archName()).isNotBlank();
            assertThat(f.header().provenance().get("quant").asText()).isEqualTo("f32");
            assertThat(f.header().provenance().get("hf_config").get("model_type")).isNotNull();
        }
    }

    /** For qwen3 and qwen3_next, the reference converter's F32 files: same names, shapes, order, and bit-identical values. */
    @ParameterizedTest
    @ValueSource(strings = {"qwen3", "qwen3_next"})
    void matchesReferenceConverterF32(String model) {
        Path out = convert(Fixtures.require("models/" + model), tmp.resolve(model + ".cmf"), TensorPolicy.Mode.F32, List.of());
        try (CmfFile ours = CmfFile.open(out); CmfFile ref = CmfFile.open(Fixtures.require("cmf/refconv/" + model + "-F32.cmf"))) {
            assertThat(ours.tensors().stream().map(TensorEntry::name).toList())
                    .isEqualTo(ref.tensors().stream().map(TensorEntry::name).toList());
            for (TensorEntry r : ref.tensors()) {
                TensorEntry o = ours.tensor(r.name());
                assertThat(o.shape()).as(r.name()).isEqualTo(r.shape());
                assertThat(o.hash()).as("%s payload hash", r.name()).isEqualTo(r.hash());
            }
            assertThat(ours.header().tokenizerConfig().eosTokenIds()).isEqualTo(ref.header().tokenizerConfig().eosTokenIds());
            assertThat(ours.header().tokenizerConfig().bosTokenId()).isEqualTo(ref.header().tokenizerConfig().bosTokenId());
        }
    }

    @Test void bf16SourceKeptUnderAuto() {
        Path out = convert(Fixtures.require("models/qwen3_e2e"), tmp.resolve("e2e.cmf"), TensorPolicy.Mode.AUTO, List.of());
        try (CmfFile f = CmfFile.open(out); SafetensorsReader st = SafetensorsReader.open(Fixtures.require("models/qwen3_e2e"))) {
            TensorEntry emb = f.tensor("model.embed_tokens.weight");
            assertThat(emb.dtype()).isEqualTo(DType.BF16);
            assertThat(emb.data().asByteBuffer()).isEqualTo(st.bytes("model.embed_tokens.weight").asByteBuffer());
            assertThat(f.tensor("model.norm.weight").dtype()).isEqualTo(DType.F32);
            assertThat(f.header().quantType()).isEqualTo("BF16");
            assertThat(f.header().tokenizerConfig().eosTokenIds()).containsExactly(151645, 151643);
            assertThat(f.header().tokenizerConfig().padTokenId()).isEqualTo(151643);
        }
    }

    @Test void keepOverridesAndErrors() {
        Path out = convert(Fixtures.require("models/llama"), tmp.resolve("k.cmf"), TensorPolicy.Mode.Q8_ROW,
                List.of("lm_head.weight=f16", "*.mlp.*=q4_block", "model.layers.1.mlp.down_proj.weight=bf16"));
        try (CmfFile f = CmfFile.open(out)) {
            assertThat(f.tensor("lm_head.weight").dtype()).isEqualTo(DType.F16);
            assertThat(f.tensor("model.layers.0.mlp.up_proj.weight").dtype()).isEqualTo(DType.Q4_BLOCK);
            assertThat(f.tensor("model.layers.1.mlp.down_proj.weight").dtype()).isEqualTo(DType.BF16);
            assertThat(f.tensor("model.layers.0.self_attn.q_proj.weight").dtype()).isEqualTo(DType.Q8_ROW);
            assertThat(f.tensor("model.norm.weight").dtype()).isEqualTo(DType.F32);
            assertThat(f.header().provenance().get("policy").get("keep").size()).isEqualTo(3);
        }
        assertThatThrownBy(() -> TensorPolicy.Keep.parse("x=q9")).hasMessageContaining("q9");
        assertThatThrownBy(() -> TensorPolicy.Keep.parse("noequals")).hasMessageContaining("GLOB=DTYPE");
        assertThatThrownBy(() -> convert(Fixtures.require("models/gpt_oss"), tmp.resolve("bad.cmf"), TensorPolicy.Mode.F32,
                List.of("*.sinks=q4tp"))).isInstanceOf(ConvertException.class).hasMessageContaining("model.layers.0.self_attn.sinks");
        assertThat(tmp.resolve("bad.cmf")).doesNotExist();
    }

    @Test void missingOrBrokenSourcesGiveClearErrors() throws Exception {
        assertThatThrownBy(() -> HfCheckpoint.open(tmp)).hasMessageContaining("config.json");
        Path d = Files.createDirectory(tmp.resolve("m"));
        Files.copy(Fixtures.require("models/llama/config.json"), d.resolve("config.json"));
        assertThatThrownBy(() -> HfCheckpoint.open(d)).hasMessageContaining("model.safetensors");
        byte[] st = Files.readAllBytes(Fixtures.require("models/llama/model.safetensors"));
        Files.write(d.resolve("model.safetensors"), java.util.Arrays.copyOf(st, st.length / 2));
        assertThatThrownBy(() -> HfCheckpoint.open(d)).isInstanceOf(ConvertException.class)
                .hasMessageContaining(d.resolve("model.safetensors").toString()).hasMessageContaining("truncated");
    }

    /** Bit-exact float comparison that reports the first difference (AssertJ's diff is quadratic on big arrays). */
    static void assertBitsEqual(String what, float[] got, float[] want) {
        assertThat(got.length).as(what + " length").isEqualTo(want.length);
        for (int i = 0; i < got.length; i++) {
            if (Float.floatToRawIntBits(got[i]) != Float.floatToRawIntBits(want[i]))
                throw new AssertionError(what + ": element " + i + " is " + got[i] + ", expected " + want[i]);
        }
    }

    // ---- expected values, computed here independently of the converter -------------------------

    private static final Pattern EXPERT = Pattern.compile("^(.*experts\\.)(\\d+)\\.(gate_proj|up_proj|down_proj)\\.(weight|bias)$");

    /** The source values an output tensor must hold, or null when the test takes them from elsewhere. */
    static float[] expected(String model, SafetensorsReader st, String name, long[] shape) {
        if (st.has(name)) return st.readFloats(name);
        Matcher m = EXPERT.matcher(name);
        if (m.matches()) {
            int e = Integer.parseInt(m.group(2));
            String proj = m.group(3), kind = m.group(4);
            if (model.equals("gpt_oss")) {
                if (kind.equals("bias")) {
                    String src = m.group(1) + (proj.equals("down_proj") ? "down_proj_bias" : "gate_up_proj_bias");
                    long[] s = st.tensor(src).shape();
                    float[] all = st.readFloats(src);
                    float[] out = new float[(int) shape[0]];
                    for (int i = 0; i < out.length; i++) {
                        out[i] = proj.equals("down_proj") ? all[(int) (e * s[1] + i)]
                                : all[(int) (e * s[1] + 2L * i + (proj.equals("up_proj") ? 1 : 0))];
                    }
                    return out;
                }
                if (proj.equals("down_proj")) {           // source [E, I, H], x @ W -> out [H, I]
                    long[] s = st.tensor(m.group(1) + "down_proj").shape();
                    float[] all = st.readFloats(m.group(1) + "down_proj");
                    float[] out = new float[(int) (s[1] * s[2])];
                    for (int h = 0; h < s[2]; h++)
                        for (int i = 0; i < s[1]; i++) out[(int) (h * s[1] + i)] = all[(int) ((e * s[1] + i) * s[2] + h)];
                    return out;
                }
                long[] s = st.tensor(m.group(1) + "gate_up_proj").shape();     // [E, H, 2I]
                float[] all = st.readFloats(m.group(1) + "gate_up_proj");
                int par = proj.equals("up_proj") ? 1 : 0;
                long inter = s[2] / 2;
                float[] out = new float[(int) (inter * s[1])];
                for (int r = 0; r < inter; r++)
                    for (int h = 0; h < s[1]; h++) out[(int) (r * s[1] + h)] = all[(int) ((e * s[1] + h) * s[2] + 2L * r + par)];
                return out;
            }
            // gemma4 (and transformers' fused layout): gate_up [E, 2I, H], down [E, H, I]
            String src = m.group(1) + (proj.equals("down_proj") ? "down_proj" : "gate_up_proj");
            long[] s = st.tensor(src).shape();
            float[] all = st.readFloats(src);
            long per = s[1] * s[2];
            long start = e * per + (proj.equals("up_proj") ? per / 2 : 0);
            long len = proj.equals("down_proj") ? per : per / 2;
            return java.util.Arrays.copyOfRange(all, (int) start, (int) (start + len));
        }
        if (model.equals("qwen3_next") && name.contains("linear_attn.in_proj_")) return null;
        throw new AssertionError("no source for " + name);
    }

    /** The reference writer's layout rules (CMF_FORMAT.md §1.1, §1.3): data at 4096, tensors 64-aligned, disjoint, in order. */
    static void assertLayout(CmfFile f) {
        Envelope env = f.envelope();
        assertThat(env.data().offset() % 4096).isZero();
        assertThat(env.header().offset()).isEqualTo(128);
        assertThat(env.directory().offset()).isEqualTo(128 + env.header().length());
        long prevEnd = 0;
        List<String> names = new ArrayList<>();
        for (TensorEntry e : f.tensors()) {
            assertThat(e.offset() % 64).as(e.name()).isZero();
            if (e.nbytes() >= 16 * 1024) assertThat(e.offset() % 4096).as(e.name()).isZero();
            assertThat(e.offset()).as("%s after the previous tensor", e.name()).isGreaterThanOrEqualTo(prevEnd);
            prevEnd = e.offset() + e.nbytes();
            names.add(e.name());
        }
        assertThat(names).isSortedAccordingTo(TensorOrder.NAMES);
        assertThat(names.getFirst()).isEqualTo("model.embed_tokens.weight");
    }
}
