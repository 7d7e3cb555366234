package dev.cmf4j.model.graph;

import dev.cmf4j.backend.DeviceForward;

/**
 * Everything one sequence keeps between forward steps: KV caches, recurrent states, its position. The scratch of a
 * step lives in a {@link Workspace}: the state makes its own (of {@link #maxChunk()} rows) only when it runs alone
 * through {@link Graph#forward(State, int[], int, int, float[], boolean, Graph.HiddenObserver)}; batched steps use
 * their driver's. Created by {@link Graph#newState(int, int)}; not thread-safe (one step at a time).
 */
public final class State {
    final Graph graph;
    final int maxChunk, maxContext;
    final Object[] mixerState;
    /** The device forward's per-session state (KV cache on the device), or null on the CPU graph. */
    final Object deviceState;
    int position;
    /** A step failed after a state that cannot roll back (recurrent) was modified: only reset helps. */
    boolean broken;
    /**
     * The hierarchical head's gate for this sequence: clusters whose log-probability is below it read no rows
     * (−∞, the default: every row). Only a head with clusters uses it.
     */
    double headGate = Double.NEGATIVE_INFINITY;
    /** Head rows (vocabulary entries) this sequence's last step computed. */
    long headRowsRead;
    /** The skill and adapter this sequence reads its weights through ({@link #useOverlay}). */
    Overlay overlay = Overlay.NONE;
    /** Set by {@link #close}: the device memory is gone, no further step may run. */
    boolean closed;
    /** Frees the device state once: run by {@link #close}, or by the cleaner when this state becomes unreachable. */
    private final java.lang.ref.Cleaner.Cleanable deviceRelease;

    State(Graph graph, int maxChunk, int maxContext) {
        this.graph = graph;
        this.maxChunk = maxChunk;
        this.maxContext = maxContext;
        int n = graph.numLayers();
        mixerState = new Object[n];
        // on a device graph the CPU steps never run: none of their caches
        boolean cpu = graph.device() == null;
        for (int l = 0; cpu && l < n; l++) mixerState[l] = graph.mixer(l).newState(maxContext);
        deviceState = cpu ? null : graph.device().newState(maxChunk, maxContext);
        if (!cpu) {
            // the device memory (KV cache, scratch, captured graph) goes back at close, or when this state becomes
            // unreachable; the action must not reach the state itself
            DeviceForward device = graph.device();
            Object ds = deviceState;
            deviceRelease = DEVICE_MEMORY.register(this, () -> device.release(ds));
        } else {
            deviceRelease = null;
        }
    }

    /**
     * Gives the device memory back now (a no-op on the CPU graph, and when already closed); any later step
     * fails with {@link IllegalStateException}.
     */
    public void close() {
        closed = true;
        if (deviceRelease != null) deviceRelease.clean();
    }

    /** Frees dropped sessions' device memory, so many short sessions never pile up (an explicit close is sooner). */
    private static final java.lang.ref.Cleaner DEVICE_MEMORY = java.lang.ref.Cleaner.create();

    Object mixerState(int layer) { return mixerState[layer]; }

    /** This state's own workspace and one-span batch, for steps it runs alone; made on first use. */
    private Workspace solo;
    private Batch soloBatch;

    Workspace soloWorkspace() {
        if (solo == null) solo = graph.newWorkspace(maxChunk, maxContext);
        return solo;
    }

    Batch soloBatch() {
        if (soloBatch == null) soloBatch = new Batch();
        return soloBatch.clear();
    }

    /**
     * Gates the hierarchical head for top-p sampling at {@code topP} (with temperature 1 and no other filter): the
     * largest gate at which the candidate set provably equals the full head's (V·e^g ≤ (1 − p)/2); 1 reads every
     * row. No effect on a model with a flat head.
     */
    public void gateHeadForTopP(double topP) {
        if (!(topP > 0 && topP <= 1)) throw new IllegalArgumentException("top-p must be in (0, 1], got " + topP);
        headGate = graph.clusterHead() == null || topP >= 1 ? Double.NEGATIVE_INFINITY
                : Math.log(0.5 * (1 - topP) / graph.vocab());
    }

