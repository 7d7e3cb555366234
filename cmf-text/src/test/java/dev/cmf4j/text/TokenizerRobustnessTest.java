package dev.cmf4j.text;

import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.fail;

/** Hostile input: mutated tokenizer.json files, odd ids, and random id streams for the streaming decoder. */
class TokenizerRobustnessTest {
    private static final String[] INSERTS = {"{", "}", "[", "]", "\"", ",", ":", "-1", "1e999", "null", "true", "99999999999",
            "\"type\": \"Sequence\"", "\\u", "\\ud800", "\"\"", "0.5", "[[", "{\"type\": 7}"};

    /** A bounded mutation fuzz: every outcome is a tokenizer or a TokenizerException, never another failure. */
    @Test
    void mutatedFilesFailWithTypedErrorsOnly() throws Exception {
        byte[] base = Files.readAllBytes(Fixtures.require("gguf/synthetic-tokenizer.json"));
        SplittableRandom r = new SplittableRandom(7);
        int loaded = 0, rejected = 0;
        for (int i = 0; i < 1500; i++) {
            byte[] m = mutate(base, r);
            try {
                Tokenizer t = Tokenizer.fromJson(m);
                loaded++;
                try {
                    int[] ids = t.encodeIds("Hello <|begin_of_text|> wörld 123 😀", true);
                    t.decode(ids, false);
                    t.decode(new int[] {-1, 0, Integer.MAX_VALUE, 5}, true);
                } catch (TokenizerException e) {
                    // e.g. an unk_token missing from the vocabulary: reported when first needed, as the reference does
                }
            } catch (TokenizerException e) {
                rejected++;
                assertThat(e.getMessage()).isNotBlank();
            } catch (RuntimeException | StackOverflowError | OutOfMemoryError e) {
                fail("mutation " + i + " threw " + e, e);
            }
        }
        assertThat(rejected).isGreaterThan(100);
    }

    private static byte[] mutate(byte[] base, SplittableRandom r) {
        byte[] m = base.clone();
        int ops = 1 + r.nextInt(3);
        for (int k = 0; k < ops; k++) {
            int at = r.nextInt(m.length);
            switch (r.nextInt(4)) {
                case 0 -> m[at] = (byte) r.nextInt(256);
                case 1 -> m = java.util.Arrays.copyOf(m, at);
                case 2 -> {
                    byte[] ins = INSERTS[r.nextInt(INSERTS.length)].getBytes(StandardCharsets.UTF_8);
                    byte[] n = new byte[m.length + ins.length];
                    System.arraycopy(m, 0, n, 0, at);
                    System.arraycopy(ins, 0, n, at, ins.length);
                    System.arraycopy(m, at, n, at + ins.length, m.length - at);
                    m = n;
                }
                default -> {
                    int len = Math.min(m.length - at, 1 + r.nextInt(40));
                    byte[] n = new byte[m.length - len];
                    System.arraycopy(m, 0, n, 0, at);
                    System.arraycopy(m, at + len, n, at, m.length - at - len);
                    m = n;
                }
            }
            if (m.length == 0) break;
        }
        return m;
    }

    @Test
    void hugeTokenIdsAreRejectedNotAllocated() {
        String json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}, \"merges\": []}}";
        assertThatThrownBy(() -> Tokenizer.fromJson(json.getBytes(StandardCharsets.UTF_8)))
                .isInstanceOf(TokenizerException.class).hasMessageContaining("too large");
    }

    @Test
    void unknownIdsDecodeToNothing() {
        Tokenizer t = FixtureTokenizers.get("llama3");
        assertThat(t.decode(new int[] {-7, 9906, 1 << 30}, false)).isEqualTo("Hello");
        StreamingDecoder sd = t.streamingDecoder(false);
        assertThat(sd.feed(-7)).isEmpty();
        assertThat(sd.feed(9906)).isEqualTo("Hello");
    }

    /**
     * Random id streams (byte tokens, half characters, specials, anything) decode the same fed one at
     * a time as all at once, and no piece ends inside a character.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama3", "qwen3", "gemma3"})
    void streamingEqualsFullDecodeOnRandomIds(String name) {
        Tokenizer t = FixtureTokenizers.get(name);
        SplittableRandom r = new SplittableRandom(name.hashCode());
        int vocab = t.vocabSize();
        List<Integer> special = new ArrayList<>(t.addedTokens().keySet());
        for (int seq = 0; seq < 400; seq++) {
            int n = r.nextInt(40);
            int[] ids = new int[n];
            for (int i = 0; i < n; i++) {
                int kind = r.nextInt(10);
                if (kind < 4) ids[i] = r.nextInt(vocab);
                else if (kind < 8) ids[i] = r.nextInt(Math.min(vocab, 600)); // bytes, <0xNN>, short pieces
                else if (kind < 9) ids[i] = special.get(r.nextInt(special.size()));
                else ids[i] = t.tokenToId("<0x" + String.format("%02X", 0x80 + r.nextInt(0x80)) + ">") >= 0
                        ? t.tokenToId("<0x" + String.format("%02X", 0x80 + r.nextInt(0x80)) + ">") : r.nextInt(vocab);
            }
            for (boolean skip : new boolean[] {false, true}) {
                StreamingDecoder sd = t.streamingDecoder(skip);
                StringBuilder sb = new StringBuilder();
                for (int id : ids) {
                    String piece = sd.feed(id);
                    if (!piece.isEmpty()) assertThat(Character.isHighSurrogate(piece.charAt(piece.length() - 1))).isFalse();
                    sb.append(piece);
                }
                sb.append(sd.finish());
                assertThat(sb.toString()).as("%s ids %s skip=%s", name, java.util.Arrays.toString(ids), skip).isEqualTo(t.decode(ids, skip));
            }
        }
    }
}
