package dev.cmf4j.text;

/**
 * String to non-negative int, open addressing with linear probing. A vocabulary of 262k entries
 * costs two arrays instead of 262k boxed map nodes, which keeps loading a tokenizer.json fast.
 */
final class StringIntMap {
    private String[] keys;
    private int[] values;
    private int size;
    private int mask;

    StringIntMap(int expected) {
        int cap = Integer.highestOneBit(Math.max(4, expected * 2 - 1)) << 1;
        keys = new String[cap];
        values = new int[cap];
        mask = cap - 1;
    }

    int size() {
        return size;
    }

    private static int mix(int h) {
        h *= 0x9E3779B9;
        return h ^ (h >>> 16);
    }

    /** The value for {@code key}, or -1. */
    int get(String key) {
        int i = mix(key.hashCode()) & mask;
        for (String k; (k = keys[i]) != null; i = (i + 1) & mask) {
            if (k.equals(key)) return values[i];
        }
        return -1;
    }

    /** The value for the text {@code s[from..to)}, or -1; avoids allocating a substring. */
    int get(CharSequence s, int from, int to) {
        int h = 0;
        for (int j = from; j < to; j++) h = 31 * h + s.charAt(j);
        int len = to - from;
        int i = mix(h) & mask;
        outer:
        for (String k; (k = keys[i]) != null; i = (i + 1) & mask) {
            if (k.length() != len) continue;
            for (int j = 0; j < len; j++) if (k.charAt(j) != s.charAt(from + j)) continue outer;
            return values[i];
        }
        return -1;
    }

    /** Sets {@code key} to {@code value} (a later put of the same key wins, like a JSON object read into a map). */
    void put(String key, int value) {
        if (value < 0) throw new IllegalArgumentException("negative value");
        if ((size + 1) * 2 > keys.length) grow();
        int i = mix(key.hashCode()) & mask;
        for (String k; (k = keys[i]) != null; i = (i + 1) & mask) {
            if (k.equals(key)) { values[i] = value; return; }
        }
        keys[i] = key;
        values[i] = value;
        size++;
    }

    private void grow() {
        String[] ok = keys; int[] ov = values;
        keys = new String[ok.length * 2];
        values = new int[ok.length * 2];
        mask = keys.length - 1;
        size = 0;
        for (int i = 0; i < ok.length; i++) if (ok[i] != null) put(ok[i], ov[i]);
    }

    /** Calls {@code f} for every entry. */
    void forEach(java.util.function.ObjIntConsumer<String> f) {
        for (int i = 0; i < keys.length; i++) if (keys[i] != null) f.accept(keys[i], values[i]);
    }

    @Override public String toString() {
        return "StringIntMap[size=" + size + ", capacity=" + keys.length + "]";
    }
}
