package dev.cmf4j.api;

/**
 * What a {@link Chat#publisher} emits: pieces of text as they are generated, then the whole reply once.
 */
public sealed interface ChatEvent {
    /** Text the tokens so far complete (whole UTF-8 characters; stop strings and tool-call blocks never shown). */
    record Text(String text) implements ChatEvent {}

    /** The last event: the reply, with its tool calls. */
    record Done(Reply reply) implements ChatEvent {}
}
