package dev.cmf4j.hub;

/** A Hub download or pull that cannot go on, with a message that says what to do about it. */
public final class HubException extends RuntimeException {
    private final boolean unreachable;

    public HubException(String message) { this(message, null, false); }

    public HubException(String message, Throwable cause) { this(message, cause, false); }

    private HubException(String message, Throwable cause, boolean unreachable) {
        super(message, cause);
        this.unreachable = unreachable;
    }

    /** The Hub could not be reached at all (no HTTP answer), as opposed to an answer that refused. */
    static HubException unreachable(String message, Throwable cause) { return new HubException(message, cause, true); }

    public boolean unreachable() { return unreachable; }
}
