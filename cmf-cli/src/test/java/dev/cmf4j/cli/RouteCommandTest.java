package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code skill add --prompts}, {@code skill describe}, {@code cmf route} and {@code --skill auto} on the tiny fixture. */
class RouteCommandTest {
    @Test void routeAndSkillAuto(@TempDir Path tmp) throws Exception {
        Path base = tmp.resolve("tiny.cmf"), donor = tmp.resolve("donor.cmf");
        Files.copy(Fixtures.require("cmf/tiny/tiny-F32.cmf"), base);
        SkillCommandTest.donor(base, donor);
        Path words = tmp.resolve("words.txt"), digits = tmp.resolve("digits.txt");
        Files.writeString(words, "the cat sat on the mat\na dog ran to the park\nbirds sing in the tall trees\nwe read books at night\n"
                + "the sun is warm today\nshe walks to school\n");
        Files.writeString(digits, "1 2 3 4 5 6\n42 17 99 3\n7 7 7 8 8 9\n100 200 300\n3.14 2.71 1.41\n12 34 56 78\n");
        Run a = run("skill", "add", base.toString(), "--from", donor.toString(), "--id", "words", "--prompts", words.toString(), "--rank", "2");
        assertThat(a.code()).as(a.err()).isZero();
        assertThat(a.err()).contains("routing subspace: 6 prompts");
        Run b = run("skill", "add", base.toString(), "--from", donor.toString(), "--id", "digits");
        assertThat(b.code()).as(b.err()).isZero();
        // without a descriptor a skill is not routed to; describe gives it one (only the header changes)
        Run one = run("route", base.toString(), "-p", "1 2 3", "--json");
        assertThat(one.code()).as(one.err()).isZero();
        assertThat(new ObjectMapper().readTree(one.out()).get("scores")).hasSize(1);
        Run d = run("skill", "describe", base.toString(), "--id", "digits", "--prompts", digits.toString(), "--rank", "2");
        assertThat(d.code()).as(d.err()).isZero();
        try (CmfFile f = CmfFile.open(base)) {
            assertThat(f.header().skill("digits").selection().rank()).isEqualTo(2);
            assertThat(f.header().skill("words").selection().phiLayer()).isEqualTo(1);
        }
        Run r = run("route", base.toString(), "-p", "the bird sat in the tree", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        JsonNode j = new ObjectMapper().readTree(r.out());
        assertThat(j.get("scores")).hasSize(2);
        for (JsonNode s : j.get("scores")) assertThat(s.get("error").asDouble()).as("unit φ, ‖μ‖ ≤ 1").isBetween(0.0, 4.0);
        assertThat(j.get("calibrated").asBoolean()).isFalse();
        assertThat(j.get("novelty").isNull()).isTrue();
        Run text = run("route", base.toString(), "-p", "the bird sat in the tree");
        assertThat(text.out()).contains("winner: ").contains("uncalibrated");
        // calibration: each skill held out the last of its 6 prompts; T and θ land in the header
        Run cal = run("skill", "calibrate", base.toString(), "--target-fpr", "0");
        assertThat(cal.code()).as(cal.err()).isZero();
        assertThat(cal.out()).contains("router calibrated over 2 held-out prompts");
        try (CmfFile f = CmfFile.open(base)) {
            var routing = dev.cmf4j.runtime.SkillRouter.Calibration.of(f.header().routing());
            assertThat(routing.samples()).isEqualTo(2);
            assertThat(routing.temperature()).isBetween(1e-3, 1e6);
            assertThat(routing.targetFpr()).isZero();
            assertThat(f.header().skill("digits").selection().holdoutN()).isEqualTo(1);
        }
        JsonNode jc = new ObjectMapper().readTree(run("route", base.toString(), "-p", "the bird sat in the tree", "--json").out());
        assertThat(jc.get("calibrated").asBoolean()).isTrue();
        assertThat(jc.get("novelty").asDouble()).isBetween(0.0, 1.0);
        // a file of prompts: one JSON line each, or the share each target got
        Run many = run("route", base.toString(), "--prompts", words.toString(), "--json");
        assertThat(many.code()).as(many.err()).isZero();
        assertThat(many.out().lines().toList()).hasSize(6).allSatisfy(l -> assertThat(l).contains("\"best\""));
        assertThat(run("route", base.toString(), "--prompts", words.toString()).out()).contains("6 prompts routed:");
        double sum = 0;
        for (JsonNode s : jc.get("scores")) sum += s.get("confidence").asDouble();
        assertThat(sum).isCloseTo(1.0, org.assertj.core.data.Offset.offset(1e-9));
        // --skill auto runs whatever the route picked, and says so
        Run auto = run("generate", base.toString(), "--ids", "5,6,7,8", "-n", "3", "--skill", "auto");
        assertThat(auto.code()).as(auto.err()).isZero();
        assertThat(auto.err()).contains("routed to ");
        assertThat(run("chat", base.toString(), "--skill", "auto").err()).contains("--skill auto needs a prompt");
    }
}
