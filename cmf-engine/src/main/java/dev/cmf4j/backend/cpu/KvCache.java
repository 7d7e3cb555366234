package dev.cmf4j.backend.cpu;

import dev.cmf4j.backend.KvType;

import java.util.Arrays;

/**
 * Keys and values of one attention layer for one session.
 *
 * <p>Two parts: the committed store (positions before the chunk being computed) and the pending chunk
 * (the K/V the current forward step produced, float32). Attention reads both; {@link #commit()} moves the chunk
 * into the store once every layer that reads this cache (KV-sharing layers included) is done. The store keeps
 * float32, float16, or int8 codes with one scale per head and position ({@link KvType}).
 *
 * <p>A sliding-window layer's store is a ring of exactly {@code window} positions: a query at position p
 * sees keys in (p − window, p], and every such key before the chunk is within the last {@code window}
 * committed ones. A full layer's store grows (doubling) up to the context limit.
 */
public final class KvCache {
    private final int kvDim, headDim, kvHeads;
    private final int window;          // 0 = full attention
    private final int maxPositions;
    private final KvType type;
    private int capacity;              // positions the store holds
    private int length;                // positions committed so far (= next position)
    // the store: one of these pairs, by type; q8 adds a scale per (position, head)
    private float[] k, v;
    private short[] k16, v16;
    private byte[] k8, v8;
    private float[] ks, vs;
    private float[] pk = new float[0], pv = new float[0];
    private int pendingStart, pendingCount;

    /** A float32 cache. */
    public KvCache(int kvDim, int window, int maxPositions) { this(kvDim, kvDim, window, maxPositions, KvType.F32); }

    /**
     * @param kvDim        kvHeads·headDim floats per position
     * @param headDim      one head's width (q8 keeps a scale per head)
     * @param window       sliding window, or 0 for a full layer
     * @param maxPositions context limit (bounds a full layer's growth)
     */
    public KvCache(int kvDim, int headDim, int window, int maxPositions, KvType type) {
        if (headDim < 1 || kvDim % headDim != 0) throw new IllegalArgumentException("kvDim " + kvDim + " is not a multiple of headDim " + headDim);
        this.kvDim = kvDim;
        this.headDim = headDim;
        this.kvHeads = kvDim / headDim;
        this.window = window;
        this.maxPositions = maxPositions;
        this.type = type;
        allocate(window > 0 ? window : Math.min(maxPositions, 64));
    }

    public int kvDim() { return kvDim; }

    public int window() { return window; }

    public KvType type() { return type; }

    /** Positions committed. */
    public int length() { return length; }

    /** Positions the store can hold now (the window for a sliding layer). */
    public int capacity() { return capacity; }

    /** Elements held by the committed store (K and V). */
    public long storeFloats() { return 2L * capacity * kvDim; }

    /** Bytes held by the committed store (K and V, with q8's scales), for memory accounting. */
    public long storeBytes() {
        long b = storeFloats() * type.elementBytes;
        return type == KvType.Q8 ? b + 2L * capacity * kvHeads * Float.BYTES : b;
    }

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

    /** q · key(pos)[kvOff .. kvOff+n) (n within one head for q8). */
    public float keyDot(float[] q, int qo, int pos, int kvOff, int n) {
        if (pos >= pendingStart) return VectorMath.dot(q, qo, pk, (pos - pendingStart) * kvDim + kvOff, n);
        int o = slot(pos) * kvDim + kvOff;
        return switch (type) {
            case F32 -> VectorMath.dot(q, qo, k, o, n);
            case F16 -> dot16(q, qo, k16, o, n);
            case Q8 -> VectorMath.dotBytes(q, qo, k8, o, n) * ks[slot(pos) * kvHeads + kvOff / headDim];
        };
    }

    /** out[oo..oo+n) += a · value(pos)[kvOff ..]. */
    public void addValue(float a, int pos, int kvOff, float[] out, int oo, int n) {
        if (pos >= pendingStart) { VectorMath.axpy(a, pv, (pos - pendingStart) * kvDim + kvOff, out, oo, n); return; }
        int o = slot(pos) * kvDim + kvOff;
        switch (type) {
            case F32 -> VectorMath.axpy(a, v, o, out, oo, n);
            case F16 -> { for (int i = 0; i < n; i++) out[oo + i] += a * Float.float16ToFloat(v16[o + i]); }
            case Q8 -> VectorMath.axpyBytes(a * vs[slot(pos) * kvHeads + kvOff / headDim], v8, o, out, oo, n);
        }
    }

