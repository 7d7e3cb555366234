package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.chat.ToolCallParser;
import dev.cmf4j.runtime.JsonConstraint;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The tools a chat request offers and how the model must use them ({@code tools}, {@code tool_choice}).
 * {@code auto} renders them through the model's template and parses tool calls out of the output; {@code required}
 * and a named function also force the output to be one call ({@code <tool_call>} JSON {@code </tool_call>}, the
 * Hermes/Qwen form {@link ToolCallParser} reads) by constrained sampling, its arguments following the function's
 * parameter schema when this server supports it (else any object). {@code parallel_tool_calls: false} under
 * {@code auto} ends the generation at the first call's closing tag (a stop string; the parsers take the call without
 * it), so at most one call comes back and no token is spent on a second.
 *
 * @param definitions the tools for the template, or null
 * @param parseCalls  whether the output's tool calls are parsed into {@code tool_calls}
 * @param forced      the constraint making the output one call, or null
 * @param stops       stop strings the request needs: {@link ToolCallParser#CLOSE} for at most one call, else none
 */
record ToolRequest(List<Object> definitions, boolean parseCalls, JsonConstraint forced, List<String> stops) {
    static final ToolRequest NONE = new ToolRequest(null, false, null, List.of());

    static ToolRequest parse(CompletionRequest.Fields f, ObjectMapper json) {
        JsonNode tools = f.node("tools");
        JsonNode choice = f.node("tool_choice");
        boolean parallel = !Boolean.FALSE.equals(f.bool("parallel_tool_calls"));
        if (tools == null) {
            if (choice != null && !(choice.isTextual() && (choice.asText().equals("none") || choice.asText().equals("auto"))))
                throw ApiError.badRequest("tool_choice", "tool_choice needs tools");
            return NONE;
        }
        if (!tools.isArray()) throw ApiError.badRequest("tools", "tools must be an array");
        Map<String, JsonNode> functions = new LinkedHashMap<>();
        for (int i = 0; i < tools.size(); i++) {
            JsonNode t = tools.get(i);
            String at = "tools[" + i + "]";
            if (!t.isObject() || !"function".equals(t.path("type").asText()))
                throw ApiError.badRequest(at, at + " must be {\"type\": \"function\", \"function\": {...}}");
            JsonNode fn = t.get("function");
            if (fn == null || !fn.isObject() || !fn.path("name").isTextual() || fn.get("name").asText().isEmpty())
                throw ApiError.badRequest(at + ".function.name", at + ".function.name must be a non-empty string");
            JsonNode params = fn.get("parameters");
            if (params != null && !params.isNull() && !params.isObject())
                throw ApiError.badRequest(at + ".function.parameters", at + ".function.parameters must be a JSON Schema object");
            functions.put(fn.get("name").asText(), params == null || params.isNull() ? null : params);
        }
        if (tools.isEmpty()) return NONE;
        @SuppressWarnings("unchecked")
        List<Object> defs = json.convertValue(tools, List.class);
        if (choice == null || choice.isTextual() && choice.asText().equals("auto")) return new ToolRequest(defs, true, null,
                parallel ? List.of() : List.of(ToolCallParser.CLOSE));
        if (choice.isTextual() && choice.asText().equals("none")) return NONE;
        if (choice.isTextual() && choice.asText().equals("required"))   // one tool: its parameters; several: any object
            return new ToolRequest(defs, true, JsonConstraint.toolCall(new ArrayList<>(functions.keySet()),
                    functions.size() == 1 ? functions.values().iterator().next() : null), List.of());
        String name = choice.isObject() ? choice.path("function").path("name").asText(null) : null;
        if (name == null) throw ApiError.badRequest("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (!functions.containsKey(name)) throw ApiError.badRequest("tool_choice", "tool_choice names '" + name + "', which is not among the tools");
        return new ToolRequest(defs, true, JsonConstraint.toolCall(List.of(name), functions.get(name)), List.of());
    }
}
