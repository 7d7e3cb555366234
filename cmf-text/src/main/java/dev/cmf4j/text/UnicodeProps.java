package dev.cmf4j.text;

/**
 * Character predicates with the exact definitions the reference (Rust) implementation uses, which
 * differ from {@link Character}'s similarly named methods: Rust's {@code char::is_whitespace} is the
 * Unicode White_Space property (NBSP included, U+001C..U+001F excluded), {@code is_numeric} is
 * categories Nd|Nl|No, and punctuation is the P* categories plus ASCII punctuation.
 */
final class UnicodeProps {
    private UnicodeProps() {}

    /** Unicode White_Space. */
    static boolean isWhitespace(int c) {
        if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
        if (c < 0x85) return false;
        return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A)
                || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
    }

    /** Rust {@code char::is_numeric}: general category Nd, Nl or No. */
    static boolean isNumeric(int c) {
        if (c < 0x80) return c >= '0' && c <= '9';
        int t = Character.getType(c);
        return t == Character.DECIMAL_DIGIT_NUMBER || t == Character.LETTER_NUMBER || t == Character.OTHER_NUMBER;
    }

    /** {@code is_ascii_punctuation || is_punctuation} (categories Pc Pd Ps Pe Pi Pf Po). */
    static boolean isPunctuation(int c) {
        if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
        int t = Character.getType(c);
        return t == Character.CONNECTOR_PUNCTUATION || t == Character.DASH_PUNCTUATION
                || t == Character.START_PUNCTUATION || t == Character.END_PUNCTUATION
                || t == Character.INITIAL_QUOTE_PUNCTUATION || t == Character.FINAL_QUOTE_PUNCTUATION
                || t == Character.OTHER_PUNCTUATION;
    }

    /** Unicode \w as Rust's regex crate and Oniguruma define it: letters, marks, Nd, Pc (and Join_Control for Rust). */
    static boolean isWord(int c) {
        if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        if (c == 0x200C || c == 0x200D) return true;
        if (Character.isAlphabetic(c)) return true;
        int t = Character.getType(c);
        return t == Character.NON_SPACING_MARK || t == Character.COMBINING_SPACING_MARK || t == Character.ENCLOSING_MARK
                || t == Character.DECIMAL_DIGIT_NUMBER || t == Character.CONNECTOR_PUNCTUATION;
    }

    /** Rust's unicode "Other" category test used by the BERT normalizer: Cc, Cf, Cn, Co, Cs. */
    static boolean isOther(int c) {
        int t = Character.getType(c);
        return t == Character.CONTROL || t == Character.FORMAT || t == Character.UNASSIGNED
                || t == Character.PRIVATE_USE || t == Character.SURROGATE;
    }

    static boolean isNonSpacingMark(int c) {
        return Character.getType(c) == Character.NON_SPACING_MARK;
    }

    static boolean isMark(int c) {
        int t = Character.getType(c);
        return t == Character.NON_SPACING_MARK || t == Character.COMBINING_SPACING_MARK || t == Character.ENCLOSING_MARK;
    }

    /**
     * Appends the full (unconditional, context-free) lowercase mapping of {@code c}, as Rust's
     * {@code char::to_lowercase}: one code point except U+0130, which maps to "i\u0307". Final sigma is
     * not context-sensitive here (Σ always becomes σ), unlike {@link String#toLowerCase()}.
     */
    static int lowercase(int c, int[] out) {
        if (c == 0x130) { out[0] = 'i'; out[1] = 0x307; return 2; }
        out[0] = Character.toLowerCase(c);
        return 1;
    }
}
