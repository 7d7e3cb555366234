package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.State;

import java.util.Arrays;

/**
 * Drafts with the model's own MTP head ({@code model.mtp.*}, {@link dev.cmf4j.model.MtpSpec}): the head's row for
 * position i reads the model's last-layer hidden state h_i and the token at i + 1 and predicts the token at i + 2.
 * <p>
 * Every position the model keeps goes through the head once, with the model's own hidden state (as vLLM runs it): the
 * model's steps hand their hidden rows over ({@link Session#observeHidden}), and at the start of a round the head
 * catches up on the positions it has not seen, the last of them with the token z the model has just picked, which
 * gives the first draft. Each further draft feeds the head its own output (before its final norm) in place of h; those
 * rows are taken back from the head's K/V before the model verifies, since the model's own hidden states replace them
 * in the next round. So the head's cache holds exactly one row per kept position, and rejected tokens leave nothing.
 * <p>
 * A GPU-resident model's steps copy their last-layer rows back with the logits; the head runs where the model's backend
 * puts it (on CUDA resident too: its input rows made on the host, fc, layer, norm and head on the device; greedy drafts
 * chained there, each draft's input row made on the device from the one before). One instance per sequence; not
 * thread-safe.
 */
public final class MtpDraft implements Speculation.Drafter, AutoCloseable {
    private final Graph head;
    private final State state;
    private final int hidden, vocab, chunk;
    private final float[] logits, carried;
    private Session target;
    /** The model position of the head's first row (0 unless the head started on a sequence already under way). */
    private int base;
    /** The model's hidden rows of positions [pendingFrom, pendingEnd), the head's next rows. */
    private float[] pending = new float[0];
    private int pendingFrom, pendingEnd;
    /** Ids before each draft, for the sampler's penalties: the model's history, z and the drafts so far. */
    private int[] history = new int[64];

    /**
     * @param head       the MTP head's graph ({@link dev.cmf4j.model.Model#mtpGraph})
     * @param maxContext the model session's context limit
     */
    public MtpDraft(Graph head, int maxContext) {
        this.head = head;
        this.chunk = Session.DEFAULT_CHUNK;
        this.state = head.newState(chunk, maxContext);
        this.hidden = head.hidden();
        this.vocab = head.vocab();
        this.logits = new float[vocab];
        this.carried = new float[hidden];
    }

    @Override public int vocab() { return vocab; }

    /** Positions of the model the head has consumed, one row each (from {@link #base}). */
    public int position() { return base + state.position(); }

    /** The model's session stops handing its hidden rows over (its sequence is done with drafting). */
    public void end() {
        if (target != null) target.observeHidden(null);
        target = null;
    }

    /** Ends, and frees the head's state now (on a GPU: its device memory) rather than when it is collected. */
    @Override public void close() {
        end();
        state.close();
    }

    @Override public void begin(Session target) {
        if (target.graph().hidden() != hidden)
            throw new IllegalArgumentException("the MTP head reads hidden states of " + hidden + ", the model's are " + target.graph().hidden());
        if (this.target != target) {
            if (this.target != null) this.target.observeHidden(null);
            this.target = target;
            restart(target.position());
        }
        target.observeHidden(this::hiddenRows);
    }

    /** The model ran {@code rows} tokens from {@code position}: their hidden rows are the head's next inputs. */
    private void hiddenRows(int position, float[] x, int off, int rows, int width) {
        // the model went back before what the head holds (a reset, a chat started over) or skipped positions it never
        // reported (a restored state): the head starts over from here
        if (position < position() || position > pendingEnd) restart(position);
        int need = (position + rows - pendingFrom) * hidden;
        if (pending.length < need) pending = Arrays.copyOf(pending, Math.max(need, 2 * pending.length));
        System.arraycopy(x, off, pending, (position - pendingFrom) * hidden, rows * hidden);
        pendingEnd = position + rows;
    }

    private void restart(int position) {
        state.reset();
        base = position;
        pendingFrom = pendingEnd = position;
    }

    @Override public int limit(Session target) { return state.maxContext() - (target.position() - base); }

