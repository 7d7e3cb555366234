package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.AttentionKernel;
import dev.cmf4j.backend.cpu.KvCache;
import dev.cmf4j.backend.cpu.Rotary;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.Rope;

/**
 * Softmax attention (every {@link Mixer.Attention} variant):
 * q/k/v projections → q/k/v norms → rope → causal (windowed) GQA attention with sinks and soft-capping
 * → output gate → o projection. A KV-sharing layer projects only q and reads its source layer's cache.
 */
final class AttentionStep implements MixerStep {
    private final Mixer.Attention spec;
    private final MatMul mm;
    private final Linear q, k, v, o;
    /** q, k and (unless V is the raw K) v as one shared product; null when this layer reads another's K/V. */
    private final Linear.Shared qkv;
    private final NormOp qNorm, kNorm, vNorm;
    private final float[] sinks;
    private final Rope rope;
    private final float[] invFreq;
    private final int hidden;
    /** The threads the graph's products run on (bench --threads may give a graph its own pool). */
    private final dev.cmf4j.backend.cpu.kernel.WorkerPool pool;

    AttentionStep(Mixer.Attention a, int hidden, Loader l, MatMul mm) {
        this.spec = a;
        this.mm = mm;
        this.pool = mm instanceof dev.cmf4j.backend.cpu.kernel.KernelMatMul k ? k.pool() : dev.cmf4j.backend.cpu.CpuBackend.pool();
        this.hidden = hidden;
        int qRows = a.qDim() * (a.outputGate() ? 2 : 1);
        this.q = l.linear(a.qProj(), a.qBias(), qRows, hidden);
        this.k = a.kProj() == null ? null : l.linear(a.kProj(), a.kBias(), a.kvDim(), hidden);
        this.v = a.vProj() == null ? null : l.linear(a.vProj(), a.vBias(), a.kvDim(), hidden);
        this.o = l.linear(a.oProj(), a.oBias(), hidden, a.qDim());
        this.qkv = k == null ? null : v != null ? new Linear.Shared(q, k, v) : new Linear.Shared(q, k);
        this.qNorm = NormOp.of(a.qNorm(), l);
        this.kNorm = NormOp.of(a.kNorm(), l);
        this.vNorm = NormOp.of(a.vNorm(), l);
        this.sinks = l.optionalVector(a.sinks(), a.heads());
        this.rope = a.rope();
        this.invFreq = rope.invFreq();
        if (a.heads() % a.kvHeads() != 0)
            throw new dev.cmf4j.model.ModelException(a.qProj() + ": " + a.heads() + " heads not a multiple of " + a.kvHeads() + " kv heads");
    }

    Mixer.Attention spec() { return spec; }

    @Override public Object newState(int maxContext) {
        return spec.sharesKv() ? null : new KvCache(spec.kvDim(), spec.window(), maxContext);
    }

    static final class Scratch {
        final float[] qRaw, q, gate, attn, cos, sin;
        /** The outputs of the shared q/k(/v) product, filled per chunk (the cache's pending rows may move). */
        final float[][] projections;
        private float[] scores;

        /** The caller's score buffer, grown to n. */
        float[] scores(int n) {
            if (scores.length < n) scores = new float[Math.max(n, 2 * scores.length)];
            return scores;
        }

        Scratch(Mixer.Attention a, int maxChunk, int maxContext) {
            qRaw = new float[maxChunk * a.qDim() * (a.outputGate() ? 2 : 1)];
            q = a.outputGate() ? new float[maxChunk * a.qDim()] : qRaw;
            gate = a.outputGate() ? new float[maxChunk * a.qDim()] : null;
            attn = new float[maxChunk * a.qDim()];
            cos = new float[Math.max(1, a.rope().rotaryDim() / 2)];
            sin = new float[cos.length];
            scores = new float[Math.min(maxContext, a.window() > 0 ? a.window() : 256) + maxChunk];
            projections = new float[a.vProj() == null ? 2 : 3][];
        }
    }

    @Override public Object newScratch(int maxChunk, int maxContext) { return new Scratch(spec, maxChunk, maxContext); }

