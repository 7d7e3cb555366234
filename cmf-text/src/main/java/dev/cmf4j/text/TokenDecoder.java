package dev.cmf4j.text;

import java.util.ArrayList;
import java.util.List;

/**
 * Decoders of tokenizer.json: each turns a list of token strings into another list (the reference's
 * {@code decode_chain}); the decoded text is the concatenation of the final list.
 */
sealed interface TokenDecoder {
    List<String> decodeChain(List<String> tokens);

    /** Byte-level: alphabet characters back to bytes, then UTF-8 (invalid bytes become U+FFFD). */
    record ByteLevel() implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            byte[] buf = new byte[64];
            int n = 0;
            for (String t : tokens) {
                boolean all = true;
                for (int i = 0; i < t.length() && all; i++) all = ByteLevelAlphabet.byteOf(t.charAt(i)) >= 0;
                byte[] raw = all ? null : Utf8.encode(t);
                int len = all ? t.length() : raw.length;
                if (n + len > buf.length) buf = java.util.Arrays.copyOf(buf, Math.max(buf.length * 2, n + len));
                if (all) for (int i = 0; i < t.length(); i++) buf[n++] = (byte) ByteLevelAlphabet.byteOf(t.charAt(i));
                else { System.arraycopy(raw, 0, buf, n, len); n += len; }
            }
            return List.of(Utf8.decodeLossy(buf, n));
        }
    }

    /** Replacement characters back to spaces; the first token's leading one is dropped unless the scheme is "never". */
    record Metaspace(int replacement, PreTokenizer.PrependScheme prependScheme) implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            for (int i = 0; i < tokens.size(); i++) {
                String t = tokens.get(i);
                StringBuilder sb = new StringBuilder(t.length());
                for (int k = 0; k < t.length(); ) {
                    int c = t.codePointAt(k);
                    k += Character.charCount(c);
                    if (c == replacement) {
                        if (!(i == 0 && prependScheme != PreTokenizer.PrependScheme.NEVER)) sb.append(' ');
                    } else {
                        sb.appendCodePoint(c);
                    }
                }
                out.add(sb.toString());
            }
            return out;
        }
    }

    /** Runs of {@code <0xNN>} tokens become their UTF-8 text, or one U+FFFD per byte when invalid. */
    record ByteFallback() implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            byte[] run = new byte[16];
            int n = 0;
            for (String t : tokens) {
                int b = byteValue(t);
                if (b >= 0) {
                    if (n == run.length) run = java.util.Arrays.copyOf(run, n * 2);
                    run[n++] = (byte) b;
                    continue;
                }
                if (n > 0) { flush(run, n, out); n = 0; }
                out.add(t);
            }
            if (n > 0) flush(run, n, out);
            return out;
        }

        private static void flush(byte[] run, int n, List<String> out) {
            String s = Utf8.decodeStrict(run, n);
            if (s != null) out.add(s);
            else for (int i = 0; i < n; i++) out.add("\uFFFD");
        }

        /** The byte a {@code <0xNN>} token stands for, or -1 (Rust's {@code u8::from_str_radix} also takes a '+'). */
        static int byteValue(String t) {
            if (t.length() != 6 || !t.startsWith("<0x") || t.charAt(5) != '>') return -1;
            char a = t.charAt(3), b = t.charAt(4);
            int hb = Character.digit(b, 16);
            if (hb < 0 || b > 0x7F) return -1;
            if (a == '+') return hb;
            int ha = Character.digit(a, 16);
            if (ha < 0 || a > 0x7F) return -1;
            return ha * 16 + hb;
        }
    }

    /** Joins everything into one string. */
    record Fuse() implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            return List.of(String.join("", tokens));
        }
    }

    /** Removes up to {@code start} leading and {@code stop} trailing {@code content} characters of each token. */
    record Strip(int content, int start, int stop) implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            for (String t : tokens) {
                int[] cps = t.codePoints().toArray();
                int a = 0;
                for (int i = 0; i < Math.min(start, cps.length); i++) {
                    if (cps[i] == content) a = i + 1; else break;
                }
                int b = cps.length;
                for (int i = 0; i < stop && i < cps.length; i++) {
                    int idx = cps.length - i - 1;
                    if (cps[idx] == content) b = idx; else break;
                }
                out.add(a >= b ? "" : new String(cps, a, b - a));
            }
            return out;
        }
    }

    /** Replaces every match of a literal or regex in each token. */
    record Replace(SplitPattern pattern, String content) implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            Matches m = new Matches();
            for (String t : tokens) {
                pattern.find(t, m);
                StringBuilder sb = new StringBuilder(t.length());
                for (int i = 0; i < m.size(); i++) {
                    if (m.isMatch(i)) sb.append(content);
                    else sb.append(t, m.start(i), m.end(i));
                }
                out.add(sb.toString());
            }
            return out;
        }
    }

    /** Classic BPE: the end-of-word suffix becomes a space (nothing on the last token). */
    record Bpe(String suffix) implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            for (int i = 0; i < tokens.size(); i++) {
                out.add(tokens.get(i).replace(suffix, i == tokens.size() - 1 ? "" : " "));
            }
            return out;
        }
    }

    /** WordPiece: continuation prefix removed, a space before other tokens, optional cleanup. */
    record WordPiece(String prefix, boolean cleanup) implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            for (int i = 0; i < tokens.size(); i++) {
                String t = tokens.get(i);
                if (i != 0) t = t.startsWith(prefix) ? t.substring(prefix.length()) : " " + t;
                out.add(cleanup ? cleanupText(t) : t);
            }
            return out;
        }

        static String cleanupText(String s) {
            return s.replace(" .", ".").replace(" ?", "?").replace(" !", "!").replace(" ,", ",")
                    .replace(" ' ", "'").replace(" n't", "n't").replace(" 'm", "'m").replace(" do not", " don't")
                    .replace(" 's", "'s").replace(" 've", "'ve").replace(" 're", "'re");
        }
    }

    /** CTC: collapse repeats, drop padding, optional cleanup with the word delimiter as a space. */
    record Ctc(String padToken, String wordDelimiterToken, boolean cleanup) implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            List<String> out = new ArrayList<>();
            String prev = null;
            for (String t : tokens) {
                if (t.equals(prev)) continue;
                prev = t;
                String r = padToken.isEmpty() ? t : t.replace(padToken, "");
                if (cleanup) r = WordPiece.cleanupText(r).replace(wordDelimiterToken, " ");
                if (!r.isEmpty()) out.add(r);
            }
            return out;
        }
    }

    record Sequence(List<TokenDecoder> decoders) implements TokenDecoder {
        @Override public List<String> decodeChain(List<String> tokens) {
            for (TokenDecoder d : decoders) tokens = d.decodeChain(tokens);
            return tokens;
        }
    }
}
