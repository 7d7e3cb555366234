package dev.cmf4j.model;

/**
 * A model the engine cannot run as described: an unknown architecture feature, a missing or
 * mis-shaped tensor, an inconsistent {@code arch} block. The message names what and where.
 */
public class ModelException extends RuntimeException {
    public ModelException(String message) { super(message); }

    public ModelException(String message, Throwable cause) { super(message, cause); }
}
