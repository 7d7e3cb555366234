package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.cpu.AttentionKernel;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.cpu.KvCache;
import dev.cmf4j.backend.cpu.NystromHead;
import dev.cmf4j.backend.cpu.Rotary;
import dev.cmf4j.model.AttentionMemory;
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
    /** The threads the attention of several heads runs on (the backend's host pool). */
    private final dev.cmf4j.backend.cpu.kernel.WorkerPool pool;
    /** This layer's sealing ({@code --o1}), or null: exact attention over the whole cache. */
    private final AttentionMemory.Sealed sealed;
    private final KvType kvType;

    AttentionStep(Mixer.Attention a, int hidden, Loader l, MatMul mm, dev.cmf4j.backend.cpu.kernel.WorkerPool pool,
                  AttentionMemory.Sealed sealed, KvType kvType) {
        this.spec = a;
        this.sealed = sealed;
        this.kvType = kvType;
        this.mm = mm;
        this.pool = pool;
        this.hidden = hidden;
        int qRows = a.qDim() * (a.outputGate() ? 2 : 1);
        this.q = l.linear(a.qProj(), a.qBias(), qRows, hidden);
        this.k = a.kProj() == null ? null : l.linear(a.kProj(), a.kBias(), a.kvDim(), hidden);
        this.v = a.vProj() == null ? null : l.linear(a.vProj(), a.vBias(), a.kvDim(), hidden);
        this.o = l.linear(a.oProj(), a.oBias(), hidden, a.qDim());
        this.qkv = k == null ? null : v != null ? new Linear.Shared(q, k, v) : new Linear.Shared(q, k);
        this.qNorm = l.normOp(a.qNorm());
        this.kNorm = l.normOp(a.kNorm());
        this.vNorm = l.normOp(a.vNorm());
        this.sinks = l.optionalVector(a.sinks(), a.heads());
        this.rope = a.rope();
        this.invFreq = rope.invFreq();
        if (a.heads() % a.kvHeads() != 0)
            throw new dev.cmf4j.model.ModelException(a.qProj() + ": " + a.heads() + " heads not a multiple of " + a.kvHeads() + " kv heads");
    }

    Mixer.Attention spec() { return spec; }

    /**
     * Multiply-adds (rows × heads × span × head width) from which a step with fewer rows than 4 per thread splits them
     * into chunks across the pool; below it the hand-offs cost more than they save. Tests lower it to run the split on
     * small models.
     */
    static volatile long splitFromWork = 1L << 20;

    /** This layer's sealing, or null. */
    AttentionMemory.Sealed sealed() { return sealed; }

    @Override public Object newState(int maxContext) {
        if (sealed != null) return new SealedKv(spec, sealed, kvType, maxContext);
        return spec.sharesKv() ? null : new KvCache(spec.kvDim(), spec.headDim(), spec.window(), maxContext, kvType);
    }

    /** The KV cache of a layer's state (a sealed layer's exact cache or ring). */
    static KvCache cacheOf(Object state) {
        return state instanceof SealedKv s ? s.cache() : (KvCache) state;
    }

    static final class Scratch {
        final float[] qRaw, q, gate, attn, cos, sin;
        /** The step's k and v rows, before each span's are copied into its sequence's cache; null on a KV-sharing layer. */
        final float[] k, v;
        /** The outputs of the shared q/k(/v) product. */
        final float[][] projections;
        private float[] scores;

        private KvCache[] caches = new KvCache[1];
        /** Per worker: a sealed row's far-field scratch. */
        private NystromHead.Row[] rows = new NystromHead.Row[0];

        /** Makes a row scratch for each of {@code workers} workers; called before a job, on the calling thread. */
        NystromHead.Row[] rows(int workers) {
            if (rows.length < workers) {
                rows = java.util.Arrays.copyOf(rows, workers);
                for (int w = 0; w < workers; w++) if (rows[w] == null) rows[w] = new NystromHead.Row();
            }
            return rows;
        }

        /** The spans' caches of this layer, filled per step. */
        KvCache[] caches(int n) {
            if (caches.length < n) caches = new KvCache[Math.max(n, 2 * caches.length)];
            return caches;
        }

        /** The caller's score buffer, grown to n. */
        float[] scores(int n) {
            if (scores.length < n) scores = new float[Math.max(n, 2 * scores.length)];
            return scores;
        }

        /**
         * Worker {@code worker}'s attention buffers (worker 0 is the calling thread). They live in this workspace, not
         * the pool: inline runs of concurrent workspaces never share one, and a job's other workers are its alone.
         */
        AttentionKernel.Work work(int worker) {
            AttentionKernel.Work[] ws = works;
            if (worker >= ws.length) throw new IllegalStateException("worker " + worker + " past the " + ws.length + " made before the job");
            return ws[worker];
        }

        /** Makes the per-worker attention buffers for a pool of {@code threads}; called before a job, on the calling thread. */
        void works(int threads) {
            if (works.length < threads) {
                works = java.util.Arrays.copyOf(works, threads);
                for (int w = 0; w < threads; w++) if (works[w] == null) works[w] = new AttentionKernel.Work();
            }
        }

        private AttentionKernel.Work[] works = new AttentionKernel.Work[0];
        private int[] firstUnit = new int[0];
        private float[] partials = new float[0];

        int[] firstUnit(int n) {
            if (firstUnit.length < n) firstUnit = new int[Math.max(n, 2 * firstUnit.length)];
            return firstUnit;
        }

        float[] partials(long n) {
            if (n > Integer.MAX_VALUE - 8) throw new IllegalStateException("attention partials of " + n + " floats");
            if (partials.length < n) partials = new float[(int) Math.max(n, Math.min(Integer.MAX_VALUE - 8, 2L * partials.length))];
            return partials;
        }

        Scratch(Mixer.Attention a, int maxChunk, int maxContext) {
            qRaw = new float[maxChunk * a.qDim() * (a.outputGate() ? 2 : 1)];
            q = a.outputGate() ? new float[maxChunk * a.qDim()] : qRaw;
            gate = a.outputGate() ? new float[maxChunk * a.qDim()] : null;
            attn = new float[maxChunk * a.qDim()];
            cos = new float[Math.max(1, a.rope().rotaryDim() / 2)];
            sin = new float[cos.length];
            scores = new float[Math.min(maxContext, a.window() > 0 ? a.window() : 256) + maxChunk];
            k = a.sharesKv() ? null : new float[maxChunk * a.kvDim()];
            v = a.sharesKv() ? null : new float[maxChunk * a.kvDim()];
            projections = a.vProj() == null ? new float[][] {qRaw, k} : new float[][] {qRaw, k, v};
        }
    }

    @Override public Object newScratch(int maxChunk, int maxContext) { return new Scratch(spec, maxChunk, maxContext); }

    @Override public void forward(float[] in, float[] out, Batch batch, Object scratch, int layer) {
        Scratch s = (Scratch) scratch;
        int hd = spec.headDim(), heads = spec.heads(), kvHeads = spec.kvHeads(), qDim = spec.qDim(), kvDim = spec.kvDim();
        int rows = batch.rows(), spans = batch.size();
        int[] rowPos = batch.rowPos;

        // 1. projections over every row (q, and k/v unless this layer reads another layer's cache)
        if (spec.sharesKv()) {
            q.apply(mm, in, rows, s.qRaw, batch.overlay);
        } else {
            qkv.apply(mm, in, rows, s.projections, batch.overlay);   // one submission: one copy of `in` and one hand-off on a GPU
            if (v == null) System.arraycopy(s.k, 0, s.v, 0, rows * kvDim);   // V is the raw K projection
            // 2. k and v norms, k rope at each row's position, then each span's rows into its sequence's cache
            if (kNorm != null) kNorm.rows(s.k, rows * kvHeads);
            if (vNorm != null) vNorm.rows(s.v, rows * kvHeads);
            for (int r = 0; r < rows; r++) {
                Rotary.table(rowPos[r], invFreq, rope.attentionScaling(), s.cos, s.sin);
                Rotary.apply(s.k, r * kvDim, kvHeads, hd, rope.rotaryDim(), s.cos, s.sin);
            }
            for (int i = 0; i < spans; i++) {
                Object st = batch.state(i).mixerState(layer);
                if (st instanceof SealedKv sk) sk.sealIfDue(batch.tokens(i));
                KvCache cache = cacheOf(st);
                int n = batch.tokens(i);
                cache.beginChunk(batch.pos0[i], n);
                System.arraycopy(s.k, batch.start[i] * kvDim, cache.pendingKeys(), 0, n * kvDim);
                System.arraycopy(s.v, batch.start[i] * kvDim, cache.pendingValues(), 0, n * kvDim);
            }
        }
        if (spec.outputGate()) splitGate(s.qRaw, s.q, s.gate, rows, heads, hd);
        // 3. q norm and rope
        if (qNorm != null) qNorm.rows(s.q, rows * heads);
        for (int r = 0; r < rows; r++) {
            Rotary.table(rowPos[r], invFreq, rope.attentionScaling(), s.cos, s.sin);
            Rotary.apply(s.q, r * qDim, heads, hd, rope.rotaryDim(), s.cos, s.sin);
        }
        int sealedCount = 0;
        for (int i = 0; i < spans; i++)
            if (batch.state(i).mixerState(layer) instanceof SealedKv sk) {
                if (sk.sealed()) sealedCount++;
                else sk.pendQueries(s.q, batch.start[i] * qDim, batch.tokens(i));
            }
        int sealedSpans = sealedCount;
        // 4. attention: the query of a row at position p sees its own sequence's keys in (p − window, p] (all of
        //    [0, p] on a full layer). A unit of work is a row, all heads (the cache is read in position order, each
        //    position's KV heads together; a KV head's keys serve its query heads at once); when there are too few rows
        //    to keep the pool busy (decode) and the context is long, each row is split into the kernel's fixed chunks
        //    of positions, whose partials are merged in position order afterwards: the same operations either way, so
        //    the bits do not depend on it
        int cacheLayer = spec.sharesKv() ? spec.kvSource() : layer;
        KvCache[] caches = s.caches(spans);
        long work = 0;
        for (int i = 0; i < spans; i++) {
            caches[i] = cacheOf(batch.state(i).mixerState(cacheLayer));
            boolean sealedSpan = batch.state(i).mixerState(cacheLayer) instanceof SealedKv sk && sk.sealed();
            int si = sealedSpan ? 0 : spec.window() > 0 ? spec.window() : batch.pos0[i] + batch.tokens(i);
            work += (long) batch.tokens(i) * heads * si * hd;
        }
        int group = heads / kvHeads, threads = pool.threads();
        int[] rowSpan = batch.rowSpan;
        int window = spec.window();
        float scale = spec.scale(), softcap = spec.softcap();
        boolean split = AttentionKernel.vectorized() && threads > 1 && rows < 4 * threads && work >= splitFromWork;
        s.works(threads);
        if (!split) {
            int grain = (int) Math.max(1, Math.min(rows, (1L << 16) * rows / Math.max(1, work)));
            int step = Math.max(grain, Math.ceilDiv(rows, 4 * threads));
            pool.run(Math.ceilDiv(rows, step), (chunk, worker) -> {
                AttentionKernel.Work w = s.work(worker);
                for (int r = chunk * step, end = Math.min(rows, r + step); r < end; r++) {
                    int p = rowPos[r];
                    if (sealedSpans > 0 && batch.state(rowSpan[r]).mixerState(layer) instanceof SealedKv sk && sk.sealed()) continue;
                    int from = window > 0 ? Math.max(0, p - window + 1) : 0;
                    AttentionKernel.attend(s.q, r * qDim, group, kvHeads, hd, caches[rowSpan[r]], 0, from, p, scale, softcap,
                            sinks, 0, w, s.attn, r * qDim);
                }
            });
        } else {
            // units of (row, chunk), numbered row by row; a row of a sealed span has none
            int[] firstUnit = s.firstUnit(rows + 1);
            firstUnit[0] = 0;
            for (int r = 0; r < rows; r++) {
                int p = rowPos[r], from = window > 0 ? Math.max(0, p - window + 1) : 0;
                boolean sealedRow = sealedSpans > 0 && batch.state(rowSpan[r]).mixerState(layer) instanceof SealedKv sk && sk.sealed();
                firstUnit[r + 1] = firstUnit[r] + (sealedRow ? 0 : AttentionKernel.chunks(from, p));
            }
            int pf = AttentionKernel.partialFloats(heads, hd), total = firstUnit[rows];
            float[] part = s.partials((long) total * pf);
            pool.run(total, (u, worker) -> {
                int r = 0;
                while (firstUnit[r + 1] <= u) r++;
                int p = rowPos[r], from = window > 0 ? Math.max(0, p - window + 1) : 0;
                AttentionKernel.chunkPartial(s.q, r * qDim, group, kvHeads, hd, caches[rowSpan[r]], 0, from, p,
                        u - firstUnit[r], scale, softcap, s.work(worker), part, u * pf);
            });
            for (int r = 0; r < rows; r++) {
                int nc = firstUnit[r + 1] - firstUnit[r];
                if (nc > 0) AttentionKernel.finishFromPartials(part, firstUnit[r] * pf, nc, heads, hd, sinks, 0, s.attn, r * qDim);
            }
        }
        if (sealedSpans > 0) attendSealed(batch, s, layer);
        // 5. output gate, o projection
        if (spec.outputGate())
            for (int i = 0; i < rows * qDim; i++) s.attn[i] *= 1f / (1f + (float) Math.exp(-s.gate[i]));
        if (batch.overlay.anyTask)   // heads a row's task turns off: as if o_proj's columns of those heads were 0
            for (int r = 0; r < rows; r++) {
                TaskMask tm = batch.overlay.mask(r);
                int[] off = tm == null ? null : tm.headsOff[layer];
                if (off != null) for (int h : off) java.util.Arrays.fill(s.attn, r * qDim + h * hd, r * qDim + (h + 1) * hd, 0f);
            }
        o.apply(mm, s.attn, rows, out, batch.overlay);
    }

    /**
     * The rows of sealed spans: one task per (span, head), each walking its rows in position order (a row's step
     * moves the key leaving the window into that head's far field).
     */
    private void attendSealed(Batch batch, Scratch s, int layer) {
        int heads = spec.heads(), qDim = spec.qDim(), hd = spec.headDim(), spans = batch.size();
        NystromHead.Row[] rows = s.rows(pool.threads());
        pool.run(spans * heads, (task, worker) -> {
            int i = task / heads, h = task % heads;
            if (!(batch.state(i).mixerState(layer) instanceof SealedKv sk) || !sk.sealed()) return;
            int n = sk.scratchFloats();
            float[] scores = worker == 0 ? s.scores(n) : pool.workerScratch(worker, 0, n);
            float sink = sinks == null ? Float.NaN : sinks[h];
            for (int r = batch.start[i], end = r + batch.tokens(i); r < end; r++)
                sk.attend(s.q, r * qDim + h * hd, h, batch.rowPos[r], sink, scores, rows[worker], s.attn, r * qDim + h * hd);
        });
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

    @Override public void commit(Object state) {
        switch (state) {
            case SealedKv sk -> sk.commit();
            case KvCache c -> c.commit();
            case null, default -> {}
        }
    }

    @Override public boolean abandon(Object state) {
        return switch (state) {
            case SealedKv sk -> sk.abandon();
            case KvCache c -> { c.abandon(); yield true; }
            case null, default -> true;
        };
    }

    @Override public void reset(Object state) {
        switch (state) {
            case SealedKv sk -> sk.clear();
            case KvCache c -> c.clear();
            case null, default -> {}
        }
    }

    @Override public Object mark(Object state, int upcoming) {
        return switch (state) {
            case SealedKv sk -> throw new UnsupportedOperationException(
                    "tokens cannot be taken back from --o1 sealed layers (their far field folds keys in as they leave the window)");
            case KvCache c -> c.mark(upcoming);
            case null, default -> null;   // a KV-sharing layer: its source layer's cache goes back
        };
    }

    @Override public void rewind(Object state, Object mark, int markPosition, int position) {
        if (state instanceof KvCache c) c.rewind(mark, position);
    }
}
