package dev.cmf4j.convert;

/**
 * A source checkpoint (safetensors, GGUF, config.json, tokenizer files) is malformed, truncated or uses
 * something this converter does not support. The message always names the file and, where it applies,
 * the tensor or key and the problem; it is meant to be shown to the user as is.
 */
public class ConvertException extends RuntimeException {
    public ConvertException(String message) { super(message); }

    public ConvertException(String message, Throwable cause) { super(message, cause); }
}
