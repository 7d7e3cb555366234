package dev.cmf4j.runtime;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * The decode loop: prefill the prompt, then sample, feed back, repeat until an EOS id, a stop string,
 * the token budget or the context limit. Streams text through an optional {@link TextStream} and
 * {@link Listener}, holding back just enough characters that a stop string is never shown.
 */
public final class Generator {

    /** Turns ids into text incrementally (UTF-8 safe: returns only complete characters). */
    public interface TextStream {
        /** Text that {@code id} completes (possibly empty). */
        String push(int id);

        /** Whatever is still buffered (at the end). */
        default String flush() { return ""; }
    }

    /** Receives generated tokens and text as they are produced. */
    public interface Listener {
        default void token(int id) {}

        default void text(String piece) {}
    }

    public enum StopReason { EOS, STOP_STRING, MAX_TOKENS, CONTEXT_LIMIT }

    /** What one generation produced. {@code text} is empty when no TextStream was given. */
    public record Result(int[] tokens, String text, StopReason reason) {}

    private final Session session;
    private final Sampler sampler;
    private final Set<Integer> eos;
    private final List<String> stops;

    /**
     * @param eos   ids that end generation (not included in the result)
     * @param stops strings that end generation (the text is cut before them); need a TextStream
     */
    public Generator(Session session, Sampler sampler, Set<Integer> eos, List<String> stops) {
        this.session = session;
        this.sampler = sampler;
        this.eos = Set.copyOf(eos);
        this.stops = List.copyOf(stops);
        // a plain nucleus draw lets a hierarchical head skip the clusters it cannot reach (exact; no-op on other heads)
        session.state().gateHeadForTopP(sampler.params().nucleusOnly() ? sampler.params().topP() : 1.0);
    }

    Session session() { return session; }

    Sampler sampler() { return sampler; }

    /**
     * Generates up to {@code maxTokens} tokens after {@code prompt} (appended to what the session holds): prefill, then
     * a {@link Generation} fed one decode step at a time.
     *
     * @param text     decoder for streaming and stop strings; may be null
     * @param listener may be null
     */
    public Result generate(int[] prompt, int maxTokens, TextStream text, Listener listener) {
        Generation g = start(maxTokens, text, listener);
        float[] logits = session.prefill(prompt);
        for (int id = g.next(logits, 0); id >= 0; id = g.next(logits, 0)) logits = session.decode(id);
        return g.result();
    }

    /**
     * A generation of up to {@code maxTokens} tokens in this generator's session, driven from outside one step at a
     * time: after the caller has run the prompt, each {@link Generation#next} takes the logits of the session's last
     * token and returns the id to feed it, or -1 when the generation has ended. A scheduler that batches many
     * sessions' steps drives one Generation per session this way.
     */
    public Generation start(int maxTokens, TextStream text, Listener listener) {
        if (maxTokens < 0) throw new IllegalArgumentException("max tokens must be >= 0");
        if (!stops.isEmpty() && text == null) throw new IllegalArgumentException("stop strings need a text stream");
        return new Generation(maxTokens, text, listener);
    }

    /** One generation in progress: samples each step's logits, streams text, applies the stops. Not thread-safe. */
    public final class Generation {
        private final int maxTokens;
        private final TextStream text;
        private final Listener listener;
        private final List<Integer> out = new ArrayList<>();
        private final StringBuilder all = new StringBuilder();
        private final int hold;
        private int emitted;
        private StopReason reason;

        private Generation(int maxTokens, TextStream text, Listener listener) {
            this.maxTokens = maxTokens;
            this.text = text;
            this.listener = listener;
            int h = 0;
            for (String s : stops) h = Math.max(h, s.length() - 1);
            this.hold = h;
            if (maxTokens == 0) finish(StopReason.MAX_TOKENS);
        }

        /**
         * Samples the next token from {@code logits[off, off + vocab)} (the session's last token's), streams it, and
         * returns the id the session must consume next; -1 once the generation has ended (then {@link #result}).
         */
        public int next(float[] logits, int off) {
            if (reason != null) return -1;
            return accept(sampler.sample(logits, off, session.vocab(), session.historyArray(), session.historyLength()));
        }

        /** Whether {@link #next} picks the argmax of the logits as they are (greedy, no penalty): {@link #accept} may take it. */
        public boolean picksArgmax() { return sampler.params().plainGreedy(); }

        /**
         * As {@link #next} with the pick made already (the argmax a device took, when {@link #picksArgmax}): streams
         * {@code id} and returns the id to consume next, or -1 once the generation has ended.
         */
        public int accept(int id) {
            if (reason != null) return -1;
            if (eos.contains(id)) return finish(StopReason.EOS);
            out.add(id);
            if (listener != null) listener.token(id);
            if (text != null) {
                all.append(text.push(id));
                int cut = firstStop(all);
                if (cut >= 0) {
                    all.setLength(cut);
                    emitted = emit(all, emitted, all.length(), listener);
                    return finish(StopReason.STOP_STRING);
                }
                emitted = emit(all, emitted, Math.max(emitted, all.length() - hold), listener);
            }
            if (out.size() >= maxTokens) return finish(StopReason.MAX_TOKENS);
            if (session.position() >= session.maxContext()) return finish(StopReason.CONTEXT_LIMIT);
            return id;
        }

        /** Whether the generation has ended. */
        public boolean done() { return reason != null; }

        /** The tokens so far (generated, not fed back yet included). */
        public int tokens() { return out.size(); }

        /** What the generation produced; only once it has ended. */
        public Result result() {
            if (reason == null) throw new IllegalStateException("the generation has not ended");
            return new Result(out.stream().mapToInt(Integer::intValue).toArray(), all.toString(), reason);
        }

        private int finish(StopReason why) {
            reason = why;
            if (text != null && why != StopReason.STOP_STRING) {
                all.append(text.flush());
                int cut = firstStop(all);
                if (cut >= 0) { all.setLength(cut); reason = StopReason.STOP_STRING; }
                emit(all, emitted, all.length(), listener);
            }
            return -1;
        }
    }

    private int firstStop(CharSequence s) {
        int best = -1;
        String str = s.toString();
        for (String stop : stops) {
            if (stop.isEmpty()) continue;
            int i = str.indexOf(stop);
            if (i >= 0 && (best < 0 || i < best)) best = i;
        }
        return best;
    }

    private static int emit(StringBuilder all, int from, int to, Listener l) {
        if (to > from && to < all.length() && Character.isLowSurrogate(all.charAt(to))) to--;   // never split a pair
        if (to > from && l != null) l.text(all.substring(from, to));
        return Math.max(from, to);
    }
}
