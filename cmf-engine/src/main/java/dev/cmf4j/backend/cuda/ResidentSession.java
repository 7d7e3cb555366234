package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.KvType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * One sequence's device memory for the resident forward (or the batch scratch: row buffers with no KV cache), its
 * stream and its captured decode step: the activations of a chunk's rows, the attention's split partials, the KV caches
 * (f32, f16 or q8; an anchor's ring; a sealed layer's through {@link SealedSteps.Sequence}), a delta net's conv inputs
 * and rule state, the MoE and per-layer-input scratch, the logits. Owner thread only.
 */
final class ResidentSession {
    final int maxChunk, maxContext;
    /**
     * The chunk bound this session's sliding-window layers keep rings for (window + kvChunk rows: resident.cuh's
     * r_kv_ring), or 0 when they keep a row per position (the batch scratch; {@code -Dcmf.cuda.kvRings=false}).
     */
    final int kvChunk;
    /** Whether sliding-window layers keep only their window on the device (default), not a row per position. */
    static final boolean KV_RINGS = !"false".equals(System.getProperty("cmf.cuda.kvRings"));
    final Arena arena = Arena.ofShared();
    final MemorySegment stream;
    final MemorySegment hostIn, hostLast;
    MemorySegment hostAll;
    final long in, x, h, q, k, v, att, g, u, pm, pl, pacc, done, last;
    /** An MTP head's input rows [maxChunk, 2·hidden] (what its fc reads), or 0 on a model's sessions. */
    final long mtpIn;
    /** --kv q8: a chunk's roped key rows as f32 [t, kvDim], which its attention reads (as the values from v); else 0. */
    final long kq;
    /** Sandwich-norm input, MoE: normed input, router logits, routed ids and weights, expert activations (0 = unused). */
    final long m, moeIn, moeLogits, moeIdx, moeWts, moeH, moeOut;
    final long[] kc, vc;
    /**
     * Per layer whose keys and values a later layer reads, the step's raw k and v rows (the later layer appends
     * them again: the same bytes); 0 for the others, which write s.k and s.v.
     */
    final long[] kRaw, vRaw;
    /** Gemma4's per-layer inputs of the step's rows [t, layers·dim] and the table rows they start from (0 = none). */
    final long pli, pliTab;
    /** Per delta-net layer, this sequence's conv inputs [convDim, kernel−1] and rule state [nv, dk, dv] (0 elsewhere). */
    final long[] conv, dnS;
    /** A delta net's step scratch (0 = none): projections, conv input, z, b, a, normed q and k, g, β, the rule's output. */
    final long dnProj, dnBa, dnMixed, dnZ, dnB, dnA, dnQ, dnK, dnG, dnBeta, dnCore;
    /** The attention output gate's q projection [t, 2·qDim] and gate [t, qDim]; the shared expert's output and gate logits. */
    final long qg, gate, sharedOut, sharedGate;
    /**
     * A hierarchical head's cluster log-probabilities [maxChunk, clusters] and head gates (doubles: one for a session's
     * rows, one per logit row of the batch scratch) with their pinned host copy; 0 / null without clusters.
     */
    final long lc, gates;
    final MemorySegment hostGates;
    /** A session's (keeps sequence state; its rows share one head gate), not the batch scratch. */
    final boolean sequence;
    /** The session's head gate (set by {@link ResidentForward#gateHead}) and the value its device copy holds (NaN: none yet). */
    double headGate = Double.NEGATIVE_INFINITY, gateOnDevice = Double.NaN;
    long all;
    int allRows;
    List<Step> decode;
    MemorySegment graph, exec;
    /** Captured chunks of few rows (verifications, an MTP head's rows) by shape (ResidentForward#chunkGraph). */
    final java.util.Map<Long, ResidentForward.CapturedSteps> chunkGraphs = new java.util.HashMap<>();
    /** The chunk shapes this session has run (a shape is captured from its second chunk). */
    final java.util.Set<Long> chunkShapes = new java.util.HashSet<>();
    final List<Long> owned = new ArrayList<>();
    /** A session's sealed layers (their exact caches fill kc and vc while exact), or null. */
    final SealedSteps.Sequence sealed;

    private static final long NULL = 0L;
    private final CudaDriver cu;
    private final DecoderPlan model;
    /** Called when a buffer captured steps may point at moves (the all-logits rows). */
    private final Runnable stale;

    /** Rows of a layer's KV cache with sliding window {@code window} (0: a full layer): a ring, or one per position. */
    int cacheRows(int window) {
        int ring = KvLayout.ringRows(window, kvChunk);
        return ring > 0 ? Math.min(ring, maxContext) : maxContext;
    }

