package dev.cmf4j.text;

import com.code_intelligence.jazzer.junit.FuzzTest;

/**
 * Coverage-guided fuzzing of tokenizer.json loading (plain or gzip): any bytes either load into a tokenizer that
 * then encodes and decodes, or fail with a {@link TokenizerException}. Replays {@code TokenizerJsonFuzzTestInputs/}
 * in every test run; {@code JAZZER_FUZZ=1} fuzzes (docs/FUZZING.md).
 */
class TokenizerJsonFuzzTest {
    private static final String TEXT = "Hello <|begin_of_text|> wörld  123\n\t😀 <s> ab";

    @FuzzTest(maxDuration = "40m")
    void loadAndUse(byte[] data) {
        Tokenizer t;
        try {
            t = Tokenizer.fromJson(data);
        } catch (TokenizerException expected) {
            return;
        }
        try {
            int[] ids = t.encodeIds(TEXT, true);
            t.decode(ids, false);
            t.decode(new int[] {-1, 0, 1, 2, Integer.MAX_VALUE}, true);
            StreamingDecoder d = t.streamingDecoder(false);
            for (int id : ids) d.feed(id);
            d.finish();
        } catch (TokenizerException expected) {
            // e.g. an unk_token missing from the vocabulary: reported when first needed, as the reference does
        }
    }
}
