package dev.cmf4j.cli;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** {@link Errors#message}: the one line a failed command prints. */
class ErrorsTest {
    @Test
    void aFileTheJdkCouldNotOpenSaysWhy() {
        Path gone = Path.of("surely-not-here-" + System.nanoTime() + ".json");
        assertThatThrownBy(() -> Files.readString(gone)).isInstanceOf(NoSuchFileException.class)
                .satisfies(e -> assertThat(Errors.message(e)).isEqualTo(gone + ": no such file"));
        assertThat(Errors.message(new AccessDeniedException("/root/x"))).isEqualTo("/root/x: permission denied");
        assertThat(Errors.message(new FileSystemException("/dev/full"))).isEqualTo("/dev/full: file system error");
        assertThat(Errors.message(new UncheckedIOException(new NoSuchFileException("a.bin")))).isEqualTo("a.bin: no such file");
    }

    @Test
    void aReasonGivenIsKeptAndOtherMessagesPassThrough() {
        assertThat(Errors.message(new NoSuchFileException("m.cmf", null, "no such model file"))).isEqualTo("m.cmf: no such model file");
        assertThat(Errors.message(new IllegalArgumentException("--threads must be >= 1"))).isEqualTo("--threads must be >= 1");
        assertThat(Errors.message(new IOException())).isEqualTo("IOException");
    }
}
