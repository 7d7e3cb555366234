package dev.cmf4j.text;

import java.util.Arrays;

/**
 * Incremental decoding for generation: {@link #feed} one id at a time and get back the text that
 * became final with it; {@link #finish} returns whatever was held back. The concatenation of all
 * returned pieces equals {@link Tokenizer#decode} of all ids.
 *
 * <p>Text is held back while it can still change: a trailing incomplete UTF-8 sequence (which
 * decodes to U+FFFD until its last byte arrives, so no piece ever ends inside a character), and a
 * trailing run of {@code <0xNN>} byte tokens under a ByteFallback decoder (which the decoder turns
 * into text or into U+FFFDs only once the run ends). Once everything decoded so far is final, the
 * ids since the previous such point are kept as context for decoders that treat the first token
 * specially (Metaspace, WordPiece), and older ids are forgotten, so each step costs a decode of a
 * few ids. Not thread-safe; one per generation.
 */
public final class StreamingDecoder {
    private final Tokenizer tokenizer;
    private final boolean skipSpecialTokens;
    /** Ids up to the last point where all text was final, kept as decoding context. */
    private int[] context = new int[0];
    private String contextText = "";
    /** Ids since then. */
    private int[] pending = new int[8];
    private int pendingCount;
    /** Characters of decode(context + pending), beyond contextText, already returned. */
    private int emitted;

    StreamingDecoder(Tokenizer tokenizer, boolean skipSpecialTokens) {
        this.tokenizer = tokenizer;
        this.skipSpecialTokens = skipSpecialTokens;
    }

    /** Adds one id; returns the text that became final (possibly empty, never null). */
    public String feed(int id) {
        if (tokenizer.decodesToNothing(id, skipSpecialTokens)) return "";
        if (pendingCount == pending.length) pending = Arrays.copyOf(pending, pendingCount * 2);
        pending[pendingCount++] = id;
        int[] window = window(pendingCount);
        String all = tokenizer.decode(window, skipSpecialTokens);
        if (!all.startsWith(contextText)) return ""; // cannot happen with the supported decoders; hold until finish()
        int finalLength = all.length();
        int run = trailingByteRun();
        if (run > 0) finalLength = Math.min(finalLength, tokenizer.decode(window(pendingCount - run), skipSpecialTokens).length());
        while (finalLength > contextText.length() + emitted && all.charAt(finalLength - 1) == Utf8.REPLACEMENT) finalLength--;
        String out = "";
        int done = contextText.length() + emitted;
        if (finalLength > done) {
            out = all.substring(done, finalLength);
            emitted = finalLength - contextText.length();
        }
        if (finalLength == all.length() && run == 0) commit(all);
        return out;
    }

    /** Returns the text still held back (an incomplete character becomes U+FFFD, as in decode) and resets. */
    public String finish() {
        String all = tokenizer.decode(window(pendingCount), skipSpecialTokens);
        int done = contextText.length() + emitted;
        String rest = all.length() > done && all.startsWith(contextText) ? all.substring(done) : "";
        context = new int[0];
        contextText = "";
        pendingCount = 0;
        emitted = 0;
        return rest;
    }

    /** Everything decoded so far is final: the pending ids become the context. */
    private void commit(String all) {
        int[] ids = Arrays.copyOf(pending, pendingCount);
        String text = tokenizer.decode(ids, skipSpecialTokens);
        if (text.isEmpty()) { // keep the older context too, so the next token is still not "first"
            ids = window(pendingCount);
            text = all;
        }
        context = ids;
        contextText = text;
        pendingCount = 0;
        emitted = 0;
    }

    private int[] window(int pendingPrefix) {
        int[] w = Arrays.copyOf(context, context.length + pendingPrefix);
        System.arraycopy(pending, 0, w, context.length, pendingPrefix);
        return w;
    }

    private int trailingByteRun() {
        int r = 0;
        while (r < pendingCount && tokenizer.isFallbackByte(pending[pendingCount - 1 - r])) r++;
        return r;
    }
}
