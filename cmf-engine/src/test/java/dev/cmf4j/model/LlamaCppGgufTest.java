package dev.cmf4j.model;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.testkit.Fixtures;
import dev.cmf4j.text.Tokenizer;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.zip.GZIPInputStream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The fixture models qwen3_moe, gpt_oss and gemma4 as llama.cpp's own {@code convert_hf_to_gguf.py} writes them (merged
 * expert tensors, gpt-oss's split gate/up, sinks, router and expert biases; Gemma 4's per-layer arrays, per-layer
 * embeddings and partial rope as {@code rope_freqs}), imported and run. The qwen3moe and gpt-oss f16 and q8_0 files are
 * resources ({@code gguf/*.gguf.gz}); the f32 files and gemma4's, too large for the repository, are read from the
 * fixtures' {@code gguf/} when present. All were made outside the repo by llama.cpp's converter from
 * {@code models/<name>}; docs/CONVERT.md says how.
 */
class LlamaCppGgufTest {
    @TempDir static Path tmp;

    @BeforeAll static void fixtures() { Fixtures.require("models"); }

    static Path gguf(String file) throws IOException {
        Path out = tmp.resolve(file);
        if (LlamaCppGgufTest.class.getResource("gguf/" + file + ".gz") == null) return Fixtures.require("gguf/" + file);
        if (!Files.exists(out)) {
            try (InputStream in = new GZIPInputStream(LlamaCppGgufTest.class.getResourceAsStream("gguf/" + file + ".gz"))) {
                Files.write(out, in.readAllBytes());
            }
        }
        return out;
    }

    private static String family(String gguf) {
        return switch (gguf) {
            case "qwen3moe" -> "qwen3_moe";
            case "gpt-oss" -> "gpt_oss";
            case "gemma4moe" -> "gemma4_moe";
            default -> gguf;
        };
    }

    /** The arch block of the import is the HF conversion's, field for field (only the recorded source names differ). */
    @ParameterizedTest
    @CsvSource({"qwen3moe,f16", "gpt-oss,f16", "gemma4,f32", "gemma4moe,f32"})
    void archEqualsTheHfConversion(String arch, String q) throws IOException {
        ObjectNode fromGguf, fromHf;
        try (ModelSource g = Sources.open(gguf(arch + "-" + q + ".gguf")); ModelSource h = Sources.open(Fixtures.require("models/" + family(arch)))) {
            fromGguf = g.arch().deepCopy();
            fromHf = h.arch().deepCopy();
        }
        String general = arch.equals("gemma4moe") ? "gemma4" : arch;      // general.architecture of both Gemma 4 files
        assertThat(fromGguf.remove("gguf_architecture").asText()).isEqualTo(general);
        assertThat(fromGguf.remove("hf_architecture").asText()).isEqualTo("gguf:" + general);
        fromHf.remove("hf_architecture");
        assertThat(fromGguf).isEqualTo(fromHf);
    }

    /**
     * f16: every tensor is the HF tensor rounded to f16 (round to nearest even, as numpy's astype), except what
     * llama.cpp keeps in f32 (1-D tensors, the routers), which is bit exact; q8_0: within Q8_0's error per tensor.
     */
    @ParameterizedTest
    @CsvSource({"qwen3moe,f16", "gpt-oss,f16", "qwen3moe,q8_0", "gpt-oss,q8_0", "gemma4,f32", "gemma4moe,f32"})
    void weightsAreTheHfWeights(String arch, String q) throws IOException {
        Path cmf = ConvertedGoldenTest.convert(gguf(arch + "-" + q + ".gguf"), tmp.resolve(arch + "-" + q + "-w.cmf"), TensorPolicy.Mode.F32);
        try (CmfFile f = CmfFile.open(cmf); SafetensorsReader st = SafetensorsReader.open(Fixtures.require("models/" + family(arch)));
             ModelSource hf = Sources.open(Fixtures.require("models/" + family(arch)))) {
            assertThat(f.tensors().stream().map(TensorEntry::name).sorted().toList())
                    .isEqualTo(hf.tensors().stream().map(t -> t.name()).sorted().toList());
            for (var want : hf.tensors()) {
                TensorEntry e = f.tensor(want.name());
                assertThat(e.shape()).as(e.name()).isEqualTo(want.shape());
                float[] got = Dequantizers.of(e.dtype()).all(e.data(), e.shape());
                float[] ref = new float[(int) want.numel()];
                want.data().read(0, ref, 0, ref.length);
                boolean keptF32 = want.rank() == 1 || e.name().endsWith("mlp.gate.weight") || e.name().endsWith("mlp.router.weight");
                if (q.equals("f32")) {
                    for (int i = 0; i < ref.length; i++)
                        if (Float.floatToRawIntBits(got[i]) != Float.floatToRawIntBits(ref[i]))
                            throw new AssertionError(e.name() + "[" + i + "] = " + got[i] + ", expected " + ref[i]);
                } else if (q.equals("f16")) {
                    for (int i = 0; i < ref.length; i++) {
                        float w = keptF32 ? ref[i] : Float.float16ToFloat(Float.floatToFloat16(ref[i]));
                        if (Float.floatToRawIntBits(got[i]) != Float.floatToRawIntBits(w))
                            throw new AssertionError(e.name() + "[" + i + "] = " + got[i] + ", expected " + w);
                    }
                } else {
                    double se = 0, n = 0;
                    for (int i = 0; i < ref.length; i++) {
                        se += (got[i] - ref[i]) * (double) (got[i] - ref[i]);
                        n += ref[i] * (double) ref[i];
                    }
                    assertThat(Math.sqrt(se / n)).as(e.name() + " relative RMSE").isLessThanOrEqualTo(keptF32 ? 0 : 0.01);
                }
            }
        }
    }

    /**
     * Run against transformers' logits, the files carry their own rounding error and no more: f16 gives 0.0087
     * (qwen3moe) and 0.0175 (gpt-oss) with transformers' greedy ids, as the HF folder converted at f16 does (0.0094,
     * 0.0173); q8_0 moves the prompt logits by 4.5 and 4.8, as our own 8-bit rows of the HF weights do (3.7, 3.8): in
     * these random MoE models an 8-bit error flips close router choices. (llama.cpp's f32 files import to the HF
     * conversion's tensors bit for bit: {@link #f32FilesMatchTransformers}.)
     */
    @ParameterizedTest
    @CsvSource({"qwen3moe,f16,0.03", "gpt-oss,f16,0.03", "qwen3moe,q8_0,6", "gpt-oss,q8_0,6"})
    void logitsCarryOnlyTheFilesRounding(String arch, String q, double tol) throws Exception {
        Path cmf = ConvertedGoldenTest.convert(gguf(arch + "-" + q + ".gguf"), tmp.resolve(arch + "-" + q + ".cmf"), TensorPolicy.Mode.F32);
        Golden.Result r;
        try (Model m = Model.open(cmf)) {
            r = Golden.load(Fixtures.require("models/" + family(arch))).check(m.graph(), 64, tol);
        }
        System.out.println("llama.cpp gguf " + arch + " " + q + ": " + r);
        assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        if (q.equals("f16")) {
            assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
            assertThat(r.greedyMatches()).as(r.toString()).isTrue();
        }
    }

    /**
     * llama.cpp's f32 files (too large for the repository: put them at {@code gguf/<arch>-f32.gguf} in the fixtures,
     * docs/CONVERT.md says how to make them; skipped when absent) give transformers' logits within the model tolerance.
     */
    @ParameterizedTest
    @ValueSource(strings = {"qwen3moe", "gpt-oss", "gemma4", "gemma4moe"})
    void f32FilesMatchTransformers(String arch) throws Exception {
        Path src = Fixtures.require("gguf/" + arch + "-f32.gguf");
        Path cmf = ConvertedGoldenTest.convert(src, tmp.resolve(arch + "-f32.cmf"), TensorPolicy.Mode.F32);
        Golden.Result r;
        try (Model m = Model.open(cmf)) {
            r = Golden.load(Fixtures.require("models/" + family(arch))).check(m.graph(), 64, 1e-3);
        }
        System.out.println("llama.cpp gguf " + arch + " f32: " + r);
        assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
        assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
        assertThat(r.greedyMatches()).as(r.toString()).isTrue();
    }

    /**
     * The tokenizer rebuilt from tokenizer.ggml.* tokenizes like the tokenizer llama.cpp's converter read: the
     * fixtures' synthetic vocabulary with Qwen's pre-tokenizer (taken from the real Qwen3 tokenizer.json) or OpenAI's
     * o200k split (gpt-oss's tokenizer.json).
     */
    @ParameterizedTest
    @CsvSource({"qwen3moe,q8_0", "gpt-oss,q8_0", "gemma4,f32", "gemma4moe,f32"})
    void tokenizerIsRebuilt(String arch, String q) throws IOException {
        ObjectMapper json = new ObjectMapper();
        ObjectNode ref = (ObjectNode) json.readTree(Fixtures.require("gguf/synthetic-tokenizer.json").toFile());
        if (arch.startsWith("gemma4")) ref = gemmaTokenizer(json);
        else if (arch.equals("qwen3moe")) {
            ObjectNode qwen;
            try (InputStream in = new GZIPInputStream(Files.newInputStream(Fixtures.require("tokenizers/qwen3/tokenizer.json.gz")))) {
                qwen = (ObjectNode) json.readTree(in);
            }
            ref.set("normalizer", qwen.get("normalizer"));
            ref.set("pre_tokenizer", qwen.get("pre_tokenizer"));
        } else {
            ref.putNull("normalizer");
            ref.set("pre_tokenizer", json.readTree("""
                    {"type": "Sequence", "pretokenizers": [
                      {"type": "Split", "pattern": {"Regex": "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n/]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"},
                       "behavior": "Isolated", "invert": false},
                      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}"""));
        }
        Tokenizer want = Tokenizer.fromJson(json.writeValueAsBytes(ref));
        Tokenizer got;
        try (ModelSource s = Sources.open(gguf(arch + "-" + q + ".gguf"))) {
            got = Tokenizer.fromJson(s.tokenizerJson());
        }
        List<String> texts = List.of("Hello world", "the rain in spain  stays mainly\n\tin the plain", "café ☕ 3.14", "  spaces   and\ttabs\n\nnew lines", "numbers 1234567 3.14159",
                "don't WON'T you'll HeLLo CamelCaseWord", "unicode: héllo wörld ñ 中文 日本語 😀", "<|begin_of_text|>special<|end_of_text|>",
                "", " ", "x".repeat(300), "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "path/to/file\r\n\r\nA1b22c333d4444");
        for (String t : texts) {
            int[] a = want.encode(t, false).ids(), b = got.encode(t, false).ids();
            assertThat(b).as("%s ids of %s", arch, t).containsExactly(a);
            assertThat(got.decode(b, false)).as("decode of %s", t).isEqualTo(want.decode(a, false));
        }
    }

    /**
     * The tokenizer gemma4's GGUF was made with: the real Gemma 3 tokenizer (fixtures' tokenizers/gemma3) cut to the
     * model's 1024 ids, keeping the merges whose parts and result survive.
     */
    private static ObjectNode gemmaTokenizer(ObjectMapper json) throws IOException {
        ObjectNode t;
        try (InputStream in = new GZIPInputStream(Files.newInputStream(Fixtures.require("tokenizers/gemma3/tokenizer.json.gz")))) {
            t = (ObjectNode) json.readTree(in);
        }
        ObjectNode model = (ObjectNode) t.get("model");
        ObjectNode vocab = json.createObjectNode();
        model.get("vocab").fields().forEachRemaining(e -> { if (e.getValue().asInt() < 1024) vocab.set(e.getKey(), e.getValue()); });
        var merges = json.createArrayNode();
        for (var m : model.get("merges")) {
            String a = m.get(0).asText(), b = m.get(1).asText();
            if (vocab.has(a) && vocab.has(b) && vocab.has(a + b)) merges.add(m);
        }
        model.set("vocab", vocab);
        model.set("merges", merges);
        var added = json.createArrayNode();
        for (var a : t.get("added_tokens")) if (a.get("id").asInt() < 1024) added.add(a);
        t.set("added_tokens", added);
        return t;
    }
}
