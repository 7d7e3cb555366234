package dev.cmf4j.model.graph;

import java.util.ArrayList;
import java.util.List;

/**
 * The rows of one forward step: spans of consecutive tokens, each span one sequence's next tokens starting
 * at that sequence's position. One step can mix prompt chunks of some sequences with single decode tokens of
 * others; token-wise work (norms, weight products, feed-forward, head) runs over all rows at once, so each
 * weight is read once per step, and attention and recurrent mixers run per span over that sequence's own
 * state. Rows are laid out in span order; so are the logits rows the spans ask for.
 *
 * <p>A batch is rebuilt for every step ({@link #clear}, then {@link #add}); it does not own its sequences.
 */
public final class Batch {

    /** Which logits a span wants back. */
    public enum Logits {
        /** None (a prompt chunk that is not the prompt's last). */
        NONE,
        /** The span's last row only (the next token's distribution). */
        LAST,
        /** Every row of the span ([tokens, vocab]; conformance and scoring). */
        ALL
    }

    /** One sequence's tokens in this step: {@code ids[off, off + tokens)} at positions from {@code sequence.position()}. */
    public record Span(State sequence, int[] ids, int off, int tokens, Logits logits) {
        public Span {
            if (sequence == null || ids == null || logits == null) throw new NullPointerException("sequence, ids and logits are required");
            if (tokens < 1) throw new IllegalArgumentException("a span needs at least one token, got " + tokens);
            if (off < 0 || off > ids.length - tokens)
                throw new IllegalArgumentException("ids[" + off + ", " + (off + tokens) + ") outside an array of " + ids.length);
        }

        /** Logits rows this span produces. */
        public int logitRows() {
            return switch (logits) { case NONE -> 0; case LAST -> 1; case ALL -> tokens; };
        }
    }

    private final List<Span> spans = new ArrayList<>();
    private int rows, logitRows;
    // resolved when a step starts (Graph.forward): first row and position of each span, position of each row
    int[] start = new int[8], pos0 = new int[8], rowPos = new int[64], rowSpan = new int[64];
    /** Each row's skill and adapter (from its sequence), and each logits row's; resolved with the tables above. */
    final RowOverlay overlay = new RowOverlay(), logitOverlay = new RowOverlay();

    /** Adds one sequence's next tokens; returns this batch. */
    public Batch add(State sequence, int[] ids, int off, int tokens, Logits logits) {
        return add(new Span(sequence, ids, off, tokens, logits));
    }

    public Batch add(Span span) {
        spans.add(span);
        rows += span.tokens();
        logitRows += span.logitRows();
        return this;
    }

    /** Empties the batch for the next step (keeps its buffers). */
    public Batch clear() {
        spans.clear();
        rows = 0;
        logitRows = 0;
        return this;
    }

    public int size() { return spans.size(); }

    public Span span(int i) { return spans.get(i); }

    /** Token rows over all spans. */
    public int rows() { return rows; }

    /** Logits rows over all spans (each span's {@link Span#logitRows()}, in span order). */
    public int logitRows() { return logitRows; }

    /** The first logits row of span {@code i} in the output ({@code × vocab} for the float offset). */
    public int logitRow(int i) {
        int r = 0;
        for (int j = 0; j < i; j++) r += spans.get(j).logitRows();
        return r;
    }

    /** Fills the row tables from each sequence's current position; checks every sequence appears once. */
    void resolve() {
        int n = spans.size();
        if (start.length < n) { start = new int[Math.max(n, 2 * start.length)]; pos0 = new int[start.length]; }
        if (rowPos.length < rows) { rowPos = new int[Math.max(rows, 2 * rowPos.length)]; rowSpan = new int[rowPos.length]; }
        int r = 0;
        for (int i = 0; i < n; i++) {
            Span s = spans.get(i);
            for (int j = 0; j < i; j++)
                if (spans.get(j).sequence() == s.sequence())
                    throw new IllegalArgumentException("spans " + j + " and " + i + " are the same sequence;"
                            + " one step takes each sequence's tokens as one span");
            start[i] = r;
            pos0[i] = s.sequence().position();
            for (int t = 0; t < s.tokens(); t++, r++) { rowPos[r] = pos0[i] + t; rowSpan[r] = i; }
        }
        overlay.reset(rows);
        logitOverlay.reset(logitRows);
        for (Span s : spans) {
            overlay.add(s.sequence().overlay, s.tokens());
            logitOverlay.add(s.sequence().overlay, s.logitRows());
        }
    }

    State state(int i) { return spans.get(i).sequence(); }

    int tokens(int i) { return spans.get(i).tokens(); }
}
