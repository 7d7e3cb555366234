package dev.cmf4j.model.graph;

/**
 * Executes one kind of {@link dev.cmf4j.model.Mixer} for a chunk of tokens. Implementations hold only
 * immutable resolved weights; everything per session lives in the objects they create.
 */
interface MixerStep {
    /** Per-session state of this layer (a KV cache, a recurrent state), or null when it has none. */
    Object newState(int maxContext);

    /** Per-session scratch for chunks of up to {@code maxChunk} tokens. */
    Object newScratch(int maxChunk, int maxContext);

    /**
     * in: [rows, hidden] normed input of the batch's rows; out: [rows, hidden] mixer output. Each span's rows
     * read and extend its own sequence's state of this layer ({@code layer}); {@code scratch} is this layer's
     * workspace scratch.
     */
    void forward(float[] in, float[] out, Batch batch, Object scratch, int layer);

    /** Ends a step: moves what this layer produced for the chunk into its session state. */
    default void commit(Object state) {}

    /** Drops what a failed step produced; false when the state cannot be rolled back (the session must reset). */
    default boolean abandon(Object state) { return true; }

    /** Forgets the session (a new conversation). */
    default void reset(Object state) {}

    /**
     * What {@link #rewind} needs to take the state back over up to {@code upcoming} positions committed after this
     * call (speculative decoding's rejected tokens); null when nothing is needed.
     */
    default Object mark(Object state, int upcoming) { return null; }

    /** Whether {@link #rewind} reaches any position since the mark; else only the mark's own (the caller replays). */
    default boolean rewindsExactly() { return true; }

    /**
     * Takes the state back to its first {@code position} positions ({@link #rewindsExactly}), or to the mark's
     * {@code markPosition} (else); {@code position} lies between the mark's and the current one.
     */
    default void rewind(Object state, Object mark, int markPosition, int position) {}
}
