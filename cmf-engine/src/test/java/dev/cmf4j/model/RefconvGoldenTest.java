package dev.cmf4j.model;

import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/** The reference converter's F32 files against the transformers goldens. */
class RefconvGoldenTest {

    private static Golden.Result run(String file, String model) throws Exception {
        Path cmf = Fixtures.require("cmf/refconv/" + file);
        Path dir = Fixtures.require("models/" + model);
        Golden.Result r;
        try (Model m = Model.open(cmf)) {
            r = Golden.load(dir).check(m.graph(), 64);
        }
        System.out.println(file + ": " + r);
        return r;
    }

    @Test void qwen3F32() throws Exception {
        Golden.Result r = run("qwen3-F32.cmf", "qwen3");
        assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
        assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
        assertThat(r.greedyMatches()).as(r.toString()).isTrue();
    }

    @Test void qwen3NextF32() throws Exception {
        Golden.Result r = run("qwen3_next-F32.cmf", "qwen3_next");
        assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(2e-3);
        assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(2e-3);
        assertThat(r.greedyMatches()).as(r.toString()).isTrue();
    }
}