    /**
     * Sets {@code w}'s tile to the keys and values of positions {@code [p0, p0+n)} (n ≤ {@link AttentionKernel#TILE}),
     * head slice {@code [kvOff, kvOff+hd)}: float32 rows in place where the store or the pending chunk holds them
     * contiguously, else gathered as float32 (f16 widened exactly; q8 as its integer codes with the scales beside them,
     * so a dot is Σ q·code × scale as in {@link #keyDot}).
     */
    void tile(int p0, int n, int kvOff, int hd, AttentionKernel.Work w) {
        int end = p0 + n;
        if (p0 < firstAvailable() || end > length + pendingCount)   // pendingStart == length: the chunk follows the store
            throw new IllegalStateException("positions [" + p0 + ", " + end + ") are not in the cache [" + firstAvailable() + ", "
                    + (length + pendingCount) + ")");
        if (p0 >= pendingStart) { w.view(pk, pv, (p0 - pendingStart) * kvDim + kvOff, kvDim); return; }
        int s0 = slot(p0);
        if (type == KvType.F32 && end <= pendingStart && (window <= 0 || s0 + n <= capacity)) {
            w.view(k, v, s0 * kvDim + kvOff, kvDim);
            return;
        }
        float[] kt = w.kt, vt = w.vt, ksc = w.ks, vsc = w.vs;
        int head = kvOff / headDim;
        for (int i = 0; i < n; i++) {
            int pos = p0 + i, d = i * hd;
            if (pos >= pendingStart) {
                int o = (pos - pendingStart) * kvDim + kvOff;
                System.arraycopy(pk, o, kt, d, hd);
                System.arraycopy(pv, o, vt, d, hd);
                ksc[i] = 1f;
                vsc[i] = 1f;
                continue;
            }
            int s = window > 0 ? pos % capacity : pos, o = s * kvDim + kvOff;
            switch (type) {
                case F32 -> { System.arraycopy(k, o, kt, d, hd); System.arraycopy(v, o, vt, d, hd); }
                case F16 -> {
                    for (int c = 0; c < hd; c++) kt[d + c] = Float.float16ToFloat(k16[o + c]);
                    for (int c = 0; c < hd; c++) vt[d + c] = Float.float16ToFloat(v16[o + c]);
                }
                case Q8 -> {
                    for (int c = 0; c < hd; c++) kt[d + c] = k8[o + c];
                    for (int c = 0; c < hd; c++) vt[d + c] = v8[o + c];
                    ksc[i] = ks[s * kvHeads + head];
                    vsc[i] = vs[s * kvHeads + head];
                }
            }
        }
        w.gathered(hd, type == KvType.Q8);
    }

    /** The committed keys and values of positions [from, from+count) as float32, [count, kvDim] each. */
    public void read(int from, int count, float[] keys, float[] values) {
        for (int p = from; p < from + count; p++) {
            int dst = (p - from) * kvDim;
            decode(p, true, keys, dst);
            decode(p, false, values, dst);
        }
    }

    /** Head slice [kvOff, kvOff+n) of position {@code pos}'s key and value (committed or pending) as float32. */
    public void read(int pos, int kvOff, int n, float[] key, int ko, float[] value, int vo) {
        if (pos >= pendingStart) {
            System.arraycopy(pk, (pos - pendingStart) * kvDim + kvOff, key, ko, n);
            System.arraycopy(pv, (pos - pendingStart) * kvDim + kvOff, value, vo, n);
            return;
        }
        int s = slot(pos), o = s * kvDim + kvOff;
        switch (type) {
            case F32 -> { System.arraycopy(k, o, key, ko, n); System.arraycopy(v, o, value, vo, n); }
            case F16 -> {
                for (int i = 0; i < n; i++) { key[ko + i] = Float.float16ToFloat(k16[o + i]); value[vo + i] = Float.float16ToFloat(v16[o + i]); }
            }
            case Q8 -> {
                float a = ks[s * kvHeads + kvOff / headDim], b = vs[s * kvHeads + kvOff / headDim];
                for (int i = 0; i < n; i++) { key[ko + i] = k8[o + i] * a; value[vo + i] = v8[o + i] * b; }
            }
        }
    }

    /** A ring cache of the last {@code w} committed positions (same type; no pending chunk); this cache is left as it is. */
    public KvCache lastPositions(int w) {
        if (pendingCount != 0) throw new IllegalStateException("a chunk is pending");
        KvCache ring = new KvCache(kvDim, headDim, w, maxPositions, type);
        int from = Math.max(firstAvailable(), length - w), n = length - from;
        float[] keys = new float[n * kvDim], values = new float[n * kvDim];
        read(from, n, keys, values);
        ring.length = from;
        ring.pendingStart = from;
        ring.pk = keys;
        ring.pv = values;
        ring.pendingCount = n;
        ring.commit();
        ring.pk = new float[0];
        ring.pv = new float[0];
        return ring;
    }

