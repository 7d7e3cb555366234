package dev.cmf4j.chat;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.chat.jinja.PyJson;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Extracts Hermes / Qwen style tool calls from generated text:
 * <pre>
 * &lt;tool_call&gt;
 * {"name": "get_weather", "arguments": {"city": "Paris"}}
 * &lt;/tool_call&gt;
 * </pre>
 * Any number of blocks; the text outside them is the message content (joined, surrounding
 * whitespace trimmed). A block whose JSON does not parse, is not an object, or lacks a string
 * {@code name} is reported in {@link Result#errors()} with its offset and text, never silently
 * dropped or guessed at. A final {@code <tool_call>} without its closing tag (generation stopped)
 * is parsed if what follows is complete JSON, else reported.
 */
public final class ToolCallParser {

    public static final String OPEN = "<tool_call>";
    public static final String CLOSE = "</tool_call>";

    private static final ObjectMapper JSON = new ObjectMapper();

    private ToolCallParser() { }

    /** A block that could not be turned into a call: where it starts, its raw text, why. */
    public record Error(int offset, String text, String message) { }

    /** content: the text outside the blocks; calls in order; errors for unusable blocks. */
    public record Result(String content, List<ToolCall> calls, List<Error> errors) {
        public Result {
            calls = List.copyOf(calls);
            errors = List.copyOf(errors);
        }

        public boolean hasCalls() {
            return !calls.isEmpty();
        }
    }

    public static Result parse(String generated) {
        StringBuilder content = new StringBuilder();
        List<ToolCall> calls = new ArrayList<>();
        List<Error> errors = new ArrayList<>();
        int pos = 0;
        while (true) {
            int open = generated.indexOf(OPEN, pos);
            if (open < 0) {
                content.append(generated, pos, generated.length());
                break;
            }
            content.append(generated, pos, open);
            int bodyStart = open + OPEN.length();
            int close = generated.indexOf(CLOSE, bodyStart);
            String body = close < 0 ? generated.substring(bodyStart) : generated.substring(bodyStart, close);
            String raw = close < 0 ? generated.substring(open) : generated.substring(open, close + CLOSE.length());
            String problem = parseBlock(body, calls);
            if (problem != null) {
                errors.add(new Error(open, raw, close < 0 ? "unterminated " + OPEN + " block: " + problem : problem));
            }
            if (close < 0) break;
            pos = close + CLOSE.length();
        }
        return new Result(content.toString().strip(), calls, errors);
    }

    /** Adds the call(s) in one block; returns a description of the problem or null. */
    private static String parseBlock(String body, List<ToolCall> calls) {
        if (body.isBlank()) return "empty tool call";
        List<ToolCall> found = new ArrayList<>();
        try (JsonParser p = JSON.createParser(body)) {
            JsonToken t;
            while ((t = p.nextToken()) != null) {
                if (t != JsonToken.START_OBJECT) return "expected a JSON object, found " + describe(t) + " at column " + p.currentTokenLocation().getColumnNr();
                Object value = JSON.readValue(p, Object.class);
                String problem = toCall(value, found);
                if (problem != null) return problem;
            }
        } catch (JsonProcessingException e) {
            return "malformed JSON: " + e.getOriginalMessage() + " (line " + e.getLocation().getLineNr() + ", column " + e.getLocation().getColumnNr() + ")";
        } catch (IOException e) {
            return "malformed JSON: " + e.getMessage();
        }
        calls.addAll(found);
        return null;
    }

    private static String describe(JsonToken t) {
        return switch (t) {
            case START_ARRAY -> "an array";
            case VALUE_STRING -> "a string";
            case VALUE_NUMBER_INT, VALUE_NUMBER_FLOAT -> "a number";
            default -> t.asString() == null ? t.name() : t.asString();
        };
    }

    private static String toCall(Object value, List<ToolCall> out) {
        if (!(value instanceof Map<?, ?> m)) return "tool call is not a JSON object";
        Object name = m.get("name");
        if (!(name instanceof String n) || n.isEmpty()) return "tool call has no string \"name\"";
        Object args = m.containsKey("arguments") ? m.get("arguments") : m.get("parameters");
        String json;
        if (args == null) json = "{}";
        else if (args instanceof String s) json = s;
        else if (args instanceof Map<?, ?>) json = PyJson.dumps(args);
        else return "tool call \"" + n + "\": arguments must be a JSON object or a string, not " + (args instanceof List<?> ? "an array" : args instanceof Boolean ? "a boolean" : "a number");
        out.add(new ToolCall(n, json));
        return null;
    }
}
