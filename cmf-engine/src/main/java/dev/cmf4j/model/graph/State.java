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
     * with the context (a full layer, a sealed one before it seals). On a device: the model's fixed state (its delta-net
     * states and anchor rings, allocated once per sequence at exactly that size), or -1 when it keeps a KV cache.
     */
    public long stateBytes() {
        if (graph.device() != null) {
            long b = graph.device().stateBytes(deviceState);
            return b != Long.MIN_VALUE ? b : graph.spec().fixedStateBytes();
        }
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
     * store (with its grown capacity), sealed layers, rings and recurrent states. On a device: the device memory the
     * sequence holds (caches, sealed layers, recurrent states and its step scratch), or -1 when the device does not say.
     */
    public long heldBytes() {
        if (graph.device() != null) return graph.device().heldBytes(deviceState);
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
        if (graph.device() != null) graph.device().requestSeal(deviceState);
        for (Object m : mixerState) if (m instanceof SealedKv s) s.requestSeal();
    }

    /** Whether every {@code --o1} layer of this sequence is sealed (true when the model has none). */
    public boolean sealed() {
        if (graph.device() != null) return graph.device().sealed(deviceState);
        for (Object m : mixerState) if (m instanceof SealedKv s && !s.sealed()) return false;
        return true;
    }

    /**
     * The model's operator hash, mixed with this sequence's overlay when it is not the backbone: the cached K/V were
     * computed through the overlay's weights, so a snapshot belongs to that skill, adapter and task too.
     */
    private long snapshotHash() {
        long h = graph.operatorHash();
        if (overlay.isBackbone()) return h;
        String id = overlay.skillId() + "\u0000" + overlay.adapterName() + "\u0000" + overlay.adapterScale() + "\u0000" + overlay.taskName();
        for (int i = 0; i < id.length(); i++) h = (h ^ id.charAt(i)) * 0x100000001b3L;
        return h;
    }

    /** The first bytes of a state snapshot; the version after them. */
    static final int SNAPSHOT_MAGIC = 0x434D4653, SNAPSHOT_VERSION = 1;   // "CMFS"

    /**
     * Writes this sequence's state as a versioned binary record: magic {@code CMFS}, version, the graph's
     * {@link Graph#operatorHash()}, the position, then each layer's state in its stored form (KV caches, sealed
     * layers, rings, recurrent states). {@link #importFrom} on a state of the same model restores it exactly.
     */
    public void exportTo(java.io.DataOutput out) throws java.io.IOException {
        if (broken) throw new IllegalStateException("this session's state was lost when an earlier step failed; nothing to export");
        Object[] states = graph.device() == null ? mixerState : deviceStates(true, false);
        out.writeInt(SNAPSHOT_MAGIC);
        out.writeInt(SNAPSHOT_VERSION);
        out.writeLong(snapshotHash());
        out.writeInt(position);
        out.writeInt(states.length);
        for (Object m : states) {
            switch (m) {
                case null -> out.writeByte(0);
                case dev.cmf4j.backend.cpu.KvCache c -> { out.writeByte(1); c.writeTo(out); }
                case SealedKv s -> { out.writeByte(2); s.writeTo(out); }
                case BoundedAnchorStep.Ring r -> {
                    out.writeByte(3);
                    dev.cmf4j.backend.cpu.BinaryArrays.writeFloats(out, r.k, 0, r.k.length);
                    dev.cmf4j.backend.cpu.BinaryArrays.writeFloats(out, r.v, 0, r.v.length);
                }
                case DeltaNetStep.DeltaState d -> {
                    out.writeByte(4);
                    out.writeBoolean(d.fresh);
                    dev.cmf4j.backend.cpu.BinaryArrays.writeFloats(out, d.conv, 0, d.conv.length);
                    dev.cmf4j.backend.cpu.BinaryArrays.writeFloats(out, d.s, 0, d.s.length);
                }
                default -> throw new IllegalStateException("no snapshot form for " + m.getClass().getSimpleName());
            }
        }
    }

    /**
     * Replaces this sequence's state with a snapshot {@link #exportTo} wrote. Refused (an {@link java.io.IOException}
     * saying why, this state reset) when it is not a snapshot, of another version, of another model or other
     * {@code --o1}/{@code --kv} settings, or longer than this session's context.
     */
    public void importFrom(java.io.DataInput in) throws java.io.IOException {
        Object[] states = graph.device() == null ? mixerState : deviceStates(false, false);
        if (in.readInt() != SNAPSHOT_MAGIC) throw new java.io.IOException("not a cmf state snapshot (no CMFS magic)");
        int version = in.readInt();
        if (version != SNAPSHOT_VERSION)
            throw new java.io.IOException("state snapshot version " + version + "; this engine reads version " + SNAPSHOT_VERSION);
        long hash = in.readLong();
        if (hash != snapshotHash())
            throw new java.io.IOException("state snapshot made on another model, other --o1/--kv settings or another skill,"
                    + " blend, adapter or task (hash " + Long.toHexString(hash) + ", this session " + Long.toHexString(snapshotHash()) + ")");
        int pos = in.readInt(), n = in.readInt();
        if (pos < 0 || pos > maxContext) throw new java.io.IOException("state snapshot at position " + pos + ", past this session's context " + maxContext);
        if (n != states.length) throw new java.io.IOException("state snapshot of " + n + " layers, this model has " + states.length);
        reset();
        try {
            for (int l = 0; l < n; l++) {
                int tag = in.readUnsignedByte();
                switch (states[l]) {
                    case null -> expect(tag, 0, l);
                    case dev.cmf4j.backend.cpu.KvCache c -> { expect(tag, 1, l); c.readFrom(in); }
                    case SealedKv s -> { expect(tag, 2, l); s.readFrom(in); }
                    case BoundedAnchorStep.Ring r -> {
                        expect(tag, 3, l);
                        dev.cmf4j.backend.cpu.BinaryArrays.readFloats(in, r.k, 0, r.k.length);
                        dev.cmf4j.backend.cpu.BinaryArrays.readFloats(in, r.v, 0, r.v.length);
                    }
                    case DeltaNetStep.DeltaState d -> {
                        expect(tag, 4, l);
                        d.fresh = in.readBoolean();
                        dev.cmf4j.backend.cpu.BinaryArrays.readFloats(in, d.conv, 0, d.conv.length);
                        dev.cmf4j.backend.cpu.BinaryArrays.readFloats(in, d.s, 0, d.s.length);
                    }
                    default -> throw new java.io.IOException("layer " + l + " has no snapshot form");
                }
            }
            for (Object m : states) {
                dev.cmf4j.backend.cpu.KvCache c = m instanceof SealedKv || m instanceof dev.cmf4j.backend.cpu.KvCache
                        ? AttentionStep.cacheOf(m) : null;
                if (c != null && c.length() != pos)
                    throw new java.io.IOException("state snapshot: a KV cache holds " + c.length() + " positions, the sequence " + pos);
            }
            if (graph.device() != null) toDevice(states);
        } catch (java.io.IOException | RuntimeException e) {
            reset();
            throw e;
        }
        position = pos;
    }

    /**
     * A device session's fixed state in the CPU's own forms (a ring per anchor layer, a delta state per delta-net layer),
     * copied back from the device when {@code fetch}: snapshots of either path are the same bytes. A model whose device
     * state holds a KV cache has none (its attention layers are refused, or, with {@code skipAttention}, left null).
     */
    private Object[] deviceStates(boolean fetch, boolean skipAttention) {
        Object[] states = new Object[mixerState.length];
        for (int l = 0; l < states.length; l++) {
            switch (graph.spec().layer(l).mixer()) {
                case dev.cmf4j.model.Mixer.BoundedAttention b -> {
                    var r = new BoundedAnchorStep.Ring(b.window(), b.kvDim());
                    if (fetch) graph.device().copyLayerState(deviceState, l, r.k, r.v, false);
                    states[l] = r;
                }
                case dev.cmf4j.model.Mixer.GatedDeltaNet g -> {
                    var d = new DeltaNetStep.DeltaState(g.convDim(), g.convKernel(), g.valueHeads(), g.keyDim(), g.valueDim());
                    if (fetch) graph.device().copyLayerState(deviceState, l, d.conv, d.s, false);
                    d.fresh = position == 0;
                    states[l] = d;
                }
                case dev.cmf4j.model.Mixer.Attention a when skipAttention -> {}
                case dev.cmf4j.model.Mixer.Attention a ->
                        throw new UnsupportedOperationException("state snapshots of a session on the device need a model of fixed state"
                                + " (recurrent and bounded layers); this one keeps a KV cache there: use --device cpu");
            }
        }
        return states;
    }

    /** Copies the imported rings and delta states to the device session. */
    private void toDevice(Object[] states) {
        for (int l = 0; l < states.length; l++)
            switch (states[l]) {
                case BoundedAnchorStep.Ring r -> graph.device().copyLayerState(deviceState, l, r.k, r.v, true);
                case DeltaNetStep.DeltaState d -> graph.device().copyLayerState(deviceState, l, d.conv, d.s, true);
                default -> throw new IllegalStateException("layer " + l + ": no device state");
            }
    }

    private static void expect(int tag, int want, int layer) throws java.io.IOException {
        if (tag != want) throw new java.io.IOException("state snapshot: layer " + layer + " holds state kind " + tag + ", this model's is " + want);
    }

    /**
     * A point this sequence can go back to ({@link #rewind}): its position, and what each layer needs to take back up to
     * {@code upcoming} positions committed after it (speculative decoding's rejected draft tokens). KV caches go back
     * exactly (a full layer by its length, a sliding one by the slots it saved); recurrent and ring states (and every
     * fixed state on a device) are copied and go back to the mark, and the caller runs the kept tokens again.
     */
    public Mark mark(int upcoming) {
        if (closed) throw new IllegalStateException("this session was closed; its state is gone");
        if (broken) throw new IllegalStateException("this session's state was lost when an earlier step failed; reset it");
        if (upcoming < 0) throw new IllegalArgumentException("upcoming < 0");
        Object[] layers = new Object[mixerState.length];
        boolean exact = true;
        if (graph.device() == null) {
            for (int l = 0; l < layers.length; l++) {
                layers[l] = graph.mixer(l).mark(mixerState[l], upcoming);
                exact &= graph.mixer(l).rewindsExactly();
            }
        } else {
            if (graph.memory().sealed() != null)   // as the CPU's SealedKv: its far sums cannot give a key back
                throw new UnsupportedOperationException(
                        "tokens cannot be taken back from --o1 sealed layers (their far field folds keys in as they leave the window)");
            // the device's KV caches are indexed by position (a later step overwrites a rejected row before any query
            // reads it), so only fixed states need copies
            Object[] fixed = null;
            for (int l = 0; l < layers.length; l++)
                if (!(graph.spec().layer(l).mixer() instanceof dev.cmf4j.model.Mixer.Attention)) {
                    if (fixed == null) fixed = deviceStates(true, true);
                    layers[l] = fixed[l];
                    exact = false;
                }
        }
        return new Mark(this, position, upcoming, layers, exact);
    }

    /**
     * Takes this sequence back to {@code position} (between the mark's position and the current one) and returns how
     * many tokens, from the mark's position, the caller must run again: 0 when every layer went back exactly, else
     * {@code position − mark.position()} (the state is then at the mark's position).
     */
    public int rewind(Mark m, int position) {
        if (m.state != this) throw new IllegalArgumentException("the mark belongs to another sequence");
        if (closed) throw new IllegalStateException("this session was closed; its state is gone");
        if (position < m.position || position > this.position || this.position - m.position > m.upcoming)
            throw new IllegalArgumentException("rewind to " + position + ": the mark at " + m.position + " covers up to "
                    + (m.position + m.upcoming) + ", the sequence is at " + this.position);
        int to = m.exact ? position : m.position;
        if (graph.device() == null) {
            for (int l = 0; l < mixerState.length; l++) graph.mixer(l).rewind(mixerState[l], m.layers[l], m.position, to);
        } else {
            for (int l = 0; l < mixerState.length; l++)
                switch (m.layers[l]) {
                    case BoundedAnchorStep.Ring r -> graph.device().copyLayerState(deviceState, l, r.k, r.v, true);
                    case DeltaNetStep.DeltaState d -> graph.device().copyLayerState(deviceState, l, d.conv, d.s, true);
                    case null, default -> {}
                }
        }
        this.position = to;
        broken = false;
        return position - to;
    }

    /** What {@link #rewind} takes a sequence back to. */
    public static final class Mark {
        private final State state;
        private final int position, upcoming;
        private final Object[] layers;
        private final boolean exact;

        private Mark(State state, int position, int upcoming, Object[] layers, boolean exact) {
            this.state = state;
            this.position = position;
            this.upcoming = upcoming;
            this.layers = layers;
            this.exact = exact;
        }

        /** The position marked. */
        public int position() { return position; }

        /** Whether the sequence goes back to any later position without running tokens again. */
        public boolean exact() { return exact; }
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
