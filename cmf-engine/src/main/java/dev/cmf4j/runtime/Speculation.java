package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.State;

import java.util.Arrays;

/**
 * Speculative decoding with a draft model of the same vocabulary or the model's own MTP head ({@link MtpDraft}): the
 * draft proposes up to {@code draftMax} tokens, the target runs them as the rows of one step (its weights read once for
 * all of them) and keeps the longest prefix its own sampler would have produced: greedy, the drafts equal to its pick;
 * sampled, Leviathan et al.'s rule (accept a draft x with probability min(1, p(x)/q(x)), else draw from max(0, p − q)
 * normalised), which leaves the target's distribution exact. The first rejected or the extra token comes from the
 * target, so every round yields at least one. Rejected tokens are taken back from the target's session
 * ({@link Session#rewind}) and from the draft. While the drafts are mostly rejected, drafting pauses and plain steps
 * run; it is tried again later.
 *
 * <p>One instance per sequence (it owns the draft session or the head's state, which follows the target's across
 * generations: a chat's turns); not thread-safe.
 */
public final class Speculation {

    /** Counts of one generation: tokens drafted and accepted, target steps (verification rounds and plain steps). */
    public record Stats(long drafted, long accepted, long rounds, long plainSteps, long tokens) {
        /** Accepted drafts per drafted token. */
        public double acceptance() { return drafted == 0 ? 0 : (double) accepted / drafted; }

        /** Generated tokens per target step. */
        public double tokensPerStep() { long steps = rounds + plainSteps; return steps == 0 ? 0 : (double) tokens / steps; }
    }

    /**
     * Where the drafts come from: a draft model's session ({@link SessionDrafter}) or the model's own MTP head
     * ({@link MtpDraft}).
     */
    interface Drafter {
        /** Rows of its logits. */
        int vocab();

        /** A generation on {@code target} starts; called before the target runs its prompt. */
        void begin(Session target);

        /** The most tokens it can draft after {@code z} with the target at its position. */
        int limit(Session target);

        /**
         * Drafts up to {@code k} tokens after the target's history and {@code z} into {@code xs} (sampled: {@code q[i]}
         * the distribution draft i was drawn from by {@code sampler}); returns how many, 0 when it cannot this round.
         */
        int propose(Session target, int z, int k, Sampler sampler, int[] xs, float[][] q);

        /** The target kept {@code kept} of the {@code k} drafts (its session already rewound). */
        void settle(Session target, int kept, int k);
    }

    /**
     * Wall time of the last generation's parts, in nanoseconds: drafting (the draft's catch-up and its drafts, rounds that
     * drafted nothing too), verifying (the target's step over the drafts, the acceptance test, the rollbacks) and the
     * plain steps; for finding where a round's time goes (bench --json).
     */
    public record Times(long drafting, long verifying, long plain) {}

    private final Drafter drafter;
    private final int draftMax;
    private final Sampler draftSampler;
    private long drafted, accepted, rounds, plainSteps;
    private long draftingNanos, verifyingNanos, plainNanos;
    private final Monitor monitor = new Monitor();

    /**
     * @param draft    the draft model's session (same vocabulary as the target); it is caught up on the target's tokens
     *                 as needed, so it may start empty or hold a prefix of the target's history
     * @param draftMax tokens drafted per round (1..64)
     * @param params   the target's sampling parameters; the draft samples with the same ones (its own stream)
     */
    public Speculation(Session draft, int draftMax, SamplingParams params) { this(new SessionDrafter(draft), draftMax, params); }

    /** Drafting with the model's own MTP head ({@link MtpDraft}); as above otherwise. */
    public Speculation(MtpDraft mtp, int draftMax, SamplingParams params) { this((Drafter) mtp, draftMax, params); }

    private Speculation(Drafter drafter, int draftMax, SamplingParams params) {
        if (draftMax < 1 || draftMax > 64) throw new IllegalArgumentException("--draft-max must be 1..64, got " + draftMax);
        this.drafter = drafter;
        this.draftMax = draftMax;
        Long seed = params.seed();
        this.draftSampler = new Sampler(params.withSeed(seed == null ? null : seed ^ 0x6A09E667F3BCC909L));
    }

