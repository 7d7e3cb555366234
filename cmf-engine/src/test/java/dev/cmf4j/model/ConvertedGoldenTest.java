package dev.cmf4j.model;

import dev.cmf4j.convert.Converter;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The acceptance path: each fixture HF folder → our converter at f32 → CMF file → engine (default CPU
 * backend), against transformers' logits, greedy ids and per-step logits.
 */
public class ConvertedGoldenTest {
    @TempDir static Path tmp;

    /** Converts fixtures/models/NAME at {@code mode} into {@code dir}. */
    public static Path convert(Path src, Path out, TensorPolicy.Mode mode) {
        try (ModelSource s = Sources.open(src)) {
            Converter.convert(s, out, Converter.Options.of(new TensorPolicy(mode, List.of())).withThreads(2));
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
        return out;
    }

    @BeforeAll static void fixtures() { Fixtures.require("models"); }

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "qwen3_moe", "gemma3", "gemma4", "gemma4_moe", "gpt_oss", "qwen3_next"})
    void f32MatchesTransformers(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        Path cmf = convert(dir, tmp.resolve(model + "-f32.cmf"), TensorPolicy.Mode.F32);
        double tol = model.equals("qwen3_next") ? 2e-3 : 1e-3;
        Golden.Result r;
        try (Model m = Model.open(cmf)) {
            r = Golden.load(dir).check(m.graph(), 64, tol);
        }
        System.out.println("converted " + model + " f32: " + r);
        assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        assertThat(r.greedyMatches()).as(r.toString()).isTrue();
    }
}
