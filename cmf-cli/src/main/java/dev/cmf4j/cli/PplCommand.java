package dev.cmf4j.cli;

import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Perplexity;
import dev.cmf4j.runtime.TextCodec;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code cmf ppl FILE --file TEXT}: teacher-forced perplexity of a text, window by window, so the cost of
 * {@code --o1} and {@code --kv} is measured, not assumed ({@link Perplexity}).
 */
@Command(name = "ppl", mixinStandardHelpOptions = true,
        description = {"Teacher-forced perplexity of a text file: cut into windows, each run from a fresh context; the tokens after "
                + "each window's prompt part are scored (the part sealed --o1 layers stream)."})
public final class PplCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf model")
    Path model;

    @Option(names = "--file", required = true, paramLabel = "TEXT", description = "the text file to score (UTF-8)")
    Path text;

    @Option(names = "--window-len", paramLabel = "N", defaultValue = "512", description = "tokens per window (default ${DEFAULT-VALUE})")
    int windowLen;

    @Option(names = "--windows", paramLabel = "K", defaultValue = "0", description = "at most K windows (default: all whole windows)")
    int windows;

    @Option(names = "--prompt-len", paramLabel = "N",
            description = "tokens at the start of each window run as the prompt, exact and not scored (default: a quarter of the window)")
    Integer promptLen;

    @Option(names = "--kl-base-kv", paramLabel = "TYPE",
            description = "also run the windows with the KV cache stored as TYPE (f32, f16, q8; the same --o1) and report this run's"
                    + " KL divergence from that one, its perplexity and how often the top token agrees")
    String klBaseKv;

    @Option(names = "--json", description = "print one JSON object")
    boolean json;

    @Mixin ModelFile.Overrides overrides;

    @Override public Integer call() throws Exception {
        if (!Files.isRegularFile(text)) throw new java.nio.file.NoSuchFileException(text.toString(), null, "no such text file");
        if (klBaseKv != null && !java.util.List.of("f32", "f16", "q8").contains(klBaseKv))
            throw new IllegalArgumentException("--kl-base-kv must be f32, f16 or q8, got '" + klBaseKv + "'");
        try (Model m = overrides.open(model)) {
            int[] ids = TextCodec.of(m.file()).encode(Files.readString(text));
            int prompt = promptLen != null ? promptLen : Math.max(1, windowLen / 4);
            long t0 = System.nanoTime();
            if ("auto".equals(overrides.skill) || "auto".equals(overrides.blend))
                throw new IllegalArgumentException("ppl scores a whole file: name the skill (--skill ID) or the blend's weights");
            var target = overrides.target(m, ids, spec.commandLine().getErr());
            Perplexity.Comparison c = null;
            Perplexity.Result r;
            if (klBaseKv != null) {
                try (Model base = overrides.open(model, new CpuBackend(), overrides.memory.withKv(klBaseKv))) {
                    var baseTarget = overrides.target(base, ids, spec.commandLine().getErr());
                    c = Perplexity.compare(baseTarget.graph(), baseTarget.overlay(), target.graph(), target.overlay(), ids, windowLen,
                            prompt, windows);
                }
                r = c.test();
            } else {
                r = Perplexity.measure(target.graph(), target.overlay(), ids, windowLen, prompt, windows);
            }
            double secs = (System.nanoTime() - t0) * 1e-9;
            var mem = m.graph().memory();
            String o1 = mem.sealed() == null ? "off"
                    : mem.sealed().layers() + " (m " + mem.sealed().landmarks() + ", window " + mem.sealed().window() + ", sink " + mem.sealed().sinks() + ")";
            var out = spec.commandLine().getOut();
            if (json) {
                String kl = c == null ? "" : String.format(Locale.ROOT, ", \"kl_base_kv\": \"%s\", \"base_perplexity\": %.6f,"
                                + " \"kl_mean\": %.6g, \"kl_max\": %.6g, \"same_top\": %.6f",
                        klBaseKv, c.base().perplexity(), c.meanKl(), c.maxKl(), c.sameTop());
                out.printf(Locale.ROOT, "{\"perplexity\": %.6f, \"nll\": %.6f, \"tokens\": %d, \"windows\": %d, \"window_len\": %d,"
                                + " \"prompt_len\": %d, \"o1\": \"%s\", \"kv\": \"%s\"%s, \"seconds\": %.2f}%n",
                        r.perplexity(), r.nll(), r.tokens(), r.windows(), windowLen, prompt, mem.sealed() == null ? "off" : mem.sealed().layers(),
                        mem.kv().label(), kl, secs);
            } else {
                out.printf(Locale.ROOT, "perplexity %.4f (nll %.5f nats/token) over %d tokens in %d windows of %d (prompt %d); o1 %s; kv %s; %.1f s%n",
                        r.perplexity(), r.nll(), r.tokens(), r.windows(), windowLen, prompt, o1, mem.kv().label(), secs);
                if (c != null)
                    out.printf(Locale.ROOT, "against kv %s: perplexity %.4f (ΔPPL %+.4f); KL divergence mean %.3g nats/token, max %.3g;"
                                    + " same top token %.2f%%%n",
                            klBaseKv, c.base().perplexity(), r.perplexity() - c.base().perplexity(),
                            c.meanKl(), c.maxKl(), 100 * c.sameTop());
            }
            out.flush();
        }
        return 0;
    }
}
