package dev.cmf4j.cli;

import dev.cmf4j.hub.Hub;
import dev.cmf4j.hub.HubSettings;
import dev.cmf4j.hub.HubUri;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code cmf pull hf://ORG/REPO[@REV] [--quant Q] [--file NAME.gguf] [-o OUT.cmf]}: download from the Hub, convert once. */
@Command(name = "pull", mixinStandardHelpOptions = true,
        description = {"Download a model from the Hugging Face Hub and convert it to CMF once; prints the CMF's path.",
                "Fetches only what the converter reads (config.json, the safetensors weights, tokenizer and chat files, or one "
                        + "GGUF file) into the Hub's cache (shared with Python tools), resumes cut downloads, checks every "
                        + "file's size and hash, and keeps the CMF in the cache, so a second pull is instant. "
                        + "HF_TOKEN (or the token file of 'hf auth login') is sent for private and gated repositories; "
                        + "HF_HUB_OFFLINE=1 uses the cache only. See docs/HUB.md."})
public final class PullCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "hf://ORG/REPO[@REV]", description = "the repository, at a branch, tag or commit (default main)")
    String model;

    @Option(names = {"-q", "--quant"}, paramLabel = "Q",
            description = "a cmf quantization (auto, f32, f16, bf16, q8_row, q8_2f, q4_block, q4tp; default auto keeps the "
                    + "source's float type), or a GGUF type (Q4_K_M, Q8_0, ...) choosing that GGUF file of the repository")
    String quant;

    @Option(names = "--file", paramLabel = "NAME.gguf", description = "convert this GGUF file of the repository")
    String file;

    @Option(names = {"-o", "--output"}, paramLabel = "OUT.cmf", description = "also place the CMF here (a hard link to the cached file where possible)")
    Path out;

    @Option(names = {"-f", "--force"}, description = "overwrite OUT if it exists")
    boolean force;

    @Option(names = "--cache-dir", paramLabel = "DIR", description = "the Hub cache (default: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)")
    Path cacheDir;

    @Option(names = "--endpoint", paramLabel = "URL", description = "the Hub (default: $HF_ENDPOINT, else https://huggingface.co)")
    URI endpoint;

    @Option(names = "--connections", paramLabel = "N", defaultValue = "8", description = "parallel downloads (default: ${DEFAULT-VALUE})")
    int connections;

    @Option(names = {"-t", "--threads"}, paramLabel = "N", description = "conversion threads (default: all cores)")
    Integer threads;

    @Option(names = "--progress", paramLabel = "STYLE", defaultValue = "auto",
            description = "auto (a bar on a terminal, plain lines otherwise), bar, lines or none")
    String progress;

    @Override public Integer call() {
        HubUri uri;
        try {
            uri = HubUri.parse(model);
        } catch (RuntimeException e) {
            throw new ParameterException(spec.commandLine(), e.getMessage());
        }
        if (out != null && Files.exists(out) && !force)
            throw new ParameterException(spec.commandLine(), out + " exists; pass --force to overwrite it");
        if (out != null && Files.isDirectory(out)) throw new ParameterException(spec.commandLine(), out + " is a folder");
        if (connections < 1) throw new ParameterException(spec.commandLine(), "--connections must be at least 1");
        ProgressStyle style = ProgressStyle.parse(progress, spec.commandLine());

        HubSettings s = HubSettings.fromEnvironment().withConnections(connections);
        if (endpoint != null) s = s.withEndpoint(endpoint);
        if (cacheDir != null) s = s.withCache(cacheDir);
        Hub.Options o = Hub.Options.of(quant).withFile(file).withProgress(style.download(), style.conversion());
        if (threads != null) o = o.withThreads(Math.max(1, threads));
        Hub.Pulled p;
        try (Hub hub = new Hub(s)) {
            p = hub.pull(uri, o);
        }

        PrintWriter err = spec.commandLine().getErr();
        err.printf(Locale.ROOT, "%s %s%n", p.reused() ? "cached" : "pulled", p.source()
                + (p.downloadedBytes() > 0 ? String.format(Locale.ROOT, " (%.1f MB downloaded)", p.downloadedBytes() / 1e6) : ""));
        err.flush();
        Path result = p.cmf();
        if (out != null) {
            place(p.cmf(), out);
            result = out;
        }
        PrintWriter o2 = spec.commandLine().getOut();
        o2.println(result);
        o2.flush();
        return 0;
    }

    /** A hard link to the cached CMF (no second copy of a large file), else a copy. */
    private static void place(Path cached, Path out) {
        try {
            Path parent = out.toAbsolutePath().getParent();
            if (parent != null) Files.createDirectories(parent);
            Files.deleteIfExists(out);
            try {
                Files.createLink(out, cached);
            } catch (IOException | UnsupportedOperationException e) {
                Files.copy(cached, out, StandardCopyOption.REPLACE_EXISTING);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write " + out + ": " + e.getMessage(), e);
        }
    }
}
