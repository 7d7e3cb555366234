package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.State;
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
     *                   dev.cmf4j.model.graph.State#heldBytes}: on a GPU its device memory; 0 before its first step)
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

    /** Counters since start and gauges now; {@code draftedTokens} and {@code acceptedTokens} count speculative decoding's. */
    public record Stats(long requests, long promptTokens, long cachedPromptTokens, long generatedTokens,
                        int running, int waiting, double kvUsage, long steps, long draftedTokens, long acceptedTokens) {}

    /**
     * Speculative decoding for the sequences whose tokens are drawn plainly from the logits (no logit bias or penalty,
     * JSON constraint or log-probabilities): a draft model of the same vocabulary proposes up to {@code max} tokens
     * per sequence per step, all sequences' drafts batched, and each sequence's drafts run as rows of the model's step.
     * With {@code mtpHead}, {@code graph} is the model's own MTP head ({@link dev.cmf4j.model.Model#mtpGraph}): each
     * drafting sequence's {@link MtpDraft} reads the hidden rows of the model's steps and drafts for it alone.
     */
    public record Draft(Graph graph, int max, boolean mtpHead) {
        public Draft {
            if (graph == null) throw new NullPointerException("graph");
            if (max < 1 || max > 32) throw new IllegalArgumentException("draft max must be 1..32, got " + max);
        }

        /** A draft model's graph. */
        public Draft(Graph graph, int max) { this(graph, max, false); }

        /** The model's MTP head ({@link dev.cmf4j.model.Model#mtpGraph}). */
        public static Draft mtp(Graph head, int max) { return new Draft(head, max, true); }
    }

    private final Graph graph;
    private final TextCodec codec;
    private final Config cfg;
    private final BatchDriver driver;
    private final Draft draft;
    private final BatchDriver draftDriver;
    private final AtomicLong draftedTokens = new AtomicLong(), acceptedTokens = new AtomicLong();
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
    public Scheduler(Graph graph, TextCodec codec, Config cfg) { this(graph, codec, cfg, null); }

    /** As {@link #Scheduler(Graph, TextCodec, Config)}, drafting with {@code draft} (null: none). */
    public Scheduler(Graph graph, TextCodec codec, Config cfg, Draft draft) {
        this.graph = graph;
        this.codec = codec;
        this.cfg = cfg;
        this.vocab = graph.vocab();
        this.driver = new BatchDriver(graph, cfg.stepRows(), cfg.maxContext());
        if (draft != null && draft.graph().vocab() != vocab)
            throw new IllegalArgumentException("the draft's vocabulary has " + draft.graph().vocab() + " tokens, the model's " + vocab);
        this.draft = draft;
        this.draftDriver = draft == null || draft.mtpHead() ? null : new BatchDriver(draft.graph(), cfg.stepRows(), cfg.maxContext());
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
        return new Stats(ids.get() - restores.get(), promptTokens.get(), cachedTokens.get(), generated.get(), run, wait, kv, steps.get(),
                draftedTokens.get(), acceptedTokens.get());
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
        if (draft != null) propose();
        for (Sequence s : running)
            if (s.next >= 0) {
                members.add(s);
                int[] f = new int[1 + s.k];
                f[0] = s.next;
                System.arraycopy(s.xs, 0, f, 1, s.k);
                feed.add(f);
                rows += f.length;
            }
        for (Sequence s : running) {
            if (s.next >= 0) continue;
            int n = Math.min(Math.min(cfg.chunk(), s.prompt.length - s.fed), cfg.stepRows() - rows);
            if (n <= 0) break;
            members.add(s);
            feed.add(Arrays.copyOfRange(s.prompt, s.fed, s.fed + n));
            rows += n;
        }
        // when every row that samples this step takes the plain argmax, the device picks and no logits come back
        boolean greedy = true, drafted = false;
        for (int k = 0; k < members.size() && greedy; k++) {
            Sequence s = members.get(k);
            boolean samples = s.next >= 0 || s.fed + feed.get(k).length >= s.prompt.length;
            greedy = !samples || s.picksArgmax();
            drafted |= s.k > 0;
        }
        float[] logits = null;
        int[] picks = null;
        boolean[] all = new boolean[members.size()];
        for (int k = 0; k < members.size(); k++) {
            Sequence s = members.get(k);
            if (s.k > 0) { all[k] = true; s.targetMark = s.session.mark(s.k + 1); }
        }
        try {
            Session[] sessions = members.stream().map(s -> s.session).toArray(Session[]::new);
            if (greedy && !drafted) picks = driver.stepGreedy(sessions, feed.toArray(int[][]::new));
            else logits = driver.step(sessions, feed.toArray(int[][]::new), all);
        } catch (RuntimeException e) {
            for (int k = 0; k < members.size(); k++) {   // nothing moved: the drafts are dropped, each member runs plainly
                Sequence s = members.get(k);
                if (s.k > 0) { s.dropDrafts(); feed.set(k, new int[] {s.next}); }
            }
            stepAlone(members, feed);
            return;
        }
        steps.incrementAndGet();
        for (int k = 0, off = 0; k < members.size(); k++) {
            Sequence s = members.get(k);
            if (s.k > 0) verified(s, logits, off);
            else after(s, feed.get(k), logits, off, picks == null ? -1 : picks[k]);
            off += (all[k] ? feed.get(k).length : 1) * vocab;
        }
    }

    /**
     * The draft model's proposals for this step: for each sequence that drafts (plain sampling, not paused, room in
     * its context and budget and in the step's rows), its draft session catches up on the tokens it has not seen and
     * the sequence's next token in one batched prefill, then proposes up to {@link Draft#max} tokens, one batched
     * draft step per token. A failing draft model only turns drafting off for the step.
     */
    private void propose() {
        int decoding = 0;
        for (Sequence s : running) if (s.next >= 0) decoding++;
        int budget = cfg.stepRows() - decoding;   // rows the drafts may add to the model's step
        // a draft of fewer positions than the server's context stops drafting for sequences past it, not for the step
        int draftContext = Math.min(cfg.maxContext(), draft.graph().spec().maxPositions());
        List<Sequence> ds = new ArrayList<>();
        for (Sequence s : running) {
            s.k = 0;
            if (s.next < 0 || !s.plainSampling() || budget <= 0) continue;
            if (s.monitor.paused()) continue;
            int p0 = s.session.position();
            int k = Math.min(draft.max(), Math.min(s.request.maxTokens() - s.generation.tokens() - 1, cfg.maxContext() - p0 - 2));
            k = Math.min(k, Math.min(budget, draftContext - p0 - 1));
            if (k < 1) continue;
            s.k = k;
            budget -= k;
            ds.add(s);
        }
        if (ds.isEmpty()) return;
        if (draft.mtpHead()) {   // the head drafts for each sequence from the hidden rows its session handed over
            for (Sequence s : ds) {
                try {
                    s.draftArrays();
                    s.k = s.mtp == null ? 0 : s.mtp.propose(s.session, s.next, s.k, s.draftSampler, s.xs, s.q);
                } catch (RuntimeException e) {
                    s.dropDrafts();
                }
            }
            return;
        }
        try {
            Session[] sessions = new Session[ds.size()];
            int[][] catchUp = new int[ds.size()][];
            for (int i = 0; i < ds.size(); i++) {
                Sequence s = ds.get(i);
                if (s.draftSession == null) s.draftSession = new Session(draft.graph(), cfg.maxContext());
                Session d = s.draftSession, t = s.session;
                // the draft holds a prefix of the model's tokens (else it starts over): it catches up on the rest and next
                if (d.position() > t.position() || !Arrays.equals(d.historyArray(), 0, d.position(), t.historyArray(), 0, d.position())) d.reset();
                int[] ids = Arrays.copyOfRange(t.historyArray(), d.position(), t.position() + 1);
                ids[ids.length - 1] = s.next;
                sessions[i] = d;
                catchUp[i] = ids;
            }
            float[] dl = draftDriver.prefill(sessions, catchUp, cfg.chunk());
            for (int i = 0; i < ds.size(); i++) {
                Sequence s = ds.get(i);
                s.draftMark = s.draftSession.mark(s.k - 1);
                s.pickDraft(0, dl, i * vocab);
            }
            for (int j = 1; j < draft.max(); j++) {
                List<Sequence> more = new ArrayList<>();
                for (Sequence s : ds) if (s.k > j) more.add(s);
                if (more.isEmpty()) break;
                Session[] ss = more.stream().map(s -> s.draftSession).toArray(Session[]::new);
                int[][] last = new int[more.size()][];
                for (int i = 0; i < last.length; i++) last[i] = new int[] {more.get(i).xs[j - 1]};
                float[] l = draftDriver.step(ss, last);
                for (int i = 0; i < more.size(); i++) more.get(i).pickDraft(j, l, i * vocab);
            }
        } catch (RuntimeException e) {
            for (Sequence s : ds) s.dropDrafts();
        }
    }

    /**
     * A drafting sequence's share of a step: the model's rows for its next token and its k drafts keep the drafts it
     * would have drawn and one token of its own; both sessions then hold exactly what plain decoding would have.
     */
    private void verified(Sequence s, float[] logits, int off) {
        int k = s.k, p0 = s.session.position() - (k + 1);
        int[] next = new int[1];
        int j;
        try {
            j = Speculation.verify(s.sampler, logits, off, vocab, s.session.historyArray(), p0 + 1, s.xs, k, s.q, s.p, next);
        } catch (RuntimeException e) {
            finish(s, Completion.Finish.ERROR, message(e));
            return;
        }
        draftedTokens.addAndGet(k);
        acceptedTokens.addAndGet(j);
        s.monitor.record(k, j);
        int kept = 0;
        boolean open = true;
        int id = -1;
        try {
            for (int i = 0; i < j && open; i++) {
                if (s.generation.accept(s.xs[i]) >= 0) kept++;
                else open = false;
            }
            if (kept < k) s.session.rewind(s.targetMark, p0 + 1 + kept);
            int dk = Math.min(kept, k - 1);
            if (dk < k - 1 && s.draftSession != null) s.draftSession.rewind(s.draftMark, s.draftMark.position() + dk);
            if (open) id = s.generation.accept(next[0]);
        } catch (RuntimeException e) {
            finish(s, Completion.Finish.ERROR, message(e));
            return;
        } finally {
            s.k = 0;
            s.targetMark = s.draftMark = null;
        }
        s.position = s.session.position();
        s.stateBytes = s.session.state().heldBytes();
        if (id < 0) {
            Generator.Result r = s.generation.result();
            finish(s, r.reason() == Generator.StopReason.EOS || r.reason() == Generator.StopReason.STOP_STRING
                    ? Completion.Finish.STOP : Completion.Finish.LENGTH, null);
        } else {
            s.next = id;
        }
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
        if (s.draftSession != null) s.draftSession.close();
        if (s.mtp != null) s.mtp.close();   // the kept session stops handing its rows to this head, whose memory goes now
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
        Sampler sampler;             // the generation's (speculative decoding draws with it too)
        // speculative decoding: the draft session, this step's k drafts (k = 0: none) and their distributions, the marks
        // both sessions go back to, the monitor that pauses drafting
        Session draftSession;
        MtpDraft mtp;   // with an MTP head: this sequence's, following its session from the start
        Sampler draftSampler;
        int k;
        int[] xs = new int[0];
        float[][] q;
        float[] p;
        State.Mark targetMark, draftMark;
        final Speculation.Monitor monitor = new Speculation.Monitor();

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
            sampler = new Sampler(request.sampling());
            Generator gen = new Generator(s, sampler, request.eos(), request.stops());
            generation = gen.start(request.maxTokens(), codec == null ? null : codec.stream(true), this);
            // adjusted or constrained logits, or reported log-probabilities, need every row of a hierarchical head
            if (adjust.active() || json != null || request.topLogprobs() >= 0) s.state().gateHeadForTopP(1.0);
            if (draft != null && draft.mtpHead() && plainSampling()) {   // before its prompt runs: the head reads its rows
                mtp = new MtpDraft(draft.graph(), cfg.maxContext());
                mtp.begin(s);
            }
            began = System.nanoTime();
            phase = "prefill";
            position = held;
            request.sink().started(request.prompt().length, held);
        }

        /** Whether its tokens are drawn from the logits as they are (nothing adjusts, constrains or reports them): it may draft. */
        boolean plainSampling() { return !adjust.active() && json == null && request.topLogprobs() < 0; }

        /** Draft j from the draft's logits row at {@code off}: drawn with the same parameters (its own stream). */
        void pickDraft(int j, float[] logits, int off) {
            draftArrays();
            Session d = draftSession;
            if (sampler.params().greedy()) {
                xs[j] = draftSampler.sample(logits, off, vocab, d.historyArray(), d.historyLength());
            } else {
                draftSampler.probabilities(logits, off, vocab, d.historyArray(), d.historyLength(), q[j]);
                xs[j] = draftSampler.draw(q[j], vocab);
            }
        }

        /** The drafts' buffers and sampler (the same parameters as the sequence's, its own stream), made once. */
        void draftArrays() {
            if (xs.length < draft.max()) xs = new int[draft.max()];
            if (draftSampler == null) {
                Long seed = request.sampling().seed();
                draftSampler = new Sampler(request.sampling().withSeed(seed == null ? null : seed ^ 0x6A09E667F3BCC909L));
            }
            if (!sampler.params().greedy() && q == null) { q = new float[draft.max()][vocab]; p = new float[vocab]; }
        }

        /** Forgets this step's drafts (the draft session goes back to before them). */
        void dropDrafts() {
            if (draftMark != null && draftSession != null) {
                try {
                    draftSession.rewind(draftMark, draftMark.position());
                } catch (RuntimeException e) {
                    draftSession.reset();
                }
            }
            k = 0;
            targetMark = draftMark = null;
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