    @Override public int propose(Session target, int z, int k, Sampler sampler, int[] xs, float[][] q) {
        int p = target.position();
        // rows [position(), p): the model's hidden state at i and its token at i + 1 (z for the last); none: nothing to
        // draft from yet (the head started at p), rows missing: the model ran without reporting them
        if (position() >= p || pendingEnd < p || pendingFrom > position()) {
            if (position() != p) restart(p);
            return 0;
        }
        int from = position(), n = p - from;
        int[] ids = Arrays.copyOfRange(target.historyArray(), from + 1, p + 1);
        ids[n - 1] = z;
        if (sampler.params().plainGreedy() && proposeOnDevice(ids, n, from, p, k, xs)) return k;
        // the layer's output (before the head's final norm), last row; a device running the head hands it back too
        Graph.HiddenObserver keepLast = head.lastLayer((x, tokens, width) -> System.arraycopy(x, (tokens - 1) * width, carried, 0, width));
        for (int off = 0; off < n; off += chunk) {
            int c = Math.min(chunk, n - off);
            boolean last = off + c == n;
            head.forwardMtp(state, ids, off, c, pending, (from + off - pendingFrom) * hidden, last ? logits : null, false,
                    last ? keepLast : null);
        }
        // the rows the head consumed are done with
        System.arraycopy(pending, (p - pendingFrom) * hidden, pending, 0, (pendingEnd - p) * hidden);
        pendingFrom = p;
        // drafts: each row reads the head's own output and the draft before it; taken back once all are drawn
        boolean greedy = sampler.params().greedy();
        int len = p + 1;
        if (history.length < len + k) history = new int[Math.max(len + k, 2 * history.length)];
        System.arraycopy(target.historyArray(), 0, history, 0, p);
        history[p] = z;
        State.Mark mark = k > 1 ? state.mark(k - 1) : null;
        int[] one = new int[1];
        for (int i = 0; i < k; i++) {
            if (greedy) {
                xs[i] = sampler.sample(logits, 0, vocab, history, len);
            } else {
                sampler.probabilities(logits, 0, vocab, history, len, q[i]);
                xs[i] = sampler.draw(q[i], vocab);
            }
            history[len++] = xs[i];
            if (i < k - 1) {
                one[0] = xs[i];
                head.forwardMtp(state, one, 0, 1, carried, 0, logits, false, keepLast);
            }
        }
        if (mark != null && state.rewind(mark, p - base) != 0)
            throw new IllegalStateException("the MTP head's layer did not go back exactly");   // a full-attention layer always does
        return k;
    }

    /**
     * Greedy drafts (argmax, no penalties) chained where the head runs, when its device can: the catch-up rows but the
     * last chunk's as in {@link #propose}, then that chunk and the k drafts in one call with one wait (the drafts' rows
     * taken back after, as there). False, with nothing run, where it cannot.
     */
    private boolean proposeOnDevice(int[] ids, int n, int from, int p, int k, int[] xs) {
        if (!head.draftsMtpGreedily()) return false;
        int last = (n - 1) / chunk * chunk, c = n - last;
        for (int off = 0; off < last; off += chunk)
            head.forwardMtp(state, ids, off, chunk, pending, (from + off - pendingFrom) * hidden, null, false, null);
        State.Mark mark = k > 1 ? state.mark(c + k - 1) : null;
        head.draftMtpGreedy(state, ids, last, c, pending, (from + last - pendingFrom) * hidden, k, xs);
        System.arraycopy(pending, (p - pendingFrom) * hidden, pending, 0, (pendingEnd - p) * hidden);
        pendingFrom = p;
        if (mark != null && state.rewind(mark, p - base) != 0)
            throw new IllegalStateException("the MTP head's layer did not go back exactly");
        return true;
    }

    /** The head's logits of its last row (the last draft's distribution before sampling), for tests. */
    float[] logits() { return logits; }

    /** Nothing to take back: the draft rows left the head's cache when they were drawn. */
    @Override public void settle(Session target, int kept, int k) { }
}
