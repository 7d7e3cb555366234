package dev.cmf4j.bench;

import dev.cmf4j.text.Tokenizer;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.options.CommandLineOptions;
import org.openjdk.jmh.runner.options.OptionsBuilder;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collection;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.zip.GZIPInputStream;

/**
 * Tokenizer speed: single-thread {@code encode} throughput over one mixed text of at least 1 MB
 * (see {@link BenchCorpus}), and the time to load each fixture tokenizer.json.
 *
 * <pre>
 *   CMF_FIXTURES=../shared/fixtures java -cp cmf-bench/target/benchmarks.jar dev.cmf4j.bench.TokenizerBench
 *       [-Dcmf.bench.corpusOut=corpus.txt]   # also write the corpus, to run another tokenizer on the same text
 * </pre>
 * Prints MB/s (UTF-8 bytes of input per second) and milliseconds per load after JMH's own report.
 */
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = {"-Xmx3g"})
public class TokenizerBench {
    @Param({"llama3", "qwen3", "gemma3"})
    public String tokenizer;

    Tokenizer tok;
    String corpus;
    /** The corpus cut at each "\n" (which is dropped): many short encodes, as a server sees them. */
    String[] lines;

    static Path fixtures() {
        String p = System.getProperty("cmf.fixtures", System.getenv("CMF_FIXTURES"));
        if (p == null) p = "../shared/fixtures";
        return Path.of(p);
    }

    static byte[] tokenizerJson(String name) {
        try {
            return new GZIPInputStream(Files.newInputStream(fixtures().resolve("tokenizers/" + name + "/tokenizer.json.gz"))).readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException("need the tokenizer fixtures (CMF_FIXTURES): " + e.getMessage(), e);
        }
    }

    @Setup(Level.Trial)
    public void setup() {
        tok = Tokenizer.fromJson(tokenizerJson(tokenizer));
        corpus = BenchCorpus.mixed(fixtures(), 1_000_000);
        lines = corpus.split("\n", -1);
    }

    /** One encode of the whole corpus, without special tokens. */
    @Benchmark
    @BenchmarkMode(Mode.AverageTime)
    @OutputTimeUnit(TimeUnit.MILLISECONDS)
    public int[] encode() {
        return tok.encodeIds(corpus, false);
    }

    /** One encode per line of the corpus. */
    @Benchmark
    @BenchmarkMode(Mode.AverageTime)
    @OutputTimeUnit(TimeUnit.MILLISECONDS)
    public int encodeLines() {
        int n = 0;
        for (String line : lines) n += tok.encodeIds(line, false).length;
        return n;
    }

    /** The tokenizer.json bytes (already decompressed) of one tokenizer. */
    @State(Scope.Benchmark)
    public static class Json {
        @Param({"llama3", "qwen3", "gemma3"})
        public String tokenizer;
        byte[] bytes;

        @Setup(Level.Trial)
        public void setup() {
            bytes = tokenizerJson(tokenizer);
        }
    }

    /** Parsing a tokenizer.json into a ready tokenizer; the first iterations include JIT warm-up. */
    @Benchmark
    @BenchmarkMode(Mode.SingleShotTime)
    @OutputTimeUnit(TimeUnit.MILLISECONDS)
    @Warmup(iterations = 3)
    @Measurement(iterations = 10)
    public Tokenizer load(Json json) {
        return Tokenizer.fromJson(json.bytes);
    }

    public static void main(String[] args) throws Exception {
        String out = System.getProperty("cmf.bench.corpusOut");
        String corpus = BenchCorpus.mixed(fixtures(), 1_000_000);
        int bytes = corpus.getBytes(StandardCharsets.UTF_8).length;
        if (out != null) Files.writeString(Path.of(out), corpus, StandardCharsets.UTF_8);
        OptionsBuilder ob = new OptionsBuilder();
        CommandLineOptions cli = new CommandLineOptions(args);
        ob.parent(cli);
        if (cli.getIncludes().isEmpty()) ob.include(TokenizerBench.class.getName().replace(".", "\\.") + "\\.");
        ob.jvmArgsAppend("-Dcmf.fixtures=" + fixtures().toAbsolutePath());
        Collection<RunResult> results = new Runner(ob.build()).run();
        System.out.printf(Locale.ROOT, "%ncorpus: %d UTF-8 bytes, %d chars%n", bytes, corpus.length());
        for (RunResult r : results) {
            String bench = r.getParams().getBenchmark().replaceAll(".*\\.", "");
            String name = r.getParams().getParam("tokenizer");
            double ms = r.getPrimaryResult().getScore();
            if (bench.startsWith("encode")) {
                int b = bench.equals("encode") ? bytes : bytes - (corpus.split("\n", -1).length - 1);
                System.out.printf(Locale.ROOT, "%-8s %-11s %8.1f ms per corpus = %6.2f MB/s%n", name, bench, ms, b / (ms * 1e-3) / 1e6);
            } else {
                System.out.printf(Locale.ROOT, "%-8s load   %8.1f ms (mean of %d single shots)%n", name, ms, r.getPrimaryResult().getSampleCount());
            }
        }
    }
}
