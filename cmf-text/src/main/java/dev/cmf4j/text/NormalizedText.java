package dev.cmf4j.text;

import java.util.Arrays;

/**
 * A piece of the input after normalization, with its alignment to the input: for every UTF-16 unit
 * of {@link #text}, the range {@code [start[i], end[i])} of input UTF-16 units it came from. This is the
 * reference's NormalizedString, with the same rules for where inserted characters point (the
 * character they were derived from, or the one before), so token offsets come out identical.
 * Immutable; every operation returns a new piece.
 */
final class NormalizedText {
    final String text;
    /** Alignments live in {@code start[off..off+length)}, {@code end[...]}: slices share their parent's arrays. */
    private final int[] start;
    private final int[] end;
    private final int off;
    /** Where this piece starts in the input (the reference's {@code original_shift}). */
    final int shift;

    NormalizedText(String text, int[] start, int[] end, int shift) {
        this(text, start, end, 0, shift);
    }

    private NormalizedText(String text, int[] start, int[] end, int off, int shift) {
        this.text = text;
        this.start = start;
        this.end = end;
        this.off = off;
        this.shift = shift;
    }

    /** Input start of normalized unit {@code i}. */
    int startAt(int i) {
        return start[off + i];
    }

    /** Input end of normalized unit {@code i}. */
    int endAt(int i) {
        return end[off + i];
    }

    /** The same alignments with a different text of equal length (a one-to-one character mapping). */
    NormalizedText withText(String sameLength) {
        return new NormalizedText(sameLength, start, end, off, shift);
    }

    /** {@code s} as an unnormalized piece of the input beginning at input index {@code base}. */
    static NormalizedText of(String s, int base) {
        int n = s.length();
        int[] st = new int[n], en = new int[n];
        for (int i = 0; i < n; ) {
            int w = Character.isHighSurrogate(s.charAt(i)) && i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1)) ? 2 : 1;
            for (int k = 0; k < w; k++) { st[i + k] = base + i; en[i + k] = base + i + w; }
            i += w;
        }
        return new NormalizedText(s, st, en, base);
    }

    int length() {
        return text.length();
    }

    boolean isEmpty() {
        return text.isEmpty();
    }

    /** The sub-piece of normalized units {@code [s, e)}. */
    NormalizedText slice(int s, int e) {
        if (s == 0 && e == text.length()) return this;
        int newShift = s < e ? start[off + s] : shift + s;
        return new NormalizedText(text.substring(s, e), start, end, off + s, newShift);
    }

    /** Input range covered by normalized units {@code [s, e)}: {start of first, end of last}. */
    int inputStart(int s) {
        return start[off + s];
    }

    int inputEnd(int e) {
        return end[off + e - 1];
    }

    /** Appends code points with explicit alignments; the building block of every transformation. */
    static final class Builder {
        private final StringBuilder sb;
        private int[] st, en;
        private int n;

        Builder(int capacity) {
            sb = new StringBuilder(capacity);
            st = new int[Math.max(4, capacity)];
            en = new int[st.length];
        }

        void append(int cp, int s, int e) {
            int w = Character.charCount(cp);
            if (n + w > st.length) {
                st = Arrays.copyOf(st, Math.max(n + w, st.length * 2));
                en = Arrays.copyOf(en, st.length);
            }
            sb.appendCodePoint(cp);
            for (int k = 0; k < w; k++) { st[n] = s; en[n] = e; n++; }
        }

        /** Appends units {@code [from, to)} of {@code src} with their own alignments. */
        void appendSlice(NormalizedText src, int from, int to) {
            int w = to - from;
            if (n + w > st.length) {
                st = Arrays.copyOf(st, Math.max(n + w, st.length * 2));
                en = Arrays.copyOf(en, st.length);
            }
            sb.append(src.text, from, to);
            System.arraycopy(src.start, src.off + from, st, n, w);
            System.arraycopy(src.end, src.off + from, en, n, w);
            n += w;
        }

        NormalizedText build(int shift) {
            return new NormalizedText(sb.toString(), Arrays.copyOf(st, n), Arrays.copyOf(en, n), shift);
        }
    }

    /**
     * The reference's {@code transform}: replaces the whole text with {@code cps[i]}, where
     * {@code changes[i]} says how each new code point relates to the old text: 0 replaces the next old
     * character (and takes its alignment), +1 is inserted (and takes the alignment of the old character
     * just before), -k replaces the next old character and removes the k after it. The first
     * {@code initialRemoved} old characters are dropped before anything else.
     */
    NormalizedText transform(int[] cps, int[] changes, int count, int initialRemoved) {
        Builder b = new Builder(count + 4);
        int off = 0;
        for (int r = 0; r < initialRemoved; r++) off += Character.charCount(text.codePointAt(off));
        for (int i = 0; i < count; i++) {
            int change = changes[i];
            int as, ae;
            if (change > 0) {
                if (off < 1) { as = shift; ae = shift; }
                else { as = startAt(off - 1); ae = endAt(off - 1); }
            } else {
                as = startAt(off); ae = endAt(off);
                off += Character.charCount(text.codePointAt(off));
                for (int r = 0; r < -change; r++) off += Character.charCount(text.codePointAt(off));
            }
            b.append(cps[i], as, ae);
        }
        return b.build(shift);
    }

    @Override public String toString() {
        return "NormalizedText[" + text + " @" + shift + "]";
    }
}