    private int slot(int pos) {
        if (pos < firstAvailable() || pos >= length)
            throw new IllegalStateException("position " + pos + " is not in the cache [" + firstAvailable() + ", " + length + ")");
        return window > 0 ? pos % capacity : pos;
    }

    private void decode(int pos, boolean key, float[] dst, int off) {
        int s = slot(pos), o = s * kvDim;
        switch (type) {
            case F32 -> System.arraycopy(key ? k : v, o, dst, off, kvDim);
            case F16 -> { short[] src = key ? k16 : v16; for (int i = 0; i < kvDim; i++) dst[off + i] = Float.float16ToFloat(src[o + i]); }
            case Q8 -> {
                byte[] src = key ? k8 : v8;
                float[] sc = key ? ks : vs;
                for (int i = 0; i < kvDim; i++) dst[off + i] = src[o + i] * sc[s * kvHeads + i / headDim];
            }
        }
    }

    /** Moves the pending chunk into the store. */
    public void commit() {
        int n = pendingCount;
        if (n == 0) return;
        if (window <= 0) ensure(length + n);
        for (int i = Math.max(0, window > 0 ? n - capacity : 0); i < n; i++) {
            int slot = window > 0 ? (pendingStart + i) % capacity : length + i;
            store(pk, i * kvDim, slot, true);
            store(pv, i * kvDim, slot, false);
        }
        length += n;
        pendingStart = length;
        pendingCount = 0;
    }

    private void store(float[] src, int so, int slot, boolean key) {
        int o = slot * kvDim;
        switch (type) {
            case F32 -> System.arraycopy(src, so, key ? k : v, o, kvDim);
            case F16 -> { short[] d = key ? k16 : v16; for (int i = 0; i < kvDim; i++) d[o + i] = Float.floatToFloat16(src[so + i]); }
            case Q8 -> {
                byte[] d = key ? k8 : v8;
                float[] sc = key ? ks : vs;
                for (int h = 0; h < kvHeads; h++)
                    sc[slot * kvHeads + h] = KvType.quantizeQ8(src, so + h * headDim, d, o + h * headDim, headDim);
            }
        }
    }

    /**
     * Writes the committed store (type, window, length, the stored positions in their stored form) for a state
     * snapshot; {@link #readFrom} restores it bit for bit.
     */
    public void writeTo(java.io.DataOutput out) throws java.io.IOException {
        if (pendingCount != 0) throw new IllegalStateException("a chunk is pending");
        out.writeByte(type.ordinal());
        out.writeInt(window);
        out.writeInt(length);
        int slots = window > 0 ? capacity : length;   // a ring's every slot; a full layer's positions so far
        int n = slots * kvDim;
        switch (type) {
            case F32 -> { BinaryArrays.writeFloats(out, k, 0, n); BinaryArrays.writeFloats(out, v, 0, n); }
            case F16 -> { BinaryArrays.writeShorts(out, k16, 0, n); BinaryArrays.writeShorts(out, v16, 0, n); }
            case Q8 -> {
                out.write(k8, 0, n);
                out.write(v8, 0, n);
                BinaryArrays.writeFloats(out, ks, 0, slots * kvHeads);
                BinaryArrays.writeFloats(out, vs, 0, slots * kvHeads);
            }
        }
    }

    /** Replaces this cache's contents with a snapshot's ({@link #writeTo}); its type and window must be this cache's. */
    public void readFrom(java.io.DataInput in) throws java.io.IOException {
        int t = in.readUnsignedByte(), w = in.readInt(), len = in.readInt();
        if (t != type.ordinal() || w != window)
            throw new java.io.IOException("state snapshot: a KV cache of type " + (t < KvType.values().length ? KvType.values()[t].label() : "#" + t)
                    + " and window " + w + ", this model keeps " + type.label() + " and window " + window);
        if (len < 0 || len > maxPositions)
            throw new java.io.IOException("state snapshot: " + len + " positions, past this session's context " + maxPositions);
        clear();
        if (window <= 0) ensure(Math.max(len, 1));
        int slots = window > 0 ? capacity : len, n = slots * kvDim;
        switch (type) {
            case F32 -> { BinaryArrays.readFloats(in, k, 0, n); BinaryArrays.readFloats(in, v, 0, n); }
            case F16 -> { BinaryArrays.readShorts(in, k16, 0, n); BinaryArrays.readShorts(in, v16, 0, n); }
            case Q8 -> {
                in.readFully(k8, 0, n);
                in.readFully(v8, 0, n);
                BinaryArrays.readFloats(in, ks, 0, slots * kvHeads);
                BinaryArrays.readFloats(in, vs, 0, slots * kvHeads);
            }
        }
        length = len;
        pendingStart = len;
    }

