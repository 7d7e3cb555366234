package dev.cmf4j.model.graph;

import dev.cmf4j.backend.cpu.BinaryArrays;
import dev.cmf4j.backend.cpu.KvCache;
import dev.cmf4j.backend.cpu.NystromHead;
import dev.cmf4j.backend.cpu.VectorMath;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.Mixer;

import java.util.Arrays;

/**
 * One sequence's state of a sealed ({@code --o1}) attention layer. It starts exact: a full KV cache plus the prompt's
 * queries. At the first single-token step past W + S + 8 positions (or the first step after {@link #requestSeal}
 * once it holds its S sinks and 4 positions) the layer seals: per query head the landmarks and M are built from the positions so far, the first S keys become
 * permanent sinks, the keys that already left the window go into the far field, and the cache shrinks to a ring of
 * the last W positions. From then on its size never changes.
 */
final class SealedKv {

    private final Mixer.Attention spec;
    private final AttentionMemory.Sealed params;
    private final dev.cmf4j.backend.KvType kvType;
    private final int maxContext;
    /** The full cache before sealing; the ring of the last W positions after. */
    private KvCache cache;
    /** The exact phase's queries, [positions, qDim] (rotated); null once sealed. */
    private float[] queries;
    private int pendingQueries;
    private boolean sealRequested;
    /** After sealing: sink keys and values [S, kvDim] and each query head's far field. */
    private float[] sinkK, sinkV;
    private NystromHead[] heads;
    /** A sealed step changed the far fields: a failed step cannot be undone. */
    private boolean touched;

    SealedKv(Mixer.Attention spec, AttentionMemory.Sealed params, dev.cmf4j.backend.KvType kvType, int maxContext) {
        this.spec = spec;
        this.params = params;
        this.kvType = kvType;
        this.maxContext = maxContext;
        clear();
    }

    KvCache cache() { return cache; }

    boolean sealed() { return heads != null; }

    void requestSeal() { sealRequested = true; }

    /** Seals now when the step ahead (of {@code tokens} rows) is a decode step or sealing was asked for, and the layer holds enough positions. */
    void sealIfDue(int tokens) {
        int p = cache.length();
        boolean due = dev.cmf4j.backend.SealedLayers.due(p, tokens, sealRequested, params.window(), params.sinks());   // asked for: any prompt that has its sinks
        if (sealed() || !due) return;
        int hd = spec.headDim(), kvDim = spec.kvDim(), qDim = spec.qDim(), group = spec.heads() / spec.kvHeads(), s = params.sinks();
        float[] k = new float[p * kvDim], v = new float[p * kvDim];   // the exact cache as float32, for this once
        cache.read(0, p, k, v);
        sinkK = Arrays.copyOf(k, s * kvDim);
        sinkV = Arrays.copyOf(v, s * kvDim);
        NystromHead[] built = new NystromHead[spec.heads()];
        for (int h = 0; h < built.length; h++) {
            int g = (h / group) * hd;
            built[h] = NystromHead.seal(queries, h * hd, qDim, k, g, kvDim, p, hd, hd, params.landmarks(), spec.scale());
            for (int j = s; j < p - params.window(); j++) built[h].absorb(k, j * kvDim + g, v, j * kvDim + g);
        }
        cache = cache.lastPositions(params.window());
        heads = built;
        queries = null;
    }

    /** Keeps the step's rotated queries [rows, qDim] (from {@code q[off]}) for the landmarks, until the step commits. */
    void pendQueries(float[] q, int off, int rows) {
        if (sealed()) return;
        int qDim = spec.qDim(), need = (cache.length() + rows) * qDim;
        if (queries.length < need) queries = Arrays.copyOf(queries, Math.max(need, Math.min(2 * queries.length, maxContext * qDim)));
        System.arraycopy(q, off, queries, cache.length() * qDim, rows * qDim);
        pendingQueries = rows;
    }