    @Override public void forward(float[] in, float[] out, int tokens, int pos0, State state, int layer) {
        Scratch s = (Scratch) state.mixerScratch(layer);
        int hd = spec.headDim(), heads = spec.heads(), kvHeads = spec.kvHeads(), qDim = spec.qDim(), kvDim = spec.kvDim();

        // 1. projections (q, and k/v unless this layer reads another layer's cache)
        KvCache cache;
        if (spec.sharesKv()) {
            q.apply(mm, in, tokens, s.qRaw);
            cache = (KvCache) state.mixerState(spec.kvSource());
        } else {
            cache = (KvCache) state.mixerState(layer);
            cache.beginChunk(pos0, tokens);
            float[] kb = cache.pendingKeys(), vb = cache.pendingValues();
            // q, k, v read the same input: one submission (one copy of `in` and one hand-off on a GPU)
            float[][] ys = s.projections;
            ys[0] = s.qRaw;
            ys[1] = kb;
            if (v != null) {
                ys[2] = vb;
                qkv.apply(mm, in, tokens, ys);
            } else {
                qkv.apply(mm, in, tokens, ys);
                System.arraycopy(kb, 0, vb, 0, tokens * kvDim);   // V is the raw K projection
            }
            // 2. k and v norms, k rope
            if (kNorm != null) kNorm.rows(kb, tokens * kvHeads);
            if (vNorm != null) vNorm.rows(vb, tokens * kvHeads);
            for (int t = 0; t < tokens; t++) {
                Rotary.table(pos0 + t, invFreq, rope.attentionScaling(), s.cos, s.sin);
                Rotary.apply(kb, t * kvDim, kvHeads, hd, rope.rotaryDim(), s.cos, s.sin);
            }
        }
        if (spec.outputGate()) splitGate(s.qRaw, s.q, s.gate, tokens, heads, hd);
        // 3. q norm and rope
        if (qNorm != null) qNorm.rows(s.q, tokens * heads);
        for (int t = 0; t < tokens; t++) {
            Rotary.table(pos0 + t, invFreq, rope.attentionScaling(), s.cos, s.sin);
            Rotary.apply(s.q, t * qDim, heads, hd, rope.rotaryDim(), s.cos, s.sin);
        }
        // 4. attention: query at p sees keys in (p − window, p] (all of [0, p] on a full layer);
        //    (token, head) pairs are independent: split over the pool when there is enough work
        int group = heads / kvHeads;
        int span = spec.window() > 0 ? spec.window() : pos0 + tokens;
        final KvCache kv = cache;
        long work = (long) tokens * heads * span * hd;
        int grain = (int) Math.max(1, Math.min((long) tokens * heads, (1L << 16) * tokens * heads / Math.max(1, work)));
        int pairs = tokens * heads, step = Math.max(grain, Math.ceilDiv(pairs, 4 * pool.threads()));
        pool.run(Math.ceilDiv(pairs, step), (chunk, worker) -> {
            // a score row per thread, reused across steps (no allocation per decode step): worker 0 is the calling
            // thread and takes the session's own row (inline runs of concurrent sessions never share one); the other
            // workers exist only while this job holds the pool, so their per-worker rows are this job's alone
            float[] scores = worker == 0 ? s.scores(span) : pool.workerScratch(worker, 0, span);
            for (int th = chunk * step, to0 = Math.min(pairs, th + step); th < to0; th++) {
                int t = th / heads, h = th % heads, p = pos0 + t;
                int from = spec.window() > 0 ? Math.max(0, p - spec.window() + 1) : 0;
                float sink = sinks == null ? Float.NaN : sinks[h];
                AttentionKernel.attend(s.q, t * qDim + h * hd, hd, kv, (h / group) * hd, from, p,
                        spec.scale(), spec.softcap(), sink, scores, s.attn, t * qDim + h * hd);
            }
        });
        // 5. output gate, o projection
        if (spec.outputGate())
            for (int i = 0; i < tokens * qDim; i++) s.attn[i] *= 1f / (1f + (float) Math.exp(-s.gate[i]));
        o.apply(mm, s.attn, tokens, out);
    }

    /** q_proj with an output gate emits per head [q (hd) | gate (hd)]. */
    private static void splitGate(float[] raw, float[] q, float[] gate, int tokens, int heads, int hd) {
        for (int t = 0; t < tokens; t++)
            for (int h = 0; h < heads; h++) {
                int src = (t * heads + h) * 2 * hd, dst = (t * heads + h) * hd;
                System.arraycopy(raw, src, q, dst, hd);
                System.arraycopy(raw, src + hd, gate, dst, hd);
            }
    }

    @Override public void commit(Object state) { if (state != null) ((KvCache) state).commit(); }

    @Override public boolean abandon(Object state) {
        if (state != null) ((KvCache) state).abandon();
        return true;
    }

    @Override public void reset(Object state) { if (state != null) ((KvCache) state).clear(); }
}