    /** A session's own state ({@code splits}: the attention's key splits for a chunk of t rows). */
    ResidentSession(CudaDriver cu, DecoderPlan model, KvType kv, SealedSteps o1, java.util.function.IntUnaryOperator splits,
                    Runnable stale, int maxChunk, int maxContext, KvPages pages) {
        this(cu, model, kv, o1, splits, stale, maxChunk, maxContext, 1, pages, true);
    }

    /**
     * {@code decodeRows}: the most one-token rows a decode attention launch takes (r_attn_rows; 1 for a session);
     * {@code pages}: where full layers' caches are reserved and backed as positions are used (null: allocated whole);
     * {@code sequence}: a session's (it keeps recurrent state), not the batch scratch (its rows use their sessions').
     */
    ResidentSession(CudaDriver cu, DecoderPlan model, KvType kv, SealedSteps o1, java.util.function.IntUnaryOperator splits,
                    Runnable stale, int maxChunk, int maxContext, int decodeRows, KvPages pages, boolean sequence) {
        this.cu = cu;
        this.model = model;
        this.stale = stale;
        int layerCount = model.layers().size();
        this.maxChunk = maxChunk;
        this.maxContext = maxContext;
        this.sequence = sequence;
        this.kvChunk = sequence && KV_RINGS ? maxChunk : 0;
        this.pages = sequence ? pages : null;
        int hidden = model.hidden(), vocab = model.vocab();
        // a failure part way (the KV cache of a long context not fitting, say) gives back what was taken
        MemorySegment st = null, hi = null, hl = null, hg = null;
        SealedSteps.Sequence so = null;
        try {
            st = cu.streamCreate(CudaDriver.STREAM_NON_BLOCKING);
            hi = cu.memAllocHost(4L * (1 + maxChunk));
            hl = cu.memAllocHost(4L * vocab);
            in = alloc(4L * (1 + maxChunk));
            x = alloc(4L * maxChunk * hidden);
            mtpIn = model.mtpProjection() == null ? NULL : alloc(8L * maxChunk * hidden);
            h = alloc(4L * maxChunk * hidden);
            q = alloc(4L * maxChunk * model.qDim());
            k = alloc(4L * maxChunk * model.kvDim());
            v = alloc(4L * maxChunk * model.kvDim());
            kq = kv == KvType.Q8 ? alloc(4L * maxChunk * model.kvDim()) : NULL;
            att = alloc(4L * maxChunk * model.qDim());
            var ple = model.perLayerEmbedding();
            int pleDim = ple == null ? 0 : ple.dim(), width = pleDim * layerCount;
            g = alloc(4L * maxChunk * Math.max(model.intermediate(), pleDim));
            u = alloc(4L * maxChunk * model.intermediate());
            pli = ple == null ? NULL : alloc(4L * maxChunk * width);
            pliTab = ple == null ? NULL : alloc(4L * maxChunk * width);
            long partials = 0;   // decode rows and few-row chunks; longer chunks run r_attn_prefill
            // decode rows, and chunks of few rows (ResidentLowering.CHUNK_ATTENTION_ROWS), split their keys over blocks
            int splitRows = Math.max(decodeRows, Math.min(maxChunk, ResidentLowering.CHUNK_ATTENTION_ROWS));
            for (int r = 1; r <= splitRows; r++) partials = Math.max(partials, (long) splits.applyAsInt(r) * model.heads() * r);
            pm = alloc(4L * partials);
            pl = alloc(4L * partials);
            pacc = alloc(4L * partials * model.headDim());
            // per row and head: splits finished this step (the last one resets it)
            done = alloc(4L * model.heads() * splitRows);
            cu.memsetD8(done, (byte) 0, 4L * model.heads() * splitRows);
            cu.synchronize();   // the memset runs on the legacy stream, which the session's non-blocking stream does not wait for
            last = alloc(4L * vocab);
            boolean sandwich = false, beside = false;
            int experts = 0, topK = 0, expertInter = 0;
            for (DecoderPlan.Layer l : model.layers()) {
                sandwich |= l.postAttnNorm() != null || l.postFfnNorm() != null;
                beside |= l.moe() != null && l.gate() != null;
                if (l.moe() != null) {
                    experts = Math.max(experts, l.moe().experts());
                    topK = Math.max(topK, l.moe().topK());
                    expertInter = Math.max(expertInter, l.moe().intermediate());
                }
            }
            m = sandwich || ple != null ? alloc(4L * maxChunk * hidden) : NULL;
            int proj = 0, ba = 0, convDim = 0, vd = 0, nvdk = 0, nv = 0;
            boolean outGate = false, sharedExpert = false;
            conv = new long[layerCount];
            dnS = new long[layerCount];
            for (int l = 0; l < layerCount; l++) {
                DecoderPlan.Layer spec = model.layers().get(l);
                outGate |= spec.outputGate();
                sharedExpert |= spec.moe() != null && spec.moe().shared() != null;
                var dn = spec.deltaNet();
                if (dn == null) continue;
                proj = Math.max(proj, 2 * dn.qkDim() + 2 * dn.vDim());
                ba = Math.max(ba, 2 * dn.valueHeads());
                convDim = Math.max(convDim, dn.convDim());
                vd = Math.max(vd, dn.vDim());
                nvdk = Math.max(nvdk, dn.valueHeads() * dn.keyDim());
                nv = Math.max(nv, dn.valueHeads());
                if (!sequence) continue;
                conv[l] = alloc(4L * dn.convDim() * (dn.convKernel() - 1));
                dnS[l] = alloc(4L * dn.valueHeads() * dn.keyDim() * dn.valueDim());
            }
            boolean gdn = convDim > 0;
            dnProj = gdn ? alloc(4L * maxChunk * proj) : NULL;
            dnBa = gdn ? alloc(4L * maxChunk * ba) : NULL;
            dnMixed = gdn ? alloc(4L * maxChunk * convDim) : NULL;
            dnZ = gdn ? alloc(4L * maxChunk * vd) : NULL;
            dnB = gdn ? alloc(4L * maxChunk * nv) : NULL;
            dnA = gdn ? alloc(4L * maxChunk * nv) : NULL;
            dnQ = gdn ? alloc(4L * maxChunk * nvdk) : NULL;
            dnK = gdn ? alloc(4L * maxChunk * nvdk) : NULL;
            dnG = gdn ? alloc(4L * maxChunk * nv) : NULL;
            dnBeta = gdn ? alloc(4L * maxChunk * nv) : NULL;
            dnCore = gdn ? alloc(4L * maxChunk * vd) : NULL;
            qg = outGate ? alloc(4L * maxChunk * 2 * model.qDim()) : NULL;
            gate = outGate ? alloc(4L * maxChunk * model.qDim()) : NULL;
            sharedOut = sharedExpert ? alloc(4L * maxChunk * hidden) : NULL;
            sharedGate = sharedExpert ? alloc(4L * maxChunk) : NULL;
            moeIn = experts > 0 ? alloc(4L * maxChunk * hidden) : NULL;
            moeLogits = experts > 0 ? alloc(4L * maxChunk * experts) : NULL;
            moeIdx = experts > 0 ? alloc(4L * maxChunk * topK) : NULL;
            moeWts = experts > 0 ? alloc(4L * maxChunk * topK) : NULL;
            moeH = experts > 0 ? alloc(4L * maxChunk * topK * expertInter) : NULL;
            moeOut = beside ? alloc(4L * maxChunk * hidden) : NULL;
            var hc = model.headClusters();
            lc = hc == null ? NULL : alloc(4L * maxChunk * hc.count());
            gates = hc == null ? NULL : alloc(8L * maxChunk);
            if (hc != null) hg = cu.memAllocHost(8L * maxChunk);
            kc = new long[layerCount];
            vc = new long[layerCount];
            kRaw = new long[layerCount];
            vRaw = new long[layerCount];
            for (int l = 0; l < layerCount; l++) {
                DecoderPlan.Layer spec = model.layers().get(l);
                long kvDim = (long) spec.kvHeads() * spec.headDim();
                if (spec.sharesKv()) {   // an earlier layer's caches (allocated: sources come first)
                    kc[l] = kc[spec.kvSource()];
                    vc[l] = vc[spec.kvSource()];
                    if (kRaw[spec.kvSource()] == NULL) {
                        kRaw[spec.kvSource()] = alloc(4L * maxChunk * kvDim);
                        vRaw[spec.kvSource()] = alloc(4L * maxChunk * kvDim);
                    }
                } else if (o1 != null && o1.seals(l)) {   // SealedSteps.Sequence's, below
                    continue;
                } else {   // a bounded anchor's ring (f32) holds its window: the rows a sequence keeps at any length;
                           // a sliding layer's, its window and a chunk
                    long rowBytes = KvLayout.rowBytes(kv, spec.kvHeads(), spec.headDim());
                    long bytes = spec.anchor() != null ? 4L * spec.anchor().window() * kvDim : rowBytes * cacheRows(spec.window());
                    // a full attention layer's cache is backed as positions are reached (a delta-net layer has none: rowBytes 0)
                    if (this.pages != null && spec.anchor() == null && rowBytes > 0 && KvLayout.ringRows(spec.window(), kvChunk) == 0) {
                        kc[l] = this.pages.reserve(bytes, rowBytes);
                        vc[l] = this.pages.reserve(bytes, rowBytes);
                    } else {
                        kc[l] = alloc(bytes);
                        vc[l] = alloc(bytes);
                    }
                }
            }
            if (o1 != null && sequence) so = o1.new Sequence(kc, vc, maxContext);
        } catch (RuntimeException | Error e) {
            for (long d : owned) cu.memFree(d);
            owned.clear();
            if (this.pages != null) this.pages.free();
            if (hi != null) cu.memFreeHost(hi);
            if (hl != null) cu.memFreeHost(hl);
            if (hg != null) cu.memFreeHost(hg);
            if (st != null) cu.streamDestroy(st);
            arena.close();
            throw e;
        }
        stream = st;
        sealed = so;
        hostIn = hi;
        hostLast = hl;
        hostGates = hg;
    }

