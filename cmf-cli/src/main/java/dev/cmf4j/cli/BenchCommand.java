package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuInfo;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.backend.cpu.kernel.KernelMatMul;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.model.Model;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.Speculation;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;

/**
 * {@code cmf bench FILE}: prefill and decode speed the way llama-bench measures pp/tg — a prompt of
 * random ids prefilled as one chunk into an empty context (pp), and single tokens of random ids
 * decoded one after another from an empty context (tg); logits of the last token only; no sampling.
 * Each test runs {@code --warmup} times unmeasured (the JIT compiles the kernels then), then
 * {@code --reps} times; the median and the spread are reported.
 */
@Command(name = "bench", mixinStandardHelpOptions = true,
        description = {"Measure prefill and decode speed (tokens/s) of a CMF model, like llama-bench's pp and tg tests.",
                "Prompt and generated ids are random; the weights are read in place from the file."})
public final class BenchCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf model")
    Path file;

    /** The overlay every measured session runs with. */
    private dev.cmf4j.model.graph.Overlay overlay = dev.cmf4j.model.graph.Overlay.NONE;

    /** A session of the measured overlay. */
    private Session session(Graph graph, int ctx, int chunk) { return session(graph, ctx, chunk, overlay); }

    private static Session session(Graph graph, int ctx, int chunk, dev.cmf4j.model.graph.Overlay o) {
        Session s = chunk > 0 ? new Session(graph, ctx, chunk) : new Session(graph, ctx);
        s.useOverlay(o);
        return s;
    }

    @Option(names = {"-t", "--threads"}, paramLabel = "N", description = "threads (default: available processors)")
    Integer threads;

    @Option(names = {"-p", "--prompt-tokens"}, paramLabel = "N", defaultValue = "128",
            description = "prompt length of the prefill test (0 skips it; default ${DEFAULT-VALUE})")
    int promptTokens;

    @Option(names = {"-n", "--gen-tokens"}, paramLabel = "N", defaultValue = "64",
            description = "tokens of the decode test (0 skips it; default ${DEFAULT-VALUE})")
    int genTokens;

    @Option(names = {"-r", "--reps"}, paramLabel = "N", defaultValue = "3", description = "measured repetitions (default ${DEFAULT-VALUE})")
    int reps;

    @Option(names = "--warmup", paramLabel = "N", defaultValue = "1",
            description = "unmeasured runs of each test first, for the JIT (default ${DEFAULT-VALUE})")
    int warmup;

    @Option(names = "--batch", paramLabel = "B[,B...]", split = ",",
            description = {"also measure B concurrent sequences per test: each prefills its own random prompt (steps of up to"
                    + " --batch-rows rows), then all decode together, one token each per step (e.g. --batch 1,8,32,64);"
                    + " reports aggregate tokens/s"})
    int[] batch;

    @Option(names = {"-d", "--depth"}, paramLabel = "D[,D...]", split = ",",
            description = {"also measure the decode test with D random tokens already in the context (like llama-bench -d):"
                    + " prefilled unmeasured in chunks of 512, then every warm-up and repetition continues that context"})
    int[] depth;

    @Option(names = "--batch-rows", paramLabel = "N", defaultValue = "512",
            description = "most token rows one batched prefill step holds (default ${DEFAULT-VALUE})")
    int batchRows;

    @Option(names = "--ctx", paramLabel = "N",
            description = "with --batch: each sequence's context in tokens (default: its prompt and generated tokens); the"
                    + " memory a sequence holds at the end is reported (on a GPU with KV pages an unused context costs nothing)")
    Integer batchCtx;

    @Option(names = "--greedy", description = "with --batch: each sequence decodes its own greedy picks, taken where the model"
            + " runs (on a GPU only the ids come back), instead of given tokens with every logit row copied back")
    boolean greedy;

    @Option(names = "--skills", paramLabel = "ID[,ID...]",
            description = {"with --batch: sequence i reads the i-th skill of the list, round robin ('none': the backbone), so"
                    + " one step holds rows of several skills; repeat for several mixes (e.g. --skills a,b,c --skills a"
                    + " --skills none), each measured at every --batch size. Also measures each skill's first step (its"
                    + " tensors uploaded, on a GPU) against the same step with them resident"})
    java.util.List<String> skills;

    @picocli.CommandLine.Mixin DeviceOption device;

    @picocli.CommandLine.Mixin ModelFile.Overrides overrides = new ModelFile.Overrides();

    @Option(names = "--json", description = "print one JSON object instead of the table")
    boolean json;

    @picocli.CommandLine.Mixin DraftOptions draft;

    /** One test's per-repetition speeds. */
    record Samples(double[] tokensPerSecond) {
        double median() {
            double[] s = tokensPerSecond.clone();
            Arrays.sort(s);
            int n = s.length;
            return n == 0 ? Double.NaN : n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
        }

        double stddev() {
            int n = tokensPerSecond.length;
            if (n < 2) return 0;
            double mean = Arrays.stream(tokensPerSecond).average().orElse(0), v = 0;
            for (double x : tokensPerSecond) v += (x - mean) * (x - mean);
            return Math.sqrt(v / (n - 1));
        }

        double min() { return Arrays.stream(tokensPerSecond).min().orElse(Double.NaN); }

        double max() { return Arrays.stream(tokensPerSecond).max().orElse(Double.NaN); }
    }

    @Override public Integer call() throws Exception {
        if (promptTokens < 0 || genTokens < 0) throw new IllegalArgumentException("token counts must be >= 0");
        if (promptTokens == 0 && genTokens == 0)
            throw new IllegalArgumentException("nothing to measure: --prompt-tokens and --gen-tokens are both 0");
        if (reps < 1) throw new IllegalArgumentException("--reps must be >= 1");
        if (warmup < 0) throw new IllegalArgumentException("--warmup must be >= 0");
        if (batch != null)
            for (int b : batch) if (b < 1 || b > 4096) throw new IllegalArgumentException("--batch sizes must be in 1..4096, got " + b);
        if (batchRows < 1) throw new IllegalArgumentException("--batch-rows must be >= 1");
        if (depth != null)
            for (int d : depth) if (d < 1) throw new IllegalArgumentException("--depth must be >= 1, got " + d);
        if (depth != null && genTokens == 0) throw new IllegalArgumentException("--depth measures decoding: --gen-tokens must be >= 1");
        if (greedy && batch == null) throw new IllegalArgumentException("--greedy needs --batch");
        if (batchCtx != null && batch == null) throw new IllegalArgumentException("--ctx needs --batch");
        if (batchCtx != null && batchCtx < 2) throw new IllegalArgumentException("--ctx must be >= 2, got " + batchCtx);
        if (skills != null && batch == null) throw new IllegalArgumentException("--skills needs --batch");
        if (skills != null && (overrides.skill != null || overrides.blend != null))
            throw new IllegalArgumentException("--skills sets each sequence's skill: not with --skill or --blend");
        device.checkSplit();
        if (device.gpus != 1) return onGpus();
        int nThreads = threads != null ? threads : Runtime.getRuntime().availableProcessors();
        if (nThreads < 1) throw new IllegalArgumentException("--threads must be >= 1");
        // one pool for everything: the engine's process-wide pool reads cmf.threads once, on first use
        if (System.getProperty("cmf.threads") == null) System.setProperty("cmf.threads", Integer.toString(nThreads));
        WorkerPool shared = CpuBackend.pool();
        WorkerPool own = shared.threads() == nThreads ? null : new WorkerPool(nThreads);
        WorkerPool pool = own != null ? own : shared;
        PrintWriter out = spec.commandLine().getOut();
        boolean cpu = dev.cmf4j.backend.cuda.DeviceChoice.parse(device.device) == dev.cmf4j.backend.cuda.DeviceChoice.CPU;
        // --device auto without a usable GPU measures the CPU exactly as --device cpu would: on the --threads pool
        try (Backend gpu = cpu ? null : device.open(spec.commandLine().getErr())) {
            boolean onGpu = gpu != null && !gpu.device().equals("cpu");
            Backend backend = onGpu ? gpu : new CpuBackend(new KernelMatMul(pool, new CpuMatMul(pool)), pool, null);
            if (onGpu) spec.commandLine().getErr().println("device: " + gpu.description());
            usedDevice = backend.device();
            measure(backend, onGpu ? nThreads : pool.threads(), out);
        } finally {
            if (own != null) own.close();
        }
        out.flush();
        return 0;
    }

    private void measure(Backend backend, int usedThreads, PrintWriter out) throws Exception {
        try (Model model = overrides.openOne(file, backend, spec.commandLine().getErr())) {
            Graph graph = model.graph();
            overlay = overrides.overlay(graph);   // --skill, --task, --lora: every measured sequence
            long bytesPerToken = weightBytesPerToken(model);
            String dtype = dominantDtype(model);
            SplittableRandom rnd = new SplittableRandom(1234);
            int vocab = graph.vocab();
            int[] prompt = rnd.ints(promptTokens, 0, vocab).toArray();
            int[] gen = rnd.ints(genTokens, 0, vocab).toArray();

            Samples pp = null, tg = null;
            if (promptTokens > 0) {
                for (int i = 0; i < warmup; i++) prefill(graph, prompt);
                double[] s = new double[reps];
                for (int i = 0; i < reps; i++) s[i] = prefill(graph, prompt);
                pp = new Samples(s);
            }
            if (genTokens > 0) {
                for (int i = 0; i < warmup; i++) decode(graph, gen);
                double[] s = new double[reps];
                for (int i = 0; i < reps; i++) s[i] = decode(graph, gen);
                tg = new Samples(s);
            }
            java.util.List<DepthResult> deep = new java.util.ArrayList<>();
            if (depth != null)
                for (int d : depth) deep.add(atDepth(graph, d, gen, rnd));
            SkillMixes mixes = skills == null ? null : new SkillMixes(skills);
            java.util.List<SkillMixes.Switch> switches = mixes == null ? java.util.List.of() : mixes.measureSwitches(model, reps, warmup);
            java.util.List<BatchResult> batched = new java.util.ArrayList<>();
            if (batch != null)
                for (int b : batch) {
                    if (mixes == null) batched.add(batched(graph, b, rnd, null));
                    else for (var mix : mixes.mixes()) batched.add(batched(graph, b, rnd, mix));
                }
            SpecResult drafted = null;
            if (draft.on()) {
                if (genTokens < 2) throw new IllegalArgumentException("--draft measures generation: --gen-tokens must be >= 2");
                try (Model dm = draft.open(model, backend)) { drafted = speculative(model, graph, dm, prompt); }
            }
            if (json) out.println(json(dtype, usedThreads, bytesPerToken, pp, tg, deep, batched, switches, drafted));
            else {
                table(out, dtype, usedThreads, bytesPerToken, pp, tg);
                if (drafted != null) speculativeTable(out, drafted);
                if (!deep.isEmpty()) depthTable(out, deep);
                if (!switches.isEmpty()) SkillMixes.table(out, switches);
                if (!batched.isEmpty()) batchTable(out, batched);
            }
        }
    }

    /** How many GPUs the model was split over (--gpus); 1 for one device. */
    private int gpus = 1;
    /** With --gpus: the split taken ({@code tensor} or {@code layers}) and why. */
    private String splitKind, splitWhy;

    /**
     * {@code --gpus N}: pp and tg of the model split over N GPUs (tensor parallel or by layers, as --split says or the
     * model allows; the choice and its reason printed and in --json), each as the one-device test: a
     * prompt prefilled as one chunk into a fresh sequence, single tokens decoded from a fresh sequence. The batched,
     * depth, skill and draft tests are refused.
     */
    private int onGpus() throws Exception {
        if (batch != null || depth != null || skills != null || draft.on())
            throw new IllegalArgumentException("--gpus measures pp and tg only: not with --batch, --depth, --skills or --draft");
        if (overrides.skill != null || overrides.blend != null)
            throw new IllegalArgumentException("--gpus: skills are not carried to the GPUs' parts");
        PrintWriter out = spec.commandLine().getOut(), err = spec.commandLine().getErr();
        device.checkSplit();
        try (Model model = overrides.openOne(file, new CpuBackend(), err);
             var split = device.openSplit(model, err)) {
            var tp = split.graph();
            gpus = tp.parts();
            splitKind = tp.kind();
            splitWhy = split.why();
            usedDevice = "cuda";
            for (var b : split.gpus()) err.println("device: " + b.description());
            SplittableRandom rnd = new SplittableRandom(1234);
            int vocab = tp.vocab();
            int[] prompt = rnd.ints(promptTokens, 0, vocab).toArray(), gen = rnd.ints(genTokens, 0, vocab).toArray();
            float[] logits = new float[vocab];
            Samples pp = null, tg = null;
            if (promptTokens > 0) {
                double[] sp = new double[reps];
                for (int i = -warmup; i < reps; i++) {
                    var seq = tp.newSequence(promptTokens, promptTokens + 1);
                    long t0 = System.nanoTime();
                    tp.forward(seq, prompt, 0, promptTokens, logits, false);
                    if (i >= 0) sp[i] = promptTokens / ((System.nanoTime() - t0) * 1e-9);
                }
                pp = new Samples(sp);
            }
            if (genTokens > 0) {
                double[] sg = new double[reps];
                for (int i = -warmup; i < reps; i++) {
                    var seq = tp.newSequence(1, genTokens + 1);
                    long t0 = System.nanoTime();
                    for (int t = 0; t < genTokens; t++) tp.forward(seq, gen, t, 1, logits, false);
                    if (i >= 0) sg[i] = genTokens / ((System.nanoTime() - t0) * 1e-9);
                }
                tg = new Samples(sg);
            }
            long bytesPerToken = weightBytesPerToken(model);
            String dtype = dominantDtype(model);
            int hostThreads = threads != null ? threads : Runtime.getRuntime().availableProcessors();
            if (json) out.println(json(dtype, hostThreads, bytesPerToken, pp, tg, java.util.List.of(), java.util.List.of(), java.util.List.of(), null));
            else {
                usedDevice = "cuda×" + gpus;
                out.println("split: " + splitKind + " over " + gpus + " GPUs (" + splitWhy + ")");
                table(out, dtype, hostThreads, bytesPerToken, pp, tg);
            }
        }
        out.flush();
        return 0;
    }

    /** The device the measurements ran on ({@code cpu}, {@code cuda} or {@code vulkan}; never {@code auto}). */
    private String usedDevice;

    /** Tokens/s of one prefill of {@code prompt} as a single chunk into a fresh context. */
    private double prefill(Graph graph, int[] prompt) {
        try (Session s = session(graph, prompt.length + 1, prompt.length)) {   // frees a GPU KV cache at once
            long t0 = System.nanoTime();
            s.prefill(prompt);
            long t1 = System.nanoTime();
            return prompt.length / ((t1 - t0) * 1e-9);
        }
    }

    /** Tokens/s of decoding {@code ids} one at a time from a fresh context. */
    private double decode(Graph graph, int[] ids) {
        try (Session s = session(graph, ids.length + 1, 1)) {
            long t0 = System.nanoTime();
            for (int id : ids) s.decode(id);
            long t1 = System.nanoTime();
            return ids.length / ((t1 - t0) * 1e-9);
        }
    }

    /** Greedy generation speed without and with the draft (interleaved), and what the draft achieved. */
    record SpecResult(Samples plain, Samples drafted, Speculation.Stats stats, Speculation.Times times) {}

    /**
     * Greedy generation of {@code genTokens} after the prompt (at least one token of it), timed from the first token to
     * the last, plainly and with the draft, alternating; both must produce the same tokens.
     */
    private SpecResult speculative(Model model, Graph graph, Model dm, int[] prompt) {
        int[] p = prompt.length > 0 ? prompt : new int[] {0};
        double[] plain = new double[reps], withDraft = new double[reps];
        Speculation.Stats stats = null;
        Speculation.Times times = null;
        for (int i = -warmup; i < reps; i++) {
            try (Session s = session(graph, p.length + genTokens + 1, 0)) {
                long[] t = new long[2];
                Generator.Result r = new Generator(s, new Sampler(SamplingParams.GREEDY), java.util.Set.of(), java.util.List.of())
                        .generate(p, genTokens, null, firstAndLast(t));
                double a = (r.tokens().length - 1) / ((t[1] - t[0]) * 1e-9);
                try (Session s2 = session(graph, p.length + genTokens + 1, 0)) {
                    Speculation sp = draft.speculation(model, dm, p.length + genTokens + 1, SamplingParams.GREEDY);
                    long[] u = new long[2];
                    Generator.Result r2 = sp.generate(new Generator(s2, new Sampler(SamplingParams.GREEDY), java.util.Set.of(), java.util.List.of()),
                            p, genTokens, null, firstAndLast(u));
                    if (!Arrays.equals(r.tokens(), r2.tokens()))
                        throw new IllegalStateException("speculative decoding generated other tokens than plain greedy decoding");
                    if (i >= 0) {
                        plain[i] = a;
                        withDraft[i] = (r2.tokens().length - 1) / ((u[1] - u[0]) * 1e-9);
                        stats = sp.stats(r2.tokens().length);
                        times = sp.times();
                    }
                }
            }
        }
        return new SpecResult(new Samples(plain), new Samples(withDraft), stats, times);
    }

    private static Generator.Listener firstAndLast(long[] t) {
        return new Generator.Listener() {
            @Override public void token(int id) {
                long now = System.nanoTime();
                if (t[0] == 0) t[0] = now;
                t[1] = now;
            }
        };
    }

    private void speculativeTable(PrintWriter out, SpecResult r) {
        out.printf(Locale.ROOT, "greedy generation of %d tokens, first to last token: plain %.2f ± %.2f t/s, with --draft %s (k %d)"
                        + " %.2f ± %.2f t/s (%.2f×)%n", genTokens, r.plain().median(), r.plain().stddev(), draft.label(),
                draft.draftMax, r.drafted().median(), r.drafted().stddev(), r.drafted().median() / r.plain().median());
        out.println(DraftOptions.describe(r.stats()));
    }

    /** Decode speed with {@code depth} tokens in the context; the sequence's state bytes there (-1: a growing KV cache). */
    record DepthResult(int depth, Samples decode, long stateBytes, long heldBytes) {}

    /** The decode test after {@code depth} random tokens: one context, every warm-up and repetition continuing it. */
    private DepthResult atDepth(Graph graph, int depth, int[] ids, SplittableRandom rnd) {
        int[] prefix = rnd.ints(depth, 0, graph.vocab()).toArray();
        double[] s = new double[reps];
        long bytes, held;
        try (Session session = session(graph, depth + (warmup + reps) * ids.length + 1, Math.min(512, depth))) {
            long t0 = System.nanoTime();
            if (graph.memory().sealed() != null && depth > 512) {
                // sealed layers: the first chunk runs exact, then they seal and the rest streams in (linear time)
                session.prefill(java.util.Arrays.copyOf(prefix, 512));
                session.state().seal();
                session.prefill(java.util.Arrays.copyOfRange(prefix, 512, depth));
            } else {
                session.prefill(prefix);
            }
            spec.commandLine().getErr().printf(Locale.ROOT, "bench: depth %d prefilled in %.1f s%n", depth, (System.nanoTime() - t0) * 1e-9);
            for (int r = -warmup; r < reps; r++) {
                long t1 = System.nanoTime();
                for (int id : ids) session.decode(id);
                if (r >= 0) s[r] = ids.length / ((System.nanoTime() - t1) * 1e-9);
            }
            bytes = session.state().stateBytes();
            held = session.state().heldBytes();
        }
        return new DepthResult(depth, new Samples(s), bytes, held);
    }

    /** The depth runs; "held": the attention state as allocated (on a GPU: the sequence's device memory, scratch included). */
    private void depthTable(PrintWriter out, java.util.List<DepthResult> results) {
        String fmt = "| %9s | %-8s | %22s | %18s | %18s |%n";
        out.printf(Locale.ROOT, "%n" + fmt, "depth", "test", "t/s (median ± sd)", "state B/sequence", "held B/sequence");
        out.printf(Locale.ROOT, "|%s|%s|%s|%s|%s|%n", "-".repeat(11), "-".repeat(10), "-".repeat(24), "-".repeat(20), "-".repeat(20));
        for (DepthResult r : results)
            out.printf(Locale.ROOT, fmt, r.depth(), "tg" + genTokens, cell(r.decode()),
                    r.stateBytes() >= 0 ? String.format(Locale.ROOT, "%,d", r.stateBytes()) : "grows",
                    r.heldBytes() >= 0 ? String.format(Locale.ROOT, "%,d", r.heldBytes()) : "-");
    }

    /** Aggregate speeds of {@code sequences} concurrent sequences (null when that test was skipped); the skill mix or null. */
    /** {@code heldBytes}: the memory one sequence of {@code context} tokens held at the end (the mean over the batch). */
    record BatchResult(int sequences, Samples prefill, Samples decode, String skills, int context, long heldBytes) {}

    /**
     * {@code b} sequences with random prompts: all prompts prefilled through one batch driver (steps of up to
     * --batch-rows rows), then {@code --gen-tokens} steps of one random token per sequence; tokens/s over all.
     */
    private BatchResult batched(Graph graph, int b, SplittableRandom rnd, java.util.List<String> mix) {
        var overlays = mix == null ? null : SkillMixes.overlays(graph, mix, b);
        int vocab = graph.vocab(), ctx = Math.max(promptTokens + genTokens + 1, batchCtx == null ? 0 : batchCtx);
        int[][] prompts = new int[b][];
        for (int i = 0; i < b; i++) prompts[i] = rnd.ints(Math.max(1, promptTokens), 0, vocab).toArray();
        int[][] steps = new int[genTokens][];
        for (int g = 0; g < genTokens; g++) steps[g] = rnd.ints(b, 0, vocab).toArray();
        var driver = new dev.cmf4j.runtime.BatchDriver(graph, Math.max(batchRows, b), ctx);
        double[] pp = new double[reps], tg = new double[reps];
        long held = 0;
        for (int r = -warmup; r < reps; r++) {
            Session[] ss = new Session[b];
            try {
                for (int i = 0; i < b; i++) ss[i] = overlays == null ? session(graph, ctx, 0) : session(graph, ctx, 0, overlays[i]);
                long t0 = System.nanoTime();
                driver.prefill(ss, prompts, batchRows);
                long t1 = System.nanoTime();
                int[][] ids = new int[b][1];
                for (int i = 0; i < b; i++) ids[i][0] = steps[0][i];
                for (int g = 0; g < genTokens; g++) {
                    if (greedy) {
                        int[] picks = driver.stepGreedy(ss, ids);
                        for (int i = 0; i < b; i++) ids[i][0] = picks[i];
                    } else {
                        for (int i = 0; i < b; i++) ids[i][0] = steps[g][i];
                        driver.step(ss, ids);
                    }
                }
                long t2 = System.nanoTime();
                double p = (double) b * prompts[0].length / ((t1 - t0) * 1e-9), d = (double) b * genTokens / ((t2 - t1) * 1e-9);
                if (r >= 0) { pp[r] = p; tg[r] = d; }
                held = 0;
                for (Session s : ss) held += s.state().heldBytes();
                held /= b;
                // progress: a batch of 64 on a CPU takes minutes
                spec.commandLine().getErr().printf(Locale.ROOT, "bench: %d sequences%s, %s: prefill %.1f tok/s, decode %.1f tok/s%n",
                        b, mix == null ? "" : " of skills " + String.join(",", mix), r < 0 ? "warm-up" : "rep " + (r + 1) + "/" + reps, p, d);
            } finally {
                for (Session s : ss) if (s != null) s.close();   // frees GPU KV caches at once
            }
        }
        return new BatchResult(b, promptTokens > 0 ? new Samples(pp) : null, genTokens > 0 ? new Samples(tg) : null,
                mix == null ? null : String.join(",", mix), ctx, held);
    }

    private void batchTable(PrintWriter out, java.util.List<BatchResult> results) {
        String fmt = "| %9s | %-12s | %24s | %24s | %8s | %13s |%n";
        out.printf(Locale.ROOT, "%n" + fmt, "sequences", "skills", "prefill t/s (all, ± sd)", "decode t/s (all, ± sd)", "context",
                "MiB/sequence");
        out.printf(Locale.ROOT, "|%s|%s|%s|%s|%s|%s|%n", "-".repeat(11), "-".repeat(14), "-".repeat(26), "-".repeat(26), "-".repeat(10),
                "-".repeat(15));
        for (BatchResult r : results)
            out.printf(Locale.ROOT, fmt, r.sequences(), r.skills() == null ? "-" : r.skills(), cell(r.prefill()), cell(r.decode()),
                    r.context(), String.format(Locale.ROOT, "%.1f", r.heldBytes() / 1048576.0));
    }

    private static String cell(Samples s) {
        return s == null ? "-" : String.format(Locale.ROOT, "%.2f ± %.2f", s.median(), s.stddev());
    }

    /** Bytes of weights one decode step reads: every matrix, the embedding table only when it is also the head. */
    static long weightBytesPerToken(Model model) {
        var spec = model.spec();
        long total = 0;
        for (TensorEntry t : model.file().tensors()) {
            if (t.ndim() < 2) continue;
            if (t.name().equals(spec.embedding()) && !t.name().equals(spec.head())) continue;  // one row read per token
            if (t.name().startsWith("skill.")) continue;
            total += t.nbytes();
        }
        return total;
    }

    /** The dtype holding most bytes of the model's matrices. */
    static String dominantDtype(Model model) {
        Map<DType, Long> bytes = new EnumMap<>(DType.class);
        for (TensorEntry t : model.file().tensors())
            if (t.ndim() >= 2) bytes.merge(t.dtype(), t.nbytes(), Long::sum);
        return bytes.entrySet().stream().max(Map.Entry.comparingByValue()).map(e -> e.getKey().label).orElse("none");
    }

    private String json(String dtype, int nThreads, long bytesPerToken, Samples pp, Samples tg,
                        java.util.List<DepthResult> deep, java.util.List<BatchResult> batched,
                        java.util.List<SkillMixes.Switch> switches, SpecResult drafted) throws Exception {
        ObjectMapper m = new ObjectMapper();
        ObjectNode o = m.createObjectNode();
        o.put("file", file.toString());
        o.put("device", usedDevice);
        if (gpus > 1) o.put("gpus", gpus).put("split", splitKind).put("split_reason", splitWhy);
        o.put("dtype", dtype);
        o.put("threads", nThreads);
        o.put("prompt_tokens", promptTokens);
        o.put("gen_tokens", genTokens);
        o.put("reps", reps);
        o.put("warmup", warmup);
        o.put("weight_bytes_per_token", bytesPerToken);
        if (pp != null) put(o, "prefill", pp);
        if (tg != null) {
            put(o, "decode", tg);
            o.put("decode_weight_gb_per_s", round(tg.median() * bytesPerToken / 1e9));
        }
        if (!deep.isEmpty()) {
            ArrayNode a = o.putArray("depth");
            for (DepthResult r : deep) {
                ObjectNode d = a.addObject();
                d.put("depth", r.depth());
                put(d, "decode", r.decode());
                if (r.stateBytes() >= 0) d.put("state_bytes_per_sequence", r.stateBytes());
                if (r.heldBytes() >= 0) d.put("attention_bytes_per_sequence", r.heldBytes());
            }
        }
        if (!batched.isEmpty()) {
            o.put("batch_rows", batchRows);
            ArrayNode a = o.putArray("batch");
            for (BatchResult r : batched) {
                ObjectNode b = a.addObject();
                b.put("sequences", r.sequences());
                b.put("context", r.context());
                b.put("held_bytes_per_sequence", r.heldBytes());
                if (r.skills() != null) b.put("skills", r.skills());
                if (r.decode() != null) put(b, "decode", r.decode());
                if (r.prefill() != null) put(b, "prefill", r.prefill());
            }
        }
        if (!switches.isEmpty()) SkillMixes.json(o.putArray("skill_switch"), switches);
        if (drafted != null) {
            ObjectNode d = o.putObject("speculative");
            d.put("draft", draft.draft.toString());
            d.put("draft_max", draft.draftMax);
            put(d, "plain", drafted.plain());
            put(d, "draft", drafted.drafted());   // greedy generation with the draft, not the draft model alone
            d.put("speedup", round(drafted.drafted().median() / drafted.plain().median()));
            d.put("drafted", drafted.stats().drafted());
            d.put("accepted", drafted.stats().accepted());
            d.put("acceptance", round(drafted.stats().acceptance()));
            d.put("tokens_per_step", round(drafted.stats().tokensPerStep()));
            // the last drafted generation's wall time by part: where a round goes
            Speculation.Stats st = drafted.stats();
            Speculation.Times tm = drafted.times();
            d.put("rounds", st.rounds());
            d.put("plain_steps", st.plainSteps());
            d.put("drafting_ms_per_round", round(tm.drafting() / 1e6 / Math.max(1, st.rounds())));
            d.put("verifying_ms_per_round", round(tm.verifying() / 1e6 / Math.max(1, st.rounds())));
            d.put("ms_per_plain_step", round(tm.plain() / 1e6 / Math.max(1, st.plainSteps())));
        }
        o.put("java", Runtime.version().toString());
        CpuInfo host = CpuInfo.host();   // speed compares only on the same CPU: say which one ran
        o.put("vector_bits", host.vectorBits());
        ObjectNode c = o.putObject("cpu").put("name", host.name()).put("identity", host.identity()).put("processors", host.processors());
        host.features().forEach(c.putArray("features")::add);
        return m.writeValueAsString(o);
    }

    private static void put(ObjectNode o, String test, Samples s) {
        o.put(test + "_tokens_per_s", round(s.median()));
        o.put(test + "_tokens_per_s_stddev", round(s.stddev()));
        o.put(test + "_tokens_per_s_min", round(s.min()));
        o.put(test + "_tokens_per_s_max", round(s.max()));
        ArrayNode a = o.putArray(test + "_samples");
        for (double v : s.tokensPerSecond()) a.add(round(v));
    }

    private static double round(double v) {
        return Math.round(v * 1000) / 1000.0;
    }

    private void table(PrintWriter out, String dtype, int nThreads, long bytesPerToken, Samples pp, Samples tg) {
        String name = file.getFileName().toString();
        String size = bytesPerToken >= 1e9 ? String.format(Locale.ROOT, "%.2f GB", bytesPerToken / 1e9)
                : String.format(Locale.ROOT, "%.1f MB", bytesPerToken / 1e6);
        String fmt = "| %-28s | %-8s | %9s | %-6s | %7s | %-6s | %20s |%n";
        out.printf(Locale.ROOT, fmt, "model", "dtype", "weights", "device", "threads", "test", "t/s (median ± sd)");
        out.printf(Locale.ROOT, "|%s|%s|%s|%s|%s|%s|%s|%n", "-".repeat(30), "-".repeat(10), "-".repeat(11), "-".repeat(8),
                "-".repeat(9), "-".repeat(8), "-".repeat(22));
        if (pp != null) out.printf(Locale.ROOT, fmt, name, dtype, size, usedDevice, nThreads, "pp" + promptTokens,
                String.format(Locale.ROOT, "%.2f ± %.2f", pp.median(), pp.stddev()));
        if (tg != null) out.printf(Locale.ROOT, fmt, name, dtype, size, usedDevice, nThreads, "tg" + genTokens,
                String.format(Locale.ROOT, "%.2f ± %.2f", tg.median(), tg.stddev()));
        if (tg != null)
            out.printf(Locale.ROOT, "decode reads %.2f GB of weights per token: %.2f GB/s at the median%n",
                    bytesPerToken / 1e9, tg.median() * bytesPerToken / 1e9);
        out.println("host: " + CpuInfo.host().describe() + "; Java " + Runtime.version());
    }
}
