package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/** {@code --draft} on run, generate and bench with the bundled model: the same output as without, and the refusals. */
class DraftCommandTest {
    private static Path model;

    @BeforeAll static void locate() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve(ModelFile.DEFAULT))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above " + Path.of("").toAbsolutePath()).isNotNull();
        model = dir.resolve(ModelFile.DEFAULT);
    }

    @Test void runAndGenerateGiveThePlainGreedyOutput() throws Exception {
        String[] base = {"run", model.toString(), "-p", "The manual page for tar says", "-n", "40", "--greedy"};
        Run plain = Run.run(base);
        assertThat(plain.code()).as(plain.err()).isZero();
        String[] withDraft = java.util.Arrays.copyOf(base, base.length + 5);
        System.arraycopy(new String[] {"--draft", model.toString(), "--draft-max", "5", "-v"}, 0, withDraft, base.length, 5);
        Run drafted = Run.run(withDraft);
        assertThat(drafted.code()).as(drafted.err()).isZero();
        assertThat(drafted.out()).isEqualTo(plain.out());
        assertThat(drafted.err()).contains("[draft: ").contains("accepted (100.0%)");

        ObjectMapper om = new ObjectMapper();
        String ids = "1,20,300,4000,50,600,70";
        Run g = Run.run("generate", model.toString(), "--ids", ids, "-n", "30", "--json");
        Run gd = Run.run("generate", model.toString(), "--ids", ids, "-n", "30", "--json", "--draft", model.toString(), "--draft-max", "3",
                "--rep-penalty", "1.0");
        assertThat(gd.code()).as(gd.err()).isZero();
        JsonNode a = om.readTree(g.out()), b = om.readTree(gd.out());
        assertThat(b.get("ids")).isEqualTo(a.get("ids"));
        assertThat(b.at("/draft/acceptance").asDouble()).isEqualTo(1.0);
        assertThat(b.at("/draft/drafted").asLong()).isGreaterThan(0);
    }

    @Test void benchMeasuresGenerationWithAndWithoutTheDraft() throws Exception {
        Run r = Run.run("bench", model.toString(), "-p", "8", "-n", "24", "-r", "1", "--warmup", "0", "-t", "2", "--json",
                "--draft", model.toString(), "--draft-max", "4");
        assertThat(r.code()).as(r.err()).isZero();
        JsonNode s = new ObjectMapper().readTree(r.out()).get("speculative");
        assertThat(s.get("acceptance").asDouble()).isEqualTo(1.0);
        assertThat(s.get("tokens_per_step").asDouble()).isGreaterThan(3.0);   // 4 drafts + the target's own per step
        assertThat(s.get("draft_tokens_per_s").asDouble()).isPositive();
        assertThat(s.get("plain_tokens_per_s").asDouble()).isPositive();
        assertThat(s.get("speedup").asDouble()).as("generation with the draft over plain generation")
                .isCloseTo(s.get("draft_tokens_per_s").asDouble() / s.get("plain_tokens_per_s").asDouble(), org.assertj.core.data.Offset.offset(1e-3));
    }

    @Test void draftsOfAnotherVocabularyOrNoFileAreRefused() {
        Run missing = Run.run("run", model.toString(), "-p", "hi", "-n", "2", "--draft", "/nonexistent/draft.cmf");
        assertThat(missing.code()).isNotZero();
        assertThat(missing.err()).contains("/nonexistent/draft.cmf");
        Run range = Run.run("run", model.toString(), "-p", "hi", "-n", "2", "--draft", model.toString(), "--draft-max", "0");
        assertThat(range.code()).isNotZero();
        assertThat(range.err()).contains("--draft-max must be 1..32");
        Path other = Fixtures.require("cmf/refconv/qwen3-F32.cmf");
        Run foreign = Run.run("run", model.toString(), "-p", "hi", "-n", "2", "--draft", other.toString());
        assertThat(foreign.code()).isNotZero();
        assertThat(foreign.err()).contains("cannot draft for this model");
    }
}
