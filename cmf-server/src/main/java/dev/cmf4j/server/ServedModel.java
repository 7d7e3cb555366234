package dev.cmf4j.server;

import dev.cmf4j.model.graph.Overlay;

import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.TextCodec;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The model a server answers with: its name in the API, its text codec, and its replicas: one or more whole copies of
 * the same file, each on its own device with its own scheduler (and draft model, or null). A request runs on the
 * replica with the fewest sequences ({@link #route}); a replica's failing step fails only its own requests. Closing
 * stops the schedulers and closes the models.
 */
public final class ServedModel implements AutoCloseable {
    private final String name;
    private final TextCodec codec;
    private final List<Replica> replicas;
    private final Overlay defaultOverlay;
    /** Where the scan for the least-loaded replica starts: taken in turn, so ties do not all go to the first. */
    private final AtomicInteger next = new AtomicInteger();

    /**
     * One copy of the model on one device and the scheduler that runs it (its own loop thread; a GPU's calls go on
     * through that GPU's owner thread).
     *
     * @param device what the API and metrics call its device ({@code cuda:1}, {@code cpu}, ...)
     * @param draft  the draft model its scheduler drafts with, owned by the replica; null: none
     */
    public record Replica(int index, String device, Model model, Scheduler scheduler, Model draft, Health health) {
        /**
         * Opens a scheduler of {@code cfg} over {@code model}, drafting up to {@code draftMax} tokens per step with
         * {@code draft} (null: none) or, with {@code mtp}, with the model's own MTP head.
         */
        public static Replica start(int index, String device, Model model, TextCodec codec, Scheduler.Config cfg, Model draft,
                                    int draftMax, boolean mtp) {
            Scheduler.Draft d = mtp ? Scheduler.Draft.mtp(model.mtpGraph(), draftMax)
                    : draft == null ? null : new Scheduler.Draft(draft.graph(), draftMax);
            return new Replica(index, device, model, new Scheduler(model.graph(), codec, cfg, d), draft, new Health());
        }

        /** Sequences on it now: running and waiting (what {@link #route} balances). */
        int load() {
            Scheduler.Stats s = scheduler.stats();
            return s.running() + s.waiting();
        }

        void close() {
            scheduler.close();
            model.close();
            if (draft != null) draft.close();
        }
    }

    /**
     * How a replica's requests have been ending: a generation that failed (its step threw: a GPU fault, say) marks the
     * replica failing until one succeeds; {@link #route} passes a failing replica by for {@link #retryAfter} after its
     * last failure, so a broken GPU, which answers fastest and so looks least loaded, does not draw every request.
     */
    public static final class Health {
        private final java.util.concurrent.atomic.AtomicLong failures = new java.util.concurrent.atomic.AtomicLong();
        private volatile int failingInARow;
        private volatile long lastFailureNanos;

        /** A choice ended: an error counts against the replica, a finished generation clears it; cancels and timeouts say nothing. */
        void ended(dev.cmf4j.runtime.Completion.Finish finish) {
            switch (finish) {
                case ERROR -> {
                    failures.incrementAndGet();
                    lastFailureNanos = System.nanoTime();
                    failingInARow++;
                }
                case STOP, LENGTH -> failingInARow = 0;
                default -> { }
            }
        }

        /** Generations that failed on the replica since start. */
        public long failures() { return failures.get(); }

        /** Whether its last ended generation failed. */
        public boolean failing() { return failingInARow > 0; }

        boolean resting(long now, long retryNanos) { return failingInARow > 0 && now - lastFailureNanos < retryNanos; }
    }

    /** Serves {@code replicas} (indexed 0, 1, ... in order) as {@code name}; requests that name no skill run with {@code defaultOverlay}. */
    public ServedModel(String name, TextCodec codec, List<Replica> replicas, Overlay defaultOverlay) {
        if (replicas.isEmpty()) throw new IllegalArgumentException("a served model needs at least one replica");
        this.name = name;
        this.codec = codec;
        this.replicas = List.copyOf(replicas);
        this.defaultOverlay = defaultOverlay == null ? Overlay.NONE : defaultOverlay;
    }

    public String name() { return name; }

    public TextCodec codec() { return codec; }

    public List<Replica> replicas() { return replicas; }

    public Overlay defaultOverlay() { return defaultOverlay; }

    /** Opens a scheduler of {@code cfg} over {@code model}. */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg) { return start(name, model, cfg, null); }

    /** As {@link #start(String, Model, Scheduler.Config)}; requests that name no skill run with {@code defaultOverlay}. */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg, Overlay defaultOverlay) {
        return start(name, model, cfg, defaultOverlay, null, 0);
    }

    /**
     * As {@link #start(String, Model, Scheduler.Config, Overlay)}, drafting up to {@code draftMax} tokens per step with
     * {@code draft} (speculative decoding; null: none), which this served model then owns.
     */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg, Overlay defaultOverlay, Model draft, int draftMax) {
        return start(name, model, cfg, defaultOverlay, draft, draftMax, false);
    }

    /**
     * As above; with {@code mtp} the model's own MTP head drafts ({@link Model#mtpGraph}) and {@code draft}
     * is null.
     */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg, Overlay defaultOverlay, Model draft, int draftMax,
                                    boolean mtp) {
        TextCodec codec = TextCodec.of(model.file());
        return new ServedModel(name, codec, List.of(Replica.start(0, "default", model, codec, cfg, draft, draftMax, mtp)), defaultOverlay);
    }

    /** The model as every replica holds it (the first's: the same file, spec, vocabulary and skills). */
    public Model model() { return replicas.getFirst().model(); }

    /** The draft model of the first replica, or null. */
    public Model draft() { return replicas.getFirst().draft(); }

    /**
     * The replica a new request runs on: the one with the fewest running and waiting sequences, ties taken in turn, a
     * replica whose last generation failed passed by for {@link #retryAfter} (unless every replica is). Two requests
     * routed at the same instant may both see the same counts; the next ones see theirs.
     */
    public Replica route() {
        int n = replicas.size();
        if (n == 1) return replicas.getFirst();
        int start = Math.floorMod(next.getAndIncrement(), n);
        long now = System.nanoTime(), retry = retryAfter.toNanos();
        Replica best = null;
        int least = Integer.MAX_VALUE;
        for (int pass = 0; pass < 2 && best == null; pass++)   // the healthy ones first; all of them when none is
            for (int i = 0; i < n; i++) {
                Replica r = replicas.get((start + i) % n);
                if (pass == 0 && r.health().resting(now, retry)) continue;
                int load = r.load();
                if (load < least) { least = load; best = r; }
            }
        return best;
    }

    /** How long a replica whose last generation failed is passed by (default 30 s); then one request tries it again. */
    private volatile java.time.Duration retryAfter = java.time.Duration.ofSeconds(30);

    /** Sets how long {@link #route} passes a failing replica by. */
    public void retryAfter(java.time.Duration d) { retryAfter = d; }

    /** The replicas' counters summed and their gauges combined (the KV usage as their mean: each holds parallel x context). */
    public Scheduler.Stats stats() {
        long requests = 0, prompt = 0, cached = 0, generated = 0, steps = 0, drafted = 0, accepted = 0;
        int running = 0, waiting = 0;
        double kv = 0;
        for (Replica r : replicas) {
            Scheduler.Stats s = r.scheduler().stats();
            requests += s.requests(); prompt += s.promptTokens(); cached += s.cachedPromptTokens(); generated += s.generatedTokens();
            steps += s.steps(); drafted += s.draftedTokens(); accepted += s.acceptedTokens();
            running += s.running(); waiting += s.waiting(); kv += s.kvUsage();
        }
        return new Scheduler.Stats(requests, prompt, cached, generated, running, waiting, kv / replicas.size(), steps, drafted, accepted);
    }

    /**
     * Runs two short generations on each replica together and waits for them, so the JIT has compiled the prefill and
     * batched decode paths (and each GPU captured its graphs) before the first client comes (its first request would
     * otherwise wait seconds).
     */
    public void warmUp() throws InterruptedException {
        int[] text = codec.encode("The quick brown fox jumps over the lazy dog, and the warm-up is done.");
        int[] prompt = java.util.Arrays.copyOf(text, Math.max(1, Math.min(text.length, maxContext() / 2)));
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(2 * replicas.size());
        dev.cmf4j.runtime.TokenSink sink = c -> done.countDown();
        for (Replica r : replicas)
            for (int i = 0; i < 2; i++)
                r.scheduler().submit(dev.cmf4j.runtime.GenerationRequest.of(prompt, 8, dev.cmf4j.runtime.SamplingParams.GREEDY, java.util.Set.of(), sink));
        done.await();
    }

    /** Sequences one replica runs at once. */
    public int parallel() { return replicas.getFirst().scheduler().config().parallel(); }

    /** Positions one sequence may hold: the scheduler's context within the model's. */
    public int maxContext() { return Math.min(replicas.getFirst().scheduler().config().maxContext(), model().spec().maxPositions()); }

    @Override public void close() {
        List<RuntimeException> failures = new ArrayList<>();
        for (Replica r : replicas) {
            try {
                r.close();
            } catch (RuntimeException e) {
                failures.add(e);
            }
        }
        if (!failures.isEmpty()) throw failures.getFirst();
    }
}
