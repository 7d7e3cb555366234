package dev.cmf4j.chat;

/**
 * One function call a model asked for. argumentsJson is a JSON object as text: the model's object
 * re-serialised like Python's {@code json.dumps(..., ensure_ascii=False)} (so it renders back into a
 * template unchanged), or the model's own string when it emitted the arguments as a JSON string.
 */
public record ToolCall(String name, String argumentsJson) {
    public ToolCall {
        if (name == null || name.isEmpty()) throw new IllegalArgumentException("tool call needs a name");
        if (argumentsJson == null) throw new IllegalArgumentException("tool call needs arguments (use \"{}\")");
    }
}
