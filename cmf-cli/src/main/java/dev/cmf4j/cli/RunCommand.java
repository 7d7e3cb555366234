package dev.cmf4j.cli;

import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.Speculation;
import dev.cmf4j.runtime.TextCodec;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/** {@code cmf run [FILE] -p TEXT [--chat] [-n N] [sampling flags]}: text in, streamed text out. */
@Command(name = "run", mixinStandardHelpOptions = true,
        description = {"Generate text from a prompt, streaming it as it is produced.",
                "Uses the tokenizer and chat template stored in the file. Without FILE, runs the bundled "
                        + "default model (models/default.cmf)."})
public final class RunCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", arity = "0..1", paramLabel = "FILE", description = "the .cmf model (default: the bundled model)")
    Path file;

    @Mixin ModelFile.Overrides overrides;

    @Option(names = {"-p", "--prompt"}, required = true, paramLabel = "TEXT", description = "the prompt")
    String prompt;

    @Option(names = "--chat", description = "wrap the prompt as a user message with the model's chat template")
    boolean chat;

    @Option(names = "--system", paramLabel = "TEXT", description = "a system message (with --chat)")
    String system;

    @Option(names = "--no-think", description = "pass enable_thinking=false to the chat template (Qwen3)")
    boolean noThink;

    @Option(names = {"-n", "--max-tokens"}, paramLabel = "N", defaultValue = "256", description = "most tokens to generate (default ${DEFAULT-VALUE})")
    int maxTokens;

    @Option(names = "--ctx", paramLabel = "N", defaultValue = "4096", description = "context limit in tokens (default ${DEFAULT-VALUE}, capped by the model)")
    int ctx;

    @Option(names = "--state-in", paramLabel = "F",
            description = "continue the sequence saved in F (by --state-out, same model and --o1/--kv settings): the prompt follows it")
    Path stateIn;

    @Option(names = "--state-out", paramLabel = "F",
            description = "save the sequence (state snapshot: KV caches or sealed layers, and the ids) to F after generating")
    Path stateOut;

    @Option(names = "--stop", paramLabel = "TEXT", description = "stop when this text appears (repeatable)")
    List<String> stops = new ArrayList<>();

    @Option(names = {"-v", "--verbose"}, description = "print token counts and speed to standard error")
    boolean verbose;

    @Mixin SamplingOptions sampling;

    @Mixin DraftOptions draft;

    @Mixin DeviceOption device;

    @Override public Integer call() throws Exception {
        device.checkSplit();
        if (device.gpus != 1) return onGpus();
        try (var dev = device.open(spec.commandLine().getErr());
             Model m = overrides.openOne(file, dev, spec.commandLine().getErr());
             Model dm = draft.open(m, dev)) {
            TextCodec codec = TextCodec.of(m.file());
            int[] ids = promptIds(codec);
            SamplingParams p = sampling.params(SamplingParams.defaults());
            var target = overrides.target(m, ids, spec.commandLine().getErr());   // --skill auto and --blend pick here
            Session s = new Session(target.graph(), ctx);
            s.useOverlay(target.overlay());
            if (stateIn != null) StateFile.load(stateIn, s::importState);
            PrintWriter out = spec.commandLine().getOut();
            long t0 = System.nanoTime();
            long[] firstToken = {0, 0};   // nanoTime, and wall clock ms for the time since the JVM started
            Generator gen = new Generator(s, new Sampler(p), codec.eosIds(), stops);
            Generator.Listener listener = new Generator.Listener() {
                @Override public void token(int id) {
                    if (firstToken[0] == 0) { firstToken[0] = System.nanoTime(); firstToken[1] = System.currentTimeMillis(); }
                }

                @Override public void text(String piece) { out.print(piece); out.flush(); }
            };
            Speculation sp = draft.on() ? draft.speculation(m, dm, ctx, p) : null;
            Generator.Result r = sp == null ? gen.generate(ids, maxTokens, codec.stream(true), listener)
                    : sp.generate(gen, ids, maxTokens, codec.stream(true), listener);
            out.println();
            out.flush();
            if (stateOut != null) StateFile.save(stateOut, s::exportState);
            if (verbose) {
                long t1 = System.nanoTime();
                double prefill = (firstToken[0] - t0) / 1e9, decode = (t1 - firstToken[0]) / 1e9;
                spec.commandLine().getErr().printf("[prompt %d tokens in %.2fs (%.1f tok/s); generated %d tokens in %.2fs (%.1f tok/s); stop: %s]%n",
                        ids.length, prefill, ids.length / prefill, r.tokens().length, decode,
                        Math.max(0, r.tokens().length - 1) / Math.max(decode, 1e-9), r.reason().name().toLowerCase(java.util.Locale.ROOT));
                if (sp != null) spec.commandLine().getErr().println(DraftOptions.describe(sp.stats(r.tokens().length)));
                long started = java.lang.management.ManagementFactory.getRuntimeMXBean().getStartTime();
                spec.commandLine().getErr().printf("[first token %.2fs after the JVM started]%n", (firstToken[1] - started) / 1e3);
            }
        }
        return 0;
    }

    /**
     * {@code --gpus N}: the prompt and the generation through the model split over N GPUs (tensor parallel or by layers,
     * as --split says), sampled as a plain run samples; what the split does not carry (drafts, state files, skills,
     * stop strings) is refused.
     */
    private int onGpus() throws Exception {
        PrintWriter err = spec.commandLine().getErr();
        if (draft.on()) throw new IllegalArgumentException("--gpus: --draft is not supported across GPUs");
        if (stateIn != null || stateOut != null) throw new IllegalArgumentException("--gpus: state files are not supported across GPUs");
        if (!stops.isEmpty()) throw new IllegalArgumentException("--gpus: --stop is not supported across GPUs");
        if (overrides.skill != null || overrides.blend != null)
            throw new IllegalArgumentException("--gpus: skills are not carried to the GPUs' parts");
        device.checkSplit();
        try (Model m = overrides.openOne(file, new dev.cmf4j.backend.cpu.CpuBackend(), err);
             var split = device.openSplit(m, err)) {
            var tp = split.graph();
            err.println("cmf: --gpus " + tp.parts() + ": split by " + tp.kind() + " (" + split.why() + ")");
            TextCodec codec = TextCodec.of(m.file());
            int[] ids = promptIds(codec);
            int limit = Math.min(ctx, m.spec().maxPositions());
            if (ids.length == 0) throw new IllegalArgumentException("empty prompt");
            if (ids.length >= limit) throw new IllegalArgumentException("the prompt of " + ids.length + " tokens does not fit the context of " + limit);
            var rank0 = tp.part(0).device();
            int chunk = Math.min(rank0 != null ? rank0.preferredChunk() : 64, limit);
            var seq = tp.newSequence(chunk, limit);
            Sampler sampler = new Sampler(sampling.params(SamplingParams.defaults()));
            int V = tp.vocab();
            float[] logits = new float[V];
            int[] history = java.util.Arrays.copyOf(ids, limit + 1);
            int n = ids.length;
            long t0 = System.nanoTime();
            for (int p = 0; p < ids.length; p += chunk) tp.forward(seq, ids, p, Math.min(chunk, ids.length - p), logits, false);
            long t1 = System.nanoTime();
            PrintWriter out = spec.commandLine().getOut();
            var text = codec.stream(true);
            int made = 0;
            String reason = "max tokens";
            while (made < maxTokens) {
                int id = sampler.sample(logits, 0, V, history, n);
                if (codec.eosIds().contains(id)) { reason = "eos"; break; }
                out.print(text.push(id));
                out.flush();
                made++;
                history[n++] = id;
                if (made == maxTokens) break;
                if (seq.position() >= limit) { reason = "context limit"; break; }
                tp.forward(seq, new int[] {id}, 0, 1, logits, false);
            }
            out.print(text.flush());
            out.println();
            out.flush();
            if (verbose) {
                double prefill = (t1 - t0) / 1e9, decode = (System.nanoTime() - t1) / 1e9;
                err.printf("[%d GPUs split by " + tp.kind() + "; prompt %d tokens in %.2fs (%.1f tok/s); generated %d tokens in %.2fs (%.1f tok/s); stop: %s]%n",
                        tp.parts(), ids.length, prefill, ids.length / prefill, made, decode, Math.max(0, made - 1) / Math.max(decode, 1e-9), reason);
            }
        }
        return 0;
    }

    /** The prompt's ids: as a chat's user turn (after the system prompt) with --chat, else the plain text. */
    private int[] promptIds(TextCodec codec) {
        if (!chat) return codec.encode(prompt);
        List<Map<String, Object>> messages = new ArrayList<>();
        if (system != null) messages.add(Map.of("role", "system", "content", system));
        messages.add(Map.of("role", "user", "content", prompt));
        return codec.encodeChat(messages, noThink ? Map.of("enable_thinking", false) : Map.of());
    }
}
