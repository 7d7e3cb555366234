package dev.cmf4j.chat.jinja;

/**
 * Every failure of a template: a syntax error while compiling, or an error while rendering
 * (an undefined value used where jinja2 raises, a Python type error, a sandbox violation, or the
 * template's own {@code raise_exception(msg)}).
 *
 * <p>{@link #kind()} is the jinja2/Python exception class the same failure raises in transformers
 * ({@code TemplateError} for {@code raise_exception}, {@code UndefinedError}, {@code TypeError},
 * ...), so {@link #pythonMessage()} reads exactly like the Python side's {@code "Kind: message"}.
 */
public final class TemplateException extends RuntimeException {

    /** The Python exception class jinja2 would raise for the same failure. */
    public enum Kind {
        /** {@code raise_exception(msg)} called by the template: {@code jinja2.exceptions.TemplateError}. */
        TemplateError,
        TemplateSyntaxError,
        TemplateAssertionError,
        TemplateRuntimeError,
        UndefinedError,
        SecurityError,
        TypeError,
        ValueError,
        IndexError,
        KeyError,
        ZeroDivisionError,
        OverflowError,
        /** A limit of this engine (output size, recursion depth), not a jinja2 error. */
        LimitExceeded,
        /** A construct jinja2 accepts that this engine does not implement; names the construct. */
        Unsupported,
    }

    private final Kind kind;
    private final String detail;
    private int line;

    public TemplateException(Kind kind, String detail) {
        this(kind, detail, 0);
    }

    public TemplateException(Kind kind, String detail, int line) {
        super(detail);
        this.kind = kind;
        this.detail = detail;
        this.line = line;
    }

    public Kind kind() {
        return kind;
    }

    /** The message alone, exactly as the Python exception carries it. */
    public String detail() {
        return detail;
    }

    /** 1-based template line the failure happened on, 0 when unknown. */
    public int line() {
        return line;
    }

    /** {@code "Kind: detail"}: what {@code str(type(e).__name__) + ": " + str(e)} prints in Python. */
    public String pythonMessage() {
        return kind + ": " + detail;
    }

    /** Records the template line once (the innermost node that knows it wins). */
    TemplateException atLine(int templateLine) {
        if (this.line == 0) this.line = templateLine;
        return this;
    }

    /**
     * The template's own {@code raise_exception} message stays verbatim (it is meant for users), unless it is blank
     * ({@code raise_exception(undefined)}: the fuzzer's find); everything else says what kind of error it is and where.
     */
    @Override
    public String getMessage() {
        if (kind == Kind.TemplateError && detail != null && !detail.isBlank()) return detail;
        if (kind == Kind.TemplateError)
            return "the chat template raised an exception with an empty message" + (line > 0 ? " (template line " + line + ")" : "");
        return kind + ": " + detail + (line > 0 ? " (template line " + line + ")" : "");
    }
}
