package dev.cmf4j.text;

/**
 * A tokenizer.json that cannot be used: malformed JSON, a missing or ill-typed field, a component
 * type this implementation does not support, or a vocabulary that contradicts its merges. The message
 * names the JSON path ({@code $.pre_tokenizer.pretokenizers[1]}) where the problem sits.
 */
public final class TokenizerException extends RuntimeException {
    private final String path;

    public TokenizerException(String path, String message) {
        super(path == null ? message : message + " (at " + path + ")");
        this.path = path;
    }

    public TokenizerException(String path, String message, Throwable cause) {
        super(path == null ? message : message + " (at " + path + ")", cause);
        this.path = path;
    }

    /** The JSON path of the offending element, or null when the problem is not tied to one. */
    public String path() {
        return path;
    }
}