    /** What the last generation drafted, accepted and ran. */
    public Stats stats(int tokens) { return new Stats(drafted, accepted, rounds, plainSteps, tokens); }

    /** Where the last generation's time went. */
    public Times times() { return new Times(draftingNanos, verifyingNanos, plainNanos); }

    /**
     * Generates as {@link Generator#generate} does, with the same result for greedy decoding and the same distribution
     * for sampling, drafting with this instance's draft session.
     */
    public Generator.Result generate(Generator g, int[] prompt, int maxTokens, Generator.TextStream text, Generator.Listener listener) {
        Session target = g.session();
        if (drafter.vocab() != target.vocab())
            throw new IllegalArgumentException("the draft's vocabulary has " + drafter.vocab() + " tokens, the target's " + target.vocab());
        Sampler sampler = g.sampler();
        boolean greedy = sampler.params().greedy();
        int v = target.vocab();
        drafted = accepted = rounds = plainSteps = 0;
        draftingNanos = verifyingNanos = plainNanos = 0;
        Generator.Generation gen = g.start(maxTokens, text, listener);
        drafter.begin(target);
        float[] logits = target.prefill(prompt);
        int z = gen.next(logits, 0);
        float[][] q = greedy ? null : new float[draftMax][v];
        float[] p = greedy ? null : new float[v];
        int[] xs = new int[draftMax];
        while (z >= 0) {
            int p0 = target.position();
            int k = Math.min(draftMax, Math.min(maxTokens - gen.tokens() - 1, target.maxContext() - p0 - 2));
            k = Math.min(k, drafter.limit(target));
            // 1. the draft catches up on the target's tokens and z, then proposes k tokens (none: a plain step)
            long t0 = System.nanoTime();
            if (k >= 1 && !monitor.paused()) k = drafter.propose(target, z, k, draftSampler, xs, q);
            else k = 0;
            long t1 = System.nanoTime();
            draftingNanos += t1 - t0;
            if (k < 1) {
                plainSteps++;
                logits = target.decode(z);
                z = gen.next(logits, 0);
                plainNanos += System.nanoTime() - t1;
                continue;
            }
            // 2. the target runs z and the k drafts as one step: row i is its distribution for draft i, row k the next
            State.Mark tm = target.mark(k + 1);
            int[] span = new int[k + 1];
            span[0] = z;
            System.arraycopy(xs, 0, span, 1, k);
            float[] rows = target.logitsAll(span);
            int[] next = new int[1];
            int j = verify(sampler, rows, 0, v, target.historyArray(), p0 + 1, xs, k, q, p, next);
            rounds++;
            drafted += k;
            accepted += j;
            monitor.record(k, j);
            // 3. emit the accepted drafts and the target's own token; keep in both exactly what plain decoding would have
            // consumed (every emitted token but one that ended the generation)
            int kept = 0;
            z = -1;
            boolean open = true;
            for (int i = 0; i < j && open; i++) {
                if (gen.accept(xs[i]) >= 0) kept++;
                else open = false;
            }
            if (kept < k) target.rewind(tm, p0 + 1 + kept);
            drafter.settle(target, kept, k);
            verifyingNanos += System.nanoTime() - t1;
            if (open) z = gen.accept(next[0]);
        }
        return gen.result();
    }

    /**
     * Drafts with a draft model's session: it catches up on the target's tokens it has not seen, proposes one token a
     * step, and takes back what the target did not keep.
     */
    private static final class SessionDrafter implements Drafter {
        private final Session draft;
        private State.Mark mark;
        private int markedAt;

        SessionDrafter(Session draft) { this.draft = draft; }

        @Override public int vocab() { return draft.vocab(); }

        @Override public void begin(Session target) { mark = null; }

        @Override public int limit(Session target) { return draft.maxContext() - target.position() - 1; }

