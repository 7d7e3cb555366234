package dev.cmf4j.runtime;

import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.State;

import java.util.Arrays;

/**
 * One conversation with a model: its KV caches and recurrent states, the ids consumed so far, and the
 * forward calls that extend them. Prompts are prefilled in chunks ({@link #DEFAULT_CHUNK} tokens on the CPU: a
 * multiple of the gated delta rule's chunk, so linear-attention layers round like transformers; the device's own
 * chunk when the whole model runs on a GPU); decode
 * steps run one token. Not thread-safe: one session per thread. On a GPU the session's KV cache lives in device
 * memory: {@link #close} gives it back at once (else it goes when the session becomes unreachable).
 */
public final class Session implements AutoCloseable {
    /** Prefill chunk on the CPU graph: bounds scratch memory and keeps the weight reuse of a chunk matmul. */
    public static final int DEFAULT_CHUNK = 64;

    private final Graph graph;
    private final State state;
    private final int chunk;
    private final float[] last;
    private int[] history = new int[64];
    private int length;
    /** Receives the last layer's hidden rows of every step this session runs (an MTP head reads them), or null. */
    private HiddenRows hiddenRows;

    /**
     * The model's last-layer output rows (before its final norm) of a step that ran {@code rows} tokens from
     * {@code position}: [rows, hidden] from {@code x[off]}.
     */
    @FunctionalInterface
    public interface HiddenRows { void accept(int position, float[] x, int off, int rows, int hidden); }

    /**
     * @param maxContext positions this session may hold (capped by the model's max_position_embeddings)
     */
    public Session(Graph graph, int maxContext, int chunk) {
        this.graph = graph;
        this.chunk = chunk;
        this.state = graph.newState(chunk, maxContext);
        this.last = new float[graph.vocab()];
    }

    /**
     * A session with the graph's own chunk: {@link #DEFAULT_CHUNK} on the CPU graph, the device forward's
     * {@link dev.cmf4j.backend.DeviceForward#preferredChunk preferred chunk} when the model runs on a GPU (no
     * more than {@code maxContext}, so a short session does not hold a long chunk's device buffers).
     */
    public Session(Graph graph, int maxContext) { this(graph, maxContext, defaultChunk(graph, maxContext)); }

    static int defaultChunk(Graph graph, int maxContext) {
        if (graph.device() == null) return DEFAULT_CHUNK;
        return Math.max(1, Math.min(graph.device().preferredChunk(), Math.min(maxContext, graph.spec().maxPositions())));
    }

    public Graph graph() { return graph; }

    /** Positions consumed so far. */
    public int position() { return state.position(); }

    /** The context limit of this session. */
    public int maxContext() { return state.maxContext(); }

    public int vocab() { return graph.vocab(); }

    /** Every id consumed so far (prompt and generated), for repetition penalties. */
    public int[] history() { return Arrays.copyOf(history, length); }

    int historyLength() { return length; }

    int[] historyArray() { return history; }

    /**
     * Runs the following steps through a skill and/or un-merged adapter ({@link Graph#overlay}); choose it before the
     * first token, or after {@link #reset} (tokens already held keep what the earlier overlay computed).
     */
    public void useOverlay(dev.cmf4j.model.graph.Overlay o) { state.useOverlay(o); }

    /** The state (caches), for tests and memory accounting. */
    public State state() { return state; }

    /**
     * Runs {@code ids} after what the session already holds and returns the logits of the last one
     * (a view, valid until the next call).
     */
    public float[] prefill(int[] ids) {
        check(ids);
        for (int p = 0; p < ids.length; p += chunk) forward(ids, p, Math.min(chunk, ids.length - p), last, false);
        return last;
    }

    /** One token; returns its logits (a view, valid until the next call). */
    public float[] decode(int id) {
        oneId[0] = id;
        return prefill(oneId);
    }

    /** decode's one-token input, reused (a session is used by one thread at a time, as its logits view is). */
    private final int[] oneId = new int[1];

    /**
     * Runs {@code ids} and returns the logits of every one, [ids.length, vocab] row-major. On a device at most
     * {@link #DEFAULT_CHUNK} tokens per call: every row of logits costs vocab floats on the device twice (the head's
     * GEMM output and the logits) and in pinned host memory, so a device session's longer prompt chunk (512) would
     * take 8× the memory here (by the resident forward's scratch sizes, ~2 GB of device memory at a 152k vocabulary;
     * not measured).
     */
    public float[] logitsAll(int[] ids) {
        check(ids);
        int v = graph.vocab();
        int step = graph.device() != null ? Math.min(chunk, DEFAULT_CHUNK) : chunk;
        float[] out = new float[Math.multiplyExact(ids.length, v)];
        float[] buf = new float[Math.min(step, ids.length) * v];
        for (int p = 0; p < ids.length; p += step) {
            int n = Math.min(step, ids.length - p);
            forward(ids, p, n, buf, true);
            System.arraycopy(buf, 0, out, p * v, n * v);
        }
        return out;
    }

    /**
     * Frees the session's device memory now (nothing to free on the CPU); idempotent. Any later call that runs
     * the model fails with {@link IllegalStateException}.
     */
    @Override
    public void close() { state.close(); }

