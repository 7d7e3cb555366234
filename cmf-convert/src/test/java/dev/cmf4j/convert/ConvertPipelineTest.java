package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.zip.GZIPInputStream;

import static org.assertj.core.api.Assertions.assertThat;

/** The pipeline's guarantees: determinism across thread counts, the scratch-file path, shards, the tokenizer bundle, progress. */
class ConvertPipelineTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    @TempDir Path tmp;

    private static Path convert(Path src, Path out, TensorPolicy.Mode mode, Converter.Options opts) {
        try (ModelSource s = Sources.open(src)) {
            Converter.convert(s, out, opts);
        }
        return out;
    }

    private static Converter.Options opts(TensorPolicy.Mode mode) {
        return Converter.Options.of(new TensorPolicy(mode, List.of()));
    }

    @Test void outputIsIdenticalWhateverTheThreadCount() throws IOException {
        Path src = Fixtures.require("models/qwen3_moe");
        Path one = convert(src, tmp.resolve("one.cmf"), TensorPolicy.Mode.Q8_2F, opts(TensorPolicy.Mode.Q8_2F).withThreads(1));
        Path four = convert(src, tmp.resolve("four.cmf"), TensorPolicy.Mode.Q8_2F, opts(TensorPolicy.Mode.Q8_2F).withThreads(4));
        assertThat(Files.readAllBytes(four)).isEqualTo(Files.readAllBytes(one));
    }

    /** A tensor larger than the memory budget is encoded through a scratch file; the result is the same. */
    @Test void tensorsOverTheBudgetGoThroughAScratchFile() throws IOException {
        Path src = Fixtures.require("models/qwen3_e2e");     // embed_tokens: 151936 x 32 f32 = 19 MB
        Path small = convert(src, tmp.resolve("small.cmf"), TensorPolicy.Mode.F32, opts(TensorPolicy.Mode.F32).withMemoryBudget(1 << 20));
        Path big = convert(src, tmp.resolve("big.cmf"), TensorPolicy.Mode.F32, opts(TensorPolicy.Mode.F32));
        assertThat(Files.readAllBytes(small)).isEqualTo(Files.readAllBytes(big));
        try (var files = Files.list(tmp)) {
            assertThat(files.map(p -> p.getFileName().toString()).filter(n -> n.contains("scratch") || n.contains("tmp"))).isEmpty();
        }
    }

    /** A sharded checkpoint (index + two shards) converts to the same file as the single-file one. */
    @Test void shardedCheckpointConvertsLikeTheSingleFile() throws IOException {
        Path src = Fixtures.require("models/llama");
        Path dir = Files.createDirectory(tmp.resolve("sharded"));
        Files.copy(src.resolve("config.json"), dir.resolve("config.json"));
        Files.copy(src.resolve("generation_config.json"), dir.resolve("generation_config.json"));
        StringBuilder index = new StringBuilder("{\"metadata\": {}, \"weight_map\": {");
        try (SafetensorsReader st = SafetensorsReader.open(src)) {
            SafetensorsFiles a = new SafetensorsFiles(), b = new SafetensorsFiles();
            int i = 0;
            for (SafetensorsReader.Tensor t : st.tensors()) {
                SafetensorsFiles w = i++ % 2 == 0 ? a : b;
                w.add(t.name(), t.dtypeName(), t.shape(), st.bytes(t.name()).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
                index.append(i == 1 ? "" : ",").append('"').append(t.name()).append("\": \"model-0000").append(w == a ? 1 : 2).append("-of-00002.safetensors\"");
            }
            a.write(dir.resolve("model-00001-of-00002.safetensors"));
            b.write(dir.resolve("model-00002-of-00002.safetensors"));
        }
        Files.writeString(dir.resolve("model.safetensors.index.json"), index.append("}}"));
        Path fromShards = convert(dir, tmp.resolve("s.cmf"), TensorPolicy.Mode.F32, opts(TensorPolicy.Mode.F32));
        Path fromSingle = convert(src, tmp.resolve("x.cmf"), TensorPolicy.Mode.F32, opts(TensorPolicy.Mode.F32));
        try (CmfFile s = CmfFile.open(fromShards); CmfFile x = CmfFile.open(fromSingle)) {
            assertThat(s.tensors()).hasSameSizeAs(x.tensors());
            for (int k = 0; k < s.tensors().size(); k++) {
                TensorEntry p = s.tensors().get(k), q = x.tensors().get(k);
                assertThat(p.name()).isEqualTo(q.name());
                assertThat(p.hash()).as(p.name()).isEqualTo(q.hash());
            }
        }
    }

    /** A folder with the real Qwen3 tokenizer files: vocab verbatim, template, eos list, special token strings. */
    @Test void tokenizerBundleFromRealFiles() throws IOException {
        Path model = Fixtures.require("models/qwen3_e2e"), tok = Fixtures.require("tokenizers/qwen3");
        Path dir = Files.createDirectory(tmp.resolve("q"));
        for (String f : List.of("config.json", "generation_config.json", "model.safetensors")) Files.copy(model.resolve(f), dir.resolve(f));
        Files.copy(tok.resolve("tokenizer.json.gz"), dir.resolve("tokenizer.json.gz"));
        Files.copy(tok.resolve("tokenizer_config.json"), dir.resolve("tokenizer_config.json"));
        Path out = convert(dir, tmp.resolve("q.cmf"), TensorPolicy.Mode.AUTO, opts(TensorPolicy.Mode.AUTO));
        byte[] raw;
        try (var in = new GZIPInputStream(Files.newInputStream(tok.resolve("tokenizer.json.gz")))) {
            raw = in.readAllBytes();
        }
        JsonNode tc = JSON.readTree(tok.resolve("tokenizer_config.json").toFile());
        try (CmfFile f = CmfFile.open(out)) {
            assertThat(f.vocab().orElseThrow()).isEqualTo(raw);
            var t = f.header().tokenizerConfig();
            assertThat(t.chatTemplate()).isEqualTo(tc.get("chat_template").asText());
            assertThat(t.eosTokenIds()).containsExactly(151645, 151643);
            assertThat(t.bosTokenId()).isEqualTo(151643);
            assertThat(t.padTokenId()).isEqualTo(151643);
            assertThat(t.extra().get("eos_token").asText()).isEqualTo(tc.get("eos_token").asText());
            assertThat(t.extra().get("pad_token").asText()).isEqualTo("<|endoftext|>");
        }
        // chat_template.jinja wins over tokenizer_config.json's template
        Files.writeString(dir.resolve("chat_template.jinja"), "{{ messages[0]['content'] }}");
        Path out2 = convert(dir, tmp.resolve("q2.cmf"), TensorPolicy.Mode.AUTO, opts(TensorPolicy.Mode.AUTO));
        try (CmfFile f = CmfFile.open(out2)) {
            assertThat(f.header().tokenizerConfig().chatTemplate()).isEqualTo("{{ messages[0]['content'] }}");
        }
    }

    /** Token ids for special-token strings come from tokenizer.json when the config has no added_tokens_decoder. */
    @Test void specialTokenIdsResolvedFromTokenizerJson() throws IOException {
        Path tok = Fixtures.require("tokenizers/gemma3");
        byte[] json;
        try (var in = new GZIPInputStream(Files.newInputStream(tok.resolve("tokenizer.json.gz")))) {
            json = in.readAllBytes();
        }
        var ids = TokenizerBundle.resolveIds(null, json, java.util.Set.of("<bos>", "<eos>", "<pad>", "<start_of_turn>", "▁the"));
        assertThat(ids).containsEntry("<bos>", 2).containsEntry("<eos>", 1).containsEntry("<pad>", 0).containsKey("<start_of_turn>")
                .containsKey("▁the");
    }

    /**
     * A source truncated after it was opened (its mapping then faults where pages are gone) fails the conversion
     * with a ConvertException, and neither the output nor a temporary file is left.
     */
    @Test void aSourceTruncatedWhileConvertingFailsClearlyAndLeavesNoOutput() throws IOException {
        Path src = tmp.resolve("src");
        Files.createDirectories(src);
        try (var files = Files.list(Fixtures.require("models/llama"))) {
            for (Path f : files.toList()) if (!f.getFileName().toString().startsWith("golden")) Files.copy(f, src.resolve(f.getFileName()));
        }
        Path outDir = Files.createDirectories(tmp.resolve("out"));
        try (ModelSource s = Sources.open(src)) {
            try (var ch = java.nio.channels.FileChannel.open(src.resolve("model.safetensors"), java.nio.file.StandardOpenOption.WRITE)) {
                ch.truncate(ch.size() / 4);
            }
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> Converter.convert(s, outDir.resolve("m.cmf"), opts(TensorPolicy.Mode.F32)))
                    .isInstanceOf(ConvertException.class).hasMessageContaining("truncated");
        }
        try (var left = Files.list(outDir)) {
            assertThat(left.toList()).as("no output, no temporary file").isEmpty();
        }
    }

    @Test void progressLinesForLogs() {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        Progress p = Progress.lines(new PrintStream(buf, true));
        Path src = Fixtures.require("models/llama");
        convert(src, tmp.resolve("p.cmf"), TensorPolicy.Mode.F32, opts(TensorPolicy.Mode.F32).withProgress(p));
        String out = buf.toString();
        assertThat(out).startsWith("converting " + src + ": 21 tensors");
        assertThat(out).contains("100% 21/21 tensors").contains("MB/s").contains("ETA").contains("converted 21 tensors");
        assertThat(out.lines().count()).isLessThanOrEqualTo(14);
    }

    @Test void naturalOrder() {
        List<String> names = new java.util.ArrayList<>(List.of("model.layers.10.mlp.w", "lm_head.weight", "model.layers.2.mlp.experts.10.up_proj.weight",
                "model.layers.2.mlp.experts.9.up_proj.weight", "model.norm.weight", "model.embed_tokens.weight", "model.mtp.x", "model.layers.2.a"));
        names.sort(TensorOrder.NAMES);
        assertThat(names).containsExactly("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.2.a",
                "model.layers.2.mlp.experts.9.up_proj.weight", "model.layers.2.mlp.experts.10.up_proj.weight", "model.layers.10.mlp.w",
                "model.mtp.x");
    }
}
