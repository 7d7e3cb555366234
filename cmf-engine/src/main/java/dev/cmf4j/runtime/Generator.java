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
    }

    /**
     * Generates up to {@code maxTokens} tokens after {@code prompt} (appended to what the session holds).
     *
     * @param text     decoder for streaming and stop strings; may be null
     * @param listener may be null
     */
    public Result generate(int[] prompt, int maxTokens, TextStream text, Listener listener) {
        if (maxTokens < 0) throw new IllegalArgumentException("max tokens must be >= 0");
        if (!stops.isEmpty() && text == null) throw new IllegalArgumentException("stop strings need a text stream");
        float[] logits = session.prefill(prompt);
        List<Integer> out = new ArrayList<>();
        StringBuilder all = new StringBuilder();
        int emitted = 0;
        int hold = 0;
        for (String s : stops) hold = Math.max(hold, s.length() - 1);
        StopReason reason = StopReason.MAX_TOKENS;
        while (out.size() < maxTokens) {
            int id = sampler.sample(logits, session.historyArray(), session.historyLength());
            if (eos.contains(id)) { reason = StopReason.EOS; break; }
            out.add(id);
            if (listener != null) listener.token(id);
            if (text != null) {
                all.append(text.push(id));
                int cut = firstStop(all);
                if (cut >= 0) {
                    all.setLength(cut);
                    emitted = emit(all, emitted, all.length(), listener);
                    reason = StopReason.STOP_STRING;
                    break;
                }
                emitted = emit(all, emitted, Math.max(emitted, all.length() - hold), listener);
            }
            if (out.size() >= maxTokens) break;
            if (session.position() >= session.maxContext()) { reason = StopReason.CONTEXT_LIMIT; break; }
            logits = session.decode(id);
        }
        if (text != null && reason != StopReason.STOP_STRING) {
            all.append(text.flush());
            int cut = firstStop(all);
            if (cut >= 0) { all.setLength(cut); reason = StopReason.STOP_STRING; }
            emit(all, emitted, all.length(), listener);
        }
        return new Result(out.stream().mapToInt(Integer::intValue).toArray(), all.toString(), reason);
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
