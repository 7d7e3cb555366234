package dev.cmf4j.langchain4j;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.api.Chat;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.Message;
import dev.cmf4j.api.Reply;
import dev.cmf4j.api.Sampling;
import dev.cmf4j.api.Tool;
import dev.cmf4j.api.ToolCall;
import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.agent.tool.ToolSpecification;
import dev.langchain4j.data.message.AiMessage;
import dev.langchain4j.data.message.ChatMessage;
import dev.langchain4j.data.message.SystemMessage;
import dev.langchain4j.data.message.ToolExecutionResultMessage;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.internal.JsonSchemaElementUtils;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.ResponseFormat;
import dev.langchain4j.model.chat.request.ResponseFormatType;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.output.FinishReason;
import dev.langchain4j.model.output.TokenUsage;

import java.util.ArrayList;
import java.util.List;

/**
 * Translates between LangChain4j's chat types and the cmf4j API: a {@link ChatRequest} becomes messages, a
 * configured {@link Chat} and a {@link Sampling}; a {@link Reply} becomes a {@link ChatResponse}.
 */
record RequestMapping(List<Message> messages, Chat chat, Sampling sampling) {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** Parameters LangChain4j does not carry (min-p, repetition penalty, seed) come from {@code base}. */
    static RequestMapping of(ChatRequest request, CmfModel model, Sampling base) {
        ChatRequestParameters p = request.parameters();
        Sampling s = base;
        if (p.temperature() != null) s = s.withTemperature(p.temperature().floatValue());
        if (p.topP() != null) s = s.withTopP(p.topP().floatValue());
        if (p.topK() != null) s = s.withTopK(p.topK());
        if (p.maxOutputTokens() != null) s = s.withMaxTokens(p.maxOutputTokens());
        if (p.stopSequences() != null && !p.stopSequences().isEmpty()) s = s.withStops(p.stopSequences());
        if (p.presencePenalty() != null) s = s.withPresencePenalty(p.presencePenalty().floatValue());
        if (p.frequencyPenalty() != null) s = s.withFrequencyPenalty(p.frequencyPenalty().floatValue());

        Chat chat = model.newChat();
        List<ToolSpecification> specs = p.toolSpecifications();
        if (specs != null && !specs.isEmpty()) {
            List<Tool> tools = new ArrayList<>();
            for (ToolSpecification t : specs)
                tools.add(new Tool(t.name(), t.description(), t.parameters() == null ? null : json(JsonSchemaElementUtils.toMap(t.parameters()))));
            chat = chat.withTools(tools);
            if (p.toolChoice() != null) chat = chat.withToolChoice(switch (p.toolChoice()) {
                case AUTO -> Chat.ToolChoice.AUTO;
                case REQUIRED -> Chat.ToolChoice.REQUIRED;
                case NONE -> Chat.ToolChoice.NONE;
            });
        }
        ResponseFormat rf = p.responseFormat();
        if (rf != null && rf.type() == ResponseFormatType.JSON)
            chat = rf.jsonSchema() == null ? chat.withJsonOutput() : chat.withJsonSchema(json(JsonSchemaElementUtils.toMap(rf.jsonSchema().rootElement())));
        return new RequestMapping(messages(request.messages()), chat, s);
    }

    private static List<Message> messages(List<ChatMessage> in) {
        List<Message> out = new ArrayList<>();
        for (ChatMessage m : in) {
            out.add(switch (m) {
                case SystemMessage s -> Message.system(s.text());
                case UserMessage u -> {
                    if (!u.hasSingleText()) throw new IllegalArgumentException("cmf4j takes text only: a user message has "
                            + u.contents().size() + " parts or a part that is not text");
                    yield Message.user(u.singleText());
                }
                case AiMessage a -> {
                    List<ToolCall> calls = new ArrayList<>();
                    if (a.hasToolExecutionRequests())
                        for (ToolExecutionRequest r : a.toolExecutionRequests())
                            calls.add(new ToolCall(r.id() == null ? "call_" + calls.size() : r.id(), r.name(), r.arguments() == null ? "{}" : r.arguments()));
                    yield Message.assistant(a.text() == null ? "" : a.text(), calls);
                }
                case ToolExecutionResultMessage t -> new Message(Message.Role.TOOL, t.text(), List.of(), t.id(), t.toolName());
                default -> throw new IllegalArgumentException("cmf4j cannot send a " + m.type() + " message to the model");
            });
        }
        return out;
    }

    /** The reply as LangChain4j's response: text or tool execution requests, token usage, finish reason. */
    static ChatResponse response(Reply r, String modelName) {
        List<ToolExecutionRequest> calls = r.toolCalls().stream()
                .map(c -> ToolExecutionRequest.builder().id(c.id()).name(c.name()).arguments(c.argumentsJson()).build())
                .toList();
        AiMessage ai = calls.isEmpty() ? AiMessage.from(r.text())
                : AiMessage.from(r.text().isEmpty() ? null : r.text(), calls);
        return ChatResponse.builder()
                .aiMessage(ai)
                .modelName(modelName)
                .tokenUsage(new TokenUsage(r.promptTokens(), r.tokens().length))
                .finishReason(switch (r.finish()) {
                    case STOP -> FinishReason.STOP;
                    case LENGTH -> FinishReason.LENGTH;
                    case TOOL_CALLS -> FinishReason.TOOL_EXECUTION;
                })
                .build();
    }

    private static String json(Object o) {
        try {
            return JSON.writeValueAsString(o);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("a JSON schema could not be written: " + e.getMessage(), e);
        }
    }
}
