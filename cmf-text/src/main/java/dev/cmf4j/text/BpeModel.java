package dev.cmf4j.text;

import java.util.Arrays;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Byte-pair encoding over one pre-tokenized word, as the reference implements it: the word starts as
 * one symbol per character (or per byte via {@code <0xNN>} tokens when the character is not in the
 * vocabulary and byte fallback is on, else the unknown token), then the adjacent pair with the lowest
 * merge rank (leftmost on ties) is merged until no pair merges. The pairs wait in a binary min-heap
 * keyed by {@code rank << 32 | position}; stale entries are skipped when popped, exactly as the
 * reference's queue does, so results match it even where two pairs merge into the same token.
 *
 * <p>Thread-safe: the model is immutable except for a bounded per-word cache.
 */
final class BpeModel {
    /** Words of this many UTF-16 units or more are not cached (the reference's limit is 256 bytes). */
    private static final int CACHE_MAX_WORD = 256;
    private static final int CACHE_CAPACITY = 10_000;
    /** Ids index an array; real vocabularies stay far below this (262k for Gemma 3). */
    static final int MAX_ID = 1 << 24;

    private final StringIntMap vocab;
    private final String[] idToToken;
    private final MergeTable merges;
    private final String unkToken;
    private final String prefix;
    private final String suffix;
    private final boolean fuseUnk;
    private final boolean byteFallback;
    private final boolean ignoreMerges;
    /** Token id of each single BMP character (-1 when absent); only used when no prefix/suffix decorates symbols. */
    private final int[] charIds;
    /** Token id of {@code <0xNN>} for each byte, or -1. */
    private final int[] byteIds;
    private final ConcurrentHashMap<String, int[]> cache = new ConcurrentHashMap<>();

    BpeModel(StringIntMap vocab, MergeTable merges, String unkToken, String continuingSubwordPrefix,
             String endOfWordSuffix, boolean fuseUnk, boolean byteFallback, boolean ignoreMerges) {
        this.vocab = vocab;
        this.merges = merges;
        this.unkToken = unkToken;
        this.prefix = continuingSubwordPrefix;
        this.suffix = endOfWordSuffix;
        this.fuseUnk = fuseUnk;
        this.byteFallback = byteFallback;
        this.ignoreMerges = ignoreMerges;
        int[] maxId = {-1};
        vocab.forEach((k, v) -> maxId[0] = Math.max(maxId[0], v));
        if (maxId[0] >= MAX_ID) {
            throw new TokenizerException("$.model.vocab", "token id " + maxId[0] + " is too large (ids must stay below " + MAX_ID + ")");
        }
        this.idToToken = new String[maxId[0] + 1];
        this.charIds = new int[0x10000];
        Arrays.fill(charIds, -1);
        vocab.forEach((k, v) -> {
            if (idToToken[v] == null || idToToken[v].compareTo(k) > 0) idToToken[v] = k; // deterministic on shared ids
            if (k.length() == 1) charIds[k.charAt(0)] = v;
        });
        this.byteIds = new int[256];
        for (int b = 0; b < 256; b++) byteIds[b] = vocab.get(String.format("<0x%02X>", b));
    }

    /** Number of entries in the vocabulary (the reference's {@code get_vocab_size}). */
    int vocabSize() {
        return vocab.size();
    }

    /** The largest token id in the vocabulary (ids may have gaps). */
    int maxId() {
        return idToToken.length - 1;
    }

    int tokenToId(String token) {
        return vocab.get(token);
    }

    String idToToken(int id) {
        return id >= 0 && id < idToToken.length ? idToToken[id] : null;
    }

    /** Receives the tokens of one word: id and the word's UTF-16 span it covers. */
    interface Sink {
        void token(int id, int start, int end);
    }

    /** Tokenizes {@code word}, reporting each token to {@code sink} in order. */
    void tokenize(String word, Sink sink) {
        int n = word.length();
        if (n == 0) return;
        if (ignoreMerges) {
            int id = vocab.get(word);
            if (id >= 0) { sink.token(id, 0, n); return; }
        }
        int[] cached = n < CACHE_MAX_WORD ? cache.get(word) : null;
        if (cached == null) {
            cached = mergeWord(word);
            if (n < CACHE_MAX_WORD && cache.size() < CACHE_CAPACITY) cache.put(word, cached);
        }
        int k = cached.length / 3;
        for (int i = 0; i < k; i++) sink.token(cached[i], cached[k + i], cached[2 * k + i]);
    }