    private long alloc(long bytes) {
        long d = cu.memAlloc(Math.max(bytes, 16));
        owned.add(d);
        allocated += Math.max(bytes, 16);
        return d;
    }

    /** Device bytes of {@link #owned}. */
    long allocated;

    /** The full layers' paged caches, or null when every cache was allocated whole. */
    private final KvPages pages;

    /**
     * Backs the rows of positions [0, {@code positions}) in the full layers' caches (nothing when they are allocated
     * whole); throws, changing nothing the sequence holds, when the device has no memory left for them.
     */
    void ensurePositions(int positions) {
        if (pages != null) pages.ensureRows(positions);
    }

    /** Device bytes this sequence holds: its buffers and the KV pages mapped for it so far. */
    long heldBytes() { return allocated + (pages == null ? 0 : pages.mappedBytes()); }

    /** Device and host room for {@code rows} rows of logits (all-logits chunks). */
    void ensureAll(int rows) {
        if (rows <= allRows) return;
        if (all != NULL) { cu.memFree(all); owned.remove(all); allocated -= 4L * allRows * model.vocab(); cu.memFreeHost(hostAll); stale.run(); }
        all = alloc(4L * rows * model.vocab());
        hostAll = cu.memAllocHost(4L * rows * model.vocab());
        allRows = rows;
    }

