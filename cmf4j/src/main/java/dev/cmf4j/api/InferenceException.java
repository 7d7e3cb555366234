package dev.cmf4j.api;

/**
 * Why a model could not be opened or a generation did not complete; {@link #kind()} says which case it is.
 */
public final class InferenceException extends RuntimeException {

    public enum Kind {
        /** The input cannot be run: an empty prompt, an id outside the vocabulary, a bad schema, a template error. */
        BAD_INPUT,
        /** The prompt leaves no room to generate in the context. */
        CONTEXT_LIMIT,
        /** More requests wait than {@link ModelOptions#maxQueue()} allows; try again later. */
        BUSY,
        /** The model was closed before or while the generation ran. */
        CLOSED,
        /** The caller cancelled it (or its thread was interrupted). */
        CANCELLED,
        /** The engine failed on this generation (others went on). */
        FAILED,
        /** An {@code hf://} model could not be downloaded or converted (the message says why). */
        DOWNLOAD,
        /** The engine cannot do what was asked yet (e.g. skills). */
        UNSUPPORTED
    }

    private final Kind kind;

    public InferenceException(Kind kind, String message) { this(kind, message, null); }

    public InferenceException(Kind kind, String message, Throwable cause) {
        super(message, cause);
        this.kind = kind;
    }

    public Kind kind() { return kind; }
}