    /**
     * What {@link #rewind} needs to take back up to {@code upcoming} positions committed after this call: the length,
     * and for a ring the slots those positions will overwrite (a full layer's store only grows, so its length is all).
     */
    public Object mark(int upcoming) {
        if (pendingCount != 0) throw new IllegalStateException("a chunk is pending");
        if (upcoming < 0) throw new IllegalArgumentException("upcoming < 0");
        if (window <= 0) return new Mark(length, null);
        if (upcoming > capacity)
            throw new IllegalArgumentException("a sliding layer can take back at most its window (" + capacity + ") positions, asked " + upcoming);
        Object[] saved = new Object[upcoming];
        for (int i = 0; i < upcoming; i++) saved[i] = copySlot((length + i) % capacity);
        return new Mark(length, saved);
    }

    /** Takes the store back to its first {@code position} positions (at least the mark's length, at most the length now). */
    public void rewind(Object mark, int position) {
        Mark m = (Mark) mark;
        if (pendingCount != 0) throw new IllegalStateException("a chunk is pending");
        if (position < m.length || position > length)
            throw new IllegalArgumentException("rewind to " + position + " outside [" + m.length + ", " + length + "]");
        if (m.saved != null) {
            if (length - m.length > m.saved.length)
                throw new IllegalStateException((length - m.length) + " positions committed since the mark, which saved " + m.saved.length);
            for (int q = position; q < length; q++) restoreSlot(q % capacity, m.saved[q - m.length]);
        }
        length = position;
        pendingStart = position;
    }

    private record Mark(int length, Object[] saved) {}

    /** One slot's stored K and V (and q8's scales), in their stored form. */
    private Object copySlot(int slot) {
        int o = slot * kvDim;
        return switch (type) {
            case F32 -> new float[][] {Arrays.copyOfRange(k, o, o + kvDim), Arrays.copyOfRange(v, o, o + kvDim)};
            case F16 -> new short[][] {Arrays.copyOfRange(k16, o, o + kvDim), Arrays.copyOfRange(v16, o, o + kvDim)};
            case Q8 -> new Object[] {Arrays.copyOfRange(k8, o, o + kvDim), Arrays.copyOfRange(v8, o, o + kvDim),
                    Arrays.copyOfRange(ks, slot * kvHeads, (slot + 1) * kvHeads), Arrays.copyOfRange(vs, slot * kvHeads, (slot + 1) * kvHeads)};
        };
    }

    private void restoreSlot(int slot, Object copy) {
        int o = slot * kvDim;
        switch (type) {
            case F32 -> { float[][] c = (float[][]) copy; System.arraycopy(c[0], 0, k, o, kvDim); System.arraycopy(c[1], 0, v, o, kvDim); }
            case F16 -> { short[][] c = (short[][]) copy; System.arraycopy(c[0], 0, k16, o, kvDim); System.arraycopy(c[1], 0, v16, o, kvDim); }
            case Q8 -> {
                Object[] c = (Object[]) copy;
                System.arraycopy((byte[]) c[0], 0, k8, o, kvDim);
                System.arraycopy((byte[]) c[1], 0, v8, o, kvDim);
                System.arraycopy((float[]) c[2], 0, ks, slot * kvHeads, kvHeads);
                System.arraycopy((float[]) c[3], 0, vs, slot * kvHeads, kvHeads);
            }
        }
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
        int n = c * kvDim;
        switch (type) {
            case F32 -> { k = Arrays.copyOf(k, n); v = Arrays.copyOf(v, n); }
            case F16 -> { k16 = Arrays.copyOf(k16, n); v16 = Arrays.copyOf(v16, n); }
            case Q8 -> {
                k8 = Arrays.copyOf(k8, n); v8 = Arrays.copyOf(v8, n);
                ks = Arrays.copyOf(ks, c * kvHeads); vs = Arrays.copyOf(vs, c * kvHeads);
            }
        }
        capacity = c;
    }

    private void allocate(int positions) {
        int n = positions * kvDim;
        switch (type) {
            case F32 -> { k = new float[n]; v = new float[n]; }
            case F16 -> { k16 = new short[n]; v16 = new short[n]; }
            case Q8 -> { k8 = new byte[n]; v8 = new byte[n]; ks = new float[positions * kvHeads]; vs = new float[positions * kvHeads]; }
        }
        capacity = positions;
    }

    private static float dot16(float[] q, int qo, short[] x, int xo, int n) {
        float s = 0f;
        for (int i = 0; i < n; i++) s += q[qo + i] * Float.float16ToFloat(x[xo + i]);
        return s;
    }
}
