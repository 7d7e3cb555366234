package dev.cmf4j.hub;

import dev.cmf4j.convert.TensorPolicy;

import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.regex.Pattern;

/**
 * The files of a repository the converter needs: a Hugging Face checkpoint (config.json, the safetensors file
 * or index, the tokenizer and chat files), or one GGUF file. A checkpoint is preferred when the repository has
 * one; a GGUF file is chosen by {@code --file}, by a GGUF quant type in {@code --quant} ({@code Q4_K_M}), or
 * because it is the only one.
 */
sealed interface ModelFiles {
    /** Files read beside the weights when present (docs/CONVERT.md). */
    List<String> CHECKPOINT_EXTRAS = List.of("generation_config.json", "tokenizer.json", "tokenizer.json.gz",
            "tokenizer_config.json", "chat_template.jinja", "chat_template.json");
    String INDEX = "model.safetensors.index.json";

    /** config.json, the weights (one file, or the index whose shards are listed once it is read) and extras. */
    record Checkpoint(RepoFile config, RepoFile weights, List<RepoFile> extras) implements ModelFiles {
        boolean sharded() { return weights.path().equals(INDEX); }

        List<RepoFile> metadata() {
            return java.util.stream.Stream.concat(java.util.stream.Stream.of(config, weights), extras.stream()).toList();
        }
    }

    record Gguf(RepoFile file) implements ModelFiles {}

    /** The CMF's name in the cache, from what was converted and how. */
    default String cmfName(TensorPolicy.Mode mode) {
        return switch (this) {
            case Checkpoint c -> "model-" + mode.label;
            case Gguf g -> g.file().path().substring(0, g.file().path().length() - ".gguf".length()).replace("/", "--") + "-" + mode.label;
        };
    }

    /**
     * What to convert from {@code rev}. {@code quant} (may be null) is a cmf quant mode or a GGUF quant type;
     * {@code file} (may be null) names a GGUF file.
     */
    static ModelFiles choose(RepoRevision rev, String quant, String file) {
        String what = rev.uri().toString();
        List<RepoFile> ggufs = rev.files().stream().filter(ModelFiles::isModelGguf).toList();
        if (file != null) {
            RepoFile f = rev.file(file).orElseThrow(() -> new HubException(what + ": no file \"" + file + "\" at commit " + rev.commit()
                    + (ggufs.isEmpty() ? "" : "; its GGUF files: " + names(ggufs))));
            if (!f.path().toLowerCase(Locale.ROOT).endsWith(".gguf"))
                throw new HubException(what + ": --file takes one of the repository's .gguf files; " + file + " is not one "
                        + "(without --file the Hugging Face checkpoint is used)");
            return gguf(what, f);
        }
        boolean cmfMode = quant == null || isCmfMode(quant);
        Optional<RepoFile> config = rev.file("config.json");
        Optional<RepoFile> weights = rev.file(INDEX).or(() -> rev.file("model.safetensors"));
        if (cmfMode && config.isPresent() && weights.isPresent())
            return new Checkpoint(config.get(), weights.get(),
                    CHECKPOINT_EXTRAS.stream().flatMap(n -> rev.file(n).stream()).toList());
        if (!ggufs.isEmpty()) {
            if (quant != null) {
                Pattern type = Pattern.compile("(?<![A-Z0-9])" + Pattern.quote(quant.toUpperCase(Locale.ROOT)) + "(?![A-Z0-9_])");
                List<RepoFile> match = ggufs.stream().filter(g -> type.matcher(g.name().toUpperCase(Locale.ROOT)).find()).toList();
                if (match.size() == 1) return gguf(what, match.getFirst());
                if (match.size() > 1)
                    throw new HubException(what + ": several GGUF files match --quant " + quant + ": " + names(match) + "; pick one with --file");
                if (!cmfMode)
                    throw new HubException(what + ": no GGUF file of type " + quant + "; its GGUF files: " + names(ggufs));
            }
            if (ggufs.size() == 1) return gguf(what, ggufs.getFirst());
            throw new HubException(what + ": the repository holds several GGUF files; pick one with --file NAME or by its type "
                    + "with --quant (e.g. Q4_K_M): " + names(ggufs));
        }
        if (!cmfMode)
            throw new HubException(what + ": --quant " + quant + " is neither a cmf quantization (auto, f32, f16, bf16, q8_row, "
                    + "q8_2f, q4_block, q4tp) nor the type of a GGUF file, and the repository holds no GGUF file");
        throw new HubException(what + ": nothing cmf can convert at commit " + rev.commit() + ": " + missing(rev, config.isPresent()));
    }

    private static String missing(RepoRevision rev, boolean hasConfig) {
        boolean bins = rev.files().stream().anyMatch(f -> f.path().endsWith(".bin") || f.path().endsWith(".pt") || f.path().endsWith(".pth"));
        boolean nestedSt = rev.files().stream().anyMatch(f -> f.path().endsWith(".safetensors"));
        String need = "it needs config.json with model.safetensors (or model.safetensors.index.json) at the top, or a .gguf file";
        if (!hasConfig) return "there is no config.json; " + need;
        if (nestedSt) return "its .safetensors files are not the model.safetensors / model.safetensors.index.json of a "
                + "transformers checkpoint; " + need;
        if (bins) return "its weights are PyTorch pickles (.bin/.pt), which cmf does not read; look for a safetensors or GGUF "
                + "version of this model";
        return need;
    }

    private static Gguf gguf(String what, RepoFile f) {
        if (f.name().matches("(?i).*-\\d{5}-of-\\d{5}\\.gguf"))
            throw new HubException(what + ": " + f.path() + " is one part of a split GGUF, which cmf does not read yet; "
                    + "join the parts with llama.cpp's llama-gguf-split --merge and convert the result with cmf convert");
        return new Gguf(f);
    }

    private static boolean isModelGguf(RepoFile f) {
        String n = f.name().toLowerCase(Locale.ROOT);
        return n.endsWith(".gguf") && !n.startsWith("mmproj");       // mmproj files are vision projectors, not models
    }

    static boolean isCmfMode(String quant) {
        try {
            TensorPolicy.Mode.parse(quant);
            return true;
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    private static String names(List<RepoFile> fs) {
        return String.join(", ", fs.stream().map(RepoFile::path).toList());
    }
}
