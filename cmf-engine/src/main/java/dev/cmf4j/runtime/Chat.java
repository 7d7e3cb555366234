package dev.cmf4j.runtime;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * A multi-turn conversation: the messages so far and a session whose cache holds their rendering. Each
 * turn renders the whole conversation with the template and feeds only the ids past what the session
 * already holds (when the new rendering extends the old one; otherwise it starts the session over).
 */
public final class Chat {
    private final Session session;
    private final TextCodec codec;
    private final Sampler sampler;
    private final List<Map<String, Object>> messages = new ArrayList<>();
    private final Map<String, ?> kwargs;
    private final int maxTokens;

    public Chat(Session session, TextCodec codec, Sampler sampler, int maxTokens, Map<String, ?> kwargs) {
        this.session = session;
        this.codec = codec;
        this.sampler = sampler;
        this.maxTokens = maxTokens;
        this.kwargs = kwargs == null ? Map.of() : kwargs;
    }

    /** Adds a system message (before the first user turn). */
    public void system(String content) { messages.add(Map.of("role", "system", "content", content)); }

    public List<Map<String, Object>> messages() { return List.copyOf(messages); }

    /** Forgets the conversation. */
    public void reset() {
        messages.clear();
        session.reset();
    }

    /** Adds the user's message, generates the reply (streamed to {@code listener}) and records it. */
    public Generator.Result reply(String user, Generator.Listener listener) {
        messages.add(Map.of("role", "user", "content", user));
        int[] ids = codec.encodeChat(messages, kwargs);
        int[] held = session.history();
        int[] fresh;
        if (held.length > 0 && held.length < ids.length && Arrays.equals(held, 0, held.length, ids, 0, held.length)) {
            fresh = Arrays.copyOfRange(ids, held.length, ids.length);
        } else {
            session.reset();
            fresh = ids;
        }
        Generator gen = new Generator(session, sampler, codec.eosIds(), List.of());
        Generator.Result r;
        try {
            r = gen.generate(fresh, maxTokens, codec.stream(true), listener);
        } catch (GenerationException e) {
            messages.removeLast();
            throw e;
        }
        messages.add(Map.of("role", "assistant", "content", r.text()));
        return r;
    }
}
