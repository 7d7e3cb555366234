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
    private int lastCached;

    public Chat(Session session, TextCodec codec, Sampler sampler, int maxTokens, Map<String, ?> kwargs) {
        this.session = session;
        this.codec = codec;
        this.sampler = sampler;
        this.maxTokens = maxTokens;
        this.kwargs = kwargs == null ? Map.of() : kwargs;
    }

    private Speculation draft;

    /** Drafts every reply with {@code s} (speculative decoding), or plainly with null. */
    public void useDraft(Speculation s) { this.draft = s; }

    /** Adds a system message (before the first user turn). */
    public void system(String content) { messages.add(Map.of("role", "system", "content", content)); }

    public List<Map<String, Object>> messages() { return List.copyOf(messages); }

    /** Tokens of the last turn's prompt the session already held (not prefilled again). */
    public int lastCachedTokens() { return lastCached; }

    /** Forgets the conversation. */
    public void reset() {
        messages.clear();
        session.reset();
    }

    /** After the session's snapshot in a chat state: "CMFC", then the version. */
    static final int TRANSCRIPT_MAGIC = 0x434D4643, TRANSCRIPT_VERSION = 1;

    /**
     * Writes the conversation: the session's snapshot ({@link Session#exportState}: caches, position, ids), then the
     * transcript, which the template renders the next turn from (the ids alone cannot be turned back into messages).
     */
    public void exportState(java.io.OutputStream out) throws java.io.IOException {
        var d = new java.io.DataOutputStream(new java.io.BufferedOutputStream(out, 1 << 16));
        session.exportState(d);
        d.writeInt(TRANSCRIPT_MAGIC);
        d.writeInt(TRANSCRIPT_VERSION);
        d.writeInt(messages.size());
        for (Map<String, Object> m : messages) {
            writeString(d, (String) m.get("role"));
            writeString(d, (String) m.get("content"));
        }
        d.flush();
    }

    /**
     * Replaces the conversation with one {@link #exportState} wrote: the next {@link #reply} renders the restored
     * messages plus the new one and feeds only the ids past what the restored session holds. Refused (an
     * {@link java.io.IOException} saying why; the conversation then is empty) for a snapshot of another model or
     * settings, one without a transcript ({@code cmf run --state-out}) or one cut short.
     */
    public void importState(java.io.InputStream in) throws java.io.IOException {
        var d = new java.io.DataInputStream(new java.io.BufferedInputStream(in, 1 << 16));
        reset();
        session.importState(d);
        try {
            int magic;
            try {
                magic = d.readInt();
            } catch (java.io.EOFException e) {
                throw new java.io.IOException("the state holds a sequence but no chat transcript (cmf run and the server's"
                        + " /slots save none); a chat resumes from a state cmf chat saved");
            }
            if (magic != TRANSCRIPT_MAGIC) throw new java.io.IOException("the state's chat transcript is damaged (no CMFC magic)");
            int version = d.readInt();
            if (version != TRANSCRIPT_VERSION)
                throw new java.io.IOException("chat transcript version " + version + "; this engine reads version " + TRANSCRIPT_VERSION);
            int n = d.readInt();
            if (n < 0 || n > 1 << 20) throw new java.io.IOException("chat transcript of " + n + " messages");
            for (int i = 0; i < n; i++) messages.add(Map.of("role", readString(d), "content", readString(d)));
        } catch (java.io.EOFException e) {
            reset();
            throw new java.io.IOException("the state's chat transcript is truncated", e);
        } catch (java.io.IOException | RuntimeException e) {
            reset();
            throw e;
        }
    }

    private static void writeString(java.io.DataOutputStream d, String s) throws java.io.IOException {
        byte[] b = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        d.writeInt(b.length);
        d.write(b);
    }

    private static String readString(java.io.DataInputStream d) throws java.io.IOException {
        int n = d.readInt();
        if (n < 0 || n > 1 << 28) throw new java.io.IOException("chat transcript: a message of " + n + " bytes");
        byte[] b = d.readNBytes(n);   // grows as it reads: a damaged length cannot claim memory the file does not hold
        if (b.length < n) throw new java.io.EOFException();
        return new String(b, java.nio.charset.StandardCharsets.UTF_8);
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
        lastCached = ids.length - fresh.length;
        Generator gen = new Generator(session, sampler, codec.eosIds(), List.of());
        Generator.Result r;
        try {
            r = draft == null ? gen.generate(fresh, maxTokens, codec.stream(true), listener)
                    : draft.generate(gen, fresh, maxTokens, codec.stream(true), listener);
        } catch (GenerationException e) {
            messages.removeLast();
            throw e;
        }
        messages.add(Map.of("role", "assistant", "content", r.text()));
        return r;
    }
}
