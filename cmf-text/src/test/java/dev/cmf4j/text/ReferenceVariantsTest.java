package dev.cmf4j.text;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPInputStream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * 46 tokenizer configurations (every normalizer, pre-tokenizer, split behavior, post-processor and
 * decoder, added-token flags, Metaspace schemes) over random multilingual strings, against outputs
 * recorded from the Hugging Face tokenizers library (see reference/README.md): ids, tokens,
 * offsets, decode with and without special tokens, and streaming decode.
 */
class ReferenceVariantsTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    private static InputStream resource(String name) {
        InputStream in = ReferenceVariantsTest.class.getResourceAsStream("reference/" + name);
        assertThat(in).as("test resource reference/" + name).isNotNull();
        return in;
    }

    @Test
    void everyConfigurationMatchesTheReference() throws Exception {
        JsonNode variants = JSON.readTree(resource("variants.json"));
        Map<String, Tokenizer> tokenizers = new HashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = variants.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> v = it.next();
            Tokenizer base = FixtureTokenizers.get(v.getValue().get("base").asText());
            byte[] overrides = JSON.writeValueAsBytes(v.getValue().get("overrides"));
            tokenizers.put(v.getKey(), TokenizerJson.withOverrides(base, overrides));
        }
        List<String> failures = new ArrayList<>();
        Map<String, Integer> counts = new HashMap<>();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(new GZIPInputStream(resource("cases.jsonl.gz")), StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                JsonNode c = JSON.readTree(line);
                String v = c.get("v").asText();
                counts.merge(v, 1, Integer::sum);
                check(tokenizers.get(v), c, v, failures);
            }
        }
        assertThat(counts).hasSize(variants.size());
        int total = counts.values().stream().mapToInt(Integer::intValue).sum();
        assertThat(total).isGreaterThan(3000);
        assertThat(failures).as(failures.size() + " mismatches in " + total + " cases").isEmpty();
    }

    private static void check(Tokenizer tok, JsonNode c, String v, List<String> failures) throws Exception {
        String text = c.get("text").asText();
        boolean add = c.get("add").asBoolean();
        String where = v + " " + JSON.writeValueAsString(text) + (add ? " (special) " : " ");
        int[] ids = new int[c.get("ids").size()];
        for (int i = 0; i < ids.length; i++) ids[i] = c.get("ids").get(i).asInt();
        Encoding e = tok.encode(text, add);
        if (!Arrays.equals(e.ids(), ids)) {
            failures.add(where + "ids " + Arrays.toString(e.ids()) + " != " + Arrays.toString(ids));
            return;
        }
        List<String> tokens = new ArrayList<>();
        c.get("tokens").forEach(t -> tokens.add(t.asText()));
        if (!e.tokens().equals(tokens)) failures.add(where + "tokens " + e.tokens() + " != " + tokens);
        for (int i = 0; i < ids.length; i++) {
            JsonNode o = c.get("offsets").get(i);
            if (e.starts()[i] != o.get(0).asInt() || e.ends()[i] != o.get(1).asInt()) {
                failures.add(where + "offset " + i + " [" + e.starts()[i] + ", " + e.ends()[i] + "] != " + o);
                break;
            }
        }
        for (boolean skip : new boolean[] {false, true}) {
            String expected = c.get(skip ? "decoded_skip" : "decoded").asText();
            String decoded = tok.decode(ids, skip);
            if (!decoded.equals(expected)) failures.add(where + "decode(skip=" + skip + ") " + JSON.writeValueAsString(decoded));
            StreamingDecoder sd = tok.streamingDecoder(skip);
            StringBuilder streamed = new StringBuilder();
            for (int id : ids) streamed.append(sd.feed(id));
            streamed.append(sd.finish());
            if (!streamed.toString().equals(expected)) failures.add(where + "stream(skip=" + skip + ") " + JSON.writeValueAsString(streamed.toString()));
        }
    }
}
