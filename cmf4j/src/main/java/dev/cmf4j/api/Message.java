package dev.cmf4j.api;

import java.util.List;

/**
 * One message of a conversation.
 *
 * <pre>{@code
 * List<Message> messages = List.of(Message.system("Be brief."), Message.user("What does ls do?"));
 * }</pre>
 *
 * @param role       who says it
 * @param content    its text (may be empty for an assistant message that only calls tools)
 * @param toolCalls  the calls an assistant message made (empty otherwise)
 * @param toolCallId for a {@link Role#TOOL} message: the id of the call it answers
 * @param name       for a {@link Role#TOOL} message: the function's name; else null
 */
public record Message(Role role, String content, List<ToolCall> toolCalls, String toolCallId, String name) {

    public enum Role { SYSTEM, USER, ASSISTANT, TOOL }

    public Message {
        if (role == null) throw new IllegalArgumentException("a message needs a role");
        if (content == null) content = "";
        toolCalls = toolCalls == null ? List.of() : List.copyOf(toolCalls);
        if (!toolCalls.isEmpty() && role != Role.ASSISTANT) throw new IllegalArgumentException("only an assistant message carries tool calls");
    }

    public static Message system(String text) { return new Message(Role.SYSTEM, text, List.of(), null, null); }

    public static Message user(String text) { return new Message(Role.USER, text, List.of(), null, null); }

    public static Message assistant(String text) { return new Message(Role.ASSISTANT, text, List.of(), null, null); }

    /** An assistant turn that called tools (a {@link Reply}'s calls, to continue the conversation with their results). */
    public static Message assistant(String text, List<ToolCall> calls) { return new Message(Role.ASSISTANT, text, calls, null, null); }

    /** A tool's answer to {@code call}. */
    public static Message toolResult(ToolCall call, String result) { return new Message(Role.TOOL, result, List.of(), call.id(), call.name()); }
}
