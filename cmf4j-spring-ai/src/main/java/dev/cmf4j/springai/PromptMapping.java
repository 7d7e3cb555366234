package dev.cmf4j.springai;

import dev.cmf4j.api.Chat;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.Message;
import dev.cmf4j.api.Reply;
import dev.cmf4j.api.Sampling;
import dev.cmf4j.api.Tool;
import dev.cmf4j.api.ToolCall;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.SystemMessage;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.chat.metadata.ChatGenerationMetadata;
import org.springframework.ai.chat.metadata.ChatResponseMetadata;
import org.springframework.ai.chat.metadata.DefaultUsage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.model.Generation;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.model.tool.StructuredOutputChatOptions;
import org.springframework.ai.tool.ToolCallback;
import org.springframework.ai.tool.definition.ToolDefinition;

import java.util.ArrayList;
import java.util.List;

/**
 * Translates between Spring AI's chat types and the cmf4j API: a {@link Prompt} (its options over the chat model's
 * defaults) becomes messages, a configured {@link Chat} and a {@link Sampling}; a {@link Reply} becomes a
 * {@link ChatResponse}. Tool calls are returned, not executed: Spring AI 2's ChatClient runs them and calls again.
 */
record PromptMapping(List<Message> messages, Chat chat, Sampling sampling) {

    static PromptMapping of(Prompt prompt, CmfModel model, CmfChatOptions defaults) {
        CmfChatOptions.Builder b = defaults.mutate();
        ChatOptions o = prompt.getOptions();
        if (o != null) b.combineWith(o.mutate());
        CmfChatOptions p = b.build();
        Sampling s = Sampling.greedy();
        if (p.getTemperature() != null) s = s.withTemperature(p.getTemperature().floatValue());
        if (p.getTopP() != null) s = s.withTopP(p.getTopP().floatValue());
        if (p.getTopK() != null) s = s.withTopK(p.getTopK());
        if (p.getMinP() != null) s = s.withMinP(p.getMinP().floatValue());
        if (p.getRepetitionPenalty() != null) s = s.withRepetitionPenalty(p.getRepetitionPenalty().floatValue());
        if (p.getPresencePenalty() != null) s = s.withPresencePenalty(p.getPresencePenalty().floatValue());
        if (p.getFrequencyPenalty() != null) s = s.withFrequencyPenalty(p.getFrequencyPenalty().floatValue());
        if (p.getSeed() != null) s = s.withSeed(p.getSeed());
        if (p.getMaxTokens() != null) s = s.withMaxTokens(p.getMaxTokens());
        if (p.getStopSequences() != null && !p.getStopSequences().isEmpty()) s = s.withStops(p.getStopSequences());

        Chat chat = model.newChat();
        List<ToolCallback> callbacks = p.getToolCallbacks();
        if (callbacks != null && !callbacks.isEmpty()) {
            List<Tool> tools = new ArrayList<>();
            for (ToolCallback c : callbacks) {
                ToolDefinition d = c.getToolDefinition();
                tools.add(new Tool(d.name(), d.description(), d.inputSchema()));
            }
            chat = chat.withTools(tools);
            if (p.getToolChoice() != null) chat = chat.withToolChoice(p.getToolChoice());
        }
        String schema = o instanceof StructuredOutputChatOptions so && so.getOutputSchema() != null ? so.getOutputSchema() : p.getOutputSchema();
        if (schema != null) chat = chat.withJsonSchema(schema);
        return new PromptMapping(messages(prompt.getInstructions()), chat, s);
    }

    private static List<Message> messages(List<org.springframework.ai.chat.messages.Message> in) {
        List<Message> out = new ArrayList<>();
        for (org.springframework.ai.chat.messages.Message m : in) {
            switch (m) {
                case SystemMessage s -> out.add(Message.system(s.getText()));
                case UserMessage u -> {
                    if (!u.getMedia().isEmpty())
                        throw new IllegalArgumentException("cmf4j takes text only: a user message has " + u.getMedia().size() + " media parts");
                    out.add(Message.user(u.getText()));
                }
                case AssistantMessage a -> {
                    List<ToolCall> calls = new ArrayList<>();
                    for (AssistantMessage.ToolCall c : a.getToolCalls())
                        calls.add(new ToolCall(c.id() == null ? "call_" + calls.size() : c.id(), c.name(), c.arguments() == null ? "{}" : c.arguments()));
                    out.add(Message.assistant(a.getText() == null ? "" : a.getText(), calls));
                }
                case ToolResponseMessage t -> {
                    for (ToolResponseMessage.ToolResponse r : t.getResponses())
                        out.add(new Message(Message.Role.TOOL, r.responseData(), List.of(), r.id(), r.name()));
                }
                default -> throw new IllegalArgumentException("cmf4j cannot send a " + m.getMessageType() + " message to the model");
            }
        }
        return out;
    }

    /** Spring AI's finish reasons, as its OpenAI model reports them. */
    static String finishReason(Reply r) {
        return switch (r.finish()) {
            case STOP -> "STOP";
            case LENGTH -> "LENGTH";
            case TOOL_CALLS -> "TOOL_CALLS";
        };
    }

    /** The whole reply: text or tool calls, finish reason, token usage, the model's name. */
    static ChatResponse response(Reply r, String modelName) { return response(r, r.text(), modelName); }

    /** A stream's last response: no text (the pieces had it all), the tool calls, finish reason and usage. */
    static ChatResponse end(Reply r, String modelName) { return response(r, "", modelName); }

    private static ChatResponse response(Reply r, String text, String modelName) {
        List<AssistantMessage.ToolCall> calls = r.toolCalls().stream()
                .map(c -> new AssistantMessage.ToolCall(c.id(), "function", c.name(), c.argumentsJson())).toList();
        AssistantMessage out = AssistantMessage.builder().content(text).toolCalls(calls).build();
        return new ChatResponse(List.of(new Generation(out, ChatGenerationMetadata.builder().finishReason(finishReason(r)).build())),
                metadata(r, modelName));
    }

    /** A streamed piece of text (no finish reason, no usage yet). */
    static ChatResponse piece(String text, String modelName) {
        return new ChatResponse(List.of(new Generation(new AssistantMessage(text))), ChatResponseMetadata.builder().model(modelName).build());
    }

    private static ChatResponseMetadata metadata(Reply r, String modelName) {
        return ChatResponseMetadata.builder().model(modelName).usage(new DefaultUsage(r.promptTokens(), r.tokens().length)).build();
    }
}