        @Override public int propose(Session target, int z, int k, Sampler sampler, int[] xs, float[][] q) {
            // the draft must hold a prefix of the target's tokens (a chat that started over, a restored state: start over)
            int[] dh = draft.historyArray(), th = target.historyArray();
            if (draft.position() > target.position() || !Arrays.equals(dh, 0, draft.position(), th, 0, draft.position())) draft.reset();
            boolean greedy = sampler.params().greedy();
            int v = draft.vocab();
            float[] dl = draft.prefill(catchUp(target, z));
            mark = draft.mark(k - 1);
            markedAt = draft.position();
            for (int i = 0; i < k; i++) {
                if (greedy) {
                    xs[i] = sampler.sample(dl, 0, v, draft.historyArray(), draft.historyLength());
                } else {
                    sampler.probabilities(dl, 0, v, draft.historyArray(), draft.historyLength(), q[i]);
                    xs[i] = sampler.draw(q[i], v);
                }
                if (i < k - 1) dl = draft.decode(xs[i]);
            }
            return k;
        }

        /** The draft consumed z and drafts 0..k-2: it keeps z and the kept drafts (the last draft it never ran). */
        @Override public void settle(Session target, int kept, int k) {
            if (Math.min(kept, k - 1) < k - 1) draft.rewind(mark, markedAt + Math.min(kept, k - 1));
            mark = null;
        }

        /** The target's tokens the draft has not consumed, then z (the draft holds a prefix of the target's history). */
        private int[] catchUp(Session target, int z) {
            int from = draft.position(), to = target.position();
            int[] ids = Arrays.copyOfRange(target.historyArray(), from, to + 1);
            ids[ids.length - 1] = z;
            return ids;
        }
    }

    /**
     * Which of the drafts {@code xs[0, k)} the target keeps, given its logits rows {@code rows} from float {@code off}
     * (row i: its distribution for draft i; row k: the one after the last) and its history {@code hist}, whose first
     * {@code before} ids precede draft 0: returns how many it keeps and puts its own next token in {@code next[0]}.
     * Greedy: the drafts equal to its pick. Sampled ({@code q[i]} the draft's distribution for draft i, {@code p} a
     * buffer): Leviathan's rule, min(1, p/q), then a draw from max(0, p − q).
     */
    static int verify(Sampler sampler, float[] rows, int off, int v, int[] hist, int before, int[] xs, int k, float[][] q,
                      float[] p, int[] next) {
        boolean greedy = sampler.params().greedy();
        for (int j = 0; j < k; j++) {
            int n = before + j;   // the history as it stood before draft j
            if (greedy) {
                int t = sampler.sample(rows, off + j * v, v, hist, n);
                if (t != xs[j]) { next[0] = t; return j; }
            } else {
                sampler.probabilities(rows, off + j * v, v, hist, n, p);
                int x = xs[j];
                if (sampler.uniform() * q[j][x] < p[x]) continue;   // accept with probability min(1, p/q)
                for (int t = 0; t < v; t++) p[t] = Math.max(0f, p[t] - q[j][t]);
                next[0] = sampler.draw(p, v);
                return j;
            }
        }
        next[0] = sampler.sample(rows, off + k * v, v, hist, before + k);
        return k;
    }

    /**
     * Pauses drafting while the last rounds accepted too little of what they drafted: averaged over {@value #WINDOW}
     * rounds, below {@value #MIN_ACCEPTANCE} a round costs more than the plain steps it saves; drafting resumes after
     * {@value #PAUSE} plain steps.
     */
    static final class Monitor {
        static final int WINDOW = 4;
        static final double MIN_ACCEPTANCE = 0.3;
        static final int PAUSE = 32;
        private final int[] recentDrafted = new int[WINDOW], recentAccepted = new int[WINDOW];
        private int recent, paused;

        /** Whether this step runs plainly (counting it against the pause). */
        boolean paused() {
            if (paused == 0) return false;
            paused--;
            return true;
        }

        void record(int k, int j) {
            recentDrafted[recent % WINDOW] = k;
            recentAccepted[recent % WINDOW] = j;
            recent++;
            if (recent < WINDOW) return;
            int d = 0, a = 0;
            for (int i = 0; i < WINDOW; i++) { d += recentDrafted[i]; a += recentAccepted[i]; }
            if (a < MIN_ACCEPTANCE * d) {
                paused = PAUSE;
                recent = 0;
                Arrays.fill(recentDrafted, 0);
                Arrays.fill(recentAccepted, 0);
            }
        }
    }
}
