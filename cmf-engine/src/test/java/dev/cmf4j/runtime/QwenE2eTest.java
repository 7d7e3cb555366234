package dev.cmf4j.runtime;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.convert.Converter;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.model.Model;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * qwen3_e2e end to end: conversation → chat template → ids equal prompt_ids → bf16 weights computed in
 * float32 → greedy ids and text equal transformers'.
 */
class QwenE2eTest {

    /** Checks a text model against the qwen3_e2e golden; used for the HF folder and for converted files. */
    static void check(dev.cmf4j.model.graph.Graph graph, TextCodec codec) throws Exception {
        Path dir = Fixtures.require("models/qwen3_e2e");
        JsonNode g = new ObjectMapper().readTree(dir.resolve("golden.json").toFile());
        List<Map<String, Object>> conv = new ObjectMapper().convertValue(g.get("conversation"), new TypeReference<>() {});
        assertThat(codec.render(conv, Map.of())).isEqualTo(g.get("prompt").asText());
        int[] ids = codec.encodeChat(conv, Map.of());
        int[] want = new ObjectMapper().convertValue(g.get("prompt_ids"), int[].class);
        assertThat(ids).containsExactly(want);

        int V = graph.vocab(), T = ids.length;
        float[] logits = new Session(graph, 4096).logitsAll(ids);
        try (SafetensorsReader gs = SafetensorsReader.open(dir.resolve("golden.safetensors"))) {
            int[] pos = TestFiles.ints(gs.readLongs("logits_positions"));
            float[] at = gs.readFloats("logits_at");
            double d = 0;
            for (int i = 0; i < pos.length; i++)
                for (int v = 0; v < V; v++) d = Math.max(d, Math.abs(at[i * V + v] - logits[pos[i] * V + v]));
            System.out.println("qwen3_e2e logits_at max|Δ| " + d);
            assertThat(d).isLessThanOrEqualTo(1e-3);
            float[] lse = gs.readFloats("logits_logsumexp");
            for (int t = 0; t < T; t++) {
                double m = Double.NEGATIVE_INFINITY, s = 0;
                for (int v = 0; v < V; v++) m = Math.max(m, logits[t * V + v]);
                for (int v = 0; v < V; v++) s += Math.exp(logits[t * V + v] - m);
                assertThat(m + Math.log(s)).as("logsumexp at " + t).isCloseTo(lse[t], org.assertj.core.data.Offset.offset(1e-3));
            }
            int[] topIds = TestFiles.ints(gs.readLongs("logits_topk_ids"));
            for (int t = 0; t < T; t++) {
                int best = 0;
                for (int v = 1; v < V; v++) if (logits[t * V + v] > logits[t * V + best]) best = v;
                assertThat(best).as("argmax at " + t).isEqualTo(topIds[t * 16]);
            }
            // greedy: exactly N tokens, no EOS stop (as the golden was made)
            int[] greedy = TestFiles.ints(gs.readLongs("greedy_ids"));
            Session s = new Session(graph, 4096);
            Generator.Result r = new Generator(s, new Sampler(SamplingParams.GREEDY), Set.of(), List.of())
                    .generate(ids, greedy.length, codec.stream(false), null);
            assertThat(r.tokens()).containsExactly(greedy);
            assertThat(r.text()).isEqualTo(g.get("greedy_text").asText());
            assertThat(codec.decode(r.tokens())).isEqualTo(g.get("greedy_text").asText());
        }
    }

    /**
     * The real path: an HF folder (config, bf16 weights, the real tokenizer and its config) → our converter
     * (bf16 kept) → one CMF file carrying weights, tokenizer and chat template → engine.
     */
    @Test void convertedFile(@TempDir Path tmp) throws Exception {
        Path model = Fixtures.require("models/qwen3_e2e"), tok = Fixtures.require("tokenizers/qwen3");
        Path src = Files.createDirectories(tmp.resolve("qwen3_e2e"));
        for (String f : new String[] {"config.json", "generation_config.json", "model.safetensors"})
            Files.copy(model.resolve(f), src.resolve(f));
        for (String f : new String[] {"tokenizer.json.gz", "tokenizer_config.json"})
            Files.copy(tok.resolve(f), src.resolve(f));
        Path cmf = tmp.resolve("qwen3_e2e.cmf");
        try (ModelSource s = Sources.open(src)) {
            Converter.convert(s, cmf, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.BF16, List.of())).withThreads(2));
        }
        try (Model m = Model.open(cmf)) {
            TextCodec codec = TextCodec.of(m.file());
            assertThat(codec.eosIds()).contains(151645);
            check(m.graph(), codec);
        }
    }
}
