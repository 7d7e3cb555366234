package dev.cmf4j.runtime;

/** A request the runtime cannot serve as asked: bad ids, an empty prompt, a context overflow. */
public class GenerationException extends RuntimeException {
    public GenerationException(String message) { super(message); }

    /** The prompt (or the conversation so far) does not fit the context. */
    public static final class ContextLimit extends GenerationException {
        private final int limit;

        public ContextLimit(int limit, String message) {
            super(message);
            this.limit = limit;
        }

        public int limit() { return limit; }
    }

    /** Input the model cannot take (ids outside the vocabulary, an empty prompt). */
    public static final class BadInput extends GenerationException {
        public BadInput(String message) { super(message); }
    }
}
