package dev.cmf4j.text;

import java.nio.charset.StandardCharsets;

/**
 * UTF-8 helpers with Rust's semantics, which the reference tokenizers use: {@link #decodeLossy}
 * replaces each maximal ill-formed subpart with one U+FFFD exactly like {@code String::from_utf8_lossy}
 * (Unicode's recommended practice), and {@link #decodeStrict} fails like {@code String::from_utf8}.
 */
final class Utf8 {
    private Utf8() {}

    static final char REPLACEMENT = '\uFFFD';

    static byte[] encode(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Length in bytes of the UTF-8 encoding of code point {@code cp}. */
    static int byteLength(int cp) {
        return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    }

    /** Decodes {@code b[0..n)}; each maximal ill-formed subpart becomes one U+FFFD. */
    static String decodeLossy(byte[] b, int n) {
        StringBuilder sb = new StringBuilder(n);
        int i = 0;
        while (i < n) {
            int c = b[i] & 0xFF;
            if (c < 0x80) { sb.append((char) c); i++; continue; }
            int need; int lo = 0x80, hi = 0xBF; int cp;
            if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; }
            else if (c >= 0xE0 && c <= 0xEF) {
                need = 2; cp = c & 0x0F;
                if (c == 0xE0) lo = 0xA0; else if (c == 0xED) hi = 0x9F;
            } else if (c >= 0xF0 && c <= 0xF4) {
                need = 3; cp = c & 0x07;
                if (c == 0xF0) lo = 0x90; else if (c == 0xF4) hi = 0x8F;
            } else { sb.append(REPLACEMENT); i++; continue; }
            int j = i + 1;
            boolean ok = true;
            for (int k = 0; k < need; k++, j++) {
                if (j >= n) { ok = false; break; }
                int d = b[j] & 0xFF;
                int l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
                if (d < l || d > h) { ok = false; break; }
                cp = (cp << 6) | (d & 0x3F);
            }
            if (ok) { sb.appendCodePoint(cp); i = j; }
            else { sb.append(REPLACEMENT); i = j; } // j stops at the first byte that broke the sequence
        }
        return sb.toString();
    }

    /** The decoded string, or null when {@code b[0..n)} is not well-formed UTF-8. */
    static String decodeStrict(byte[] b, int n) {
        String s = decodeLossy(b, n);
        // A lossless decode re-encodes to the same bytes; any U+FFFD that was not in the input breaks that.
        if (s.indexOf(REPLACEMENT) < 0) return s;
        byte[] back = encode(s);
        if (back.length != n) return null;
        for (int i = 0; i < n; i++) if (back[i] != b[i]) return null;
        return s;
    }
}