    /**
     * Query head {@code h} of the row at {@code pos} (rows of one head in position order): the key that leaves the
     * window at this step enters the far field, then one softmax over sinks, window and far field.
     *
     * @param sink    the head's sink logit (gpt-oss), or NaN
     * @param scores  scratch of at least {@link #scratchFloats()} floats
     */
    void attend(float[] q, int qo, int h, int pos, float sink, float[] scores, NystromHead.Row row, float[] out, int oo) {
        int hd = spec.headDim(), kvOff = (h / (spec.heads() / spec.kvHeads())) * hd, s = params.sinks(), kvDim = spec.kvDim();
        int evicted = pos - params.window();
        touched = true;
        if (evicted >= s) {   // the leaving key and value, decoded into the scratch's tail
            int at = s + params.window() + 1;
            cache.read(evicted, kvOff, hd, scores, at, scores, at + hd);
            heads[h].absorb(scores, at, scores, at + hd);
        }
        float scale = spec.scale(), max = Float.NEGATIVE_INFINITY;
        int from = Math.max(s, evicted + 1), n = s + pos - from + 1;
        for (int j = 0; j < s; j++) max = Math.max(max, scores[j] = VectorMath.dot(q, qo, sinkK, j * kvDim + kvOff, hd) * scale);
        for (int j = from; j <= pos; j++)
            max = Math.max(max, scores[s + j - from] = cache.keyDot(q, qo, j, kvOff, hd) * scale);
        boolean hasSink = !Float.isNaN(sink);
        if (hasSink) max = Math.max(max, sink);
        float den = heads[h].far(q, qo, max, row, out, oo);
        float shift = row.shift;
        if (hasSink) den += (float) Math.exp(sink - shift);
        for (int j = 0; j < n; j++) {
            float e = (float) Math.exp(scores[j] - shift);
            den += e;
            if (j < s) VectorMath.axpy(e, sinkV, j * kvDim + kvOff, out, oo, hd);
            else {
                int p = from + j - s;
                cache.addValue(e, p, kvOff, out, oo, hd);
            }
        }
        float inv = 1f / Math.max(den, NystromHead.DEN_EPS);
        for (int c = 0; c < hd; c++) out[oo + c] *= inv;
    }

    /** The scratch {@link #attend} needs: near scores and one decoded key and value. */
    int scratchFloats() { return params.sinks() + params.window() + 1 + 2 * spec.headDim(); }

    void commit() {
        cache.commit();
        pendingQueries = 0;
        touched = false;
        sealRequested = false;
    }

    /** Drops the step; false when a sealed step already moved keys into the far fields (the sequence must reset). */
    boolean abandon() {
        cache.abandon();
        pendingQueries = 0;
        boolean ok = !touched;
        touched = false;
        return ok;
    }

    /** Back to an empty exact layer. */
    void clear() {
        cache = new KvCache(spec.kvDim(), spec.headDim(), 0, maxContext, kvType);
        queries = new float[Math.min(maxContext, 64) * spec.qDim()];
        pendingQueries = 0;
        sinkK = sinkV = null;
        heads = null;
        touched = false;
        sealRequested = false;
    }

    /** Writes the layer (exact: cache and queries; sealed: ring, sinks, heads) for a state snapshot. */
    void writeTo(java.io.DataOutput out) throws java.io.IOException {
        out.writeBoolean(sealed());
        cache.writeTo(out);
        int qDim = spec.qDim(), kvDim = spec.kvDim();
        if (!sealed()) {
            BinaryArrays.writeFloats(out, queries, 0, cache.length() * qDim);
            return;
        }
        out.writeInt(params.sinks());
        BinaryArrays.writeFloats(out, sinkK, 0, params.sinks() * kvDim);
        BinaryArrays.writeFloats(out, sinkV, 0, params.sinks() * kvDim);
        for (NystromHead h : heads) h.writeTo(out);
    }

    void readFrom(java.io.DataInput in) throws java.io.IOException {
        boolean isSealed = in.readBoolean();
        int qDim = spec.qDim(), kvDim = spec.kvDim(), hd = spec.headDim();
        KvCache c = isSealed ? new KvCache(kvDim, hd, params.window(), maxContext, kvType) : new KvCache(kvDim, hd, 0, maxContext, kvType);
        c.readFrom(in);
        clear();
        cache = c;
        if (!isSealed) {
            queries = new float[Math.max(queries.length, c.length() * qDim)];
            BinaryArrays.readFloats(in, queries, 0, c.length() * qDim);
            return;
        }
        BinaryArrays.checkedLength(in, params.sinks(), "the sink count");
        sinkK = new float[params.sinks() * kvDim];
        sinkV = new float[params.sinks() * kvDim];
        BinaryArrays.readFloats(in, sinkK, 0, sinkK.length);
        BinaryArrays.readFloats(in, sinkV, 0, sinkV.length);
        NystromHead[] hs = new NystromHead[spec.heads()];
        for (int h = 0; h < hs.length; h++) hs[h] = NystromHead.readFrom(in, hd, hd);
        heads = hs;
        queries = null;
    }

    /** Bytes held once sealed (ring, sinks, landmarks, M, far sums); -1 while exact (it grows with the context). */
    long bytes() {
        if (!sealed()) return -1;
        long floats = sinkK.length + sinkV.length;
        for (NystromHead h : heads) floats += h.floats();
        return cache.storeBytes() + Float.BYTES * floats;
    }
}
