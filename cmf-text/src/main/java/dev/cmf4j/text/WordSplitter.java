package dev.cmf4j.text;

/**
 * Hand-written matchers for the word-splitting regexes that nearly every byte-level tokenizer uses
 * (GPT-2's, and the Llama-3 / Qwen family), giving exactly the matches the regex gives (the same
 * alternatives tried in the same order, the same greedy and backtracking outcomes) at several times
 * the speed of {@link java.util.regex}. {@link #forPattern} returns one only for a pattern it knows
 * character for character; {@code WordSplitterTest} checks each against the general regex path on
 * random text.
 *
 * <p>Character classes are the translated regex's: {@code \p{L}} and {@code \p{N}} by
 * {@link Character#getType}, {@code \s} as Unicode White_Space.
 */
final class WordSplitter {
    /** Llama 3 ({@code \p{N}{1,3}}) and Qwen 2/3 ({@code \p{N}}). */
    static final String LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static final String QWEN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    /** GPT-2's, also the ByteLevel pre-tokenizer's built-in regex. */
    static final String GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

    private static final byte L = 1, N = 2, WS = 4;
    private static final byte[] BMP = new byte[0x10000];

    static {
        for (int c = 0; c < 0x10000; c++) BMP[c] = classify(c);
    }

    private static byte classify(int c) {
        if (UnicodeProps.isWhitespace(c)) return WS;
        return switch (Character.getType(c)) {
            case Character.UPPERCASE_LETTER, Character.LOWERCASE_LETTER, Character.TITLECASE_LETTER,
                 Character.MODIFIER_LETTER, Character.OTHER_LETTER -> L;
            case Character.DECIMAL_DIGIT_NUMBER, Character.LETTER_NUMBER, Character.OTHER_NUMBER -> N;
            default -> 0;
        };
    }

    private enum Kind { LLAMA3, QWEN, GPT2 }

    private final Kind kind;
    private final int maxDigits;

    private WordSplitter(Kind kind, int maxDigits) {
        this.kind = kind;
        this.maxDigits = maxDigits;
    }

    /** A fast matcher for exactly this pattern source, or null. */
    static WordSplitter forPattern(String source) {
        return switch (source) {
            case LLAMA3 -> new WordSplitter(Kind.LLAMA3, 3);
            case QWEN -> new WordSplitter(Kind.QWEN, 1);
            case GPT2 -> new WordSplitter(Kind.GPT2, Integer.MAX_VALUE);
            default -> null;
        };
    }

    /** Same contract as {@link OnigRegex#find}. */
    void find(String s, Matches out) {
        out.clear();
        int n = s.length();
        if (n == 0) { out.add(0, 0, false); return; }
        int prev = 0;
        int i = 0;
        while (i < n) {
            int end = kind == Kind.GPT2 ? matchGpt2(s, i, n) : matchLlama(s, i, n);
            if (end < 0) { i += Character.charCount(s.codePointAt(i)); continue; } // cannot happen: every character matches some branch
            if (prev != i) out.add(prev, i, false);
            out.add(i, end, true);
            prev = i = end;
        }
        if (prev != n) out.add(prev, n, false);
    }

    private static int cls(String s, int i) {
        char c = s.charAt(i);
        if (!Character.isHighSurrogate(c) || i + 1 >= s.length() || !Character.isLowSurrogate(s.charAt(i + 1))) return BMP[c];
        return classify(Character.toCodePoint(c, s.charAt(i + 1)));
    }

    private static int width(String s, int i) {
        return Character.isHighSurrogate(s.charAt(i)) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1)) ? 2 : 1;
    }

    /** End of the run of characters of class {@code mask} starting at {@code i}. */
    private static int run(String s, int i, int n, int mask) {
        while (i < n && (cls(s, i) & mask) != 0) i += width(s, i);
        return i;
    }

    /** End of the run of characters not in {@code WS|L|N} starting at {@code i}. */
    private static int otherRun(String s, int i, int n) {
        while (i < n && cls(s, i) == 0) i += width(s, i);
        return i;
    }

    private static boolean isCrLf(char c) {
        return c == '\r' || c == '\n';
    }

    /** Contraction after an apostrophe at {@code i}; case-insensitive (Unicode: ſ folds to s) or not. */
    private static int contraction(String s, int i, int n, boolean ignoreCase) {
        if (s.charAt(i) != '\'' || i + 1 >= n) return -1;
        char a = s.charAt(i + 1);
        char b = i + 2 < n ? s.charAt(i + 2) : 0;
        if (ignoreCase) {
            if (a == 's' || a == 'S' || a == 'ſ') return i + 2;
            if (a == 't' || a == 'T') return i + 2;
            if ((a == 'r' || a == 'R') && (b == 'e' || b == 'E')) return i + 3;
            if ((a == 'v' || a == 'V') && (b == 'e' || b == 'E')) return i + 3;
            if (a == 'm' || a == 'M') return i + 2;
            if ((a == 'l' || a == 'L') && (b == 'l' || b == 'L')) return i + 3;
            if (a == 'd' || a == 'D') return i + 2;
        } else {
            if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
            if ((a == 'r' || a == 'v') && b == 'e') return i + 3;
            if (a == 'l' && b == 'l') return i + 3;
        }
        return -1;
    }

    /** {@code \s+(?!\S)|\s+} at a whitespace character {@code i}. */
    private static int whitespace(String s, int i, int n) {
        int j = run(s, i, n, WS);
        if (j == n) return j;          // \s+ to the end: (?!\S) holds
        if (j - 1 > i) return j - 1;   // back off one so the next character is whitespace
        return j;                      // a single space before non-space: plain \s+
    }

    private int matchLlama(String s, int i, int n) {
        int e = contraction(s, i, n, true);
        if (e >= 0) return e;
        int c = cls(s, i);
        char ch = s.charAt(i);
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if ((c & (L | N)) == 0 && !isCrLf(ch)) {
            int w = width(s, i);
            if (i + w < n && cls(s, i + w) == L) return run(s, i + w, n, L);
        }
        if (c == L) return run(s, i, n, L);
        // \p{N}{1,k}
        if (c == N) {
            int j = i;
            for (int k = 0; k < maxDigits && j < n && cls(s, j) == N; k++) j += width(s, j);
            return j;
        }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        int start = ch == ' ' && i + 1 < n && cls(s, i + 1) == 0 ? i + 1 : (c == 0 ? i : -1);
        if (start >= 0) {
            int j = otherRun(s, start, n);
            while (j < n && isCrLf(s.charAt(j))) j++;
            return j;
        }
        // here the character is whitespace
        // \s*[\r\n]+ : up to the last CR/LF within the whitespace run
        int j = run(s, i, n, WS);
        for (int k = j - 1; k >= i; k--) if (isCrLf(s.charAt(k))) return k + 1;
        return whitespace(s, i, n);
    }

    private int matchGpt2(String s, int i, int n) {
        int e = contraction(s, i, n, false);
        if (e >= 0) return e;
        int c = cls(s, i);
        int start = i, sc = c;
        if (s.charAt(i) == ' ' && i + 1 < n) {
            int next = cls(s, i + 1);
            if (next != WS) { start = i + 1; sc = next; } // " ?X+" with X the class of the next character
        }
        if (sc == L) return run(s, start, n, L);
        if (sc == N) return run(s, start, n, N);
        if (sc == 0) return otherRun(s, start, n);
        return whitespace(s, i, n);
    }
}
