package dev.cmf4j.cli;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/** The files of {@code --state-in} and {@code --state-out} (run, chat): read with one clear error, written whole or not at all. */
final class StateFile {
    private StateFile() {}

    @FunctionalInterface
    interface Reader { void read(InputStream in) throws IOException; }

    @FunctionalInterface
    interface Writer { void write(OutputStream out) throws IOException; }

    /** Reads {@code file} through {@code r}; a refusal becomes an {@link IllegalArgumentException} naming the file. */
    static void load(Path file, Reader r) throws IOException {
        if (!Files.isRegularFile(file)) throw new NoSuchFileException(file.toString(), null, "no such state file");
        try (InputStream in = Files.newInputStream(file)) {
            r.read(in);
        } catch (IOException e) {
            throw new IllegalArgumentException(file + ": " + e.getMessage(), e);
        }
    }

    /** Writes {@code file} beside it, then moves it in place: a failed write never leaves half a snapshot. */
    static void save(Path file, Writer w) throws IOException {
        Path abs = file.toAbsolutePath();
        Path tmp = abs.resolveSibling(abs.getFileName() + ".part");
        try (OutputStream os = Files.newOutputStream(tmp)) {
            w.write(os);
        } catch (IOException | RuntimeException e) {
            Files.deleteIfExists(tmp);
            throw e;
        }
        Files.move(tmp, abs, StandardCopyOption.REPLACE_EXISTING);
    }
}
