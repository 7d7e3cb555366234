package dev.cmf4j.api;

import java.util.List;

/**
 * A finished reply.
 *
 * @param text         the generated text (tool-call blocks taken out when the chat has tools; empty for a model
 *                     without a tokenizer)
 * @param toolCalls    the calls the model asked for, in order (empty when none)
 * @param tokens       the generated ids (an end-of-sequence id not included)
 * @param finish       why it ended
 * @param promptTokens the prompt's length in tokens
 * @param cachedTokens prompt tokens reused from an earlier turn's cache (not computed again)
 */
public record Reply(String text, List<ToolCall> toolCalls, int[] tokens, Finish finish, int promptTokens, int cachedTokens) {

    public enum Finish {
        /** An end-of-sequence token or a stop string. */
        STOP,
        /** {@link Sampling#maxTokens()} or the context's end. */
        LENGTH,
        /** The model called tools (see {@link #toolCalls()}). */
        TOOL_CALLS
    }

    public Reply {
        toolCalls = List.copyOf(toolCalls);
        tokens = tokens.clone();
    }

    @Override public int[] tokens() { return tokens.clone(); }

    /** The reply as an assistant message, to continue the conversation. */
    public Message asMessage() { return Message.assistant(text, toolCalls); }
}