    /** The merged word as {ids..., starts..., ends...}. */
    private int[] mergeWord(String w) {
        int n = w.length();
        Symbols sym = new Symbols(n + 4);
        int unkId = -1, unkStart = 0, unkEnd = 0; // a pending unknown token
        boolean decorated = prefix != null || suffix != null;
        byte[] utf8 = new byte[4];
        for (int i = 0; i < n; ) {
            int c = w.codePointAt(i);
            int cw = Character.charCount(c);
            int end = i + cw;
            boolean first = i == 0, last = end == n;
            String s = null;
            int id;
            if (!decorated && cw == 1) {
                id = charIds[c];
            } else {
                s = w.substring(i, end);
                if (!first && prefix != null) s = prefix + s;
                if (last && suffix != null) s = s + suffix;
                id = vocab.get(s);
            }
            if (id >= 0) {
                if (unkId >= 0) { sym.add(unkId, unkStart, unkEnd); unkId = -1; }
                sym.add(id, i, end);
            } else {
                boolean done = false;
                if (byteFallback) {
                    byte[] bytes = s == null ? utf8Of(c, utf8) : Utf8.encode(s);
                    int len = s == null ? TextNormalizer.encodeUtf8(c, utf8) : bytes.length;
                    boolean all = true;
                    for (int b = 0; b < len && all; b++) all = byteIds[bytes[b] & 0xFF] >= 0;
                    if (all) {
                        for (int b = 0; b < len; b++) sym.add(byteIds[bytes[b] & 0xFF], i, end);
                        done = true;
                    }
                }
                if (!done && unkToken != null) {
                    int uid = vocab.get(unkToken);
                    if (uid < 0) throw new TokenizerException("$.model.unk_token", "unk_token \"" + unkToken + "\" is not in the vocabulary");
                    if (unkId >= 0 && fuseUnk) {
                        unkEnd = end;
                    } else {
                        if (unkId >= 0) sym.add(unkId, unkStart, unkEnd);
                        unkId = uid;
                        unkStart = i;
                        unkEnd = end;
                    }
                }
            }
            i = end;
        }
        if (unkId >= 0) sym.add(unkId, unkStart, unkEnd);
        mergeAll(sym);
        int k = 0;
        for (int i = 0; i < sym.n; i++) if (sym.alive[i]) k++;
        int[] out = new int[3 * k];
        int j = 0;
        for (int i = 0; i < sym.n; i++) {
            if (!sym.alive[i]) continue;
            out[j] = sym.id[i];
            out[k + j] = sym.start[i];
            out[2 * k + j] = sym.end[i];
            j++;
        }
        return out;
    }

    private static byte[] utf8Of(int c, byte[] buf) {
        TextNormalizer.encodeUtf8(c, buf);
        return buf;
    }

    /** The reference's merge loop (word.rs {@code merge_all}) without dropout. */
    private void mergeAll(Symbols s) {
        Heap heap = new Heap(s.n + 4);
        for (int i = 0; i + 1 < s.n; i++) {
            long m = merges.get(s.id[i], s.id[i + 1]);
            if (m >= 0) heap.push((m >>> 32), i, (int) m);
        }
        while (heap.size > 0) {
            long key = heap.topKey();
            int newId = heap.topValue();
            heap.pop();
            int pos = (int) key;
            if (!s.alive[pos]) continue;
            int next = s.next[pos];
            if (next < 0) continue;
            long cur = merges.get(s.id[pos], s.id[next]);
            if (cur < 0 || (int) cur != newId) continue; // expired entry
            // merge `next` into `pos`
            s.id[pos] = newId;
            s.end[pos] = s.end[next];
            s.next[pos] = s.next[next];
            s.alive[next] = false;
            if (s.next[next] >= 0) s.prev[s.next[next]] = pos;
            int prev = s.prev[pos];
            if (prev >= 0) {
                long m = merges.get(s.id[prev], s.id[pos]);
                if (m >= 0) heap.push(m >>> 32, prev, (int) m);
            }
            int nn = s.next[pos];
            if (nn >= 0) {
                long m = merges.get(s.id[pos], s.id[nn]);
                if (m >= 0) heap.push(m >>> 32, pos, (int) m);
            }
        }
    }

    /** The word's symbols as a doubly linked list over parallel arrays. */
    private static final class Symbols {
        int[] id, start, end, prev, next;
        boolean[] alive;
        int n;

        Symbols(int cap) {
            id = new int[cap]; start = new int[cap]; end = new int[cap]; prev = new int[cap]; next = new int[cap];
            alive = new boolean[cap];
        }

        void add(int tokenId, int s, int e) {
            if (n == id.length) {
                int c = n * 2;
                id = Arrays.copyOf(id, c); start = Arrays.copyOf(start, c); end = Arrays.copyOf(end, c);
                prev = Arrays.copyOf(prev, c); next = Arrays.copyOf(next, c); alive = Arrays.copyOf(alive, c);
            }
            id[n] = tokenId;
            start[n] = s;
            end[n] = e;
            prev[n] = n - 1;
            next[n] = -1;
            if (n > 0) next[n - 1] = n;
            alive[n] = true;
            n++;
        }
    }

    /** Binary min-heap of (rank << 32 | position) keys with the merged token id as payload. */
    private static final class Heap {
        long[] keys;
        int[] values;
        int size;

        Heap(int cap) {
            keys = new long[cap];
            values = new int[cap];
        }

        void push(long rank, int pos, int value) {
            if (size == keys.length) {
                keys = Arrays.copyOf(keys, size * 2);
                values = Arrays.copyOf(values, size * 2);
            }
            long k = (rank << 32) | pos;
            int i = size++;
            while (i > 0) {
                int p = (i - 1) >>> 1;
                if (keys[p] <= k) break;
                keys[i] = keys[p];
                values[i] = values[p];
                i = p;
            }
            keys[i] = k;
            values[i] = value;
        }

        long topKey() {
            return keys[0];
        }

        int topValue() {
            return values[0];
        }

        void pop() {
            size--;
            if (size == 0) return;
            long k = keys[size];
            int v = values[size];
            int i = 0;
            while (true) {
                int l = 2 * i + 1;
                if (l >= size) break;
                int r = l + 1;
                int c = r < size && keys[r] < keys[l] ? r : l;
                if (keys[c] >= k) break;
                keys[i] = keys[c];
                values[i] = values[c];
                i = c;
            }
            keys[i] = k;
            values[i] = v;
        }
    }
}
