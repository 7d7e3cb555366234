package dev.cmf4j.text;

import java.util.List;

/** What a split does with the matched delimiters (tokenizer.json {@code "behavior"}). */
enum SplitBehavior {
    REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS;

    static SplitBehavior fromJson(String name) {
        return switch (name) {
            case "Removed" -> REMOVED;
            case "Isolated" -> ISOLATED;
            case "MergedWithPrevious" -> MERGED_WITH_PREVIOUS;
            case "MergedWithNext" -> MERGED_WITH_NEXT;
            case "Contiguous" -> CONTIGUOUS;
            default -> null;
        };
    }

    /**
     * Splits {@code t} at the spans in {@code m} (which cover it) following this behavior, appending the
     * non-empty pieces to {@code out}. Mirrors the reference's {@code NormalizedString::split}; {@code m}
     * is rewritten in place.
     */
    void split(NormalizedText t, Matches m, List<NormalizedText> out) {
        int n = m.size();
        switch (this) {
            case ISOLATED -> {
                for (int i = 0; i < n; i++) add(t, m.start(i), m.end(i), out);
            }
            case REMOVED -> {
                for (int i = 0; i < n; i++) if (!m.isMatch(i)) add(t, m.start(i), m.end(i), out);
            }
            case CONTIGUOUS -> {
                int accStart = -1, accEnd = -1;
                boolean prevMatch = false;
                for (int i = 0; i < n; i++) {
                    boolean isMatch = m.isMatch(i);
                    if (isMatch == prevMatch && accStart >= 0) {
                        accEnd = m.end(i);
                    } else {
                        if (accStart >= 0) add(t, accStart, accEnd, out);
                        accStart = m.start(i);
                        accEnd = m.end(i);
                    }
                    prevMatch = isMatch;
                }
                if (accStart >= 0) add(t, accStart, accEnd, out);
            }
            case MERGED_WITH_PREVIOUS -> {
                int accStart = -1, accEnd = -1;
                boolean prevMatch = false;
                for (int i = 0; i < n; i++) {
                    boolean isMatch = m.isMatch(i);
                    if (isMatch && !prevMatch && accStart >= 0) {
                        accEnd = m.end(i);
                    } else {
                        if (accStart >= 0) add(t, accStart, accEnd, out);
                        accStart = m.start(i);
                        accEnd = m.end(i);
                    }
                    prevMatch = isMatch;
                }
                if (accStart >= 0) add(t, accStart, accEnd, out);
            }
            case MERGED_WITH_NEXT -> {
                // Walk backwards, merging a match into the piece that follows it.
                int[] starts = new int[n], ends = new int[n];
                int k = 0;
                boolean prevMatch = false;
                for (int i = n - 1; i >= 0; i--) {
                    boolean isMatch = m.isMatch(i);
                    if (isMatch && !prevMatch && k > 0) {
                        starts[k - 1] = m.start(i);
                    } else {
                        starts[k] = m.start(i);
                        ends[k] = m.end(i);
                        k++;
                    }
                    prevMatch = isMatch;
                }
                for (int i = k - 1; i >= 0; i--) add(t, starts[i], ends[i], out);
            }
        }
    }

    private static void add(NormalizedText t, int s, int e, List<NormalizedText> out) {
        if (e > s) out.add(t.slice(s, e));
    }
}
