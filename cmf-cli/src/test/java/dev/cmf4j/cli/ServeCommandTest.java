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
        Run missing = Run.run("serve", "no-such-model.cmf");
        assertThat(missing.code()).isEqualTo(1);
        assertThat(missing.err()).contains("no such model file");
    }
}