    /**
     * Writes this session's sequence (the state snapshot of {@link State#exportTo}, then the ids consumed, which
     * repetition penalties read) to {@code out}.
     */
    public void exportState(java.io.OutputStream out) throws java.io.IOException {
        var d = new java.io.DataOutputStream(new java.io.BufferedOutputStream(out, 1 << 16));
        exportState(d);
        d.flush();
    }

    /** As {@link #exportState(java.io.OutputStream)}, to a stream more records may follow (a chat's transcript). */
    void exportState(java.io.DataOutputStream d) throws java.io.IOException {
        state.exportTo(d);
        d.writeInt(length);
        for (int i = 0; i < length; i++) d.writeInt(history[i]);
    }

    /**
     * Replaces this session's sequence with one {@link #exportState} wrote; refused with an {@link java.io.IOException}
     * (and the session reset) when it comes from another model or other {@code --o1}/{@code --kv} settings, or is cut
     * short. Bytes after the snapshot (a chat's transcript) are not read.
     */
    public void importState(java.io.InputStream in) throws java.io.IOException {
        importState(new java.io.DataInputStream(new java.io.BufferedInputStream(in, 1 << 16)));
    }

    /** As {@link #importState(java.io.InputStream)}, reading no byte past the snapshot from {@code d}. */
    void importState(java.io.DataInputStream d) throws java.io.IOException {
        try {
            state.importFrom(d);
            int n = d.readInt();
            if (n != state.position()) throw new java.io.IOException("state snapshot: " + n + " ids for a sequence at position " + state.position());
            int[] h = new int[Math.max(n, 16)];
            for (int i = 0; i < n; i++) h[i] = d.readInt();
            history = h;
            length = n;
        } catch (java.io.EOFException e) {
            reset();
            throw new java.io.IOException("state snapshot is truncated", e);
        } catch (java.io.IOException | RuntimeException e) {
            reset();
            throw e;
        }
    }

    /** A point this session can go back to ({@link #rewind}) over up to {@code upcoming} later tokens. */
    public dev.cmf4j.model.graph.State.Mark mark(int upcoming) {
        if (length != state.position()) throw new IllegalStateException("the history holds " + length + " ids at position " + state.position());
        return state.mark(upcoming);
    }

    /**
     * Takes the session back to {@code position} (between the mark's and the current one): later tokens are forgotten,
     * their ids leave the history. Layers that only go back to the mark (recurrent, ring) run the kept tokens again.
     */
    public void rewind(dev.cmf4j.model.graph.State.Mark m, int position) {
        int replay = state.rewind(m, position);
        int from = position - replay;
        int[] again = Arrays.copyOfRange(history, from, position);
        length = from;
        for (int p = 0; p < again.length; p += chunk) forward(again, p, Math.min(chunk, again.length - p), null, false);
    }

    /**
     * Hands the last layer's hidden rows of every later step to {@code sink} (null: none), rows [tokens, hidden] as
     * they leave the last layer (a GPU-resident forward copies them back with the logits; a device forward that does
     * not is refused: {@link Graph#lastLayerProblem}).
     */
    public void observeHidden(HiddenRows sink) {
        if (sink != null && graph.lastLayerProblem() != null) throw new IllegalStateException(graph.lastLayerProblem());
        this.hiddenRows = sink;
    }

    /** Where this session's hidden rows go, or null ({@link BatchDriver} hands over the rows of its steps too). */
    HiddenRows hiddenRows() { return hiddenRows; }

    /** Forgets the conversation. */
    public void reset() {
        state.reset();
        length = 0;
    }

    private void forward(int[] ids, int off, int n, float[] logits, boolean all) {
        Graph.HiddenObserver observer = null;
        if (hiddenRows != null) {
            HiddenRows sink = hiddenRows;
            int from = state.position();
            observer = graph.lastLayer((x, tokens, hidden) -> sink.accept(from, x, 0, tokens, hidden));
        }
        graph.forward(state, ids, off, n, logits, all, observer);
        consumed(ids, off, n);
    }

    /** Records ids the state has just consumed (here, or in a step a {@link BatchDriver} ran). */
    void consumed(int[] ids, int off, int n) {
        if (length + n > history.length) history = Arrays.copyOf(history, Math.max(length + n, 2 * history.length));
        System.arraycopy(ids, off, history, length, n);
        length += n;
    }

    void check(int[] ids) {
        if (ids.length == 0) throw new GenerationException.BadInput("empty prompt: at least one token id is needed");
        int v = graph.vocab();
        for (int i = 0; i < ids.length; i++)
            if (ids[i] < 0 || ids[i] >= v)
                throw new GenerationException.BadInput("token id " + ids[i] + " (at index " + i + ") is outside the vocabulary [0, " + v + ")");
        if ((long) state.position() + ids.length > state.maxContext())
            throw new GenerationException.ContextLimit(state.maxContext(), "context limit of " + state.maxContext()
                    + " tokens exceeded: " + state.position() + " already held + " + ids.length + " new");
    }
}
