package dev.cmf4j.text;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The acceptance goldens: every case of tokenizers/{llama3,qwen3,gemma3}/cases.jsonl (recorded with
 * the Hugging Face tokenizers library) gives exactly the recorded ids, tokens, offsets and decoded
 * text, with and without special tokens; and streaming decode, fed one id at a time, concatenates to
 * the full decode. Each tokenizer is loaded once per class.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class TokenizerFixturesTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private Tokenizer tokenizer(String name) {
        return FixtureTokenizers.get(name);
    }

    private static List<JsonNode> cases(String name) throws IOException {
        Path p = Fixtures.require("tokenizers/" + name).resolve("cases.jsonl");
        List<JsonNode> out = new ArrayList<>();
        for (String line : Files.readAllLines(p)) if (!line.isBlank()) out.add(JSON.readTree(line));
        return out;
    }

    private static int[] ints(JsonNode a) {
        int[] r = new int[a.size()];
        for (int i = 0; i < r.length; i++) r[i] = a.get(i).asInt();
        return r;
    }

    private static List<String> strings(JsonNode a) {
        List<String> r = new ArrayList<>();
        a.forEach(x -> r.add(x.asText()));
        return r;
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama3", "qwen3", "gemma3"})
    void encodesDecodesAndStreamsEveryCase(String name) throws IOException {
        Tokenizer tok = tokenizer(name);
        List<JsonNode> cases = cases(name);
        assertThat(cases).hasSizeGreaterThanOrEqualTo(100);
        List<String> failures = new ArrayList<>();
        for (JsonNode c : cases) {
            String text = c.get("text").asText();
            boolean add = c.get("add_special_tokens").asBoolean();
            String where = name + " case " + c.get("id").asInt() + (add ? " (special)" : "") + " ";
            Encoding e = tok.encode(text, add);
            int[] ids = ints(c.get("ids"));
            if (!Arrays.equals(e.ids(), ids)) failures.add(where + "ids " + Arrays.toString(e.ids()) + " != " + Arrays.toString(ids));
            if (!e.tokens().equals(strings(c.get("tokens")))) failures.add(where + "tokens " + e.tokens() + " != " + strings(c.get("tokens")));
            JsonNode offs = c.get("offsets");
            for (int i = 0; i < Math.min(offs.size(), e.size()); i++) {
                if (e.starts()[i] != offs.get(i).get(0).asInt() || e.ends()[i] != offs.get(i).get(1).asInt()) {
                    failures.add(where + "offset " + i + " [" + e.starts()[i] + ", " + e.ends()[i] + "] != " + offs.get(i));
                    break;
                }
            }
            for (boolean skip : new boolean[] {false, true}) {
                String expected = c.get(skip ? "decoded_skip_special" : "decoded").asText();
                String got = tok.decode(ids, skip);
                if (!got.equals(expected)) failures.add(where + "decode(skip=" + skip + ") " + JSON.writeValueAsString(got) + " != " + JSON.writeValueAsString(expected));
                StreamingDecoder sd = tok.streamingDecoder(skip);
                StringBuilder streamed = new StringBuilder();
                for (int id : ids) {
                    String piece = sd.feed(id);
                    if (!piece.isEmpty() && Character.isHighSurrogate(piece.charAt(piece.length() - 1))) {
                        failures.add(where + "stream piece ends inside a character");
                    }
                    streamed.append(piece);
                }
                streamed.append(sd.finish());
                if (!streamed.toString().equals(expected)) {
                    failures.add(where + "stream(skip=" + skip + ") " + JSON.writeValueAsString(streamed.toString()) + " != " + JSON.writeValueAsString(expected));
                }
            }
        }
        assertThat(failures).as(failures.size() + " mismatches in " + cases.size() + " cases").isEmpty();
    }
}