    /** The head gate in log-probability (−∞: every row is read). */
    public double headGate() { return headGate; }

    /** Head rows (vocabulary entries) the last step computed for this sequence: the whole vocabulary per logits row unless gated. */
    public long headRowsRead() { return headRowsRead; }

    /**
     * Bytes of this sequence's recurrent and bounded layer state (conv rings, delta-rule matrices, anchor rings,
     * sliding-window rings, sealed {@code --o1} layers) as held now, or -1 when some layer keeps a KV cache that grows
     * with the context (a full layer, a sealed one before it seals) or the state is on a device.
     */
    public long stateBytes() {
        if (graph.device() != null) return -1;
        long sum = 0;
        for (int l = 0; l < mixerState.length; l++) {
            switch (mixerState[l]) {
                case DeltaNetStep.DeltaState d -> sum += (long) Float.BYTES * (d.conv.length + d.s.length);
                case BoundedAnchorStep.Ring r -> sum += (long) Float.BYTES * (r.k.length + r.v.length);
                case SealedKv s -> {
                    if (!s.sealed()) return -1;
                    sum += s.bytes();
                }
                case dev.cmf4j.backend.cpu.KvCache c when c.window() > 0 -> sum += c.storeBytes();
                case null -> { if (!(graph.spec().layer(l).mixer() instanceof dev.cmf4j.model.Mixer.Attention a && a.sharesKv())) return -1; }
                default -> { return -1; }
            }
        }
        return sum;
    }

    /**
     * Reads the weights through {@code o} from the next step on (a skill and/or an un-merged adapter; made and checked
     * by {@link Graph#overlay}). Tokens already in the cache keep what the earlier overlay computed for them, so a
     * conversation normally picks its overlay before its first token.
     */
    public void useOverlay(Overlay o) {
        graph.checkOverlay(o);
        overlay = o;
    }

    /** The overlay this sequence's steps read their weights through. */
    public Overlay overlay() { return overlay; }

    /**
     * Bytes of this sequence's attention and recurrent state as held now, whether bounded or not: every KV cache's
     * store (with its grown capacity), sealed layers, rings and recurrent states. -1 on a device.
     */
    public long heldBytes() {
        if (graph.device() != null) return -1;
        long sum = 0;
        for (Object m : mixerState) {
            sum += switch (m) {
                case DeltaNetStep.DeltaState d -> (long) Float.BYTES * (d.conv.length + d.s.length);
                case BoundedAnchorStep.Ring r -> (long) Float.BYTES * (r.k.length + r.v.length);
                case SealedKv s -> s.sealed() ? s.bytes() : s.cache().storeBytes();
                case dev.cmf4j.backend.cpu.KvCache c -> c.storeBytes();
                case null, default -> 0L;
            };
        }
        return sum;
    }

    /**
     * Seals this sequence's {@code --o1} layers at its next step (of any length) when they hold at least their S sink
     * positions and 4 by then; unasked, they seal at the first single-token step past W + S + 8 positions.
     */
    public void seal() {
        for (Object m : mixerState) if (m instanceof SealedKv s) s.requestSeal();
    }

    /** Whether every {@code --o1} layer of this sequence is sealed (true when the model has none). */
    public boolean sealed() {
        for (Object m : mixerState) if (m instanceof SealedKv s && !s.sealed()) return false;
        return true;
    }

    /** Positions consumed so far (the next token's position). */
    public int position() { return position; }

    public int maxChunk() { return maxChunk; }

    public int maxContext() { return maxContext; }

    /** The KV cache of attention layer {@code layer}, or null (other mixers, KV-shared layers); for tests. */
    public dev.cmf4j.backend.cpu.KvCache kvCache(int layer) {
        return mixerState[layer] instanceof dev.cmf4j.backend.cpu.KvCache || mixerState[layer] instanceof SealedKv
                ? AttentionStep.cacheOf(mixerState[layer]) : null;
    }

    /** Forgets the conversation: the next token is at position 0. */
    public void reset() {
        if (graph.device() == null) for (int l = 0; l < mixerState.length; l++) graph.mixer(l).reset(mixerState[l]);
        position = 0;
        broken = false;
    }
}
