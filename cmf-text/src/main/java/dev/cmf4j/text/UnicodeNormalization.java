package dev.cmf4j.text;

import java.text.Normalizer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * NFC, NFD, NFKC and NFKD of a {@link NormalizedText}, keeping alignments the way the reference does.
 *
 * <p>The text itself comes from the JDK's {@link Normalizer}. The reference also records, for each
 * output character, whether it replaced an input character, was inserted, or absorbed the following
 * ones (a composed "é" from "e" + U+0301 points at the "e" only). To reproduce that, each run of text
 * that the JDK says is not already normalized is re-done step by step as the reference's algorithm
 * does it: per-character decomposition, canonical reordering, then canonical composition, carrying
 * the change markers. Combining classes and compositions are read off the JDK normalizer itself
 * (by how it orders and composes character pairs), so no Unicode table is duplicated here.
 * Already-normalized text, the common case, takes one {@code isNormalized} check.
 */
final class UnicodeNormalization {
    private UnicodeNormalization() {}

    enum Form {
        NFC(Normalizer.Form.NFC, true, false), NFD(Normalizer.Form.NFD, false, false),
        NFKC(Normalizer.Form.NFKC, true, true), NFKD(Normalizer.Form.NFKD, false, true);

        final Normalizer.Form jdk;
        final boolean compose;
        final boolean compat;

        Form(Normalizer.Form jdk, boolean compose, boolean compat) {
            this.jdk = jdk;
            this.compose = compose;
            this.compat = compat;
        }
    }

    static NormalizedText apply(NormalizedText t, Form form) {
        String s = t.text;
        if (Normalizer.isNormalized(s, form.jdk)) return t;
        IntList cps = new IntList(s.length() + 8), changes = new IntList(s.length() + 8);
        int n = s.length();
        int i = 0;
        while (i < n) {
            // A chunk: one character, then every non-ASCII character after it. ASCII characters are
            // starters that never compose with what precedes them, so chunks normalize independently.
            int j = i + Character.charCount(s.codePointAt(i));
            while (j < n && s.charAt(j) >= 0x80) j++;
            String chunk = s.substring(i, j);
            if (s.charAt(i) < 0x80 && j == i + 1 || Normalizer.isNormalized(chunk, form.jdk)) {
                for (int k = i; k < j; ) {
                    int c = s.codePointAt(k);
                    cps.add(c);
                    changes.add(0);
                    k += Character.charCount(c);
                }
            } else {
                normalizeChunk(chunk, form, cps, changes);
            }
            i = j;
        }
        return t.transform(cps.a, changes.a, cps.n, 0);
    }

    /** The reference's decompose-reorder-(re)compose over one chunk, appending (code point, change) pairs. */
    private static void normalizeChunk(String chunk, Form form, IntList outCps, IntList outChanges) {
        // 1. Decompose each character; the first code point of a decomposition replaces the character
        //    (change 0), the rest are inserted (+1).
        List<int[]> seq = new ArrayList<>(); // {cp, change}
        for (int k = 0; k < chunk.length(); ) {
            int c = chunk.codePointAt(k);
            k += Character.charCount(c);
            int[] d = decompose(c, form.compat);
            for (int m = 0; m < d.length; m++) seq.add(new int[] {d[m], m == 0 ? 0 : 1});
        }
        // 2. Canonical ordering: stable sort of each run of non-starters by combining class.
        for (int a = 1; a < seq.size(); a++) {
            int[] x = seq.get(a);
            if (isStarter(x[0])) continue;
            int b = a;
            while (b > 0 && !isStarter(seq.get(b - 1)[0]) && cccCompare(seq.get(b - 1)[0], x[0]) > 0) {
                seq.set(b, seq.get(b - 1));
                b--;
            }
            seq.set(b, x);
        }
        if (!form.compose) {
            for (int[] e : seq) { outCps.add(e[0]); outChanges.add(e[1]); }
            return;
        }
        // 3. Canonical composition, as the reference's Recompositions iterator does it.
        int[] composee = null;
        int lastCcc = -1; // -1: none
        int lastCp = 0;
        List<int[]> buffer = new ArrayList<>();
        for (int[] e : seq) {
            int ch = e[0], change = e[1];
            boolean starter = isStarter(ch);
            if (composee == null) {
                if (!starter) { emit(e, outCps, outChanges); continue; }
                composee = e.clone();
                continue;
            }
            if (lastCcc < 0) {
                int r = compose(composee[0], ch);
                if (r >= 0) { composee = new int[] {r, composee[1] + change - 1}; continue; }
                if (starter) { emit(composee, outCps, outChanges); composee = e.clone(); continue; }
                buffer.add(e);
                lastCcc = 1;
                lastCp = ch;
            } else {
                boolean blocked = starter || cccCompare(lastCp, ch) >= 0;
                if (blocked) {
                    if (starter) {
                        emit(composee, outCps, outChanges);
                        for (int[] b : buffer) emit(b, outCps, outChanges);
                        buffer.clear();
                        composee = e.clone();
                        lastCcc = -1;
                        continue;
                    }
                    buffer.add(e);
                    lastCp = ch;
                    continue;
                }
                int r = compose(composee[0], ch);
                if (r >= 0) { composee = new int[] {r, composee[1] + change - 1}; continue; }
                buffer.add(e);
                lastCp = ch;
            }
        }
        if (composee != null) emit(composee, outCps, outChanges);
        for (int[] b : buffer) emit(b, outCps, outChanges);
    }

