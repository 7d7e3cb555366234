package dev.cmf4j.text;

import java.util.List;

/**
 * The normalizers of tokenizer.json ({@code "normalizer": {"type": ...}}), each with the reference's
 * semantics including how normalized characters align to the input.
 */
sealed interface TextNormalizer {
    NormalizedText normalize(NormalizedText t);

    /** NFC, NFD, NFKC or NFKD. */
    record Unicode(UnicodeNormalization.Form form) implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            return UnicodeNormalization.apply(t, form);
        }
    }

    /** Replaces every match of a literal or regex with {@code content}. */
    record Replace(SplitPattern pattern, String content) implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            return replace(t, pattern, content);
        }
    }

    /** Prepends a string to non-empty text. */
    record Prepend(String prepend) implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            return t.isEmpty() ? t : TextNormalizer.prepend(t, prepend);
        }
    }

    record Lowercase() implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            return lowercase(t);
        }
    }

    /** Removes leading and/or trailing White_Space. */
    record Strip(boolean left, boolean right) implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            String s = t.text;
            int a = 0, b = s.length();
            if (left) while (a < b && UnicodeProps.isWhitespace(s.codePointAt(a))) a += Character.charCount(s.codePointAt(a));
            if (right) while (b > a && UnicodeProps.isWhitespace(s.codePointBefore(b))) b -= Character.charCount(s.codePointBefore(b));
            if (a == 0 && b == s.length()) return t;
            NormalizedText.Builder out = new NormalizedText.Builder(b - a);
            out.appendSlice(t, a, b);
            return out.build(t.shift);
        }
    }

    /** Removes combining marks (categories Mn, Mc, Me). */
    record StripAccents() implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            return filter(t, c -> !UnicodeProps.isMark(c));
        }
    }

    /** SentencePiece's NMT normalization: drops control characters, turns odd spaces into ' '. */
    record Nmt() implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            NormalizedText f = filter(t, c -> !((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F)
                    || c == 0x7F || c == 0x8F || c == 0x9F));
            return map(f, c -> switch (c) {
                case 0x09, 0x0A, 0x0C, 0x0D, 0x1680, 0x2028, 0x2029, 0x2581, 0xFEFF, 0xFFFD -> ' ';
                default -> (c >= 0x200B && c <= 0x200F) ? ' ' : c;
            });
        }
    }

    /** BERT's normalizer: clean control characters, space out CJK ideographs, strip accents, lowercase. */
    record Bert(boolean cleanText, boolean handleChineseChars, Boolean stripAccents, boolean lowercase) implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            if (cleanText) {
                t = filter(t, c -> !(c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && UnicodeProps.isOther(c))));
                t = map(t, c -> (c == '\t' || c == '\n' || c == '\r' || UnicodeProps.isWhitespace(c)) ? ' ' : c);
            }
            if (handleChineseChars) {
                NormalizedText.Builder b = new NormalizedText.Builder(t.length() + 8);
                for (int i = 0; i < t.length(); ) {
                    int c = t.text.codePointAt(i);
                    int w = Character.charCount(c);
                    if (isChinese(c)) {
                        b.append(' ', t.startAt(i), t.endAt(i));
                        b.append(c, t.startAt(i), t.endAt(i));
                        b.append(' ', t.startAt(i), t.endAt(i));
                    } else {
                        b.append(c, t.startAt(i), t.endAt(i));
                    }
                    i += w;
                }
                t = b.build(t.shift);
            }
            if (stripAccents != null ? stripAccents : lowercase) {
                t = UnicodeNormalization.apply(t, UnicodeNormalization.Form.NFD);
                t = filter(t, c -> !UnicodeProps.isNonSpacingMark(c));
            }
            if (lowercase) t = TextNormalizer.lowercase(t);
            return t;
        }

        private static boolean isChinese(int c) {
            return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF)
                    || (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF)
                    || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
        }
    }

    /** Rewrites every byte of the UTF-8 text as its GPT-2 alphabet character. */
    record ByteLevel() implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            return byteLevel(t);
        }
    }

    record Sequence(List<TextNormalizer> normalizers) implements TextNormalizer {
        @Override public NormalizedText normalize(NormalizedText t) {
            for (TextNormalizer n : normalizers) t = n.normalize(t);
            return t;
        }
    }

    // ----------------------------------------------------------------- shared operations

    /** Each replacement character aligns with the last character of the match it replaces. */
    static NormalizedText replace(NormalizedText t, SplitPattern pattern, String content) {
        Matches m = new Matches();
        pattern.find(t.text, m);
        boolean any = false;
        for (int i = 0; i < m.size(); i++) if (m.isMatch(i)) { any = true; break; }
        if (!any) return t;
        NormalizedText.Builder b = new NormalizedText.Builder(t.length() + 8);
        for (int i = 0; i < m.size(); i++) {
            int s = m.start(i), e = m.end(i);
            if (!m.isMatch(i)) { b.appendSlice(t, s, e); continue; }
            int as, ae;
            if (e < 1) { as = t.shift; ae = t.shift; } else { as = t.startAt(e - 1); ae = t.endAt(e - 1); }
            for (int k = 0; k < content.length(); ) {
                int c = content.codePointAt(k);
                b.append(c, as, ae);
                k += Character.charCount(c);
            }
        }
        return b.build(t.shift);
    }

    /** Prepended characters align with the first character. */
    static NormalizedText prepend(NormalizedText t, String s) {
        NormalizedText.Builder b = new NormalizedText.Builder(t.length() + s.length());
        for (int k = 0; k < s.length(); ) {
            int c = s.codePointAt(k);
            b.append(c, t.startAt(0), t.endAt(0));
            k += Character.charCount(c);
        }
        b.appendSlice(t, 0, t.length());
        return b.build(t.shift);
    }

    static NormalizedText lowercase(NormalizedText t) {
        NormalizedText.Builder b = new NormalizedText.Builder(t.length() + 4);
        int[] buf = new int[3];
        String s = t.text;
        for (int i = 0; i < s.length(); ) {
            int c = s.codePointAt(i);
            int w = Character.charCount(c);
            int k = UnicodeProps.lowercase(c, buf);
            for (int j = 0; j < k; j++) b.append(buf[j], t.startAt(i), t.endAt(i));
            i += w;
        }
        return b.build(t.shift);
    }

    static NormalizedText filter(NormalizedText t, java.util.function.IntPredicate keep) {
        NormalizedText.Builder b = new NormalizedText.Builder(t.length());
        String s = t.text;
        for (int i = 0; i < s.length(); ) {
            int c = s.codePointAt(i);
            int w = Character.charCount(c);
            if (keep.test(c)) b.appendSlice(t, i, i + w);
            i += w;
        }
        return b.build(t.shift);
    }

    static NormalizedText map(NormalizedText t, java.util.function.IntUnaryOperator f) {
        NormalizedText.Builder b = new NormalizedText.Builder(t.length());
        String s = t.text;
        for (int i = 0; i < s.length(); ) {
            int c = s.codePointAt(i);
            int w = Character.charCount(c);
            b.append(f.applyAsInt(c), t.startAt(i), t.endAt(i));
            i += w;
        }
        return b.build(t.shift);
    }

    /** Every UTF-8 byte becomes one alphabet character aligned with the character it came from. */
    static NormalizedText byteLevel(NormalizedText t) {
        String s = t.text;
        int n = s.length();
        boolean ascii = true, identity = true;
        for (int i = 0; i < n && ascii; i++) {
            char c = s.charAt(i);
            ascii = c < 0x80;
            identity &= c >= '!' && c <= '~';
        }
        if (identity) return t;
        char[] bytes = ByteLevelAlphabet.BYTE_TO_CHAR;
        if (ascii) { // one byte per character: the alignments stay as they are
            char[] out = new char[n];
            for (int i = 0; i < n; i++) out[i] = bytes[s.charAt(i)];
            return t.withText(new String(out));
        }
        char[] out = new char[n * 3 + 4];
        int[] st = new int[out.length], en = new int[out.length];
        int k = 0;
        byte[] tmp = new byte[4];
        for (int i = 0; i < n; ) {
            int c = s.codePointAt(i);
            int w = Character.charCount(c);
            int len = encodeUtf8(c, tmp);
            int as = t.startAt(i), ae = t.endAt(i);
            for (int j = 0; j < len; j++) {
                out[k] = bytes[tmp[j] & 0xFF];
                st[k] = as;
                en[k] = ae;
                k++;
            }
            i += w;
        }
        return new NormalizedText(new String(out, 0, k), java.util.Arrays.copyOf(st, k), java.util.Arrays.copyOf(en, k), t.shift);
    }

    /** UTF-8 of one code point (a lone surrogate encodes as U+FFFD, as Java's encoder does). */
    static int encodeUtf8(int c, byte[] out) {
        if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;
        if (c < 0x80) { out[0] = (byte) c; return 1; }
        if (c < 0x800) { out[0] = (byte) (0xC0 | (c >> 6)); out[1] = (byte) (0x80 | (c & 0x3F)); return 2; }
        if (c < 0x10000) {
            out[0] = (byte) (0xE0 | (c >> 12)); out[1] = (byte) (0x80 | ((c >> 6) & 0x3F)); out[2] = (byte) (0x80 | (c & 0x3F));
            return 3;
        }
        out[0] = (byte) (0xF0 | (c >> 18)); out[1] = (byte) (0x80 | ((c >> 12) & 0x3F));
        out[2] = (byte) (0x80 | ((c >> 6) & 0x3F)); out[3] = (byte) (0x80 | (c & 0x3F));
        return 4;
    }
}
