package dev.cmf4j.api;

/**
 * A function call the model asked for.
 *
 * @param id            an id to answer it with ({@link Message#toolResult})
 * @param name          the function's name, one of the chat's {@link Tool}s
 * @param argumentsJson the arguments as a JSON object's text
 */
public record ToolCall(String id, String name, String argumentsJson) {
    public ToolCall {
        if (id == null || id.isEmpty()) throw new IllegalArgumentException("a tool call needs an id");
        if (name == null || name.isEmpty()) throw new IllegalArgumentException("a tool call needs a name");
        if (argumentsJson == null) throw new IllegalArgumentException("a tool call needs arguments (\"{}\" for none)");
    }
}
