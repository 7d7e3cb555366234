package dev.cmf4j.api;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.runtime.GenerationRequest;
import dev.cmf4j.runtime.JsonConstraint;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Flow;
import java.util.function.Consumer;

/**
 * How to chat with a model: the tools it may call, whether its output must be JSON, the template's extra variables.
 * Immutable and safe to share between threads; each {@code with...} returns a new chat. Every call renders the messages
 * with the model's own chat template (transformers-exact) and runs them through the model's scheduler; a conversation
 * that grows turn by turn reuses the previous turn's cache, so only the new tokens are computed.
 *
 * <pre>{@code
 * Chat chat = model.newChat();
 * List<Message> messages = new ArrayList<>(List.of(Message.user("What does tar do?")));
 * Reply r = chat.stream(messages, Sampling.defaults(), System.out::print);   // text as it is generated
 * messages.add(r.asMessage());
 * }</pre>
 */
public final class Chat {

    /** Whether the model must call a tool. */
    public enum ToolChoice {
        /** The model decides; calls in its output are parsed into {@link Reply#toolCalls()}. */
        AUTO,
        /** The output is exactly one call of one of the tools (enforced while sampling). */
        REQUIRED,
        /** Tools are not shown to the model and nothing is parsed. */
        NONE
    }

    private static final ObjectMapper JSON = new ObjectMapper();

    private final CmfModel model;
    private final List<Tool> tools;
    private final ToolChoice choice;
    private final JsonConstraint json;
    private final Map<String, Object> templateArgs;

    Chat(CmfModel model, List<Tool> tools, ToolChoice choice, JsonConstraint json, Map<String, ?> templateArgs) {
        this.model = model;
        this.tools = List.copyOf(tools);
        this.choice = choice;
        this.json = json;
        this.templateArgs = Map.copyOf(templateArgs);
    }

    /** The tools the model may call (rendered by its chat template; see {@link #withToolChoice}). */
    public Chat withTools(List<Tool> t) {
        for (Tool tool : t) parameters(tool);   // a bad schema is an error now, not at the first call
        return new Chat(model, t, choice, json, templateArgs);
    }

    public Chat withToolChoice(ToolChoice c) { return new Chat(model, tools, c, json, templateArgs); }

    /** Replies are one JSON object (enforced while sampling: every token must continue a valid document). */
    public Chat withJsonOutput() { return new Chat(model, tools, choice, JsonConstraint.anyObject(), templateArgs); }

    /**
     * Replies are JSON documents of {@code schema} (the subset {@code cmf serve} supports: type, properties, required,
     * items, minItems, maxItems, enum, const).
     *
     * @throws InferenceException (BAD_INPUT) for text that is not JSON or a keyword outside the subset
     */
    public Chat withJsonSchema(String schema) {
        try {
            return new Chat(model, tools, choice, JsonConstraint.of(JSON.readTree(schema)), templateArgs);
        } catch (JsonProcessingException | IllegalArgumentException e) {
            throw new InferenceException(InferenceException.Kind.BAD_INPUT, "the JSON schema cannot be used: " + e.getMessage(), e);
        }
    }

    /** Plain text replies again. */
    public Chat withTextOutput() { return new Chat(model, tools, choice, null, templateArgs); }

    /** Extra variables for the chat template, e.g. {@code Map.of("enable_thinking", false)} for Qwen3. */
    public Chat withTemplateArgs(Map<String, ?> args) { return new Chat(model, tools, choice, json, args); }

    /** Generates the next assistant message and waits for it. */
    public Reply complete(List<Message> messages, Sampling sampling) { return stream(messages, sampling, null); }

    /**
     * Generates the next assistant message, calling {@code onText} on this thread with each piece of text as it is
     * generated (whole characters; stop strings and tool-call blocks never shown), and returns the whole reply.
     * An exception from {@code onText} stops the generation and is rethrown.
     *
     * @throws InferenceException bad input, a prompt that fills the context, the model closed, a failure
     */
    public Reply stream(List<Message> messages, Sampling sampling, Consumer<String> onText) {
        return new Run(model, parsesTools()).run(request(messages, sampling), onText, null);
    }

