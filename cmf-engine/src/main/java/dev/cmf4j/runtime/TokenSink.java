package dev.cmf4j.runtime;

/**
 * Where a scheduled generation's output goes, called on the scheduler's thread as each token is sampled: keep every
 * call short and never block (hand the data to another thread). An exception thrown here ends this generation with
 * {@link Completion.Finish#ERROR} and no other.
 */
public interface TokenSink {
    /** The sequence started running: {@code cachedTokens} of its prompt came from a cached prefix. */
    default void started(int promptTokens, int cachedTokens) {}

    /** A generated token, with its log-probabilities when the request asked for them (else null). */
    default void token(int id, TokenLogprobs logprobs) {}

    /** Text the tokens so far complete (UTF-8 whole, stop strings held back and never shown). */
    default void text(String piece) {}

    /** The generation ended (always called once, also on cancel, timeout and error). */
    void finished(Completion completion);
}
