package dev.cmf4j.cli;

import dev.cmf4j.format.CmfFile;
import dev.cmf4j.text.Tokenizer;

import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.regex.Pattern;

/**
 * Where the tokenize/detokenize commands get a tokenizer: a CMF file (its vocab section holds the
 * tokenizer.json bytes), a tokenizer.json or tokenizer.json.gz, or a Hugging Face model directory
 * holding one.
 */
final class TokenizerSource {
    private TokenizerSource() {}

    private static final Pattern CMF = Pattern.compile("(?i).*\\.cmf");

    static Tokenizer load(Path src) throws NoSuchFileException {
        if (Files.isDirectory(src)) {
            Path json = src.resolve("tokenizer.json");
            if (!Files.exists(json)) json = src.resolve("tokenizer.json.gz");
            if (!Files.exists(json)) throw new NoSuchFileException(src.toString(), null, "the directory holds no tokenizer.json");
            return Tokenizer.fromFile(json);
        }
        if (!Files.exists(src)) throw new NoSuchFileException(src.toString(), null, "no such file");
        if (CMF.matcher(src.getFileName().toString()).matches()) {
            try (CmfFile cmf = CmfFile.open(src)) {
                byte[] json = cmf.vocab().orElseThrow(() -> new IllegalArgumentException(src + " has no vocab section (no tokenizer)"));
                return Tokenizer.fromJson(json);
            }
        }
        return Tokenizer.fromFile(src);
    }
}
