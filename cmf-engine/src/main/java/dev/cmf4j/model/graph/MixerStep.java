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
}