    /**
     * The reply as a {@link Flow.Publisher}: each subscription generates it anew (on a virtual thread), emitting
     * {@link ChatEvent.Text} pieces as demanded, then one {@link ChatEvent.Done}, then completes; a cancelled
     * subscription stops the generation before the model's next step. The messages are rendered now, so bad input
     * fails here rather than in {@code onError}.
     */
    public Flow.Publisher<ChatEvent> publisher(List<Message> messages, Sampling sampling) {
        GenerationRequest r = request(messages, sampling);
        return subscriber -> new ChatSubscription(new Run(model, parsesTools()), r, subscriber).start();
    }

    /** The prompt the model sees for {@code messages}: the template's rendering with the assistant's turn opened. */
    public String render(List<Message> messages) {
        if (messages == null || messages.isEmpty()) throw new InferenceException(InferenceException.Kind.BAD_INPUT, "a chat needs at least one message");
        List<Map<String, Object>> maps = new ArrayList<>();
        for (Message m : messages) maps.add(map(m));
        try {
            return model.codec().template().render(maps, shownTools(), true, templateArgs);
        } catch (RuntimeException e) {
            throw new InferenceException(InferenceException.Kind.BAD_INPUT, "the chat template failed on these messages: " + e.getMessage(), e);
        }
    }

    private GenerationRequest request(List<Message> messages, Sampling sampling) {
        int[] ids = model.codec().tokenizer().encodeIds(render(messages), false);
        JsonConstraint constraint = json;
        if (choice == ToolChoice.REQUIRED) {
            if (tools.isEmpty()) throw new InferenceException(InferenceException.Kind.BAD_INPUT, "ToolChoice.REQUIRED needs tools");
            constraint = JsonConstraint.toolCall(tools.stream().map(Tool::name).toList(), tools.size() == 1 ? parameters(tools.getFirst()) : null);
        }
        return model.request(ids, sampling, constraint);
    }

    private boolean parsesTools() { return !tools.isEmpty() && choice != ToolChoice.NONE; }

    /** The tools as transformers passes them to a template: {@code {"type": "function", "function": {...}}}. */
    private List<Object> shownTools() {
        if (!parsesTools()) return null;
        List<Object> out = new ArrayList<>();
        for (Tool t : tools) {
            Map<String, Object> fn = new LinkedHashMap<>();
            fn.put("name", t.name());
            if (t.description() != null) fn.put("description", t.description());
            JsonNode p = parameters(t);
            if (p != null) fn.put("parameters", JSON.convertValue(p, Map.class));
            out.add(Map.of("type", "function", "function", fn));
        }
        return out;
    }

    private static JsonNode parameters(Tool t) {
        if (t.parametersJson() == null) return null;
        try {
            JsonNode n = JSON.readTree(t.parametersJson());
            if (n == null || !n.isObject()) throw new InferenceException(InferenceException.Kind.BAD_INPUT, "tool " + t.name() + ": parameters must be a JSON Schema object");
            return n;
        } catch (JsonProcessingException e) {
            throw new InferenceException(InferenceException.Kind.BAD_INPUT, "tool " + t.name() + ": parameters are not JSON: " + e.getOriginalMessage(), e);
        }
    }

    /** A message as chat templates take it (OpenAI's shape; a call's arguments as an object, as transformers passes them). */
    private static Map<String, Object> map(Message m) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("role", m.role().name().toLowerCase(java.util.Locale.ROOT));
        o.put("content", m.content());
        if (!m.toolCalls().isEmpty()) {
            List<Object> calls = new ArrayList<>();
            for (ToolCall c : m.toolCalls()) {
                Object args;
                try {
                    args = JSON.readValue(c.argumentsJson(), Object.class);
                } catch (JsonProcessingException e) {
                    args = c.argumentsJson();
                }
                Map<String, Object> fn = new LinkedHashMap<>();
                fn.put("name", c.name());
                fn.put("arguments", args);
                calls.add(Map.of("id", c.id(), "type", "function", "function", fn));
            }
            o.put("tool_calls", calls);
        }
        if (m.toolCallId() != null) o.put("tool_call_id", m.toolCallId());
        if (m.name() != null) o.put("name", m.name());
        return o;
    }
}
