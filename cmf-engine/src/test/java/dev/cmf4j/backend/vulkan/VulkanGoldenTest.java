package dev.cmf4j.backend.vulkan;

import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.model.ConvertedGoldenTest;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.Model;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The fixture goldens through the Vulkan backend (lavapipe in CI): each fixture HF folder converted at f32, run with its
 * weight products on the Vulkan device, against transformers' logits, greedy ids and per-step logits within the bounds
 * the CPU meets (ConvertedGoldenTest); and the reference converter's q8_2f files against the CPU engine on the same file
 * (the goldens are no quantized reference).
 */
class VulkanGoldenTest {
    @TempDir static Path tmp;
    static VulkanContext ctx;

    @BeforeAll static void setUp() {
        ctx = VulkanTesting.context();
        Fixtures.require("models");
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "qwen3_moe", "gemma3", "gemma4", "gemma4_moe", "gpt_oss", "qwen3_next"})
    void f32MatchesTransformers(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve(model + "-f32.cmf"), TensorPolicy.Mode.F32);
        double tol = model.equals("qwen3_next") ? 2e-3 : 1e-3;
        Golden.Result r;
        long device;
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            r = Golden.load(dir).check(m.graph(), 64, tol);
            device = ((VulkanMatMul) b.matmul()).deviceBytes();
        }
        System.out.println("vulkan " + model + " f32: " + r + " (" + device + " bytes of weights on the device)");
        assertThat(device).as("the products ran on the device").isPositive();
        assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        assertThat(r.greedyMatches()).as(r.toString()).isTrue();
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3"})
    void q8_2fMatchesTheCpuEngine(String model) throws Exception {
        Path cmf = Fixtures.require("cmf/refconv/" + model + "-Q8_2F.cmf");
        int[] ids = Golden.load(Fixtures.require("models/" + model)).inputIds();
        float[] want, got;
        try (Model m = Model.open(cmf)) { want = logits(m, ids); }
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            got = logits(m, ids);
            assertThat(((VulkanMatMul) b.matmul()).deviceBytes()).isPositive();
        }
        double d = 0;
        for (int i = 0; i < want.length; i++) d = Math.max(d, Math.abs(got[i] - want[i]));
        System.out.println("vulkan " + model + " q8_2f vs cpu: logits max|Δ| " + d);
        assertThat(d).isLessThanOrEqualTo(1e-3);
    }

    /** Every position's logits of one forward over {@code ids}. */
    private static float[] logits(Model m, int[] ids) {
        var g = m.graph();
        var st = g.newState(ids.length, ids.length + 1);
        float[] out = new float[ids.length * g.vocab()];
        g.forward(st, ids, 0, ids.length, out, true, null);
        return out;
    }
}
