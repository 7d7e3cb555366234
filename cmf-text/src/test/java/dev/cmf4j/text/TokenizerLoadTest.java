package dev.cmf4j.text;

import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.zip.GZIPOutputStream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Loading: the other tokenizer.json fixtures, gzip input, and clear errors for what cannot be honoured. */
class TokenizerLoadTest {

    @Test
    void loadsTheTinyCmfTokenizer() {
        Tokenizer t = Tokenizer.fromFile(Fixtures.require("cmf/tiny/tokenizer.json"));
        assertThat(t.vocabSize()).isEqualTo(128);
        // No pre-tokenizer, no merges: one token per character; the special token is cut out first.
        Encoding e = t.encode("Hi <|endoftext|>", true);
        assertThat(e.ids()).containsExactly(40, 73, 0, 126);
        assertThat(e.tokens()).containsExactly("H", "i", " ", "<|endoftext|>");
        // No decoder: tokens are joined with spaces, as the reference does.
        assertThat(t.decode(e.ids(), false)).isEqualTo("H i   <|endoftext|>");
        assertThat(t.decode(e.ids(), true)).isEqualTo("H i  ");
        assertThat(t.isSpecial(126)).isTrue();
    }

    @Test
    void loadsTheSyntheticGgufTokenizer() {
        Tokenizer t = Tokenizer.fromFile(Fixtures.require("gguf/synthetic-tokenizer.json"));
        assertThat(t.vocabSize()).isEqualTo(1024);
        Encoding e = t.encode("Hello world", true);
        assertThat(e.ids()[0]).isEqualTo(1000); // TemplateProcessing inside a post-processor Sequence
        assertThat(t.encode("Hello world", false).ids()).isEqualTo(java.util.Arrays.copyOfRange(e.ids(), 1, e.size()));
        assertThat(t.decode(t.encode("Hello world", false).ids(), false)).isEqualTo("Hello world");
    }

    @Test
    void acceptsGzippedJsonAndMergesAsPairs() throws Exception {
        String json = """
            {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3, "abc": 4},
                       "merges": [["a", "b"], "ab c"]}}
            """;
        ByteArrayOutputStream bo = new ByteArrayOutputStream();
        try (GZIPOutputStream gz = new GZIPOutputStream(bo)) { gz.write(json.getBytes(StandardCharsets.UTF_8)); }
        Tokenizer t = Tokenizer.fromJson(bo.toByteArray());
        assertThat(t.encode("abcab", false).ids()).containsExactly(4, 2);
    }

    @Test
    void unknownComponentTypesAreErrorsNamingTypeAndPath() {
        String json = """
            {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
             "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Frobnicate"}]}}
            """;
        assertThatThrownBy(() -> Tokenizer.fromJson(json.getBytes(StandardCharsets.UTF_8)))
                .isInstanceOf(TokenizerException.class)
                .hasMessageContaining("Frobnicate")
                .hasMessageContaining("$.normalizer.normalizers[1].type")
                .extracting(e -> ((TokenizerException) e).path()).isEqualTo("$.normalizer.normalizers[1].type");
        for (String part : new String[] {"pre_tokenizer", "post_processor", "decoder"}) {
            String j = "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"" + part + "\": {\"type\": \"Nope\"}}";
            assertThatThrownBy(() -> Tokenizer.fromJson(j.getBytes(StandardCharsets.UTF_8)))
                    .isInstanceOf(TokenizerException.class).hasMessageContaining("\"Nope\"").hasMessageContaining("$." + part + ".type");
        }
        String unigram = "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}";
        assertThatThrownBy(() -> Tokenizer.fromJson(unigram.getBytes(StandardCharsets.UTF_8)))
                .isInstanceOf(TokenizerException.class).hasMessageContaining("Unigram").hasMessageContaining("$.model.type");
    }

    @Test
    void badInputIsATypedErrorNotACrash() {
        String[] bad = {
            "", "[]", "{", "{\"model\": 3}", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a  a\"]}}",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}}",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
            "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {}}}",
        };
        for (String b : bad) {
            assertThatThrownBy(() -> Tokenizer.fromJson(b.getBytes(StandardCharsets.UTF_8))).as(b).isInstanceOf(TokenizerException.class);
        }
    }
}
