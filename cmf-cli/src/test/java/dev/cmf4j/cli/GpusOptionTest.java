package dev.cmf4j.cli;

import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code --gpus N} on run and bench (issue 26): what it needs and refuses, said before anything runs. The split itself
 * runs in the engine's tests (TensorParallelTest on the CPU, CudaTensorParallelTest on two mock GPUs).
 */
class GpusOptionTest {
    private static String model() { return Fixtures.require("cmf/refconv/llama-Q8_2F.cmf").toString(); }

    @Test
    void needsCudaAndAtLeastOne() {
        Run r = run("run", model(), "-p", "hi", "--gpus", "2");
        assertThat(r.code()).isNotZero();
        assertThat(r.err()).contains("--gpus 2 needs --device cuda");
        Run zero = run("bench", model(), "--gpus", "0", "--device", "cuda");
        assertThat(zero.code()).isNotZero();
        assertThat(zero.err()).contains("--gpus must be >= 1, got 0");
        Run logits = run("logits", model(), "--ids", "1,2", "-o", System.getProperty("java.io.tmpdir") + "/gpus-logits.npy", "--gpus", "2", "--device", "cuda");
        assertThat(logits.code()).isNotZero();
        assertThat(logits.err()).contains("--gpus is taken by run and bench only");
    }

    /** --split: tensor or layers, with --gpus only; the splits themselves run in GpusSplitTest (two mock GPUs). */
    @Test
    void splitIsTensorOrLayersWithGpus() {
        Run bad = run("bench", model(), "--gpus", "2", "--device", "cuda", "--split", "diagonal");
        assertThat(bad.code()).isNotZero();
        assertThat(bad.err()).contains("--split diagonal: expected tensor or layers");
        Run alone = run("bench", model(), "--split", "layers");
        assertThat(alone.code()).isNotZero();
        assertThat(alone.err()).contains("--split needs --gpus N (2 or more)");
        Run one = run("run", model(), "-p", "hi", "--split", "layers", "--gpus", "1");
        assertThat(one.code()).isNotZero();
        assertThat(one.err()).contains("--split needs --gpus N");
    }

    @Test
    void benchRefusesTheTestsItDoesNotSplit() {
        Run r = run("bench", model(), "--gpus", "2", "--device", "cuda", "--batch", "4");
        assertThat(r.code()).isNotZero();
        assertThat(r.err()).contains("--gpus measures pp and tg only");
        Run d = run("run", model(), "-p", "hi", "--gpus", "2", "--device", "cuda", "--stop", "x");
        assertThat(d.code()).isNotZero();
        assertThat(d.err()).contains("--gpus: --stop is not supported across GPUs");
    }

    /** Where fewer than two GPUs (or no CUDA) are usable, as here and in CI: a clear error naming --gpus. */
    @Test
    void fewerGpusThanAskedIsAClearError() {
        Run r = run("bench", model(), "--gpus", "2", "--device", "cuda", "-p", "4", "-n", "2", "-r", "1", "--warmup", "0");
        org.junit.jupiter.api.Assumptions.assumeTrue(r.code() != 0, "two GPUs are usable here: " + r.out());
        assertThat(r.err()).contains("--gpus 2: ");
        Run g = run("run", model(), "-p", "hi", "-n", "2", "--gpus", "2", "--device", "cuda");
        assertThat(g.code()).isNotZero();
        assertThat(g.err()).contains("--gpus 2: ");
    }
}
