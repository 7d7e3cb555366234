package dev.cmf4j.server;

/**
 * Splits a reply's reasoning from its answer as text streams in, where the chat template marks reasoning with
 * {@code <think>} ... {@code </think>} (Qwen3, DeepSeek-R1): the reasoning goes to {@code reasoning_content}, the rest
 * to {@code content}. A reply opens with the tag, or starts inside it when the prompt already ends with it. Text
 * that may be part of a tag is held back until it is decided.
 */
final class ReasoningSplitter {
    static final String OPEN = "<think>", CLOSE = "</think>";

    /** What a piece released. */
    record Out(String reasoning, String content) {}

    private enum Phase { BEFORE, THINKING, AFTER }

    private final StringBuilder pending = new StringBuilder();
    private Phase phase;
    private boolean justClosed;

    /** @param inside the prompt ends with the opening tag, so the reply starts as reasoning */
    ReasoningSplitter(boolean inside) { this.phase = inside ? Phase.THINKING : Phase.BEFORE; }

    /** Whether a rendered prompt leaves the reply inside a reasoning block. */
    static boolean endsInside(String prompt) { return prompt.stripTrailing().endsWith(OPEN); }

    Out push(String piece) {
        pending.append(piece);
        StringBuilder reasoning = new StringBuilder(), content = new StringBuilder();
        while (true) {
            switch (phase) {
                case BEFORE -> {
                    String head = pending.toString().stripLeading();
                    if (head.startsWith(OPEN)) {
                        pending.delete(0, pending.indexOf(OPEN) + OPEN.length());
                        phase = Phase.THINKING;
                        continue;
                    }
                    if (OPEN.startsWith(head)) return new Out("", "");   // maybe the tag: wait
                    phase = Phase.AFTER;
                }
                case THINKING -> {
                    int close = pending.indexOf(CLOSE);
                    if (close >= 0) {
                        reasoning.append(pending, 0, close);
                        pending.delete(0, close + CLOSE.length());
                        phase = Phase.AFTER;
                        justClosed = true;
                        continue;
                    }
                    int release = pending.length() - heldBack();
                    reasoning.append(pending, 0, release);
                    pending.delete(0, release);
                    return new Out(strip(reasoning), content.toString());
                }
                case AFTER -> {
                    if (justClosed) {   // the blank lines templates put after the closing tag
                        int i = 0;
                        while (i < pending.length() && Character.isWhitespace(pending.charAt(i))) i++;
                        pending.delete(0, i);
                        if (pending.isEmpty()) return new Out(strip(reasoning), "");
                        justClosed = false;
                    }
                    content.append(pending);
                    pending.setLength(0);
                    return new Out(strip(reasoning), content.toString());
                }
            }
        }
    }

    /** The rest at the end (an unclosed reasoning block stays reasoning). */
    Out finish() {
        String rest = pending.toString();
        pending.setLength(0);
        return phase == Phase.THINKING ? new Out(rest, "") : new Out("", phase == Phase.AFTER && justClosed ? rest.strip() : rest);
    }

    private boolean started;

    /** The reasoning without the newline templates put right after the opening tag. */
    private String strip(StringBuilder r) {
        String s = r.toString();
        if (!started && !s.isEmpty()) {
            started = true;
            if (s.startsWith("\n")) s = s.substring(1);
        }
        return s;
    }

    private int heldBack() {
        for (int k = Math.min(CLOSE.length() - 1, pending.length()); k > 0; k--)
            if (pending.substring(pending.length() - k).equals(CLOSE.substring(0, k))) return k;
        return 0;
    }
}