    /** Pinned host memory grown to what is asked for (made when first asked); freed with the session. */
    private final class PinnedRoom {
        private MemorySegment seg;
        private long bytes;

        MemorySegment of(long n) {
            if (n > bytes) {
                free();
                seg = cu.memAllocHost(n);
                bytes = n;
            }
            return seg;
        }

        void free() {
            if (seg != null) cu.memFreeHost(seg);
            seg = null;
            bytes = 0;
        }
    }

    /** The last layer's rows of a step (the model's, for an MTP head) and an MTP head's input rows, on their way. */
    private final PinnedRoom hiddenRoom = new PinnedRoom(), mtpRoom = new PinnedRoom();

    /** Host room for {@code rows} rows of x (the residual stream before the final norm). */
    MemorySegment hostHidden(int rows) { return hiddenRoom.of(4L * rows * model.hidden()); }

    /** Host room for {@code rows} of an MTP head's input rows [rows, 2·hidden]. */
    MemorySegment hostMtpIn(int rows) { return mtpRoom.of(8L * rows * model.hidden()); }

    /** The most greedy drafts an MTP head's session chains on the device in one call (ResidentForward#forwardMtpGreedy). */
    static final int MAX_DRAFTS = 64;
    private long draftIds;
    /** Pinned: the drafts' ids on their way back, then the positions of the draft steps ({@link #MAX_DRAFTS} each). */
    MemorySegment hostDrafts;

    /** The drafts' ids on the device ({@link #MAX_DRAFTS} ints), made with their pinned room on first use. */
    long draftIds() {
        if (draftIds == NULL) {
            hostDrafts = cu.memAllocHost(8L * MAX_DRAFTS);
            draftIds = alloc(4L * MAX_DRAFTS);
        }
        return draftIds;
    }

    /** Destroys the captured chunks (their buffers moved, or the session goes). */
    void dropChunkGraphs() {
        for (ResidentForward.CapturedSteps g : chunkGraphs.values()) g.free(cu);
        chunkGraphs.clear();
    }

    /** Frees everything, the KV pages too. */
    void free() {
        KvPages p = freeKeepingPages();
        if (p != null) p.free();
    }

    /** Frees everything but the KV pages, which it returns (null when the caches were allocated whole) for another sequence. */
    KvPages freeKeepingPages() {
        dropChunkGraphs();
        if (exec != null) cu.graphExecDestroy(exec);
        if (graph != null) cu.graphDestroy(graph);
        exec = graph = null;
        for (long d : owned) cu.memFree(d);
        owned.clear();
        if (sealed != null) sealed.free();
        cu.memFreeHost(hostIn);
        cu.memFreeHost(hostLast);
        if (hostAll != null) cu.memFreeHost(hostAll);
        if (hostGates != null) cu.memFreeHost(hostGates);
        if (hostDrafts != null) cu.memFreeHost(hostDrafts);
        hostDrafts = null;
        draftIds = NULL;
        hiddenRoom.free();
        mtpRoom.free();
        cu.streamDestroy(stream);
        arena.close();
        return pages;
    }
}

