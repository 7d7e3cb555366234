package dev.cmf4j.api;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.convert.Converter;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.List;
import java.util.stream.StreamSupport;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Every fixture model (converted at f32) through the API: ids in, transformers' greedy ids out. */
class FixtureModelsTest {
    @TempDir static Path tmp;

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "qwen3_moe", "gemma3", "gemma4", "gemma4_moe", "gpt_oss", "qwen3_next"})
    void greedyIdsEqualTransformers(String name) throws Exception {
        Path dir = Fixtures.require("models/" + name);
        Path cmf = tmp.resolve(name + ".cmf");
        try (ModelSource s = Sources.open(dir)) {
            Converter.convert(s, cmf, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.F32, List.of())).withThreads(2));
        }
        JsonNode golden = new ObjectMapper().readTree(dir.resolve("golden.json").toFile());
        int[] prompt = ints(golden.get("input_ids")), expected = ints(golden.get("greedy_ids"));
        try (CmfModel m = Cmf.open(cmf, ModelOptions.defaults().withContextLength(128))) {
            Reply r = m.generate(prompt, Sampling.greedy().withMaxTokens(expected.length).withIgnoreEos(true), null);
            assertThat(r.tokens()).as(name).containsExactly(expected);
            if (!m.hasTokenizer())
                assertThatThrownBy(() -> m.newChat().complete(List.of(Message.user("hi")), Sampling.greedy()))
                        .isInstanceOf(InferenceException.class).hasMessageContaining("carries no tokenizer");
        }
    }

    static int[] ints(JsonNode a) {
        return StreamSupport.stream(a.spliterator(), false).mapToInt(JsonNode::asInt).toArray();
    }
}
