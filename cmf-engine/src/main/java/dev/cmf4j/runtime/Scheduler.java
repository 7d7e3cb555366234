package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.Overlay;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Continuous batching for one model: one loop thread (the model's forward is not thread-safe) admits submitted
 * requests, and every step runs the decode token of each running sequence together with prompt chunks of new ones
 * through a {@link BatchDriver}, samples each row with its own request's parameters and streams it to the request's
 * {@link TokenSink}. A cancelled or timed-out sequence leaves before the next step; a failing one ends alone.
 * Finished sequences stay cached (up to {@link Config#cachedSessions}) so a prompt that extends one (a chat's next
 * turn) prefills only its new tokens.
 */
public final class Scheduler implements AutoCloseable {

    /**
     * @param parallel       sequences running at once (more wait in the queue)
     * @param maxContext     positions a sequence may hold (prompt and output)
     * @param maxQueue       requests waiting at most beyond the free places; {@link #submit} refuses more
     * @param stepRows       token rows one step holds (decode rows first, prompt chunks fill the rest)
     * @param chunk          the most prompt tokens of one sequence per step
     * @param cachedSessions finished sequences kept for prefix reuse
     */
    public record Config(int parallel, int maxContext, int maxQueue, int stepRows, int chunk, int cachedSessions) {
        public Config {
            if (parallel < 1) throw new IllegalArgumentException("parallel must be >= 1, got " + parallel);
            if (maxContext < 2) throw new IllegalArgumentException("context must be >= 2, got " + maxContext);
            if (maxQueue < 0) throw new IllegalArgumentException("max queue must be >= 0, got " + maxQueue);
            if (stepRows < parallel) throw new IllegalArgumentException("step rows (" + stepRows + ") must hold every running sequence (" + parallel + ")");
            if (chunk < 1) throw new IllegalArgumentException("chunk must be >= 1");
            if (cachedSessions < 0) throw new IllegalArgumentException("cached sessions must be >= 0");
        }

        /** {@code parallel} sequences of up to {@code maxContext} positions, steps of max(parallel, 64) rows. */
        public static Config of(int parallel, int maxContext, int maxQueue) {
            return new Config(parallel, maxContext, maxQueue, Math.max(parallel, Session.DEFAULT_CHUNK), Session.DEFAULT_CHUNK, parallel);
        }
    }

    /** Past {@link Config#maxQueue} waiting requests. */
    public static final class QueueFull extends RuntimeException {
        public QueueFull(String message) { super(message); }
    }

    /** A submitted request's handle. */
    public interface Ticket {
        long id();

        /** Ends the generation (finish CANCELLED) before the scheduler's next step; idempotent. */
        void cancel();
    }

    /**
     * One live sequence as {@link #live()} lists it.
     *
     * @param stateBytes bytes of its attention and recurrent state as of its last step ({@link
     *                   dev.cmf4j.model.graph.State#heldBytes}; -1 on a device, 0 before its first step)
     */
    public record SequenceInfo(long id, String state, int promptTokens, int cachedTokens, int generatedTokens,
                               int position, long ageMillis, long stateBytes) {}

    /**
     * A finished (or restored) sequence kept for prefix reuse, as {@link #cached()} lists it: the id of the request
     * that last ran it (or of the restore), the tokens it holds and the bytes of its state.
     */
    public record CachedInfo(long id, int tokens, long stateBytes) {}

    /** A sequence's state as {@link #exportState} and {@link #importState} move it: a snapshot holding {@code tokens} ids. */
    public record SavedState(long id, int tokens, byte[] snapshot) {}

    /** Counters since start and gauges now. */
    public record Stats(long requests, long promptTokens, long cachedPromptTokens, long generatedTokens,
                        int running, int waiting, double kvUsage, long steps) {}

    private final Graph graph;
    private final TextCodec codec;
    private final Config cfg;
    private final BatchDriver driver;
    private final int vocab;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition arrived = lock.newCondition();
    private final ArrayDeque<Sequence> waiting = new ArrayDeque<>();
    private final List<Sequence> running = new ArrayList<>();
    private final LinkedList<Cached> cache = new LinkedList<>();   // most recently finished first
    private volatile List<CachedInfo> cachedView = List.of();     // the cache as other threads may read it
    /** Work other threads hand to the loop (state export and import), run between steps. */
    private final java.util.concurrent.ConcurrentLinkedQueue<Runnable> chores = new java.util.concurrent.ConcurrentLinkedQueue<>();
    private final ConcurrentHashMap<Long, Sequence> live = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong(), restores = new AtomicLong();
    private final AtomicLong promptTokens = new AtomicLong(), cachedTokens = new AtomicLong(), generated = new AtomicLong(), steps = new AtomicLong();
    private final Thread loop;
    private volatile int runningCount;   // running.size(), for submitters (the list is the loop's own)
    private volatile boolean closed;

    /**
     * Starts the loop thread.
     *
     * @param codec turns tokens into streamed text and applies stop strings; null for ids only
     */
    public Scheduler(Graph graph, TextCodec codec, Config cfg) {
        this.graph = graph;
        this.codec = codec;
        this.cfg = cfg;
        this.vocab = graph.vocab();
        this.driver = new BatchDriver(graph, cfg.stepRows(), cfg.maxContext());
        this.loop = Thread.ofPlatform().name("cmf-scheduler").daemon().start(this::run);
    }

    public Config config() { return cfg; }

    /**
     * Queues one request; its sink hears everything from the loop thread.
     *
     * @throws GenerationException.BadInput    ids outside the vocabulary, stops without a text codec
     * @throws GenerationException.ContextLimit a prompt that leaves no room to generate in the context
     * @throws QueueFull                        past {@link Config#maxQueue} waiting requests
     */
    public Ticket submit(GenerationRequest r) { return submitAll(List.of(r)).getFirst(); }

    /** Queues several requests at once (all or none; e.g. a request's {@code n} choices). */
    public List<Ticket> submitAll(List<GenerationRequest> rs) {
        for (GenerationRequest r : rs) check(r);
        List<Ticket> out = new ArrayList<>();
        lock.lock();
        try {
            if (closed) throw new IllegalStateException("the scheduler is closed");
            // free places take requests at once: only what would wait beyond them counts against the queue
            if (waiting.size() + rs.size() > cfg.maxQueue() + Math.max(0, cfg.parallel() - runningCount))
                throw new QueueFull(waiting.size() + " requests are waiting (at most " + cfg.maxQueue() + ")");
            for (GenerationRequest r : rs) {
                Sequence s = new Sequence(ids.incrementAndGet(), r);
                waiting.add(s);
                live.put(s.id, s);
                out.add(s);
            }
            arrived.signal();
        } finally {
            lock.unlock();
        }
        return out;
    }

    private void check(GenerationRequest r) {
        for (int i = 0; i < r.prompt().length; i++)
            if (r.prompt()[i] < 0 || r.prompt()[i] >= vocab)
                throw new GenerationException.BadInput("token id " + r.prompt()[i] + " (at index " + i + ") is outside the vocabulary [0, " + vocab + ")");
        int ctx = Math.min(cfg.maxContext(), graph.spec().maxPositions());
        if (r.prompt().length >= ctx)
            throw new GenerationException.ContextLimit(ctx, "the prompt's " + r.prompt().length
                    + " tokens leave no room in the context of " + ctx + " tokens");
        if (!r.stops().isEmpty() && codec == null) throw new GenerationException.BadInput("stop strings need a text codec");
        if (r.json() != null && codec == null) throw new GenerationException.BadInput("JSON output needs a text codec");
        try {
            graph.checkOverlay(r.overlay());
        } catch (IllegalArgumentException e) {
            throw new GenerationException.BadInput(e.getMessage());
        }
    }

    /** The sequences waiting and running now. */
    public List<SequenceInfo> live() {
        long now = System.nanoTime();
        List<SequenceInfo> out = new ArrayList<>();
        for (Sequence s : live.values())
            out.add(new SequenceInfo(s.id, s.phase, s.request.prompt().length, s.cached, s.tokens, s.position,
                    (now - s.submitted) / 1_000_000, s.stateBytes));
        out.sort((a, b) -> Long.compare(a.id(), b.id()));
        return out;
    }

    /** The finished and restored sequences kept for prefix reuse, most recent first. */
    public List<CachedInfo> cached() { return cachedView; }

    /**
     * The state of sequence {@code id}: a running one as of its last step, or a finished or restored one still cached
     * (a request that extended it since runs under its own id). Taken on the loop thread between steps; the snapshot
     * is {@link Session#exportState}'s.
     *
     * @throws java.util.NoSuchElementException no live or cached sequence has this id
     * @throws IllegalStateException             the sequence has not started, or its state was lost in a failed step
     * @throws UnsupportedOperationException     a device session that keeps a KV cache (fixed-state models snapshot on either path)
     */
    public SavedState exportState(long id) throws InterruptedException {
        return onLoop(() -> {
            Session s = null;
            for (Cached c : cache) if (c.id == id) s = c.session;
            Sequence q = live.get(id);
            if (s == null && q != null) {
                if (q.session == null) throw new IllegalStateException("sequence " + id + " is waiting: it holds no state yet");
                s = q.session;
            }
            if (s == null) throw new java.util.NoSuchElementException("no running or cached sequence " + id
                    + " (a later request may have extended it, or the cache dropped it)");
            java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
            try {
                s.exportState(out);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
            return new SavedState(id, s.position(), out.toByteArray());
        });
    }

    /**
     * Restores a snapshot into the prompt cache, reading its weights through {@code overlay}: the next request whose
     * prompt extends the snapshot's ids takes it and prefills only the rest. Returns the id it is cached under.
     *
     * @throws GenerationException.BadInput the snapshot is refused (another model, settings or overlay; cut short; past the context)
     * @throws IllegalStateException        the scheduler keeps no cached sequences
     */
    public SavedState importState(byte[] snapshot, Overlay overlay) throws InterruptedException {
        try {
            graph.checkOverlay(overlay);
        } catch (IllegalArgumentException e) {
            throw new GenerationException.BadInput(e.getMessage());
        }
        if (cfg.cachedSessions() == 0) throw new IllegalStateException("this scheduler keeps no cached sequences to restore into");
        return onLoop(() -> {
            Session s = new Session(graph, cfg.maxContext());
            s.state().useOverlay(overlay);
            try {
                s.importState(new java.io.ByteArrayInputStream(snapshot));
            } catch (java.io.IOException e) {
                s.close();
                throw new GenerationException.BadInput(e.getMessage());
            } catch (RuntimeException e) {
                s.close();
                throw e;
            }
            long id = ids.incrementAndGet();   // the requests' id space, so a restored and a finished sequence never share one
            restores.incrementAndGet();
            int tokens = s.position();
            keep(s, id);
            return new SavedState(id, tokens, snapshot);
        });
    }

    /**
     * Drops cached sequence {@code id}; returns the tokens it held.
     *
     * @throws java.util.NoSuchElementException no cached sequence has this id
     * @throws IllegalStateException             it is running
     */
    public int erase(long id) throws InterruptedException {
        return onLoop(() -> {
            for (Iterator<Cached> it = cache.iterator(); it.hasNext(); ) {
                Cached c = it.next();
                if (c.id != id) continue;
                it.remove();
                publishCache();
                int n = c.session.position();
                c.session.close();
                return n;
            }
            if (live.containsKey(id)) throw new IllegalStateException("sequence " + id + " is running; cancel it first");
            throw new java.util.NoSuchElementException("no cached sequence " + id);
        });
    }

    /** Runs {@code task} on the loop thread between steps and returns what it returns (or throws what it throws). */
    private <T> T onLoop(java.util.function.Supplier<T> task) throws InterruptedException {
        if (Thread.currentThread() == loop) return task.get();   // a sink asking from the loop itself: now, not queued behind itself
        java.util.concurrent.CompletableFuture<T> f = new java.util.concurrent.CompletableFuture<>();
        chores.add(() -> {
            try {
                f.complete(task.get());
            } catch (RuntimeException | Error e) {
                f.completeExceptionally(e);
            }
        });
        lock.lock();
        try {
            if (closed) throw new IllegalStateException("the scheduler is closed");
            arrived.signal();
        } finally {
            lock.unlock();
        }
        try {
            return f.get();
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof RuntimeException r) throw r;
            throw (Error) e.getCause();
        }
    }

    private void runChores() {
        for (Runnable r; (r = chores.poll()) != null; ) r.run();
    }

    public Stats stats() {
        int run = 0, wait = 0;
        long held = 0;
        for (Sequence s : live.values()) {
            if (s.phase.equals("waiting")) wait++;
            else { run++; held += s.position; }
        }
        double kv = (double) held / ((long) cfg.parallel() * cfg.maxContext());
        return new Stats(ids.get() - restores.get(), promptTokens.get(), cachedTokens.get(), generated.get(), run, wait, kv, steps.get());
    }

    /** Stops the loop: every live request ends CANCELLED, cached sessions are freed. */
    @Override public void close() {
        lock.lock();
        try {
            closed = true;
            arrived.signal();
        } finally {
            lock.unlock();
        }
        try {
            loop.join(10_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ---- the loop thread ----

    private void run() {
        try {
            while (!closed) {
                try {
                    runChores();
                    admit();
                    reap();
                    if (running.isEmpty()) {
                        idle();
                        continue;
                    }
                    step();
                } catch (RuntimeException | Error e) {   // a fault outside any one request: end the running ones, keep serving
                    if (e instanceof Error) System.err.println("cmf: scheduler: " + e + " in a step; its requests fail, the loop goes on");
                    for (Sequence s : List.copyOf(running)) finish(s, Completion.Finish.ERROR, message(e));
                }
            }
        } finally {
            lock.lock();
            try {
                closed = true;   // however the loop ended, later submissions fail at once instead of waiting for it
                for (Sequence s : waiting) finish(s, Completion.Finish.CANCELLED, null);
                waiting.clear();
            } finally {
                lock.unlock();
            }
            for (Sequence s : List.copyOf(running)) finish(s, Completion.Finish.CANCELLED, null);
            runChores();   // posted before the loop closed: each still gets its answer
            for (Cached c : cache) c.session.close();
            cache.clear();
            publishCache();
        }
    }

    private void idle() {
        lock.lock();
        try {
            // wake now and then so a waiting request's timeout is noticed even with nothing else to do
            if (waiting.isEmpty() && chores.isEmpty() && !closed) arrived.await(100, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            closed = true;
        } finally {
            lock.unlock();
        }
    }

    /** Moves waiting requests into free places, each with a session (a cached prefix when one fits). */
    private void admit() {
        while (running.size() < cfg.parallel()) {
            Sequence s;
            lock.lock();
            try {
                s = waiting.poll();
            } finally {
                lock.unlock();
            }
            if (s == null) return;
            if (s.cancelled || s.expired()) { finish(s, s.cancelled ? Completion.Finish.CANCELLED : Completion.Finish.TIMEOUT, null); continue; }
            // counted as running before its sink hears it started: a submitter told so sees the place taken
            running.add(s);
            runningCount = running.size();
            try {
                s.begin(takeSession(s.request.prompt(), s.request.overlay()));
            } catch (RuntimeException e) {
                finish(s, Completion.Finish.ERROR, message(e));
            }
        }
    }

    /** Ends cancelled and timed-out sequences, waiting or running. */
    private void reap() {
        lock.lock();
        try {
            for (Iterator<Sequence> it = waiting.iterator(); it.hasNext(); ) {
                Sequence s = it.next();
                if (s.cancelled || s.expired()) {
                    it.remove();
                    finish(s, s.cancelled ? Completion.Finish.CANCELLED : Completion.Finish.TIMEOUT, null);
                }
            }
        } finally {
            lock.unlock();
        }
        for (Sequence s : List.copyOf(running))
            if (s.cancelled) finish(s, Completion.Finish.CANCELLED, null);
            else if (s.expired()) finish(s, Completion.Finish.TIMEOUT, null);
    }

    /** One forward step: a decode row per sampling sequence, then prompt chunks in admission order. */
    private void step() {
        List<Sequence> members = new ArrayList<>();
        List<int[]> feed = new ArrayList<>();
        int rows = 0;
        for (Sequence s : running)
            if (s.next >= 0) { members.add(s); feed.add(new int[] {s.next}); rows++; }
        for (Sequence s : running) {
            if (s.next >= 0) continue;
            int n = Math.min(Math.min(cfg.chunk(), s.prompt.length - s.fed), cfg.stepRows() - rows);
            if (n <= 0) break;
            members.add(s);
            feed.add(Arrays.copyOfRange(s.prompt, s.fed, s.fed + n));
            rows += n;
        }
        // when every row that samples this step takes the plain argmax, the device picks and no logits come back
        boolean greedy = true;
        for (int k = 0; k < members.size() && greedy; k++) {
            Sequence s = members.get(k);
            boolean samples = s.next >= 0 || s.fed + feed.get(k).length >= s.prompt.length;
            greedy = !samples || s.picksArgmax();
        }
        float[] logits = null;
        int[] picks = null;
        try {
            Session[] sessions = members.stream().map(s -> s.session).toArray(Session[]::new);
            if (greedy) picks = driver.stepGreedy(sessions, feed.toArray(int[][]::new));
            else logits = driver.step(sessions, feed.toArray(int[][]::new));
        } catch (RuntimeException e) {
            stepAlone(members, feed);
            return;
        }
        steps.incrementAndGet();
        for (int k = 0; k < members.size(); k++) after(members.get(k), feed.get(k), logits, k * vocab, picks == null ? -1 : picks[k]);
    }

    /** After a failed step (which changed no sequence): each member alone, so only the failing ones end. */
    private void stepAlone(List<Sequence> members, List<int[]> feed) {
        for (int k = 0; k < members.size(); k++) {
            Sequence s = members.get(k);
            float[] logits;
            try {
                logits = driver.step(new Session[] {s.session}, new int[][] {feed.get(k)});
            } catch (RuntimeException e) {
                finish(s, Completion.Finish.ERROR, message(e));
                continue;
            }
            steps.incrementAndGet();
            after(s, feed.get(k), logits, 0, -1);
        }
    }

    /**
     * A member's share of a step: its prompt moves on, or it samples its next token from row {@code off} of the logits,
     * or takes {@code pick} (not -1: the step's argmax for it, when it {@link Sequence#picksArgmax}).
     */
    private void after(Sequence s, int[] fed, float[] logits, int off, int pick) {
        s.position = s.session.position();
        s.stateBytes = s.session.state().heldBytes();
        if (s.next < 0) {
            s.fed += fed.length;
            promptTokens.addAndGet(fed.length);
            if (s.fed < s.prompt.length) return;
        }
        int id;
        try {
            id = pick >= 0 ? s.generation.accept(pick) : s.sample(logits, off);
        } catch (RuntimeException e) {
            finish(s, Completion.Finish.ERROR, message(e));
            return;
        }
        if (id < 0) {
            Generator.Result r = s.generation.result();
            finish(s, r.reason() == Generator.StopReason.EOS || r.reason() == Generator.StopReason.STOP_STRING
                    ? Completion.Finish.STOP : Completion.Finish.LENGTH, null);
        } else {
            s.next = id;
        }
    }

    /** Ends a sequence (waiting or running): tells its sink, caches its session unless it failed. */
    private void finish(Sequence s, Completion.Finish why, String error) {
        running.remove(s);
        runningCount = running.size();
        live.remove(s.id);
        long now = System.nanoTime();
        int[] tokens;
        String text;
        if (s.generation != null && s.generation.done()) {
            Generator.Result r = s.generation.result();
            tokens = r.tokens();
            text = r.text();
        } else {
            tokens = s.out.stream().mapToInt(Integer::intValue).toArray();
            text = s.text.toString();
        }
        if (s.session != null) {
            if (why == Completion.Finish.ERROR) s.session.close();
            else keep(s.session, s.id);
        }
        Completion c = new Completion(tokens, text, why, s.request.prompt().length, s.cached, error,
                (s.began > 0 ? s.began : now) - s.submitted, s.firstToken > 0 ? s.firstToken - s.submitted : -1, now - s.submitted);
        try {
            s.request.sink().finished(c);
        } catch (RuntimeException ignored) {
            // the sink's failure is its own; the loop goes on
        }
    }

    /**
     * The cached session of the same overlay holding the longest proper prefix of {@code prompt} (taken out of the
     * cache), or a new one reading its weights through {@code overlay}.
     */
    private Session takeSession(int[] prompt, Overlay overlay) {
        Cached best = null;
        int bestLen = 0;
        for (Cached c : cache) {
            if (!c.session.state().overlay().equals(overlay)) continue;   // its cache holds another skill's K/V
            int[] h = c.session.history();
            if (h.length > bestLen && h.length < prompt.length && Arrays.equals(h, 0, h.length, prompt, 0, h.length)) {
                best = c;
                bestLen = h.length;
            }
        }
        if (best != null) {
            cache.remove(best);
            publishCache();
            return best.session;
        }
        Session fresh = new Session(graph, cfg.maxContext());
        fresh.state().useOverlay(overlay);
        return fresh;
    }

    /** A session kept for prefix reuse, under the id of the request that last ran it (or of its restore). */
    private record Cached(long id, Session session, long stateBytes) {}

    private void keep(Session s, long id) {
        if (cfg.cachedSessions() == 0 || s.position() == 0) { s.close(); return; }
        cache.addFirst(new Cached(id, s, s.state().heldBytes()));
        while (cache.size() > cfg.cachedSessions()) cache.removeLast().session.close();
        publishCache();
    }

    private void publishCache() {
        cachedView = cache.stream().map(c -> new CachedInfo(c.id, c.session.position(), c.stateBytes)).toList();
    }

    /** Each token's text (null when it is special, empty or a partial UTF-8 character), for JSON constraints. */
    private String[] pieces() {
        if (pieces == null) {
            String[] p = new String[vocab];
            for (int i = 0; i < vocab; i++) {
                String t = codec.tokenizer().decode(new int[] {i}, true);
                p[i] = t.isEmpty() || t.indexOf('\uFFFD') >= 0 ? null : t;
            }
            pieces = p;
        }
        return pieces;
    }

    private String[] pieces;

    private static String message(Throwable e) {
        return e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
    }

    /** One request's life in the loop. Fields the loop writes and other threads read ({@link #live}) are volatile. */
    private final class Sequence implements Ticket, Generator.Listener {
        final long id;
        final GenerationRequest request;
        final long submitted = System.nanoTime();
        final long deadline;
        final List<Integer> out = new ArrayList<>();
        final StringBuilder text = new StringBuilder();
        final LogitAdjustment adjust;
        volatile boolean cancelled;
        volatile String phase = "waiting";
        volatile int cached, tokens, position;
        volatile long stateBytes;
        Session session;
        Generator.Generation generation;
        int[] prompt;   // the part of the request's prompt the session does not hold yet
        int fed;        // of prompt
        int next = -1;  // the sampled id the next step feeds; -1 while the prompt runs
        long began, firstToken;
        float[] row;    // the adjusted logits row, when the request adjusts them
        float[] raw;    // the step's logits and this sequence's row in them, for log-probabilities
        int rawOff;
        JsonConstraint.State json;   // the JSON document so far, when the request asks for one

        Sequence(long id, GenerationRequest request) {
            this.id = id;
            this.request = request;
            this.deadline = request.timeout() == null ? Long.MAX_VALUE : submitted + request.timeout().toNanos();
            this.adjust = new LogitAdjustment(request.logitBias(), request.presencePenalty(), request.frequencyPenalty());
            this.json = request.json() == null ? null : request.json().start();
        }

        @Override public long id() { return id; }

        @Override public void cancel() {
            cancelled = true;
            lock.lock();
            try {
                arrived.signal();
            } finally {
                lock.unlock();
            }
        }

        boolean expired() { return System.nanoTime() - deadline > 0; }

        void begin(Session s) {
            session = s;
            int held = s.position();
            cached = held;
            cachedTokens.addAndGet(held);
            prompt = Arrays.copyOfRange(request.prompt(), held, request.prompt().length);
            Generator gen = new Generator(s, new Sampler(request.sampling()), request.eos(), request.stops());
            generation = gen.start(request.maxTokens(), codec == null ? null : codec.stream(true), this);
            // adjusted or constrained logits, or reported log-probabilities, need every row of a hierarchical head
            if (adjust.active() || json != null || request.topLogprobs() >= 0) s.state().gateHeadForTopP(1.0);
            began = System.nanoTime();
            phase = "prefill";
            position = held;
            request.sink().started(request.prompt().length, held);
        }

        /** Whether this sequence's next token is the plain argmax of its logits (nothing adjusts, constrains or reports them). */
        boolean picksArgmax() {
            return !adjust.active() && json == null && request.topLogprobs() < 0 && generation.picksArgmax();
        }

        int sample(float[] logits, int off) {
            raw = logits;
            rawOff = off;
            if (!adjust.active() && json == null) return generation.next(logits, off);
            if (row == null) row = new float[vocab];
            adjust.apply(logits, off, vocab, row);
            if (json != null) constrain(row);
            return generation.next(row, 0);
        }

        /**
         * Leaves only tokens that continue the JSON document and leave room to close it within the budget (its
         * shortest completion, at worst a character a token, fits the tokens left); its end-of-sequence ids once it
         * is complete; only the tokens of its shortest completion once nothing else fits.
         */
        void constrain(float[] row) {
            String[] text = pieces();
            boolean any = false;
            if (json.complete()) {
                for (int i = 0; i < vocab; i++) if (!request.eos().contains(i)) row[i] = Float.NEGATIVE_INFINITY; else any = true;
            } else {
                int left = request.maxTokens() - out.size();   // tokens still allowed, this one included
                String close = json.closing();
                boolean closing = close.length() >= left;
                // most candidates end in the same top frame (inside a string it stays the same object): close it once
                java.util.IdentityHashMap<JsonConstraint.Frame, Integer> closeLength = new java.util.IdentityHashMap<>();
                for (int i = 0; i < vocab; i++) {
                    String t = text[i];
                    boolean ok = false;
                    if (t != null && row[i] != Float.NEGATIVE_INFINITY) {
                        if (closing) ok = close.startsWith(t);
                        else {
                            JsonConstraint.State next = json.feed(t);
                            ok = next != null && (next.complete()
                                    || closeLength.computeIfAbsent(next.top(), f -> f.closing().length()) <= left - 1);
                        }
                    }
                    if (ok) any = true; else row[i] = Float.NEGATIVE_INFINITY;
                }
            }
            if (!any) throw new IllegalStateException("no token of the vocabulary continues the JSON document");
        }

        @Override public void token(int tokenId) {
            if (firstToken == 0) { firstToken = System.nanoTime(); phase = "decode"; }
            out.add(tokenId);
            tokens = out.size();
            generated.incrementAndGet();
            adjust.generated(tokenId);
            if (json != null && !request.eos().contains(tokenId)) json = json.feed(pieces()[tokenId]);
            TokenLogprobs lp = request.topLogprobs() < 0 ? null : TokenLogprobs.of(raw, rawOff, vocab, tokenId, request.topLogprobs());
            request.sink().token(tokenId, lp);
        }

        @Override public void text(String piece) {
            text.append(piece);
            request.sink().text(piece);
        }
    }
}
