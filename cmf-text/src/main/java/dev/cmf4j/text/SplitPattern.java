package dev.cmf4j.text;

import java.util.function.IntPredicate;

/**
 * Something to split on: a regex, a literal string, or a per-character predicate. Fills
 * {@link Matches} with the spans of matches and of the text between them, covering the whole input,
 * with the reference's conventions (an empty input yields one empty non-match span).
 */
sealed interface SplitPattern {
    void find(String s, Matches out);

    /** An Oniguruma-syntax regex (see {@link OnigRegex}), with a hand-written matcher when it is a well-known one. */
    record Regex(OnigRegex regex, WordSplitter fast) implements SplitPattern {
        static Regex of(String onig) {
            return new Regex(OnigRegex.compile(onig), WordSplitter.forPattern(onig));
        }

        @Override public void find(String s, Matches out) {
            if (fast != null) fast.find(s, out);
            else regex.find(s, out);
        }
    }

    /** A literal string, matched left to right without overlap (the reference escapes it into a regex). */
    record Literal(String literal, OnigRegex emptyRegex) implements SplitPattern {
        static Literal of(String literal) {
            return new Literal(literal, literal.isEmpty() ? OnigRegex.compile("") : null);
        }

        @Override public void find(String s, Matches out) {
            out.clear();
            if (emptyRegex != null) { emptyRegex.find(s, out); return; }
            if (s.isEmpty()) { out.add(0, 0, false); return; }
            int prev = 0;
            int n = literal.length();
            for (int at = s.indexOf(literal); at >= 0; at = s.indexOf(literal, at + n)) {
                if (prev != at) out.add(prev, at, false);
                out.add(at, at + n, true);
                prev = at + n;
            }
            if (prev != s.length()) out.add(prev, s.length(), false);
        }
    }

    /** Every character satisfying the predicate is a one-character match. */
    record CharClass(IntPredicate test) implements SplitPattern {
        @Override public void find(String s, Matches out) {
            out.clear();
            if (s.isEmpty()) { out.add(0, 0, false); return; }
            int last = 0;
            for (int i = 0; i < s.length(); ) {
                int c = s.codePointAt(i);
                int w = Character.charCount(c);
                if (test.test(c)) {
                    if (last < i) out.add(last, i, false);
                    out.add(i, i + w, true);
                    last = i + w;
                }
                i += w;
            }
            if (s.length() > last) out.add(last, s.length(), false);
        }
    }

    /** The same spans with match and non-match swapped. */
    record Invert(SplitPattern inner) implements SplitPattern {
        @Override public void find(String s, Matches out) {
            inner.find(s, out);
            out.invert();
        }
    }
}
