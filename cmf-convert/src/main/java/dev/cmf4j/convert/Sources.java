package dev.cmf4j.convert;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;

/** Opens what {@code cmf convert} was given: a Hugging Face folder or a {@code .gguf} file. */
public final class Sources {
    private Sources() {}

    public static ModelSource open(Path src) {
        if (Files.isDirectory(src)) return HfCheckpoint.open(src);
        if (!Files.exists(src)) throw new ConvertException(src + ": no such file or folder");
        String n = src.getFileName().toString().toLowerCase(Locale.ROOT);
        if (n.endsWith(".gguf")) return dev.cmf4j.convert.gguf.GgufSource.open(src);
        throw new ConvertException(src + ": expected a Hugging Face checkpoint folder (config.json + *.safetensors) or a .gguf file");
    }
}
