package dev.cmf4j.backend.cpu;

import java.util.Arrays;

/**
 * Keys and values of one attention layer for one session.
 *
 * <p>Two parts: the committed store (positions before the chunk being computed) and the pending chunk
 * (the K/V the current forward step produced). Attention reads both; {@link #commit()} moves the chunk
 * into the store once every layer that reads this cache (KV-sharing layers included) is done.
 *
 * <p>A sliding-window layer's store is a ring of exactly {@code window} positions: a query at position p
 * sees keys in (p − window, p], and every such key before the chunk is within the last {@code window}
 * committed ones. A full layer's store grows (doubling) up to the context limit.
 */
public final class KvCache {
    private final int kvDim;
    private final int window;          // 0 = full attention
    private final int maxPositions;
    private float[] k, v;
    private int capacity;              // positions the store holds
    private int length;                // positions committed so far (= next position)
    private float[] pk = new float[0], pv = new float[0];
    private int pendingStart, pendingCount;

    /**
     * @param kvDim        kvHeads·headDim floats per position
     * @param window       sliding window, or 0 for a full layer
     * @param maxPositions context limit (bounds a full layer's growth)
     */
    public KvCache(int kvDim, int window, int maxPositions) {
        this.kvDim = kvDim;
        this.window = window;
        this.maxPositions = maxPositions;
        this.capacity = window > 0 ? window : Math.min(maxPositions, 64);
        this.k = new float[capacity * kvDim];
        this.v = new float[capacity * kvDim];
    }

    public int kvDim() { return kvDim; }

    public int window() { return window; }

    /** Positions committed. */
    public int length() { return length; }

    /** Positions the store can hold now (the window for a sliding layer). */
    public int capacity() { return capacity; }

    /** Floats held by the committed store (K and V), for memory accounting. */
    public long storeFloats() { return (long) k.length + v.length; }

    /** Starts a chunk of {@code count} positions at {@code start} (must equal {@link #length()}). */
    public void beginChunk(int start, int count) {
        if (start != length) throw new IllegalStateException("chunk starts at " + start + " but cache holds " + length);
        pendingStart = start;
        pendingCount = count;
        int need = count * kvDim;
        if (pk.length < need) { pk = new float[need]; pv = new float[need]; }
    }

    /** Pending keys of the current chunk, [count, kvDim], written by the layer that owns the cache. */
    public float[] pendingKeys() { return pk; }

    public float[] pendingValues() { return pv; }

    public int pendingStart() { return pendingStart; }

    public int pendingCount() { return pendingCount; }

    /** Oldest position still readable (committed or pending). */
    public int firstAvailable() { return window > 0 ? Math.max(0, length - window) : 0; }

    /** The array holding the key of position {@code pos}; use with {@link #offset(int)}. */
    public float[] keysOf(int pos) { return pos >= pendingStart ? pk : k; }

    public float[] valuesOf(int pos) { return pos >= pendingStart ? pv : v; }

    /** Offset of position {@code pos} in {@link #keysOf(int)} / {@link #valuesOf(int)}. */
    public int offset(int pos) {
        if (pos >= pendingStart) return (pos - pendingStart) * kvDim;
        if (pos < firstAvailable() || pos >= length)
            throw new IllegalStateException("position " + pos + " is not in the cache [" + firstAvailable() + ", " + length + ")");
        return (window > 0 ? pos % capacity : pos) * kvDim;
    }

    /** Moves the pending chunk into the store. */
    public void commit() {
        int n = pendingCount;
        if (n == 0) return;
        if (window > 0) {
            int from = Math.max(0, n - capacity);
            for (int i = from; i < n; i++) {
                int slot = (pendingStart + i) % capacity;
                System.arraycopy(pk, i * kvDim, k, slot * kvDim, kvDim);
                System.arraycopy(pv, i * kvDim, v, slot * kvDim, kvDim);
            }
        } else {
            ensure(length + n);
            System.arraycopy(pk, 0, k, length * kvDim, n * kvDim);
            System.arraycopy(pv, 0, v, length * kvDim, n * kvDim);
        }
        length += n;
        pendingStart = length;
        pendingCount = 0;
    }

    /** Drops the pending chunk (a failed step) without touching the store. */
    public void abandon() { pendingStart = length; pendingCount = 0; }

    /** Forgets everything (a new conversation). */
    public void clear() { length = 0; pendingStart = 0; pendingCount = 0; }

    private void ensure(int positions) {
        if (positions <= capacity) return;
        if (positions > maxPositions) throw new IllegalStateException("KV cache past the context limit " + maxPositions);
        int c = capacity;
        while (c < positions) c = (int) Math.min(maxPositions, 2L * c);
        k = Arrays.copyOf(k, c * kvDim);
        v = Arrays.copyOf(v, c * kvDim);
        capacity = c;
    }
}
