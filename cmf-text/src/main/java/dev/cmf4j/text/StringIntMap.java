package dev.cmf4j.text;

import java.util.Arrays;

/**
 * String to non-negative int for vocabularies of hundreds of thousands of tokens. Open addressing
 * with linear probing; each slot holds the key's hash, its value and where its characters sit in one
 * shared {@code char[]} arena, so a lookup costs about two cache misses (the slot, then the
 * characters) instead of chasing a String object and its array. Keys can be looked up as ranges of
 * other strings, or as the concatenation of two ranges, without building a String: resolving half
 * a million BPE merges at load time takes three lookups each.
 */
final class StringIntMap {
    /** Per slot: {@code [hash << 32 | value, offset << 32 | (length + 1)]}; a zero second word is an empty slot. */
    private long[] slots;
    private int[] slotEntry;
    private char[] arena = new char[1 << 12];
    private int arenaSize;
    /** Per entry in insertion order: where its key sits in the arena ({@code offset << 32 | length}), its value. */
    private long[] entries;
    private int[] values;
    private int size;
    private int mask;

    StringIntMap(int expected) {
        int cap = Integer.highestOneBit(Math.max(4, expected * 2 - 1)) << 1;
        slots = new long[cap * 2];
        slotEntry = new int[cap];
        mask = cap - 1;
        entries = new long[Math.max(4, expected)];
        values = new int[entries.length];
    }

    int size() {
        return size;
    }

    private static int mix(int h) {
        h *= 0x9E3779B9;
        return h ^ (h >>> 16);
    }

    /** {@link String#hashCode()} of {@code s[from..to)}. */
    static int hash(CharSequence s, int from, int to) {
        int h = 0;
        for (int j = from; j < to; j++) h = 31 * h + s.charAt(j);
        return h;
    }

    /** The value for {@code key}, or -1. */
    int get(String key) {
        return get(key, 0, key.length(), key.hashCode());
    }

    /** The value for the text {@code s[from..to)} whose String hash is {@code h}, or -1. */
    int get(CharSequence s, int from, int to, int h) {
        return getConcat(s, from, to, "", 0, 0, h);
    }

    /** The value for the concatenation {@code a[af..at) + b[bf..bt)} whose String hash is {@code h}, or -1. */
    int getConcat(CharSequence a, int af, int at, CharSequence b, int bf, int bt, int h) {
        int la = at - af, lb = bt - bf;
        for (int i = mix(h) & mask; ; i = (i + 1) & mask) {
            long where = slots[2 * i + 1];
            if (where == 0) return -1;
            long hv = slots[2 * i];
            if ((int) (hv >>> 32) != h || (int) where - 1 != la + lb) continue;
            int off = (int) (where >>> 32);
            if (arenaEquals(off, a, af, la) && arenaEquals(off + la, b, bf, lb)) return (int) hv;
        }
    }

    private boolean arenaEquals(int off, CharSequence s, int from, int len) {
        char[] ar = arena;
        for (int j = 0; j < len; j++) if (ar[off + j] != s.charAt(from + j)) return false;
        return true;
    }

    /** Sets {@code key} to {@code value} (a later put of the same key wins, like a JSON object read into a map). */
    void put(String key, int value) {
        if (value < 0) throw new IllegalArgumentException("negative value");
        int h = key.hashCode();
        int len = key.length();
        int i = mix(h) & mask;
        for (long where; (where = slots[2 * i + 1]) != 0; i = (i + 1) & mask) {
            if ((int) (slots[2 * i] >>> 32) == h && (int) where - 1 == len && arenaEquals((int) (where >>> 32), key, 0, len)) {
                slots[2 * i] = ((long) h << 32) | value;
                values[slotEntry[i]] = value;
                return;
            }
        }
        if (arenaSize + len > arena.length) arena = Arrays.copyOf(arena, Math.max(arena.length * 2, arenaSize + len));
        key.getChars(0, len, arena, arenaSize);
        if (size == entries.length) {
            entries = Arrays.copyOf(entries, size * 2);
            values = Arrays.copyOf(values, size * 2);
        }
        entries[size] = ((long) arenaSize << 32) | len;   // the key's characters live only in the arena
        values[size] = value;
        slots[2 * i] = ((long) h << 32) | value;
        slots[2 * i + 1] = ((long) arenaSize << 32) | (len + 1);
        slotEntry[i] = size;
        arenaSize += len;
        size++;
        if (size * 2 > mask + 1) rehash();
    }

    private void rehash() {
        long[] old = slots;
        int[] oldEntry = slotEntry;
        int cap = (mask + 1) * 2;
        slots = new long[cap * 2];
        slotEntry = new int[cap];
        mask = cap - 1;
        for (int s = 0; s < old.length / 2; s++) {
            if (old[2 * s + 1] == 0) continue;
            int h = (int) (old[2 * s] >>> 32);
            int i = mix(h) & mask;
            while (slots[2 * i + 1] != 0) i = (i + 1) & mask;
            slots[2 * i] = old[2 * s];
            slots[2 * i + 1] = old[2 * s + 1];
            slotEntry[i] = oldEntry[s];
        }
    }

    /** Calls {@code f} for every entry, in insertion order (each key a new String made from the arena). */
    void forEach(java.util.function.ObjIntConsumer<String> f) {
        for (int e = 0; e < size; e++) f.accept(new String(arena, (int) (entries[e] >>> 32), (int) entries[e]), values[e]);
    }

    @Override public String toString() {
        return "StringIntMap[size=" + size + ", capacity=" + (mask + 1) + "]";
    }
}
