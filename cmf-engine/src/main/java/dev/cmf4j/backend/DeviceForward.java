package dev.cmf4j.backend;

/**
 * A whole forward pass run by a device instead of the host graph's steps: weights, activations and the KV cache stay
 * on the device, one copy of the logits comes back per call. A {@link Backend} offers one for a {@link DecoderPlan}
 * it can run whole; the model's graph then routes its forwards through it (same arguments, same results within
 * float rounding).
 */
public interface DeviceForward {

    /**
     * Prompt tokens per forward call that a session takes by default on this device: the chunk the device's prefill
     * is built for; the CPU graph's {@code Session.DEFAULT_CHUNK} unless the device says otherwise.
     */
    default int preferredChunk() { return 64; }

    /** Per-session device state (KV cache, activation buffers) for chunks of up to maxChunk tokens. */
    Object newState(int maxChunk, int maxContext);

    /**
     * Runs {@code tokens} ids at positions {@code pos0..}, writing the KV cache, and fills {@code logits}
     * ([tokens, vocab] when {@code allLogits}, else the last token's [vocab]; null = no head).
     * The caller has checked ids, chunk size and context limit.
     */
    void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits);

    /**
     * Whether {@link #forward(Object, int[], int, int, int, float[], boolean, float[])} and
     * {@link #forward(java.util.List, float[], int, float[])} hand back the last layer's output rows (an MTP head's
     * input); by default they do not.
     */
    default boolean handsBackHidden() { return false; }

    /**
     * As {@link #forward(Object, int[], int, int, int, float[], boolean)}; with {@code hidden} not null it also receives
     * every token's row of the last layer's output, the residual stream before the final norm ([tokens, hidden]).
     */
    default void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits, float[] hidden) {
        if (hidden != null) throw new UnsupportedOperationException("this device does not hand back the last layer's rows");
        forward(state, ids, off, tokens, pos0, logits, allLogits);
    }

    /** Whether this forward runs an MTP head's plan ({@link DecoderPlan#mtpProjection}) through {@link #forwardMtp}. */
    default boolean runsMtpHeads() { return false; }

    /**
     * An MTP head's step ({@link DecoderPlan#mtpProjection} not null): {@code tokens} input rows [tokens, 2·hidden] (the
     * normed embedding of each token, then the normed hidden row of the model) at positions {@code pos0..} go through
     * the fc, the layer, the final norm and the head; logits and {@code hidden} (the layer's output rows, when not null)
     * as in {@link #forward(Object, int[], int, int, int, float[], boolean, float[])}.
     */
    default void forwardMtp(Object state, int tokens, int pos0, float[] inputRows, float[] logits, boolean allLogits, float[] hidden) {
        throw new UnsupportedOperationException("this device runs no MTP heads");
    }

    /**
     * A pipeline stage's step ({@link DecoderPlan#inputRows}): as {@link #forward(Object, int[], int, int, int, float[],
     * boolean, float[])}, x made from {@code rows} [tokens, hidden] (the previous stage's last layer) instead of the
     * embedding of ids; {@code hidden} receives this stage's last layer's rows.
     */
    default void forwardRows(Object state, int tokens, int pos0, float[] rows, float[] logits, boolean allLogits, float[] hidden) {
        throw new UnsupportedOperationException("this device runs no pipeline stages");
    }

    /** Whether {@link #forwardMtpGreedy} chains an MTP head's greedy drafts on the device. */
    default boolean draftsMtpGreedily() { return false; }

    /**
     * An MTP head's catch-up rows as {@link #forwardMtp} takes them (no logits back), then {@code k} greedy drafts into
     * {@code drafts}: draft i is the argmax of the head's last logits (the lower id among equal maxima); for each draft
     * but the last, the head's next row is made on the device from that draft and the layer's last output row,
     * [embeddingNorm(embed(draft)·embedScale); hiddenNorm(row)], and runs at the next position. The state ends
     * {@code tokens + k − 1} positions on.
     */
    default void forwardMtpGreedy(Object state, int tokens, int pos0, float[] inputRows, NormOp embeddingNorm, NormOp hiddenNorm,
                                  float embedScale, int k, int[] drafts) {
        throw new UnsupportedOperationException("this device does not chain an MTP head's drafts");
    }

    /**
     * One sequence's part of a batched step: its state, {@code tokens} ids from {@code ids[off]} at positions from
     * {@code pos0}, the logits rows it wants (0, 1 = its last token's, or {@code tokens}), and the skill slot its rows
     * read their weights through (0: the backbone; see {@link #skills}) and the un-merged adapter slot added to its
     * products, with its scale (0: none; see {@link #adapters}), and the task mask slot its rows run under (0: none;
     * see {@link #tasks}).
     */
    record Span(Object state, int[] ids, int off, int tokens, int pos0, int logitRows, int skill, int adapter,
                float adapterScale, int task) {
        /** A span of the backbone. */
        public Span(Object state, int[] ids, int off, int tokens, int pos0, int logitRows) {
            this(state, ids, off, tokens, pos0, logitRows, 0, 0, 0f, 0);
        }

        /** Whether its rows read the backbone alone. */
        public boolean plain() { return skill == 0 && adapter == 0 && task == 0; }
    }

    /**
     * Takes the file's skills, once, before the first step: spans may then name a skill slot. Returns, by skill id, why
     * this device cannot run that skill (a skill absent from the map runs). By default every skill is refused.
     */
    default java.util.Map<String, String> skills(DeviceSkills skills) {
        var why = new java.util.LinkedHashMap<String, String>();
        for (String id : skills.ids()) why.put(id, "this device runs no skills per row");
        return why;
    }

    /**
     * Takes the un-merged adapters the model was opened with, once, before the first step: spans may then name an
     * adapter slot. Returns why this device cannot apply them, or null. By default it cannot.
     */
    default String adapters(DeviceAdapters adapters) { return "this device applies no un-merged adapters"; }

    /**
     * Takes the file's task masks, once, before the first step: spans may then name a task slot. Returns, by mask name,
     * why this device cannot apply that mask (absent: it can). By default every mask is refused.
     */
    default java.util.Map<String, String> tasks(DeviceTasks tasks) {
        var why = new java.util.LinkedHashMap<String, String>();
        for (String n : tasks.names()) why.put(n, "this device applies no task masks per row");
        return why;
    }

    /**
     * Runs several sequences' spans as one step and fills {@code logits} with the rows they want, in span order
     * ([Σ logitRows, vocab]). The caller has checked every span; the graph sends a one-span step to the single
     * {@link #forward} instead. By default one {@link #forward} per span; a device that batches overrides it.
     */
    default void forward(java.util.List<Span> spans, float[] logits, int vocab) {
        for (Span s : spans) if (!s.plain()) throw new UnsupportedOperationException("this device runs no skills or adapters per row");
        int row = 0;
        for (Span s : spans) {
            float[] out = s.logitRows() == 0 ? null : new float[s.logitRows() * vocab];
            forward(s.state(), s.ids(), s.off(), s.tokens(), s.pos0(), out, s.logitRows() > 1);
            if (out != null) System.arraycopy(out, 0, logits, row * vocab, s.logitRows() * vocab);
            row += s.logitRows();
        }
    }

    /**
     * As {@link #forward(java.util.List, float[], int)}; with {@code hidden} not null it also receives every row's last-layer
     * output before the final norm, in span order ([Σ tokens, hidden]).
     */
    default void forward(java.util.List<Span> spans, float[] logits, int vocab, float[] hidden) {
        if (hidden != null) throw new UnsupportedOperationException("this device does not hand back the last layer's rows");
        forward(spans, logits, vocab);
    }

    /**
     * As {@link #forward(java.util.List, float[], int)}, each logit row reduced to its argmax (the lower id among equal
     * maxima): {@code ids[i]} for row i. A device that picks on the device overrides it and copies back only the ids;
     * by default the logits come back and are reduced here.
     */
    default void forwardArgmax(java.util.List<Span> spans, int[] ids, int vocab) { forwardArgmax(spans, ids, vocab, null); }

    /**
     * As {@link #forwardArgmax(java.util.List, int[], int)}; {@code hidden} as in {@link #forward(java.util.List, float[],
     * int, float[])} (by default through it, so a device that hands the rows back there does here too).
     */
    default void forwardArgmax(java.util.List<Span> spans, int[] ids, int vocab, float[] hidden) {
        int rows = 0;
        for (Span s : spans) rows += s.logitRows();
        float[] logits = new float[rows * vocab];
        forward(spans, logits, vocab, hidden);
        for (int r = 0; r < rows; r++) ids[r] = dev.cmf4j.backend.cpu.VectorMath.argmax(logits, r * vocab, vocab);
    }

    /**
     * The hierarchical head's gate of a state's next steps (log-probability; −∞ reads every row): a cluster below it reads
     * none of its rows and its tokens get its mass spread evenly, as the CPU graph's head. Ignored by a device without
     * such a head.
     */
    default void gateHead(Object state, double gate) {}

    /**
     * Copies layer {@code layer}'s fixed per-sequence buffers of a state from the device into {@code first} and
     * {@code second} ({@code toDevice} false) or back: a bounded anchor's key and value rings [window, kvDim], a gated
     * delta net's conv inputs [convDim, kernel−1] and rule state [valueHeads, keyDim, valueDim] (the CPU graph's
     * layouts, so state snapshots are the same bytes on either path). Not between steps of that state.
     */
    default void copyLayerState(Object state, int layer, float[] first, float[] second, boolean toDevice) {
        throw new UnsupportedOperationException("this device cannot copy a sequence's state");
    }

    /** Asks a state's sealed ({@code --o1}) layers to seal at its next step (as the CPU graph's State.seal); none: nothing. */
    default void requestSeal(Object state) {}

    /** Whether every sealed ({@code --o1}) layer of a state is sealed (true when there are none). */
    default boolean sealed(Object state) { return true; }

    /**
     * Bytes of a state's attention and recurrent state when all of it is bounded (sealed layers once sealed, rings,
     * delta-rule states), or -1 while some layer keeps a growing KV cache; {@link Long#MIN_VALUE}: the device does not say.
     */
    default long stateBytes(Object state) { return Long.MIN_VALUE; }

    /** Device bytes a state holds now (KV caches, sealed layers, recurrent states, its step scratch), or -1 when not known. */
    default long heldBytes(Object state) { return -1; }

    /** Frees a state's device memory early (else it lives until the provider closes). */
    void release(Object state);
}
