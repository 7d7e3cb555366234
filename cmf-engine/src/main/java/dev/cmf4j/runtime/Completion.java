package dev.cmf4j.runtime;

/**
 * How a scheduled generation ended.
 *
 * @param tokens          the generated ids (an end-of-sequence id not included)
 * @param text            their text, cut before a stop string
 * @param promptTokens    the prompt's length
 * @param cachedTokens    prompt tokens reused from a cached prefix (not computed again)
 * @param error           what went wrong when {@code finish} is ERROR, else null
 * @param queuedNanos     from submission to the first step that ran it
 * @param firstTokenNanos from submission to its first sampled token (-1 if none)
 * @param totalNanos      from submission to the end
 */
public record Completion(int[] tokens, String text, Finish finish, int promptTokens, int cachedTokens, String error,
                         long queuedNanos, long firstTokenNanos, long totalNanos) {

    public enum Finish {
        /** An end-of-sequence id or a stop string. */
        STOP,
        /** The token budget or the context limit. */
        LENGTH,
        /** The caller cancelled it (e.g. its client disconnected). */
        CANCELLED,
        /** It ran past its request's timeout. */
        TIMEOUT,
        /** It failed; other sequences went on. */
        ERROR
    }

    /** Decode speed after the first token, tokens per second (0 when fewer than two tokens). */
    public double decodeTokensPerSecond() {
        if (tokens.length < 2 || firstTokenNanos < 0 || totalNanos <= firstTokenNanos) return 0;
        return (tokens.length - 1) * 1e9 / (totalNanos - firstTokenNanos);
    }
}
