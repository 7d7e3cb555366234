package dev.cmf4j.cli;

import picocli.CommandLine;

import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;

/** Where the model commands find their file: the argument, else the bundled default model. */
final class ModelFile {
    private ModelFile() {}

    /** Relative to the repository ({@code cmf.home}, set by the launcher). */
    static final String DEFAULT = "models/default.cmf";

    static Path resolve(Path given) throws NoSuchFileException {
        if (given != null) {
            if (!Files.isRegularFile(given)) throw new NoSuchFileException(given + ": no such model file");
            return given;
        }
        String home = System.getProperty("cmf.home");
        Path def = (home == null ? Path.of(".") : Path.of(home)).resolve(DEFAULT).toAbsolutePath().normalize();
        if (!Files.isRegularFile(def))
            throw new NoSuchFileException("no model file given and the bundled default model is missing (" + def
                    + "); pass a .cmf file, e.g. one made with 'cmf convert HF_DIR -o model.cmf'");
        return def;
    }

    /** The {@code --arch-override} option of the model commands. */
    static final class Overrides {
        @picocli.CommandLine.Option(names = "--arch-override", paramLabel = "JSON",
                description = "JSON object merged over the file's arch block, for files that lack a field "
                        + "(e.g. '{\"moe\": {\"top_k\": 2}}')")
        String json;

        @picocli.CommandLine.Mixin MemoryOptions memory = new MemoryOptions();

        /** Opens {@code file} (or the default model) with the overrides, on the CPU. */
        dev.cmf4j.model.Model open(Path file) throws NoSuchFileException {
            return open(file, new dev.cmf4j.backend.cpu.CpuBackend());
        }

        /** Opens {@code file} (or the default model) with the overrides, on {@code backend}. */
        dev.cmf4j.model.Model open(Path file, dev.cmf4j.backend.Backend backend) throws NoSuchFileException {
            Path p = resolve(file);
            com.fasterxml.jackson.databind.JsonNode o = null;
            if (json != null) {
                try {
                    o = new com.fasterxml.jackson.databind.ObjectMapper().readTree(json);
                } catch (java.io.IOException e) {
                    throw new IllegalArgumentException("--arch-override is not valid JSON: "
                            + e.getMessage().lines().findFirst().orElse(""));
                }
                if (o == null || !o.isObject()) throw new IllegalArgumentException("--arch-override must be a JSON object");
            }
            return dev.cmf4j.model.Model.open(p, o, backend, java.util.List.of(), memory::choose);
        }
    }

    /** Parses "1,2,3" (commas and/or spaces) into ids. */
    static int[] parseIds(String s) {
        String[] parts = s.trim().split("[,\\s]+");
        if (s.isBlank()) return new int[0];
        int[] ids = new int[parts.length];
        for (int i = 0; i < parts.length; i++) {
            try {
                ids[i] = Integer.parseInt(parts[i]);
            } catch (NumberFormatException e) {
                throw new CommandLine.ParameterException(new CommandLine(new Object()),
                        "--ids: '" + parts[i] + "' is not a token id (expected integers like 1,2,3)");
            }
        }
        return ids;
    }
}
