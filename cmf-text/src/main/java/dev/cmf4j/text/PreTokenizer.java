package dev.cmf4j.text;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;

/**
 * The pre-tokenizers of tokenizer.json: each cuts a normalized piece into smaller pieces (words) that
 * the model tokenizes independently. Empty pieces are dropped, as in the reference.
 */
sealed interface PreTokenizer {
    /** Appends the pieces of {@code t} to {@code out}. */
    void split(NormalizedText t, List<NormalizedText> out);

    /** Applies this pre-tokenizer to every piece. */
    default List<NormalizedText> apply(List<NormalizedText> pieces) {
        List<NormalizedText> out = new ArrayList<>(pieces.size() * 4);
        for (NormalizedText p : pieces) split(p, out);
        return out;
    }

    /** Splits on a pattern (regex or literal) with a behavior; {@code invert} splits on what does not match. */
    record Split(SplitPattern pattern, SplitBehavior behavior, boolean invert) implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            Matches m = MATCHES.get();
            pattern.find(t.text, m);
            if (invert) m.invert();
            behavior.split(t, m, out);
        }
    }

    /** GPT-2 byte-level: optional prefix space, optional GPT-2 word regex, then bytes to alphabet characters. */
    record ByteLevel(boolean addPrefixSpace, boolean trimOffsets, boolean useRegex) implements PreTokenizer {
        static final SplitPattern GPT2 = SplitPattern.Regex.of(WordSplitter.GPT2);

        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            if (addPrefixSpace && !t.text.startsWith(" ")) t = TextNormalizer.prepend(t, " ");
            if (useRegex) {
                List<NormalizedText> words = new ArrayList<>();
                Matches m = MATCHES.get();
                GPT2.find(t.text, m);
                SplitBehavior.ISOLATED.split(t, m, words);
                for (NormalizedText w : words) out.add(TextNormalizer.byteLevel(w));
            } else if (!t.isEmpty()) {
                out.add(TextNormalizer.byteLevel(t));
            }
        }
    }

    /** SentencePiece-style: spaces become {@code replacement}, a prefix is added per scheme, split before each. */
    record Metaspace(int replacement, PrependScheme prependScheme, boolean splitOnReplacement) implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            String rep = Character.toString(replacement);
            t = TextNormalizer.replace(t, SplitPattern.Literal.of(" "), rep);
            boolean prepend = switch (prependScheme) {
                case ALWAYS -> !t.text.startsWith(rep);
                case FIRST -> !t.text.startsWith(rep) && t.shift == 0;
                case NEVER -> false;
            };
            if (prepend && !t.isEmpty()) t = TextNormalizer.prepend(t, rep);
            if (splitOnReplacement) {
                Matches m = MATCHES.get();
                new SplitPattern.CharClass(c -> c == replacement).find(t.text, m);
                SplitBehavior.MERGED_WITH_NEXT.split(t, m, out);
            } else if (!t.isEmpty()) {
                out.add(t);
            }
        }
    }

    enum PrependScheme { FIRST, NEVER, ALWAYS }

    /** Splits digits from the rest: each digit alone, or runs of digits together. */
    record Digits(boolean individualDigits) implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            Matches m = MATCHES.get();
            new SplitPattern.CharClass(UnicodeProps::isNumeric).find(t.text, m);
            (individualDigits ? SplitBehavior.ISOLATED : SplitBehavior.CONTIGUOUS).split(t, m, out);
        }
    }

    record Punctuation(SplitBehavior behavior) implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            Matches m = MATCHES.get();
            new SplitPattern.CharClass(UnicodeProps::isPunctuation).find(t.text, m);
            behavior.split(t, m, out);
        }
    }

    /** Words ({@code \w+}) and runs of other non-space characters; whitespace is dropped. */
    record Whitespace() implements PreTokenizer {
        private static final java.util.regex.Pattern WORDS = java.util.regex.Pattern.compile(
                "[\\p{IsAlphabetic}\\p{M}\\p{Nd}\\p{Pc}\\u200C\\u200D]+|[^\\p{IsAlphabetic}\\p{M}\\p{Nd}\\p{Pc}\\u200C\\u200D"
                        + "\\t-\\r\\x20\\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]+");

        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            // The inverted pattern with Removed keeps exactly the matches of WORDS.
            Matcher mm = WORDS.matcher(t.text);
            while (mm.find()) if (mm.end() > mm.start()) out.add(t.slice(mm.start(), mm.end()));
        }
    }

    /** Splits on White_Space, dropping it. */
    record WhitespaceSplit() implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            Matches m = MATCHES.get();
            new SplitPattern.CharClass(UnicodeProps::isWhitespace).find(t.text, m);
            SplitBehavior.REMOVED.split(t, m, out);
        }
    }

    /** BERT: split on whitespace (dropped), then isolate punctuation. */
    record Bert() implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            List<NormalizedText> words = new ArrayList<>();
            new WhitespaceSplit().split(t, words);
            for (NormalizedText w : words) new Punctuation(SplitBehavior.ISOLATED).split(w, out);
        }
    }

    /** Splits on one delimiter character, dropping it. */
    record CharDelimiter(int delimiter) implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            Matches m = MATCHES.get();
            new SplitPattern.CharClass(c -> c == delimiter).find(t.text, m);
            SplitBehavior.REMOVED.split(t, m, out);
        }
    }

    /** Chunks of {@code length} characters. */
    record FixedLength(int length) implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            String s = t.text;
            int i = 0;
            while (i < s.length()) {
                int j = i;
                for (int k = 0; k < length && j < s.length(); k++) j += Character.charCount(s.codePointAt(j));
                out.add(t.slice(i, j));
                i = j;
            }
        }
    }

    record Sequence(List<PreTokenizer> preTokenizers) implements PreTokenizer {
        @Override public void split(NormalizedText t, List<NormalizedText> out) {
            out.addAll(apply(List.of(t)));
        }

        @Override public List<NormalizedText> apply(List<NormalizedText> pieces) {
            for (PreTokenizer p : preTokenizers) pieces = p.apply(pieces);
            return pieces;
        }
    }

    /** Per-thread scratch space for pattern results (pre-tokenizers are shared between threads). */
    ThreadLocal<Matches> MATCHES = ThreadLocal.withInitial(Matches::new);
}
