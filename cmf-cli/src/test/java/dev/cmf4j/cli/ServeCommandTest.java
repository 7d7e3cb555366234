package dev.cmf4j.cli;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf serve}'s option checks (the server itself: cmf-server's tests). */
class ServeCommandTest {
    @Test void aKeyAndAKeyFileAreExclusiveAndBadValuesAreOneLine() throws Exception {
        Run both = Run.run("serve", "--api-key", "a", "--api-key-file", "k.txt");
        assertThat(both.code()).isEqualTo(2);
        assertThat(both.err()).contains("mutually exclusive");

        Path empty = Files.createTempFile("cmf-key", ".txt");
        try {
            Run noKey = Run.run("serve", "--api-key-file", empty.toString(), "--port", "0");
            assertThat(noKey.code()).isEqualTo(1);
            assertThat(noKey.err()).contains("cmf: error: --api-key-file").contains("has no key");
        } finally {
            Files.delete(empty);
        }
        Run parallel = Run.run("serve", "--parallel", "0");
        assertThat(parallel.code()).isEqualTo(1);
        assertThat(parallel.err()).contains("cmf: error: --parallel must be >= 1");
        Run replicas = Run.run("serve", "--replicas", "0");
        assertThat(replicas.code()).isEqualTo(1);
        assertThat(replicas.err()).contains("cmf: error: --replicas must be >= 1, got 0");
        Run missing = Run.run("serve", "no-such-model.cmf");
        assertThat(missing.code()).isEqualTo(1);
        assertThat(missing.err()).contains("no such model file");
    }

    /** {@code --replicas N}: a copy per NVIDIA GPU; what it needs and refuses is said before anything loads (the server: ServerReplicasTest). */
    @Test void replicasNeedCudaAndRefuseWhatTheyDoNotCombineWith() {
        Run cpu = Run.run("serve", "--replicas", "2", "--port", "0");
        assertThat(cpu.code()).isEqualTo(1);
        assertThat(cpu.err()).contains("cmf: error: --replicas 2 needs --device cuda");
        Run gpus = Run.run("serve", "--replicas", "2", "--gpus", "2", "--device", "cuda", "--port", "0");
        assertThat(gpus.code()).isEqualTo(1);
        assertThat(gpus.err()).contains("cmf: error: --replicas and --gpus do not combine");
        Run split = Run.run("serve", "--replicas", "2", "--device", "cuda", "--split", "layers", "--port", "0");
        assertThat(split.code()).isEqualTo(1);
        assertThat(split.err()).contains("cmf: error: --split is taken with --gpus by run and bench only");
        Run state = Run.run("serve", "--replicas", "2", "--device", "cuda", "--state-dir", System.getProperty("java.io.tmpdir"), "--port", "0");
        assertThat(state.code()).isEqualTo(1);
        assertThat(state.err()).contains("cmf: error: --state-dir does not combine with --replicas");
    }

    /** Where fewer GPUs (or no CUDA) are usable, as here and in CI: one line naming --replicas. */
    @Test void moreReplicasThanGpusIsAClearError() {
        String model = dev.cmf4j.testkit.Fixtures.require("cmf/refconv/llama-Q8_2F.cmf").toString();
        Run r = Run.run("serve", model, "--replicas", "64", "--device", "cuda", "--port", "0");   // more than any machine has
        assertThat(r.code()).isEqualTo(1);
        assertThat(r.err()).contains("cmf: error: --replicas 64: ");
        assertThat(r.err().lines().filter(l -> l.startsWith("cmf: error")).count()).isEqualTo(1);
    }
}
