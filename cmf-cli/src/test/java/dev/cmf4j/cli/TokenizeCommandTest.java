package dev.cmf4j.cli;

import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;


import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf tokenize} and {@code cmf detokenize} over a .cmf, a tokenizer.json and a tokenizer.json.gz. */
class TokenizeCommandTest {
    @Test
    void tokenizesWithTheVocabSectionOfACmfFile() {
        String cmf = Fixtures.require("cmf/tiny/tiny-F32.cmf").toString();
        Run r = run("tokenize", cmf, "--text", "Hello");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out().strip()).isEqualTo("40,69,76,76,79");
        Run d = run("detokenize", cmf, "--ids", "40,69,76,76,79");
        assertThat(d.out()).isEqualTo("H e l l o"); // that tokenizer has no decoder: tokens joined by spaces
    }

    @Test
    void tokenizeJsonAndDetokenizeRoundTrip() {
        String gz = Fixtures.require("tokenizers/qwen3/tokenizer.json.gz").toString();
        Run r = run("tokenize", gz, "--json", "--text", "Hello, world! <|im_start|>");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out().strip()).isEqualTo("{\"ids\":[9707,11,1879,0,220,151644],\"tokens\":[\"Hello\",\",\",\"Ġworld\",\"!\",\"Ġ\",\"<|im_start|>\"],"
                + "\"offsets\":[[0,5],[5,6],[6,12],[12,13],[13,14],[14,26]]}");
        assertThat(run("detokenize", gz, "--ids", "9707,11,1879,0,220,151644").out()).isEqualTo("Hello, world! <|im_start|>");
        assertThat(run("detokenize", gz, "--ids", "9707 11 1879 0 220 151644", "--skip-special").out()).isEqualTo("Hello, world! ");
    }

    @Test
    void specialTokensOnlyWithSpecial() {
        String gz = Fixtures.require("tokenizers/gemma3/tokenizer.json.gz").toString();
        assertThat(run("tokenize", gz, "--text", "Hi there").out().strip()).isEqualTo("10979,993");
        assertThat(run("tokenize", gz, "--special", "--text", "Hi there").out().strip()).isEqualTo("2,10979,993");
    }

    @Test
    void badInputIsAOneLineError() {
        Run missing = run("tokenize", "/no/such/tokenizer.json", "--text", "x");
        assertThat(missing.code()).isEqualTo(1);
        assertThat(missing.err()).startsWith("cmf: error:").contains("/no/such/tokenizer.json");
        Run badIds = run("detokenize", Fixtures.require("cmf/tiny/tokenizer.json").toString(), "--ids", "1,x");
        assertThat(badIds.code()).isEqualTo(2);
        assertThat(badIds.err()).contains("\"x\" is not a token id");
    }
}
