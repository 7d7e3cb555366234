package dev.cmf4j.text;

/**
 * BPE merges: (left id, right id) -> (rank, merged id), open addressing over one long key
 * {@code left << 32 | right} and one packed long value {@code rank << 32 | mergedId}. Lookups in the
 * merge loop allocate nothing.
 */
final class MergeTable {
    private static final long EMPTY = -1L;
    private long[] keys;
    private long[] values;
    private int size;
    private int mask;

    MergeTable(int expected) {
        int cap = Integer.highestOneBit(Math.max(4, expected * 2 - 1)) << 1;
        keys = new long[cap];
        java.util.Arrays.fill(keys, EMPTY);
        values = new long[cap];
        mask = cap - 1;
    }

    int size() {
        return size;
    }

    static long key(int left, int right) {
        return ((long) left << 32) | (right & 0xFFFFFFFFL);
    }

    private static int slot(long k) {
        k *= 0x9E3779B97F4A7C15L;
        return (int) (k ^ (k >>> 29));
    }

    /** The packed {@code rank << 32 | mergedId} for the pair, or -1 when the pair does not merge. */
    long get(int left, int right) {
        long k = key(left, right);
        int i = slot(k) & mask;
        for (long c; (c = keys[i]) != EMPTY; i = (i + 1) & mask) {
            if (c == k) return values[i];
        }
        return -1L;
    }

    /** Sets the pair; a later merge of the same pair replaces the earlier one (as the reference's map collect does). */
    void put(int left, int right, int rank, int mergedId) {
        if ((size + 1) * 2 > keys.length) grow();
        long k = key(left, right);
        long v = ((long) rank << 32) | (mergedId & 0xFFFFFFFFL);
        int i = slot(k) & mask;
        for (long c; (c = keys[i]) != EMPTY; i = (i + 1) & mask) {
            if (c == k) { values[i] = v; return; }
        }
        keys[i] = k;
        values[i] = v;
        size++;
    }

    private void grow() {
        long[] ok = keys, ov = values;
        keys = new long[ok.length * 2];
        java.util.Arrays.fill(keys, EMPTY);
        values = new long[ok.length * 2];
        mask = keys.length - 1;
        size = 0;
        for (int i = 0; i < ok.length; i++) {
            if (ok[i] != EMPTY) put((int) (ok[i] >>> 32), (int) ok[i], (int) (ov[i] >>> 32), (int) ov[i]);
        }
    }
}
