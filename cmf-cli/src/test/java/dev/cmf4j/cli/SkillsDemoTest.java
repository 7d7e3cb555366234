package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * The shipped skills demo (models/skills-demo, docs/SKILLS_DEMO.md) built as tools/skills-demo/build-demo.sh builds it:
 * three LoRA adapters trained on the H200 merged into the bundled model as routed skills. The file stays under 40 MB,
 * the router sends held-out prompts to their own domain well above chance, and each skill lowers its domain's
 * perplexity on held-out text against the backbone.
 */
class SkillsDemoTest {
    private static final List<String> DOMAINS = List.of("python", "man", "info");

    @Test void theShippedAdaptersBuildARoutedSkillsFile(@TempDir Path tmp) throws Exception {
        Path root = Path.of("").toAbsolutePath();
        while (root != null && !Files.isRegularFile(root.resolve(ModelFile.DEFAULT))) root = root.getParent();
        assertThat(root).as("models/default.cmf above the working directory").isNotNull();
        Path demo = root.resolve("models/skills-demo"), file = tmp.resolve("demo.cmf");
        Files.copy(root.resolve(ModelFile.DEFAULT), file);
        for (String d : DOMAINS) {
            Run a = run("skill", "add", file.toString(), "--lora", demo.resolve(d).toString(), "--id", d,
                    "--prompts", demo.resolve(d + ".prompts.fit.txt").toString(), "--rank", "4");
            assertThat(a.code()).as(a.err()).isZero();
            assertThat(a.err()).contains("skill " + d + ": 12 tensors");
        }
        Run c = run("skill", "calibrate", file.toString());
        assertThat(c.code()).as(c.err()).isZero();
        Run k = run("compact", file.toString());
        assertThat(k.code()).as(k.err()).isZero();
        assertThat(Files.size(file)).as("the demo file's bytes").isLessThan(40_000_000L);

        ObjectMapper json = new ObjectMapper();
        int right = 0, all = 0;
        for (String d : DOMAINS) {
            Run r = run("route", file.toString(), "--prompts", demo.resolve(d + ".prompts.test.txt").toString(), "--json");
            assertThat(r.code()).as(r.err()).isZero();
            int mine = 0, n = 0;
            for (String line : r.out().split("\n")) {
                if (line.isBlank()) continue;
                JsonNode o = json.readTree(line);
                n++;
                if (d.equals(o.path("winner").asText(null))) mine++;
            }
            System.out.printf("skills demo: %s prompts routed to their own skill %d of %d%n", d, mine, n);
            assertThat(n).isGreaterThanOrEqualTo(40);
            assertThat((double) mine / n).as(d + " routed to its own skill").isGreaterThan(0.5);
            right += mine;
            all += n;
        }
        // 112 of 161 (69.6%) when written; chance is a third
        assertThat((double) right / all).as("held-out prompts routed to their own skill").isGreaterThan(0.6);

        for (String d : DOMAINS) {
            double none = perplexity(json, file, demo.resolve(d + ".prompts.test.txt"), "none");
            double own = perplexity(json, file, demo.resolve(d + ".prompts.test.txt"), d);
            System.out.printf("skills demo: %s held-out prompts, perplexity backbone %.3f, skill %.3f%n", d, none, own);
            assertThat(own).as(d + ": the skill's perplexity against the backbone's " + none).isLessThan(none);
        }
    }

    private static double perplexity(ObjectMapper json, Path file, Path text, String skill) throws Exception {
        Run p = run("ppl", file.toString(), "--file", text.toString(), "--skill", skill, "--window-len", "256", "--windows", "4", "--json");
        assertThat(p.code()).as(p.err()).isZero();
        return json.readTree(p.out()).get("perplexity").asDouble();
    }
}
