package dev.cmf4j.api;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.GenerationRequest;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.TextCodec;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.function.IntConsumer;

/**
 * An open model, safe to share between threads: every generation goes through one scheduler that batches the
 * conversations running at once (continuous batching), each sampled with its own {@link Sampling}. Close it when done;
 * a generation still running then ends with {@link InferenceException.Kind#CLOSED}.
 *
 * <pre>{@code
 * try (CmfModel model = Cmf.open(Path.of("model.cmf"))) {
 *     int[] ids = model.tokenize("The");
 *     Reply r = model.generate(ids, Sampling.greedy().withMaxTokens(20), id -> {});
 *     System.out.println(model.detokenize(r.tokens()));
 * }
 * }</pre>
 */
public final class CmfModel implements AutoCloseable {
    private final String name;
    private final Model model;
    private final Backend backend;
    private final WorkerPool ownPool;
    private final TextCodec codec;   // null for a file without a tokenizer: ids only
    private final Set<Integer> eos;
    private final Scheduler scheduler;
    private final int contextLength;
    private final AtomicBoolean closed = new AtomicBoolean();

    CmfModel(String name, Model model, Backend backend, WorkerPool ownPool, ModelOptions o) {
        this.name = name;
        this.model = model;
        this.backend = backend;
        this.ownPool = ownPool;
        this.codec = model.file().vocab().isPresent() ? TextCodec.of(model.file()) : null;
        var tc = model.file().header().tokenizerConfig();
        this.eos = codec != null ? codec.eosIds() : tc == null || tc.eosTokenIds() == null ? Set.of() : Set.copyOf(tc.eosTokenIds());
        this.contextLength = Math.min(o.contextLength() == 0 ? 4096 : o.contextLength(), model.spec().maxPositions());
        try {
            this.overlay = model.graph().withTask(model.graph().overlay(o.skill(), null, 1f), o.task());
        } catch (IllegalArgumentException e) {
            throw new InferenceException(InferenceException.Kind.BAD_INPUT, e.getMessage(), e);
        }
        this.scheduler = new Scheduler(model.graph(), codec, Scheduler.Config.of(o.parallel(), contextLength, o.maxQueue()));
    }

    /** The skill every request of this model runs with ({@link ModelOptions#skill()}). */
    private final dev.cmf4j.model.graph.Overlay overlay;

    /** A new conversation settings holder: no tools, text output, the template's defaults. */
    public Chat newChat() { return new Chat(this, List.of(), Chat.ToolChoice.AUTO, null, Map.of()); }

    /**
     * Continues {@code prompt} (token ids) and waits for the end; {@code onToken} hears each generated id on this
     * thread as it comes (may be null).
     *
     * @throws InferenceException an id outside the vocabulary, a prompt that fills the context, the model closed, ...
     */
    public Reply generate(int[] prompt, Sampling sampling, IntConsumer onToken) {
        if (prompt == null) throw new InferenceException(InferenceException.Kind.BAD_INPUT, "the prompt is null");
        return new Run(this, false).run(request(prompt, sampling, null), null, onToken == null ? id -> {} : onToken);
    }

    /** Continues {@code text} (tokenized with the model's special tokens, e.g. a BOS) and streams its text to {@code onText}. */
    public Reply complete(String text, Sampling sampling, Consumer<String> onText) {
        int[] ids = tokenize(text);
        if (ids.length == 0) throw new InferenceException(InferenceException.Kind.BAD_INPUT, "the prompt is empty");
        return new Run(this, false).run(request(ids, sampling, null), onText, null);
    }

    /**
     * Text to ids with the tokenizer's own special tokens (as {@code cmf tokenize --special}).
     *
     * @throws InferenceException (BAD_INPUT) when the file carries no tokenizer
     */
    public int[] tokenize(String text) { return codec().encode(text); }

    /** Ids to text (special tokens shown). */
    public String detokenize(int[] ids) { return codec().decode(ids); }

    /** Whether the file carries a tokenizer (and so text in and out, chat and templates); without one, ids only. */
    public boolean hasTokenizer() { return codec != null; }

    /** Positions one conversation may hold, prompt and reply together. */
    public int contextLength() { return contextLength; }

    /** The vocabulary's size: ids are in {@code [0, vocabSize)}. */
    public int vocabSize() { return model.graph().vocab(); }

    /** The file's name (or the {@code hf://} address it came from). */
    public String name() { return name; }

    /** Where the weight products run, in words (e.g. {@code cpu (2 threads)}). */
    public String device() { return backend.description(); }

    /** Whether {@link #close} was called. */
    public boolean isClosed() { return closed.get(); }

    /** Ends every running generation ({@link InferenceException.Kind#CLOSED}), then unmaps the file. Idempotent. */
    @Override public void close() {
        if (!closed.compareAndSet(false, true)) return;
        scheduler.close();
        model.close();
        backend.close();
        if (ownPool != null) ownPool.close();
    }

    Scheduler scheduler() { return scheduler; }

    TextCodec codec() {
        if (codec == null) throw new InferenceException(InferenceException.Kind.BAD_INPUT, name
                + " carries no tokenizer: text and chat need one; use generate(int[] ids, ...)");
        return codec;
    }

    GenerationRequest request(int[] prompt, Sampling s, dev.cmf4j.runtime.JsonConstraint json) {
        if (prompt == null || prompt.length == 0) throw new InferenceException(InferenceException.Kind.BAD_INPUT, "the prompt is empty: at least one token is needed");
        int room = contextLength - prompt.length;
        int max = s.maxTokens() == 0 ? Math.max(room, 0) : s.maxTokens();
        SamplingParams p = new SamplingParams(s.temperature(), s.topK(), s.topP(), s.minP(), s.repetitionPenalty(), 0f, s.seed());
        if (codec == null && (json != null || !s.stops().isEmpty())) codec();   // stops and JSON are text
        try {
            return new GenerationRequest(prompt, max, p, s.ignoreEos() && json == null ? Set.of() : eos, s.stops(), s.presencePenalty(), s.frequencyPenalty(), Map.of(), -1, null,
                    c -> {}, json, overlay);
        } catch (dev.cmf4j.runtime.GenerationException e) {
            throw new InferenceException(InferenceException.Kind.BAD_INPUT, e.getMessage(), e);
        }
    }
}
