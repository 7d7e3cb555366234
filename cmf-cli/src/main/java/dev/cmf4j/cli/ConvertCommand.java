package dev.cmf4j.cli;

import dev.cmf4j.convert.Converter;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.Progress;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code cmf convert SRC -o OUT.cmf [--quant ...] [--keep GLOB=DTYPE]... | --dry-run}: HF folder or GGUF file to CMF. */
@Command(name = "convert", mixinStandardHelpOptions = true,
        description = {"Convert a Hugging Face checkpoint folder or a GGUF file into one CMF file.",
                "The folder needs config.json and model.safetensors (or a sharded model.safetensors.index.json); "
                        + "tokenizer.json(.gz), tokenizer_config.json, chat_template.jinja and generation_config.json "
                        + "are picked up when present. See docs/CONVERT.md."})
public final class ConvertCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "SRC", description = "Hugging Face checkpoint folder, or a .gguf file")
    Path src;

    @Option(names = {"-o", "--output"}, paramLabel = "OUT.cmf", description = "the CMF file to write (required unless --dry-run)")
    Path out;

    @Option(names = "--dry-run", description = "print what would be written (architecture, tensors by dtype, bytes) and write nothing")
    boolean dryRun;

    @Option(names = {"-q", "--quant"}, paramLabel = "MODE", defaultValue = "auto",
            description = "auto (keep the source float type; the closest CMF dtype per quantized source type), f32, f16, bf16, q8_row, q8_2f, q4_block, q4tp (default: ${DEFAULT-VALUE})")
    String quant;

    @Option(names = "--keep", paramLabel = "GLOB=DTYPE",
            description = "store tensors whose name matches GLOB (* and ?) as DTYPE; repeatable, the last match wins")
    List<String> keep = new ArrayList<>();

    @Option(names = {"-t", "--threads"}, paramLabel = "N", description = "encoding threads (default: all cores)")
    Integer threads;

    @Option(names = "--memory-mb", paramLabel = "MB", defaultValue = "768",
            description = "encoded payload kept in memory at once (default: ${DEFAULT-VALUE}); bigger tensors go through a scratch file")
    long memoryMb;

    @Option(names = "--progress", paramLabel = "STYLE", defaultValue = "auto",
            description = "auto (a bar on a terminal, plain lines otherwise), bar, lines or none")
    String progress;

    @Option(names = {"-f", "--force"}, description = "overwrite OUT if it exists")
    boolean force;

    @Override public Integer call() {
        TensorPolicy.Mode mode;
        List<TensorPolicy.Keep> keeps = new ArrayList<>();
        try {
            mode = TensorPolicy.Mode.parse(quant);
            for (String k : keep) keeps.add(TensorPolicy.Keep.parse(k));
        } catch (IllegalArgumentException e) {
            throw new ParameterException(spec.commandLine(), e.getMessage());
        }
        if (dryRun) return dryRun(Converter.Options.of(new TensorPolicy(mode, keeps)));
        if (out == null) throw new ParameterException(spec.commandLine(), "missing -o OUT.cmf (or --dry-run)");
        if (Files.exists(out) && !force)
            throw new ParameterException(spec.commandLine(), out + " exists; pass --force to overwrite it");
        if (Files.isDirectory(out)) throw new ParameterException(spec.commandLine(), out + " is a folder");
        Progress p = ProgressStyle.parse(progress, spec.commandLine()).conversion();
        Converter.Options opts = Converter.Options.of(new TensorPolicy(mode, keeps)).withProgress(p)
                .withMemoryBudget(Math.max(1, memoryMb) << 20);
        if (threads != null) opts = opts.withThreads(Math.max(1, threads));
        Converter.Result r;
        try (ModelSource s = Sources.open(src)) {
            r = Converter.convert(s, out, opts);
        }
        PrintWriter o = spec.commandLine().getOut();
        o.printf(Locale.ROOT, "wrote %s: %d tensors, %.1f MB payload %s (%.1f s)%n", r.file(), r.tensors(),
                r.payloadBytes() / 1e6, r.dtypeCounts(), r.seconds());
        o.flush();
        return 0;
    }

    /** {@code --dry-run}: the source read for its metadata only, the plan printed, nothing written. */
    private int dryRun(Converter.Options opts) {
        Converter.Plan p;
        try (ModelSource s = Sources.open(src)) {
            p = Converter.plan(s, opts);
        }
        PrintWriter o = spec.commandLine().getOut();
        o.printf(Locale.ROOT, "dry run (nothing written): %s%s%n", src, out == null ? "" : " -> " + out);
        o.printf(Locale.ROOT, "arch %s, quant type %s%n", p.arch(), p.quantType());
        o.printf(Locale.ROOT, "would write %d tensors, %.1f MB payload (from %.1f MB of source tensors)%n", p.tensors().size(),
                p.payloadBytes() / 1e6, p.sourceBytes() / 1e6);
        p.payloadByDtype().forEach((d, bytes) ->
                o.printf(Locale.ROOT, "  %-9s %6d tensors %12.1f MB%n", d, p.dtypeCounts().get(d), bytes / 1e6));
        o.flush();
        return 0;
    }
}
