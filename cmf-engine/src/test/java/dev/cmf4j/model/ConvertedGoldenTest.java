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

    /**
     * gguf/llama3rope-*.gguf: models/llama written as llama.cpp's converter writes a Llama 3 (rope freq_base 500000 and
     * the llama3 scaling as a {@code rope_freqs.weight} tensor), imported: every file's rope is the llama3 rope of the
     * HF config (the frequency factors were dropped when the import also described the rope per layer type: f32 was 4.5
     * off), f32 gives transformers' logits within the model tolerance and its greedy ids, q8_0 its prompt logits within
     * its quantization error (0.19 measured; q4_0's own error on this 128-wide random model reaches 3.2 on a logit, so
     * only its rope is checked).
     */
    @ParameterizedTest
    @ValueSource(strings = {"f32", "q8_0", "q4_0"})
    void llama3GgufWithRopeFrequencyFactorsMatchesTransformers(String q) throws Exception {
        Path cmf = convert(Fixtures.require("gguf/llama3rope-" + q + ".gguf"), tmp.resolve("llama3rope-" + q + ".cmf"), TensorPolicy.Mode.F32);
        float[] want = Rope.llama3(500000, 32, 8, 1, 4, 64).invFreq();
        Golden.Result r;
        try (Model m = Model.open(cmf)) {
            for (LayerSpec l : m.spec().layers()) {
                float[] got = ((Mixer.Attention) l.mixer()).rope().invFreq();
                assertThat(got).hasSameSizeAs(want);
                for (int i = 0; i < want.length; i++)
                    assertThat(got[i]).as(q + " layer " + l.index() + " frequency " + i).isCloseTo(want[i], org.assertj.core.data.Percentage.withPercentage(1e-4));
            }
            r = Golden.load(Fixtures.require("models/llama")).check(m.graph(), 64, 1e-3);
        }
        System.out.println("gguf llama3rope " + q + ": " + r);
        if (q.equals("f32")) {
            assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
            assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
            assertThat(r.greedyMatches()).as(r.toString()).isTrue();
        } else if (q.equals("q8_0")) {
            assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(0.25);
        }
    }

    /**
     * {@code --quant auto} keeps llama3rope-q4_0's Q4_0 matrices as q4_block with ggml's (signed) scales, the same
     * values: run, its prompt logits are the f32 import's within float noise (8.1e-6), so the kernels read the signed
     * scales right.
     */
    @org.junit.jupiter.api.Test
    void q4_0GgufAtAutoRunsTheFilesValues() throws Exception {
        Path src = Fixtures.require("gguf/llama3rope-q4_0.gguf");
        // the reference: the file's values in f32, except embeddings and lm_head, which auto stores q8_row as well
        Path exact = tmp.resolve("q4_0-exact.cmf");
        try (ModelSource s = Sources.open(src)) {
            Converter.convert(s, exact, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.F32, List.of(
                    TensorPolicy.Keep.parse("model.embed_tokens.weight=q8_row"), TensorPolicy.Keep.parse("lm_head.weight=q8_row")))).withThreads(2));
        }
        Path auto = convert(src, tmp.resolve("q4_0-auto.cmf"), TensorPolicy.Mode.AUTO);
        int[] ids = Golden.load(Fixtures.require("models/llama")).inputIds();
        float[] a, b;
        try (Model m = Model.open(exact)) { a = logits(m.graph(), ids); }
        try (Model m = Model.open(auto)) { b = logits(m.graph(), ids); }
        double d = Golden.maxDiff(a, 0, b, 0, a.length);
        System.out.println("llama3rope q4_0 at auto (q4_block) vs f32 import: prompt logits max|Δ| " + d);
        assertThat(d).isLessThanOrEqualTo(Q4_AUTO_BOUND);
    }

    private static final double Q4_AUTO_BOUND = 1e-4;

    private static float[] logits(dev.cmf4j.model.graph.Graph g, int[] ids) {
        int V = g.vocab();
        float[] out = new float[ids.length * V];
        g.forward(g.newState(64, ids.length + 1), ids, 0, ids.length, out, true, null);
        return out;
    }
}