    private static void emit(int[] e, IntList cps, IntList changes) {
        cps.add(e[0]);
        changes.add(e[1]);
    }

    // ------------------------------------------------------------ character facts, read off the JDK

    private static final ConcurrentHashMap<Integer, int[]> DECOMP = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<Integer, int[]> DECOMP_COMPAT = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<Integer, Boolean> STARTER = new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<Long, Integer> COMPOSE = new ConcurrentHashMap<>();
    private static final int CACHE_LIMIT = 1 << 16;

    private static int[] decompose(int c, boolean compat) {
        if (c < 0xA0) return new int[] {c};
        ConcurrentHashMap<Integer, int[]> cache = compat ? DECOMP_COMPAT : DECOMP;
        int[] d = cache.get(c);
        if (d == null) {
            d = Normalizer.normalize(Character.toString(c), compat ? Normalizer.Form.NFKD : Normalizer.Form.NFD).codePoints().toArray();
            if (cache.size() < CACHE_LIMIT) cache.put(c, d);
        }
        return d;
    }

    /** Combining class 0. A non-starter moves in front of U+0301 (class 230) or behind U+0334 (class 1). */
    static boolean isStarter(int c) {
        if (c < 0x300) return true;
        Boolean b = STARTER.get(c);
        if (b == null) {
            String x = Character.toString(c);
            boolean nonStarter = Normalizer.normalize("\u0301" + x, Normalizer.Form.NFD).equals(x + "\u0301")
                    || Normalizer.normalize(x + "\u0334", Normalizer.Form.NFD).equals("\u0334" + x);
            b = !nonStarter;
            if (STARTER.size() < CACHE_LIMIT) STARTER.put(c, b);
        }
        return b;
    }

    /** Sign of ccc(a) - ccc(b) for two non-starters, from how NFD orders the pair. */
    private static int cccCompare(int a, int b) {
        if (isStarter(a) || isStarter(b)) return Boolean.compare(!isStarter(a), !isStarter(b));
        String sa = Character.toString(a), sb = Character.toString(b);
        if (Normalizer.normalize(sa + sb, Normalizer.Form.NFD).equals(sb + sa)) return 1;
        if (Normalizer.normalize(sb + sa, Normalizer.Form.NFD).equals(sa + sb)) return -1;
        return 0;
    }

    /** The primary composite of starter {@code a} and {@code b}, or -1. */
    private static int compose(int a, int b) {
        if (b < 0x80) return -1; // no composition has an ASCII second character
        long key = ((long) a << 32) | b;
        Integer r = COMPOSE.get(key);
        if (r == null) {
            String s = Normalizer.normalize(Character.toString(a) + Character.toString(b), Normalizer.Form.NFC);
            r = s.codePointCount(0, s.length()) == 1 ? s.codePointAt(0) : -1;
            if (COMPOSE.size() < CACHE_LIMIT) COMPOSE.put(key, r);
        }
        return r;
    }
}
