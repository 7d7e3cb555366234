package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Activation;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.Glu;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.cuda.KernelSignature.Kernel;
import dev.cmf4j.backend.cuda.ResidentWeights.W;
import dev.cmf4j.backend.cuda.ResidentWeights.LayerWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.DeltaNetWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.SharedWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.MoeWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.Table;
import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

/**
 * The dense decoder's whole forward pass on the GPU ({@code resident.cu}): weights resident in their CMF
 * dtype (uploaded once through {@link CudaMatMul}), activations and the KV cache (f32) in device memory,
 * every operator a kernel on the session's own stream. Per call the host copies the position and the ids in,
 * enqueues the step, and copies the logits back: one hand-off to the owner thread and one stream wait.
 *
 * <p>A decode step (one token) is the same launch sequence every time — the kernels read the position and
 * the id from device memory — so it is captured once per session as a CUDA graph and replayed
 * ({@code -Dcmf.cuda.graphs=false} launches the kernels one by one instead, for debugging). Prefill chunks
 * run the same kernels with a token dimension.
 */
final class ResidentForward implements DeviceForward {
    private static final long NULL = 0L;
    /** The kernel file of this forward (its own module). */
    static final String RESIDENT_CU = Kernels.RESIDENT_CU;
    /** The architecture-specific kernels (sandwich norms, other activations, mixture of experts): its own module. */
    static final String ARCH_CU = Kernels.ARCH_CU;

    private final CudaMatMul mm;
    private final CudaDriver cu;
    private final DecoderPlan model;
    private final boolean graphs;
    private final int smCount;
    private final long deviceMemory;

    /**
     * {@code -Dcmf.cuda.prefillCache=auto|true|false}: keep an f16 copy of every int8 matrix for the prefill GEMMs
     * (2 bytes per weight, made at the first prefill) instead of widening each matrix again for every chunk; auto:
     * when the copies take at most a quarter of the device's memory.
     */
    private final String prefillCache;
    /**
     * {@code -Dcmf.cuda.prefillPrecision=fast}: prefill activations enter the tensor cores at about 11 significant bits
     * instead of f32's 24: one f16 part with a per-token power-of-two scale for int8 and f16 weights (half the GEMM
     * work of the 2 exact parts), two bf16 parts (16 bits) for bf16 weights (two thirds of the work of 3; one bf16
     * part, 8 bits, changed greedy picks of the fixture models). docs/GPU.md has the measured logit differences.
     * Decode is unaffected.
     */
    private final boolean fastPrefill;
    /**
     * {@code -Dcmf.cuda.prefillFusion=false} turns off (for comparison) the prefill's fused launches: q, k and v's
     * parts from one pass over x (r_split3; gate and up's too), their three epilogues as one launch (r_gemm_out3),
     * and the SwiGLU epilogue writing the down product's parts directly (r_glu_split_N).
     */
    private final boolean fusePrefill;
    /** The element type of every KV cache (f32, or f16 / q8 with {@code --kv}); the cache kernels are this type's instances. */
    private final KvType kv;
    /** Every kernel the resident steps launch, loaded once. */
    private final ResidentKernels kernels;
    /** Head rows per block of r_qk_rope_append (a warp each): resident.cu's R_ROPE_WARPS. */
    private static final int ROPE_WARPS = 4;

    /** r_glu_split_N: the SwiGLU epilogue fused with the down product's split, rows ≤ N·2048 (blocks of 512). */
    static final int[] GLU_SPLIT_N = {1, 2, 4, 8};
    /** cuBLAS for prefill chunks of at least {@link #gemmMinTokens} tokens, or null (matvec kernels with a token dimension). */
    private final Cublas cublas;
    private final int gemmMinTokens;
    private final Arena own = Arena.ofShared();
    private final MemorySegment one = own.allocateFrom(ValueLayout.JAVA_FLOAT, 1f), zero = own.allocateFrom(ValueLayout.JAVA_FLOAT, 0f);
    /** The prefill GEMMs' scratch, the kept f16 copies of int8 weights and the cuBLAS handle. */
    private final PrefillWorkspace ws;
    /** 16-bit elements per token of the widest fused split (r_split3) of this model; 0 without fusion. */
    private final long fusedSplitUnits;
    private final W embed, head;
    /** Gemma4's per-layer embedding table and model projection (null without), the projection norm's weight. */
    private final W pleTable, pleProj;
    private final long pleNorm;
    /** The final norm is folded into the head (else it runs as its own kernel); its weight on the device when not. */
    private final boolean headFolded;
    private final long finalNorm;
    private final LayerWeights[] layers;
    /** Embryo's launches (bounded anchor, resonance router, hierarchical head), or null; its head's cluster matrix. */
    private final EmbryoSteps embryo;
    private final W clusters;
    /** The sealed ({@code --o1}) layers' launches and per-sequence state, or null. */
    private final SealedSteps o1;
    private final List<SessionState> states = new ArrayList<>();
    private boolean closed;


    /** One step of a chunk's forward on the session stream: a kernel launch or a cuBLAS GEMM. */
    sealed interface Step permits Launch, Gemm, Gemms {
        String name();
    }

    /**
     * One kernel launch with its argument block; {@code name} labels it in the profile. {@code programmatic}: launched
     * with programmatic stream serialization (see {@link #programmatic}).
     */
    record Launch(String name, MemorySegment fn, int gx, int gy, int gz, int block, MemorySegment params,
                  boolean programmatic) implements Step {
        Launch(String name, MemorySegment fn, int gx, int gy, int gz, int block, MemorySegment params) {
            this(name, fn, gx, gy, gz, block, params, false);
        }
    }

    /** C[m, n] (column-major f32) = op(A)ᵀ·B: A is a row-major [m, k] weight matrix, B [n, k] row-major activations. */
    private record Gemm(String name, long a, int aType, long b, int bType, long c, int m, int n, int k) implements Step {}

    /**
     * {@code count} such GEMMs of one shape in one strided-batched call, the i-th on a + i·strideA, b + i·strideB and
     * c + i·strideC (elements): gate and up, k and v (see {@link #pairGemm}).
     */
    private record Gemms(String name, long a, long strideA, int aType, long b, long strideB, int bType, long c, long strideC,
                         int m, int n, int k, int count) implements Step {}

    /**
     * Where a chunk's steps go as {@link #steps} makes them: into a list (a decode step, kept for its graph; a profiled
     * chunk) or onto the stream at once (a prefill chunk), so the GPU starts on a chunk's first layer while the host
     * is still making its last one's launches (the host makes a llama-8b chunk's ~500 steps in ~3 ms, which the GPU
     * otherwise waited out: on the H200 fast pp512 went 24,700 → 27,700 tok/s, exact 17,200 → 18,700).
     */
    @FunctionalInterface
    interface Steps {
        void add(Step st);
    }

    /**
     * {@code -Dcmf.cuda.profile=true}: decode steps and prefill chunks launch one by one between CUDA events (no
     * graph), and closing the model prints the GPU time per decode step of each kind of launch, and per prefill
     * chunk size the time of each kind of launch summed over those chunks (for finding what a step spends beside
     * the weights).
     */
    static final boolean PROFILE = Boolean.getBoolean("cmf.cuda.profile");
    private final java.util.Map<String, double[]> profile = new java.util.TreeMap<>();   // name -> {ms, launches}
    private int profiledSteps;
    private final java.util.Map<String, double[]> prefillProfile = new java.util.TreeMap<>();   // "prefill T: name" -> {ms, launches}

    /**
     * Whether decode steps launch by programmatic dependent launch: asked for ({@code -Dcmf.cuda.pdl}, on by default),
     * resident.cu's loaded code compiled for compute_90 or newer and the driver has {@code cuLaunchKernelEx}.
     */
    private final boolean pdl;
    /** The programmatic launches' CUlaunchConfig (owner thread only), or null without {@link #pdl}. */
    private final MemorySegment launchConfig;

    /** Whether decode steps launch by programmatic dependent launch (said in the model's note, so a run shows it). */
    boolean programmaticLaunch() { return pdl; }
    /**
     * The kernels that call r_pdl_wait in every block before touching another kernel's data (resident.cu): only
     * they may be launched programmatically. The others (the embedding, resident_arch.cu's) launch plainly.
     */
    private final java.util.Set<Long> waits = new java.util.HashSet<>();

    /** {@code mode} if it is a {@code -Dcmf.cuda.prefillCache} value (auto, true, false), else a clear error. */
    static String prefillCacheMode(String mode) {
        if (!List.of("auto", "true", "false").contains(mode))
            throw new IllegalArgumentException("-Dcmf.cuda.prefillCache must be auto, true or false, not '" + mode + "'");
        return mode;
    }

    /** {@code mode} if it is a {@code -Dcmf.cuda.prefillPrecision} value (exact, fast), else a clear error. */
    static String prefillPrecisionMode(String mode) {
        if (!List.of("exact", "fast").contains(mode))
            throw new IllegalArgumentException("-Dcmf.cuda.prefillPrecision must be exact or fast, not '" + mode + "'");
        return mode;
    }

    /** Owner thread: loads the kernels and uploads every weight. */
    ResidentForward(CudaMatMul mm, CudaContext ctx, DecoderPlan model, KvType kv, dev.cmf4j.backend.SealedLayers sealed, boolean graphs,
                    Cublas cublas, int gemmMinTokens, String prefillCache, String prefillPrecision, boolean fusePrefill,
                    boolean programmaticLaunch, int smallBatchRows, int smallBatchBlockRows) {
        if (!Kernels.KV_TYPES.contains(kv)) throw new IllegalArgumentException("the GPU-resident forward keeps no " + kv.label() + " KV cache");
        this.kv = kv;
        this.prefillCache = prefillCacheMode(prefillCache);
        this.fastPrefill = "fast".equals(prefillPrecisionMode(prefillPrecision));
        this.fusePrefill = fusePrefill;
        this.cublas = cublas;
        this.gemmMinTokens = gemmMinTokens;
        this.batchGemmMinRows = Integer.getInteger("cmf.cuda.batchGemmMinRows", Math.min(4, gemmMinTokens));
        if (smallBatchRows < 0) throw new IllegalArgumentException("-Dcmf.cuda.smallBatchRows must be 0 (off) or more, not " + smallBatchRows);
        this.smallBatchRows = smallBatchRows;
        int shape = java.util.Arrays.stream(Kernels.SMALL_BATCH_BLOCK_ROWS).boxed().toList().indexOf(smallBatchBlockRows);
        if (shape < 0) throw new IllegalArgumentException("-Dcmf.cuda.smallBatchBlockRows must be 8 or 16, not " + smallBatchBlockRows);
        this.smallBatchShape = shape;
        this.mm = mm;
        this.cu = ctx.driver();
        this.model = model;
        this.graphs = graphs;
        this.smCount = Math.max(1, ctx.info().smCount());
        this.deviceMemory = ctx.info().totalMemory();
        this.kernels = new ResidentKernels(ctx, kv);
        // the waits are compiled in only for __CUDA_ARCH__ >= 900: code the driver built from the compute_80 PTX (a GPU
        // major without SASS in the fatbin, or CUDA_FORCE_PTX_JIT) has none and must not launch programmatically
        // (nothing would order it), so the loaded function's own PTX version decides, not the device's cc
        this.pdl = programmaticLaunch && cu.hasLaunchEx() && ptxVersion(kernels.fnAttn.fn()) >= 90;
        this.launchConfig = pdl ? cu.programmaticConfig(own) : null;
        for (Kernel[] ks : List.of(kernels.fnMatvec, kernels.fnMatvec3, kernels.fnGlu)) for (Kernel k : ks) waits.add(k.fn().address());
        waits.add(kernels.fnAttn.fn().address());
        waits.add(kernels.fnAttnRows.fn().address());   // (r_qk_rope_append waits too, but runs in prefill chunks only, which launch plainly)
        weights = new ResidentWeights(mm, model);
        embed = weights.embed;
        head = weights.head;
        headFolded = weights.headFolded;
        finalNorm = weights.finalNorm;
        pleTable = weights.pleTable;
        pleProj = weights.pleProj;
        pleNorm = weights.pleNorm;
        layers = weights.layers;
        clusters = weights.clusters;
        products = weights.products;
        widestProductRows = weights.widestProductRows;
        widestProductCols = weights.widestProductCols;
        int8Products = weights.int8Products;
        boolean recurrent = false;   // (an anchor's ring is per sequence, as a delta net's state)
        for (DecoderPlan.Layer l : model.layers()) recurrent |= l.deltaNet() != null || l.anchor() != null;
        embryo = EmbryoSteps.needed(model) ? new EmbryoSteps(ctx, model, weights::vector) : null;
        o1 = sealed == null ? null : new SealedSteps(ctx, model, sealed);
        recurrent |= o1 != null;   // (a sealed layer's ring and far sums are per sequence)
        fusedSplitUnits = widestFusedSplit();
        ws = new PrefillWorkspace(cu, cublas, kernels, model, weights, this.prefillCache, deviceMemory, fusedSplitUnits,
                () -> overlays == null ? 0 : overlays.widestInt8(), () -> scratchEpoch++);
        this.recurrent = recurrent;
    }

    /** The model's weights on the device, and (below) those of its parts the launches name most. */
    private final ResidentWeights weights;
    /** Whether every product is int8 (ResidentWeights#int8Products): small-batch kernels may take batched steps. */
    private final boolean int8Products;
    private final List<W> products;
    private final long widestProductRows, widestProductCols;

    /**
     * Whether a layer carries a per-sequence state that its launches address directly (a gated delta net, a bounded
     * anchor's ring): batched steps launch per span, never replay a capture.
     */
    private final boolean recurrent;

    /**
     * The virtual architecture {@code f}'s loaded code was built for, or 0 when the driver cannot say (then no
     * programmatic launches: an optional speed-up, not worth losing the resident forward over).
     */
    private int ptxVersion(MemorySegment f) {
        try {
            return cu.functionAttribute(f, CudaDriver.FUNC_ATTR_PTX_VERSION);
        } catch (CudaException e) {
            return 0;
        }
    }

    // ---- skills, adapters and task masks per row (OverlayWeights) ----

    /** The skills', adapters' and task masks' device weights (null: the file has none and no adapter was loaded). */
    private OverlayWeights overlays;
    /**
     * The overlay runs over the rows the products being made read (null: every row reads the backbone alone): the
     * step's rows while its layers are made, its logit rows around a gathered head. Owner thread only.
     */
    private OverlayWeights.Run[] runs;

    @Override public java.util.Map<String, String> skills(dev.cmf4j.backend.DeviceSkills table) {
        return mm.context().call(() -> {
            if (overlays != null) throw new IllegalStateException("the skills are installed before the adapters, once");
            overlays = new OverlayWeights(mm, cu, table, weights.sources, weights.vectorAt, weights::upload, weights::vector,
                    OverlayWeights.budget(deviceMemory));
            return overlays.problems();
        });
    }

    @Override public String adapters(dev.cmf4j.backend.DeviceAdapters table) {
        return mm.context().call(() -> {
            if (overlays == null)
                overlays = new OverlayWeights(mm, cu, dev.cmf4j.backend.DeviceSkills.NONE, weights.sources, weights.vectorAt, weights::upload, weights::vector, 0);
            overlays.installAdapters(table, ResidentWeights::normWeight);
            return null;
        });
    }

    @Override public java.util.Map<String, String> tasks(dev.cmf4j.backend.DeviceTasks table) {
        return mm.context().call(() -> {
            if (overlays == null)
                overlays = new OverlayWeights(mm, cu, dev.cmf4j.backend.DeviceSkills.NONE, weights.sources, weights.vectorAt, weights::upload, weights::vector, 0);
            var problems = new java.util.LinkedHashMap<String, String>();
            List<java.util.Map<W, OverlayWeights.TaskPart>> parts = new ArrayList<>();
            for (int i = 0; i < table.names().size(); i++) {
                var m = table.masks().get(i);
                java.util.Map<W, OverlayWeights.TaskPart> p = new java.util.HashMap<>();
                String why = m == null ? null : taskParts(m, p);
                if (why != null) { problems.put(table.names().get(i), why); p.clear(); }
                parts.add(p);
            }
            overlays.installTasks(parts);
            return problems;
        });
    }

    /**
     * What mask {@code m} does to this model's products, into {@code out}, or why it cannot: heads off zero o's input
     * columns of those heads, neurons off down's, a layer off both o's and down's (and drops o's bias: its rows keep
     * their residual, as the CPU graph's skipped layer), experts off a router's logits (−∞ in its bias).
     */
    private String taskParts(dev.cmf4j.backend.DeviceTasks.Mask m, java.util.Map<W, OverlayWeights.TaskPart> out) {
        for (int l = 0; l < layers.length; l++) {
            DecoderPlan.Layer spec = model.layers().get(l);
            LayerWeights w = layers[l];
            int[] heads = m.headsOff()[l], ffn = m.ffnOff()[l];
            boolean off = m.layerOff()[l];
            boolean[] experts = m.expertOff()[l];
            if (off && (spec.moe() != null || spec.perLayerInput() != null || spec.layerScalar() != 1f))
                return "layer " + l + " is off, which the GPU-resident forward applies only to layers of a dense MLP without"
                        + " per-layer inputs or a layer scalar";
            if (heads != null && (spec.deltaNet() != null || spec.anchor() != null || m.heads() * spec.headDim() != w.o().cols()))
                return "layer " + l + "'s head bits (" + m.heads() + " heads) do not fit its attention";
            if (ffn != null && (w.down() == null || m.ffnWidth() != w.down().cols()))
                return "layer " + l + "'s FFN bits (" + m.ffnWidth() + " neurons) do not fit its feed-forward";
            if (experts != null && (spec.moe() == null || spec.moe().resonance() != null || m.experts() != spec.moe().experts()))
                return "layer " + l + "'s expert bits do not fit its feed-forward (no logit-routed MoE of " + m.experts() + " experts)";
            if (off || heads != null) {
                float[] c = new float[w.o().cols()];
                if (!off) {
                    java.util.Arrays.fill(c, 1f);
                    int hd = spec.headDim();
                    for (int h : heads) java.util.Arrays.fill(c, h * hd, (h + 1) * hd, 0f);
                }
                out.put(w.o(), new OverlayWeights.TaskPart(c, off, null, NULL));
            }
            if (off || ffn != null) {
                float[] c = new float[w.down().cols()];
                if (!off) {
                    java.util.Arrays.fill(c, 1f);
                    for (int n : ffn) c[n] = 0f;
                }
                out.put(w.down(), new OverlayWeights.TaskPart(c, false, null, NULL));
            }
            if (experts != null) out.put(w.moe().router(), new OverlayWeights.TaskPart(null, false, experts, w.moe().routerBias()));
        }
        return null;
    }

    /** The overlays' device weights (tests). */
    OverlayWeights overlays() { return overlays; }

    /** Whether a skill on the rows being made replaces a product or bias of layer {@code w}: its fused launches give way. */
    private boolean touched(LayerWeights w) {
        if (runs == null) return false;
        List<W> ps = w.products();
        return overlays.touches(runs, ps, w.qBias(), w.kBias(), w.vBias(), w.oBias()) || overlays.adapts(runs, ps);
    }

    /** y += s·B·(A·x) over the rows of each adapter group of the rows being made that adapts {@code w} (after its product). */
    private void lowRank(Steps L, Arena a, String name, W w, long x, long y, float normEps) {
        if (runs == null || !overlays.adapts(runs, List.of(w))) return;
        long t = overlays.lowRankRows();
        for (OverlayWeights.Run g : overlays.adapterGroups(runs, w)) {
            OverlayWeights.Delta d = overlays.delta(g.adapter(), w);
            matvecRows(L, a, name + "_lora_a", overlays.lowRankA(g, w), NULL, x + 4L * g.start() * w.cols(), t, g.rows(), false, normEps);
            if (g.scale() != 1f)
                L.add(launch("lora_scale", kernels.fnScaleCap, (g.rows() * d.a().rows() + 255) / 256, 1, 1, 256, a, t,
                        g.rows() * d.a().rows(), g.scale(), 0f));
            matvecRows(L, a, name + "_lora_b", d.b(), NULL, t, y + 4L * g.start() * w.rows(), g.rows(), true, Float.NaN);
        }
    }

    /** The embedding of t rows, per group of rows reading one table when skills replace it. */
    private void embed(Steps L, Arena a, long ids, long x, int t) {
        List<OverlayWeights.Group> gs = runs == null ? List.of(new OverlayWeights.Group(0, t, embed, NULL)) : overlays.groups(runs, embed, NULL);
        int hidden = model.hidden();
        for (OverlayWeights.Group g : gs) {
            W e = g.w();
            L.add(launch("embed", kernels.fnEmbed[kind(e.dtype())], g.rows(), 1, 1, 256, a, e.weights(), e.rowScales(), e.colField(),
                    ids + 4L * g.start(), x + 4L * g.start() * hidden, hidden, model.embedScale()));
        }
    }

    // ---- per-session state ----

    /** A session's device memory, stream, and its captured decode step. Owner thread only. */
    private final class SessionState {
        final int maxChunk, maxContext;
        final Arena arena = Arena.ofShared();
        final MemorySegment stream;
        final MemorySegment hostIn, hostLast;
        MemorySegment hostAll;
        final long in, x, h, q, k, v, att, g, u, pm, pl, pacc, done, last;
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
        /** The session's head gate (set by {@link #gateHead}) and the value its device copy holds (NaN: none yet). */
        double headGate = Double.NEGATIVE_INFINITY, gateOnDevice = Double.NaN;
        long all;
        int allRows;
        List<Step> decode;
        MemorySegment graph, exec;
        final List<Long> owned = new ArrayList<>();
        /** A session's sealed layers (their exact caches fill kc and vc while exact), or null. */
        final SealedSteps.Sequence sealed;

        SessionState(int maxChunk, int maxContext) { this(maxChunk, maxContext, 1, true); }

        /**
         * {@code decodeRows}: the most one-token rows a decode attention launch takes (r_attn_rows; 1 for a session);
         * {@code sequence}: a session's (it keeps recurrent state), not the batch scratch (its rows use their sessions').
         */
        SessionState(int maxChunk, int maxContext, int decodeRows, boolean sequence) {
            this.maxChunk = maxChunk;
            this.maxContext = maxContext;
            this.sequence = sequence;
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
                h = alloc(4L * maxChunk * hidden);
                q = alloc(4L * maxChunk * model.qDim());
                k = alloc(4L * maxChunk * model.kvDim());
                v = alloc(4L * maxChunk * model.kvDim());
                kq = kv == KvType.Q8 ? alloc(4L * maxChunk * model.kvDim()) : NULL;
                att = alloc(4L * maxChunk * model.qDim());
                var ple = model.perLayerEmbedding();
                int pleDim = ple == null ? 0 : ple.dim(), width = pleDim * layers.length;
                g = alloc(4L * maxChunk * Math.max(model.intermediate(), pleDim));
                u = alloc(4L * maxChunk * model.intermediate());
                pli = ple == null ? NULL : alloc(4L * maxChunk * width);
                pliTab = ple == null ? NULL : alloc(4L * maxChunk * width);
                long partials = 0;   // decode only: prefill chunks run r_attn_prefill
                for (int r = 1; r <= decodeRows; r++) partials = Math.max(partials, (long) splits(r) * model.heads() * r);
                pm = alloc(4L * partials);
                pl = alloc(4L * partials);
                pacc = alloc(4L * partials * model.headDim());
                // per row and head: splits finished this step (the last one resets it)
                done = alloc(4L * model.heads() * decodeRows);
                cu.memsetD8(done, (byte) 0, 4L * model.heads() * decodeRows);
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
                conv = new long[layers.length];
                dnS = new long[layers.length];
                for (int l = 0; l < layers.length; l++) {
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
                kc = new long[layers.length];
                vc = new long[layers.length];
                kRaw = new long[layers.length];
                vRaw = new long[layers.length];
                for (int l = 0; l < layers.length; l++) {
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
                    } else {   // a bounded anchor's ring (f32) holds its window: the rows a sequence keeps at any length
                        long bytes = spec.anchor() != null ? 4L * spec.anchor().window() * kvDim
                                : KvLayout.rowBytes(kv, spec.kvHeads(), spec.headDim()) * maxContext;
                        kc[l] = alloc(bytes);
                        vc[l] = alloc(bytes);
                    }
                }
                if (o1 != null && sequence) so = o1.new Sequence(kc, vc, maxContext);
            } catch (RuntimeException | Error e) {
                for (long d : owned) cu.memFree(d);
                owned.clear();
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

        /** Device and host room for {@code rows} rows of logits (all-logits chunks). */
        void ensureAll(int rows) {
            if (rows <= allRows) return;
            if (all != NULL) { cu.memFree(all); owned.remove(all); allocated -= 4L * allRows * model.vocab(); cu.memFreeHost(hostAll); scratchEpoch++; }
            all = alloc(4L * rows * model.vocab());
            hostAll = cu.memAllocHost(4L * rows * model.vocab());
            allRows = rows;
        }

        void free() {
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
            cu.streamDestroy(stream);
            arena.close();
        }
    }

    /**
     * The rows [start, start + tokens) of a step that belong to one sequence: its KV caches (a device address per
     * layer) and the device address of its first row's position.
     */
    private record Seq(int start, int tokens, long pos, long[] kc, long[] vc, long[] conv, long[] dnS, SealedSteps.Sequence sealed) {}

    /** A session's own chunk: every row is its, the position at {@code s.in}. */
    private static Seq[] alone(SessionState s, int t) { return new Seq[] {new Seq(0, t, s.in, s.kc, s.vc, s.conv, s.dnS, s.sealed)}; }

    /** The largest chunk a session takes: its tokens are a grid dimension (≤ 65,535) of rope, products and epilogues. */
    static final int MAX_CHUNK = 65535;

    /**
     * Key splits of the attention for a chunk of t tokens: enough blocks to fill the GPU on a decode step, in one wave
     * (r_attn_partial's 111 registers on sm_90, under __launch_bounds__(128, 4), leave room for 4 blocks per SM). H200, llama-8b (16 splits): 32 splits
     * made gemv_bench's decode chain slower (2808 µs per token against 2719).
     */
    int splits(int t) {
        return Math.max(1, Math.min(32, 4 * smCount / Math.max(1, model.heads() * t)));
    }

    /** Head-dimension buckets of r_attn_prefill_D (resident.cu) and the query rows per block of each. */
    static final int[] PREFILL_DIMS = {32, 64, 128, 256}, PREFILL_ROWS = {64, 64, 32, 32};

    /** The buckets of {@link #PREFILL_DIMS} (the first ones: head dims up to 128) with a tensor-core kernel; its rows per block. */
    static final int PREFILL_TC_BUCKETS = 3, PREFILL_TC_ROWS = 64;

    /**
     * {@code -Dcmf.cuda.tcAttention=false}: prefill attention always on the f32 SIMT kernels. Otherwise head dims up to
     * 128 run r_attn_prefill_tc_D on GPUs of compute capability 8.0 and up (mma.sync m16n8k16 with f16 inputs).
     */
    static boolean tensorCoreAttention(int ccMajor) {
        return ccMajor >= 8 && !"false".equalsIgnoreCase(System.getProperty("cmf.cuda.tcAttention"));
    }

    /** Index into {@link #PREFILL_DIMS} of the smallest bucket that holds {@code hd}. */
    static int prefillBucket(int hd) {
        for (int i = 0; i < PREFILL_DIMS.length; i++) if (hd <= PREFILL_DIMS[i]) return i;
        throw new IllegalArgumentException("head dimension " + hd + " > 256: no prefill attention kernel");
    }

    /**
     * The grid of r_attn_prefill for a chunk of {@code t} tokens, as the kernel derives its tiles: a block owns
     * nT tokens × nH query heads of one kv head (nH = min(group, rows), nT = rows / nH); x = query tiles,
     * y = kvHeads × head groups.
     */
    static int[] prefillGrid(int t, int heads, int kvHeads, int hd) {
        return gridOfRows(t, heads, kvHeads, PREFILL_ROWS[prefillBucket(hd)]);
    }

    /** The same for a kernel of {@code rows} query rows per block (r_attn_prefill_tc_D: {@link #PREFILL_TC_ROWS}). */
    static int[] prefillGrid(int t, int heads, int kvHeads, int hd, boolean tc) {
        return tc ? gridOfRows(t, heads, kvHeads, PREFILL_TC_ROWS) : prefillGrid(t, heads, kvHeads, hd);
    }

    private static int[] gridOfRows(int t, int heads, int kvHeads, int rows) {
        int group = heads / kvHeads;
        int nH = Math.min(group, rows), nT = rows / nH, groups = (group + nH - 1) / nH;
        return new int[] {(t + nT - 1) / nT, kvHeads * groups};
    }

    /**
     * A session's default prompt chunk on the GPU: 512 tokens, where the cuBLAS products run at their tensor-core rate
     * (H200, llama-8b, fast mode's 512 columns: a chunk's GEMMs as issued take 11.4 ms, the bound's bf16 calls 10.1 ms,
     * tools/device-bench/gemm_batch.cu) and the fixed train of ~16 launches per layer is spread over enough tokens. (H200, llama-8b q8_2f, `cmf run` of a 1,986-token prompt in a fresh process, so with
     * the one-time f16 copies and cuBLAS loading: the CPU graph's 64 gave 4,138 / 4,055 tok/s, 512 gives 8,335 /
     * 8,583; fast prefill 4,350 / 4,277 against 10,690 / 9,373.)
     */
    static final int PREFERRED_CHUNK = 512;

    @Override public int preferredChunk() { return PREFERRED_CHUNK; }

    @Override public Object newState(int maxChunk, int maxContext) {
        return mm.context().call(() -> {
            if (closed) throw new IllegalStateException("the model's GPU memory was freed (model closed)");
            if (maxChunk > MAX_CHUNK)   // chunk tokens are a grid dimension of ≤ 65,535 blocks in several kernels
                throw new IllegalArgumentException("chunks of " + maxChunk + " tokens: the GPU takes at most " + MAX_CHUNK);
            SessionState s = ws.orDroppingCopies(() -> new SessionState(maxChunk, maxContext));
            states.add(s);
            return s;
        });
    }

    @Override public void copyLayerState(Object state, int layer, float[] first, float[] second, boolean toDevice) {
        mm.context().call(() -> {
            if (closed) throw new IllegalStateException("the model's GPU memory was freed (model closed)");
            SessionState s = (SessionState) state;
            DecoderPlan.Layer l = model.layers().get(layer);
            long a, b, na, nb;
            if (l.anchor() != null) {   // the key and value rings
                a = s.kc[layer];
                b = s.vc[layer];
                na = nb = (long) l.anchor().window() * l.kvHeads() * l.headDim();
            } else if (l.deltaNet() != null) {   // the conv inputs and the rule state
                var dn = l.deltaNet();
                a = s.conv[layer];
                b = s.dnS[layer];
                na = (long) dn.convDim() * (dn.convKernel() - 1);
                nb = (long) dn.valueHeads() * dn.keyDim() * dn.valueDim();
            } else {
                throw new UnsupportedOperationException("layer " + layer + " keeps a KV cache on the device, not a fixed state");
            }
            if (first.length != na || second.length != nb)
                throw new IllegalArgumentException("layer " + layer + ": state of " + na + " + " + nb + " floats, given " + first.length
                        + " + " + second.length);
            // (the session's stream is idle between its steps: a synchronous copy orders itself)
            try (Arena ar = Arena.ofConfined()) {
                MemorySegment buf = ar.allocate(4 * Math.max(na, nb), 16);
                for (int i = 0; i < 2; i++) {
                    long d = i == 0 ? a : b, n = i == 0 ? na : nb;
                    float[] h = i == 0 ? first : second;
                    if (toDevice) {
                        MemorySegment.copy(h, 0, buf, ValueLayout.JAVA_FLOAT, 0, (int) n);
                        cu.copyToDevice(d, buf, 4 * n);
                    } else {
                        cu.copyToHost(buf, d, 4 * n);
                        MemorySegment.copy(buf, ValueLayout.JAVA_FLOAT, 0, h, 0, (int) n);
                    }
                }
            }
            return null;
        });
    }

    @Override public void requestSeal(Object state) {
        if (((SessionState) state).sealed != null) ((SessionState) state).sealed.requestSeal();
    }

    @Override public boolean sealed(Object state) {
        return ((SessionState) state).sealed == null || ((SessionState) state).sealed.isSealed();
    }

    /** Sealed layers once sealed, anchor rings and delta-rule states; -1 while a layer keeps a KV cache (full or sliding). */
    @Override public long stateBytes(Object state) {
        SessionState s = (SessionState) state;
        long sum = s.sealed == null ? 0 : s.sealed.sealedBytes();
        if (sum < 0) return -1;
        for (int i = 0; i < layers.length; i++) {
            DecoderPlan.Layer l = model.layers().get(i);
            if (o1 != null && o1.seals(i)) continue;
            if (l.anchor() != null) sum += 8L * l.anchor().window() * l.kvHeads() * l.headDim();
            else if (l.deltaNet() != null) {
                var dn = l.deltaNet();
                sum += 4L * ((long) dn.convDim() * (dn.convKernel() - 1) + (long) dn.valueHeads() * dn.keyDim() * dn.valueDim());
            } else if (!l.sharesKv()) return -1;
        }
        return sum;
    }

    @Override public long heldBytes(Object state) {
        SessionState s = (SessionState) state;
        return mm.context().call(() -> s.allocated + (s.sealed == null ? 0 : s.sealed.heldBytes()));
    }

    /** The session's hierarchical-head gate for its next steps (copied to the device with a step when it changed). */
    @Override public void gateHead(Object state, double gate) { ((SessionState) state).headGate = gate; }

    /** Frees a session's device memory (also from the engine's cleaner thread); nothing after the model closed. */
    @Override public void release(Object state) {
        try {
            mm.context().call(() -> {
                SessionState s = (SessionState) state;
                if (!closed && states.remove(s)) s.free();
                return null;
            });
        } catch (IllegalStateException e) {
            // the context is gone (process exit): nothing left to free
        }
    }

    @Override public void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits) {
        SessionState s = (SessionState) state;
        if (tokens > s.maxChunk || pos0 + tokens > s.maxContext)
            throw new IllegalArgumentException("chunk of " + tokens + " at " + pos0 + " outside the session's " + s.maxChunk
                    + " tokens / " + s.maxContext + " positions");
        int vocab = model.vocab();
        int rows = logits == null ? 0 : allLogits ? tokens : 1;
        mm.context().call(() -> {
            if (closed) throw new IllegalStateException("the model's GPU memory was freed (model closed)");
            s.hostIn.set(ValueLayout.JAVA_INT, 0, pos0);
            for (int t = 0; t < tokens; t++) s.hostIn.setAtIndex(ValueLayout.JAVA_INT, 1 + t, ids[off + t]);
            if (s.sealed != null && s.sealed.prepare(s.stream, pos0, tokens)) dropDecode(s);
            cu.copyToDeviceAsync(s.in, s.hostIn, 4L * (1 + tokens), s.stream);
            if (s.gates != NULL && Double.compare(s.headGate, s.gateOnDevice) != 0) {   // the head gate, when it changed
                s.hostGates.set(ValueLayout.JAVA_DOUBLE, 0, s.headGate);
                cu.copyToDeviceAsync(s.gates, s.hostGates, 8, s.stream);
                s.gateOnDevice = s.headGate;
            }
            long out;
            MemorySegment host;
            if (tokens == 1) {
                decodeStep(s);
                out = s.last;
                host = s.hostLast;
            } else {
                boolean many = rows > 1;
                if (many) s.ensureAll(tokens);
                out = many ? s.all : s.last;
                host = many ? s.hostAll : s.hostLast;
                boolean gemm = cublas != null && tokens >= gemmMinTokens;
                if (gemm) ws.prepare(s.stream, tokens, many);
                try (Arena a = Arena.ofConfined()) {
                    // cuLaunchKernel copies the argument values when it enqueues: the arena may close after
                    int headRows = rows == 0 ? -1 : many ? 0 : 1;
                    if (PROFILE) {
                        List<Step> chunk = new ArrayList<>();
                        steps(s, s.in + 4, alone(s, tokens), tokens, headRows, out, a, gemm, chunk::add);
                        profiled(chunk, s.stream, "prefill " + tokens + ": ", false);
                    } else {
                        steps(s, s.in + 4, alone(s, tokens), tokens, headRows, out, a, gemm, st -> run(st, s.stream));
                    }
                }
            }
            if (rows > 0) cu.copyToHostAsync(host, out, 4L * rows * vocab, s.stream);
            cu.streamSynchronize(s.stream);
            if (rows > 0) MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, logits, 0, rows * vocab);
            return null;
        });
    }

    /** The scratch of batched steps (a session-shaped set of row buffers with no KV cache) and its span positions. */
    private SessionState batchRows;
    /**
     * Captured steps of one-token rows by row count (and which rows read which skill), valid while {@link #scratchEpoch} is what it was at the capture
     * (any scratch, table or f16 copy reallocated since makes it stale).
     */
    private final java.util.Map<Object, BatchGraph> batchGraphs = new java.util.HashMap<>();
    private long scratchEpoch;
    /** Cleared when a batch step could not be captured (a note says why): they launch one by one from then on. */
    private boolean batchCapture = true;
    /**
     * {@code -Dcmf.cuda.batchGemmMinRows} (default 4): batched steps of at least this many rows take the cuBLAS products,
     * fewer the matvec kernels, which read the weights once per row (docs/GPU.md has the measured crossover).
     */
    private final int batchGemmMinRows;
    /**
     * {@code -Dcmf.cuda.smallBatchRows=N} (0, off, by default: not yet measured on a GPU): int8 products of 2 or more rows
     * that would take the matvec kernels take the small-batch ones (resident_mmvq.cu: the weights read once per 4 or 8
     * rows, each row's numbers those of the matvec kernels), and batched steps of up to N rows of an all-int8 model
     * take them even where {@link #batchGemmMinRows} would take cuBLAS.
     */
    private final int smallBatchRows;
    /**
     * {@code -Dcmf.cuda.smallBatchBlockRows=8|16} (8 by default): the weight rows a block of the small-batch products
     * takes, as an index into {@link Kernels#SMALL_BATCH_BLOCK_ROWS} (16: each x' staged from L2 serves twice the rows,
     * one block of 512 threads an SM instead of two of 256; which is faster is not measured yet).
     */
    private final int smallBatchShape;
    private long batchPos, batchKv;
    private MemorySegment batchHostPos, batchHostKv;
    private int batchSpans;
    /** ra_argmax_rows' output on the device and its pinned host copy, for {@code argmaxRows} rows (0 = none yet). */
    private long argmaxIds;
    private MemorySegment argmaxHost;
    private int argmaxRows;

    /**
     * Several sessions' spans as one step: the products over all rows (cuBLAS from {@link #batchGemmMinRows} rows, else
     * the matvec kernels with a row dimension; with the small-batch products on, an all-int8 model's steps of up to
     * {@link #smallBatchRows} rows take those instead), then per layer one r_attn_rows launch for the leading one-token spans
     * (the decode rows a scheduler puts first) and, for each longer span, its q/k norm, rope, KV append and prefill
     * attention over its own session's caches; the head over the rows asked for. A step of one-token rows only that
     * all want logits replays a graph captured per row count. (A one-span step
     * comes to the session's own {@link #forward(Object, int[], int, int, int, float[], boolean)}: Graph routes it there.)
     */
    @Override public void forward(List<Span> spans, float[] logits, int vocab) { step(spans, logits, null, vocab); }

    /** As {@link #forward(List, float[], int)}, each logit row's argmax taken on the GPU (ra_argmax_rows): only the ids come back. */
    @Override public void forwardArgmax(List<Span> spans, int[] ids, int vocab) { step(spans, null, ids, vocab); }

    /**
     * A batched step; its logit rows come back whole into {@code logits}, or (ids not null) as their argmaxes. Spans of
     * skills run in an order of their own (one-token spans first, as before, then by skill: each skill's rows one
     * group for its products) and their rows come back in the caller's order.
     */
    private void step(List<Span> spans, float[] logits, int[] ids, int vocab) {
        if (spans.stream().allMatch(Span::plain)) {
            stepInOrder(spans, logits, ids, vocab);
            return;
        }
        for (Span sp : spans) {
            if (sp.skill() != 0 && (overlays == null || !overlays.runs(sp.skill())))
                throw new IllegalArgumentException("skill slot " + sp.skill() + " does not run on this device");
            if (sp.adapter() != 0 && (overlays == null || !overlays.adapterRuns(sp.adapter())))
                throw new IllegalArgumentException("adapter slot " + sp.adapter() + " was not installed on this device");
            if (sp.task() != 0 && (overlays == null || !overlays.taskRuns(sp.task())))
                throw new IllegalArgumentException("task slot " + sp.task() + " was not installed on this device");
        }
        Integer[] order = new Integer[spans.size()];
        for (int i = 0; i < order.length; i++) order[i] = i;
        java.util.Arrays.sort(order, java.util.Comparator.comparingInt((Integer i) -> spans.get(i).tokens() == 1 ? 0 : 1)
                .thenComparingInt(i -> spans.get(i).skill()).thenComparingInt(i -> spans.get(i).adapter())
                .thenComparingDouble(i -> spans.get(i).adapterScale()).thenComparingInt(i -> spans.get(i).task()));
        List<Span> sorted = new ArrayList<>();
        int[] firstRow = new int[spans.size() + 1];   // each span's first logit row in the caller's order
        for (int i = 0; i < order.length; i++) {
            sorted.add(spans.get(order[i]));
            firstRow[i + 1] = firstRow[i] + spans.get(i).logitRows();
        }
        int want = firstRow[spans.size()];
        float[] lg = logits == null ? null : new float[want * vocab];
        int[] id = ids == null ? null : new int[want];
        stepInOrder(sorted, lg, id, vocab);
        for (int i = 0, r = 0; i < order.length; i++) {   // back to the caller's order
            int n = spans.get(order[i]).logitRows(), to = firstRow[order[i]];
            if (lg != null) System.arraycopy(lg, r * vocab, logits, to * vocab, n * vocab);
            if (id != null) System.arraycopy(id, r, ids, to, n);
            r += n;
        }
    }

    /**
     * The skill and adapter runs of {@code spans}' rows (their logit rows with {@code logitRows}), adjacent spans of one
     * skill, adapter and scale merged; null when all read the backbone alone.
     */
    private static OverlayWeights.Run[] skillRuns(List<Span> spans, boolean logitRows) {
        if (spans.stream().allMatch(Span::plain)) return null;
        List<OverlayWeights.Run> out = new ArrayList<>();
        int r = 0;
        for (Span sp : spans) {
            int n = logitRows ? sp.logitRows() : sp.tokens();
            if (n == 0) continue;
            OverlayWeights.Run last = out.isEmpty() ? null : out.getLast();
            float scale = sp.adapter() == 0 ? 0f : sp.adapterScale();
            if (last != null && last.skill() == sp.skill() && last.adapter() == sp.adapter() && last.scale() == scale && last.task() == sp.task())
                out.set(out.size() - 1, new OverlayWeights.Run(last.start(), last.rows() + n, last.skill(), last.adapter(), scale, last.task()));
            else out.add(new OverlayWeights.Run(r, n, sp.skill(), sp.adapter(), scale, sp.task()));
            r += n;
        }
        return out.toArray(OverlayWeights.Run[]::new);
    }

    /** The step's logit-row runs (see {@link #runs}), for a gathered head. */
    private OverlayWeights.Run[] logitRuns;

    private void stepInOrder(List<Span> spans, float[] logits, int[] ids, int vocab) {
        int rows = 0, want = 0;
        for (Span sp : spans) {
            SessionState st = (SessionState) sp.state();
            if (sp.pos0() + sp.tokens() > st.maxContext)
                throw new IllegalArgumentException(sp.tokens() + " tokens at " + sp.pos0() + " outside the session's " + st.maxContext + " positions");
            rows += sp.tokens();
            want += sp.logitRows();
        }
        if (rows > MAX_CHUNK) throw new IllegalArgumentException("a step of " + rows + " rows: the GPU takes at most " + MAX_CHUNK);
        final int t = rows, logitRows = want;
        mm.context().call(() -> {
            if (closed) throw new IllegalStateException("the model's GPU memory was freed (model closed)");
            OverlayWeights.Run[] stepRuns = skillRuns(spans, false);
            if (stepRuns != null) {   // the step's skills resident (uploaded on first use); a copy given back stales captures
                java.util.Set<Integer> slots = new java.util.TreeSet<>();
                for (OverlayWeights.Run r : stepRuns) if (r.skill() != 0) slots.add(r.skill());
                if (overlays.ensure(slots)) scratchEpoch++;
                if (overlays.growLowRank(t)) scratchEpoch++;   // (an adapter's A·x rows)
                overlays.prepareTasks(stepRuns, ResidentWeights::columnScales);
            }
            try {
                runs = stepRuns;
                logitRuns = skillRuns(spans, true);
                return stepOnOwner(spans, logits, ids, vocab, t, logitRows);
            } finally {
                runs = logitRuns = null;
            }
        });
    }

    /** Owner thread: the step of {@link #stepInOrder} with the skill runs set. */
    private Void stepOnOwner(List<Span> spans, float[] logits, int[] ids, int vocab, int t, int logitRows) {
        {
            SessionState w = batchScratch(t, spans.size());
            Seq[] seqs = new Seq[spans.size()];
            boolean allRows = logitRows == t;
            for (int i = 0, r = 0; i < seqs.length; i++) {
                Span sp = spans.get(i);
                SessionState st = (SessionState) sp.state();
                if (!states.contains(st)) throw new IllegalStateException("span " + i + ": a released or foreign session state");
                batchHostPos.setAtIndex(ValueLayout.JAVA_INT, i, sp.pos0());
                for (int k = 0; k < sp.tokens(); k++) w.hostIn.setAtIndex(ValueLayout.JAVA_INT, 1 + r + k, sp.ids()[sp.off() + k]);
                if (st.sealed != null && st.sealed.prepare(st.stream, sp.pos0(), sp.tokens())) dropDecode(st);
                seqs[i] = new Seq(r, sp.tokens(), batchPos + 4L * i, st.kc, st.vc, st.conv, st.dnS, st.sealed);
                r += sp.tokens();
            }
            cu.copyToDeviceAsync(w.in, w.hostIn, 4L * (1 + t), w.stream);
            cu.copyToDeviceAsync(batchPos, batchHostPos, 4L * seqs.length, w.stream);
            if (w.gates != NULL && logitRows > 0) {   // each logit row's head gate, in span order
                for (int i = 0, g = 0; i < seqs.length; i++)
                    for (int k = 0; k < spans.get(i).logitRows(); k++)
                        w.hostGates.setAtIndex(ValueLayout.JAVA_DOUBLE, g++, ((SessionState) spans.get(i).state()).headGate);
                cu.copyToDeviceAsync(w.gates, w.hostGates, 8L * logitRows, w.stream);
            }
            // the leading one-token spans (decode rows; a scheduler puts them first): one attention launch a layer
            // (r_attn_rows) over their cache tables; a step of nothing else may replay a captured graph
            int oneToken = 0;
            while (oneToken < seqs.length && seqs[oneToken].tokens() == 1) oneToken++;
            boolean decodeRows = oneToken == seqs.length;
            if (oneToken > 0) {
                int n = oneToken;
                for (int li = 0; li < layers.length; li++)
                    for (int i = 0; i < n; i++) {
                        batchHostKv.setAtIndex(ValueLayout.JAVA_LONG, (long) li * n + i, seqs[i].kc()[li]);
                        batchHostKv.setAtIndex(ValueLayout.JAVA_LONG, (long) (layers.length + li) * n + i, seqs[i].vc()[li]);
                    }
                cu.copyToDeviceAsync(batchKv, batchHostKv, 2L * 8 * layers.length * n, w.stream);
            }
            boolean gemm = cublas != null && t >= batchGemmMinRows && !(int8Products && t <= smallBatchRows);
            boolean headGemm = gemm && logitRows > 1;
            if (gemm) ws.prepare(w.stream, t, headGemm);
            if (logitRows > 1) w.ensureAll(logitRows);
            long out = logitRows > 1 ? w.all : w.last;
            MemorySegment host = logitRows > 1 ? w.hostAll : w.hostLast;
            if (decodeRows && allRows && graphs && batchCapture && !recurrent && !PROFILE) {
                // the same launches for any t sessions' one-token rows (ids, positions and cache tables are read from
                // device memory): captured once per row count, replayed while the scratch stays where it was
                Object key = runs == null ? (Object) t : t + " " + java.util.Arrays.toString(runs);   // which rows read which skill
                BatchGraph bg = batchGraphs.get(key);
                if (bg != null && bg.epoch() != scratchEpoch) { dropBatchGraphs(); bg = null; }
                if (bg == null && batchGraphs.size() >= 64) dropBatchGraphs();   // (skill arrangements come and go)
                if (bg == null) bg = captureBatch(key, w, seqs, t, out, gemm);
                if (bg != null) {
                    cu.graphLaunch(bg.exec(), w.stream);
                    logitsBack(w, out, host, logitRows, vocab, logits, ids);
                    return null;
                }
            }
            try (Arena a = Arena.ofConfined()) {
                List<Step> profiledSteps = PROFILE ? new ArrayList<>() : null;
                Steps L = PROFILE ? profiledSteps::add : st -> run(st, w.stream);
                steps(w, w.in + 4, seqs, oneToken > 0 ? batchKv : NULL, oneToken, t, allRows ? 0 : -1, out, a, gemm, L);
                if (!allRows && logitRows > 0) {   // the rows asked for, gathered in span order, then the head
                    int hidden = model.hidden(), g = 0;
                    for (int i = 0; i < seqs.length; i++) {
                        int n = spans.get(i).logitRows();
                        if (n == 0) continue;
                        long from = w.x + 4L * (seqs[i].start() + seqs[i].tokens() - n) * hidden;
                        cu.copyDeviceAsync(w.g + 4L * g * hidden, from, 4L * n * hidden, w.stream);
                        g += n;
                    }
                    OverlayWeights.Run[] stepRuns = runs;
                    runs = logitRuns;
                    head(L, a, w, w.g, logitRows, out, headGemm);
                    runs = stepRuns;
                }
                if (PROFILE) profiled(profiledSteps, w.stream, "batch " + t + (decodeRows ? " rows: " : ": "), false);
            }
            logitsBack(w, out, host, logitRows, vocab, logits, ids);
            return null;
        }
    }

    /** Owner thread: the step's logit rows (at {@code out}) to the host whole, or their argmaxes into {@code ids}; then waits. */
    private void logitsBack(SessionState w, long out, MemorySegment host, int logitRows, int vocab, float[] logits, int[] ids) {
        if (logitRows == 0) { cu.streamSynchronize(w.stream); return; }
        if (ids == null) {
            cu.copyToHostAsync(host, out, 4L * logitRows * vocab, w.stream);
            cu.streamSynchronize(w.stream);
            MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, logits, 0, logitRows * vocab);
            return;
        }
        if (argmaxRows < logitRows) {
            if (argmaxIds != NULL) cu.memFree(argmaxIds);
            if (argmaxHost != null) cu.memFreeHost(argmaxHost);
            argmaxIds = NULL;
            argmaxHost = null;
            argmaxRows = 0;
            int cap = Math.max(logitRows, 64);
            argmaxIds = cu.memAlloc(4L * cap);
            argmaxHost = cu.memAllocHost(4L * cap);
            argmaxRows = cap;
        }
        try (Arena a = Arena.ofConfined()) {
            run(launch("argmax", kernels.fnArgmax, logitRows, 1, 1, 256, a, out, argmaxIds, vocab), w.stream);
            cu.copyToHostAsync(argmaxHost, argmaxIds, 4L * logitRows, w.stream);
            cu.streamSynchronize(w.stream);
        }
        MemorySegment.copy(argmaxHost, ValueLayout.JAVA_INT, 0, ids, 0, logitRows);
    }

    private void freeBatchTables() {
        scratchEpoch++;
        if (batchPos != NULL) cu.memFree(batchPos);
        if (batchHostPos != null) cu.memFreeHost(batchHostPos);
        if (batchKv != NULL) cu.memFree(batchKv);
        if (batchHostKv != null) cu.memFreeHost(batchHostKv);
        batchPos = batchKv = NULL;
        batchHostPos = batchHostKv = null;
        batchSpans = 0;
    }

    /** A captured batch step: its graph, executable, the arena holding its launch arguments, and the epoch it belongs to. */
    private record BatchGraph(MemorySegment graph, MemorySegment exec, Arena args, long epoch) {
        void free(CudaDriver cu) {
            cu.graphExecDestroy(exec);
            cu.graphDestroy(graph);
            args.close();
        }
    }

    private void dropBatchGraphs() {
        for (BatchGraph g : batchGraphs.values()) g.free(cu);
        batchGraphs.clear();
    }

    /**
     * Owner thread: captures the step of {@code t} one-token rows; null (and no capture from now on, with a note) when
     * the driver or cuBLAS refuses it, so the caller launches one by one.
     */
    private BatchGraph captureBatch(Object key, SessionState w, Seq[] seqs, int t, long out, boolean gemm) {
        Arena args = Arena.ofShared();
        try {
            List<Step> made = new ArrayList<>();
            steps(w, w.in + 4, seqs, batchKv, t, t, 0, out, args, gemm, made::add);
            Captured c = capture(w.stream, made);
            BatchGraph bg = new BatchGraph(c.graph(), c.exec(), args, scratchEpoch);
            batchGraphs.put(key, bg);
            return bg;
        } catch (RuntimeException e) {
            args.close();
            if (!(e instanceof CudaException)) throw e;
            batchCapture = false;
            mm.note("batched decode steps launch one by one: capturing one failed (" + e.getMessage() + ")");
            return null;
        }
    }

    /** Owner thread: the batch scratch, grown to {@code rows} rows and {@code spans} spans. */
    private SessionState batchScratch(int rows, int spans) {
        if (batchRows == null || batchRows.maxChunk < rows) {
            if (batchRows != null) { states.remove(batchRows); batchRows.free(); batchRows = null; }
            scratchEpoch++;
            int cap = Math.min(MAX_CHUNK, Math.max(rows, 64));
            batchRows = ws.orDroppingCopies(() -> new SessionState(cap, 1, cap, false));
            states.add(batchRows);
        }
        if (batchSpans < spans) {
            freeBatchTables();
            int cap = Math.max(spans, 64);
            long kvBytes = 2L * 8 * layers.length * cap;   // per layer, the rows' key then value cache addresses
            try {
                batchPos = cu.memAlloc(4L * cap);
                batchHostPos = cu.memAllocHost(4L * cap);
                batchKv = cu.memAlloc(kvBytes);
                batchHostKv = cu.memAllocHost(kvBytes);
            } catch (CudaException e) {
                freeBatchTables();
                throw e;
            }
            batchSpans = cap;
        }
        return batchRows;
    }

    /** Owner thread: forgets the session's decode step (its sealed layers' buffers or phase changed): made again at the next. */
    private void dropDecode(SessionState s) {
        if (s.exec != null) cu.graphExecDestroy(s.exec);
        if (s.graph != null) cu.graphDestroy(s.graph);
        s.exec = s.graph = null;
        s.decode = null;
    }

    /** Owner thread: one token's step, as a replayed graph (captured on first use) or launch by launch. */
    private void decodeStep(SessionState s) {
        if (s.decode == null) {
            List<Step> made = new ArrayList<>();
            steps(s, s.in + 4, alone(s, 1), 1, 1, s.last, s.arena, false, made::add);
            s.decode = programmatic(made);
        }
        if (PROFILE) {
            profiled(s.decode, s.stream, "", true);
            return;
        }
        if (!graphs) {
            for (Step l : s.decode) run(l, s.stream);
            return;
        }
        if (s.exec == null) s.exec = capture(s);
        cu.graphLaunch(s.exec, s.stream);
    }

    /**
     * Owner thread: captures the decode step and instantiates it; on any failure (a launch refused while
     * capturing, the instantiation failing) the graph made so far is destroyed and the session keeps no graph,
     * so the next step captures afresh and nothing leaks.
     */
    private MemorySegment capture(SessionState s) {
        Captured c = capture(s.stream, s.decode);
        s.graph = c.graph();
        return c.exec();
    }

    /** A captured graph and its executable. */
    private record Captured(MemorySegment graph, MemorySegment exec) {}

    /**
     * Owner thread: captures {@code steps} on {@code stream} and instantiates them; on any failure the graph made so far
     * is destroyed and the exception thrown, nothing kept.
     */
    private Captured capture(MemorySegment stream, List<Step> steps) {
        cu.beginCapture(stream, CudaDriver.CAPTURE_THREAD_LOCAL);
        MemorySegment g = null;
        try {
            try {
                for (Step l : steps) run(l, stream);
            } catch (RuntimeException | Error e) {
                try {
                    g = cu.endCapture(stream);   // ends the capture; an invalidated one may report an error here
                } catch (RuntimeException suppressed) {
                    e.addSuppressed(suppressed);
                }
                throw e;
            }
            g = cu.endCapture(stream);
            return new Captured(g, cu.graphInstantiate(g));
        } catch (RuntimeException | Error e) {
            if (g != null && !MemorySegment.NULL.equals(g)) {
                try {
                    cu.graphDestroy(g);
                } catch (RuntimeException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw e;
        }
    }


    private void run(Step st, MemorySegment stream) {
        switch (st) {
            case Launch l -> launch(l, stream);
            case Gemm g -> cublas.gemm(ws.cublasHandle(), Cublas.OP_T, Cublas.OP_N, g.m(), g.n(), g.k(), one, g.a(), g.aType(), g.k(),
                    g.b(), g.bType(), g.k(), zero, g.c(), Cublas.R_32F, g.m());
            case Gemms g -> cublas.gemmStridedBatched(ws.cublasHandle(), Cublas.OP_T, Cublas.OP_N, g.m(), g.n(), g.k(), one, g.a(),
                    g.aType(), g.k(), g.strideA(), g.b(), g.bType(), g.k(), g.strideB(), zero, g.c(), Cublas.R_32F, g.m(),
                    g.strideC(), g.count());
        }
    }

    /** Whether a product's activations go in as scaled f16 parts (f16 and int8 weights, exact in f16), else bf16. */
    private static boolean f16Parts(DType weights) { return weights == DType.F16 || kind(weights) == 3; }

    /**
     * Parts an f32 activation is split into for a GEMM on 16-bit inputs (see r_split): 22 significant bits (2 scaled
     * f16 parts) or 24 (3 bf16 parts); with {@link #fastPrefill} 11 (1 scaled f16 part) or 16 (2 bf16 parts).
     */
    private int parts(DType weights) {
        if (weights == DType.F32) return 1;
        return f16Parts(weights) ? (fastPrefill ? 1 : 2) : (fastPrefill ? 2 : 3);
    }

    /** The weight of a part relative to the one before it: 2^-11 for the scaled f16 parts, 1 for bf16. */
    private static float step(DType weights) { return f16Parts(weights) ? 1f / 2048 : 1f; }

    /**
     * The GEMM of one product for a prefill chunk into {@code c} (column-major [rows, parts·t]); returns the parts.
     * x is f32 [t, cols], normalised first when {@code normEps} is a number; f16 parts write their per-token scale
     * into {@code ts}.
     */
    private int product(Steps L, Arena a, String name, W w, long x, float normEps, int t, long c, long ts) {
        boolean normed = !Float.isNaN(normEps);
        if (w.dtype() == DType.F32 && !normed) {
            L.add(new Gemm(name, w.weights(), Cublas.R_32F, x, Cublas.R_32F, c, w.rows(), t, w.cols()));
            return 1;
        }
        if (w.dtype() == DType.F32) throw new IllegalStateException(name + ": f32 weights with a folded norm");
        int parts = parts(w.dtype());
        L.add(launch(name + "_split", kernels.fnSplit, t, 1, 1, 256, a, x, w.colField(), normed ? 1 : 0,
                normed ? normEps : 0f, ws.sB, t, w.cols(), f16Parts(w.dtype()) ? 1 : 0, parts, ts));
        return gemmParts(L, a, name, w, ws.sB, t, c);
    }

    /**
     * The GEMM of {@code w} with activations already in 16-bit parts at {@code b} ([parts·t, cols]) into {@code c}
     * (the int8 widening first when no f16 copy is kept); returns the parts.
     */
    private int gemmParts(Steps L, Arena a, String name, W w, long b, int t, long c) {
        boolean f16 = f16Parts(w.dtype());
        int type = f16 ? Cublas.R_16F : Cublas.R_16BF;
        int parts = parts(w.dtype());
        long weights = w.weights();
        Long copy = ws.copyOf(weights);
        if (copy != null) {
            weights = copy;
        } else if (kind(w.dtype()) == 3) {
            L.add(ws.widen(a, name + "_widen", weights, ws.sW, (long) w.rows() * w.cols()));
            weights = ws.sW;
        }
        L.add(new Gemm(name, weights, type, b, type, c, w.rows(), parts * t, w.cols()));
        return parts;
    }


    /** A prefill product with its epilogue: y = W·x·rs (+ bias) (+ y when accumulating). */
    private void gemm(Steps L, Arena a, String name, W w, long bias, long x, long y, int t, boolean accumulate, float normEps) {
        if (runs != null && overlays.touches(runs, List.of(w), bias)) {   // per group; a group of few rows by the matvec kernel
            for (OverlayWeights.Group g : overlays.groups(runs, w, bias)) {
                W m = g.w();
                long b = g.bias(), gx = x + 4L * g.start() * w.cols(), gy = y + 4L * g.start() * w.rows();
                // (f32 weights go to cuBLAS as they are: a mask's column scales need the matvec kernel)
                if (g.rows() >= batchGemmMinRows && !(m.dtype() == DType.F32 && m.colField() != NULL)) gemmRows(L, a, name, m, b, gx, gy, g.rows(), accumulate, normEps);
                else matvecRows(L, a, name, m, b, gx, gy, g.rows(), accumulate, normEps);
            }
        } else {
            gemmRows(L, a, name, w, bias, x, y, t, accumulate, normEps);
        }
        lowRank(L, a, name, w, x, y, normEps);
    }

    private void gemmRows(Steps L, Arena a, String name, W w, long bias, long x, long y, int t, boolean accumulate, float normEps) {
        int parts = product(L, a, name, w, x, normEps, t, ws.sC1, ws.sS1);
        out(L, a, name, w, bias, y, t, accumulate, parts, ws.sC1, ws.sS1);
    }

    /** The epilogue of a product whose GEMM wrote {@code c} (its f16 parts' token scales at {@code ts}). */
    private void out(Steps L, Arena a, String name, W w, long bias, long y, int t, boolean accumulate, int parts, long c, long ts) {
        L.add(launch(name + "_out", kernels.fnGemmOut, (w.rows() + 1023) / 1024, t, 1, 256, a, c, w.rowScales(), bias, y, w.rows(), t, parts, accumulate ? 1 : 0, f16Parts(w.dtype()) ? ts : NULL, step(w.dtype())));
    }

    /**
     * Whether products of one input (q, k, v; gate, up) take their parts from one r_split3 launch: fusion on, 16-bit
     * weights (f32 ones take x as it is) of one precision.
     */
    private boolean splitTogether(W... m) {
        if (!fusePrefill) return false;
        for (W w : m)
            if (w.dtype() == DType.F32 || f16Parts(w.dtype()) != f16Parts(m[0].dtype()) || parts(w.dtype()) != parts(m[0].dtype())
                    || w.cols() != m[0].cols()) return false;
        return true;
    }

    /** 16-bit elements per token that the widest fused split (r_split3) writes: its distinct column-scale regions × parts × cols. */
    private long widestFusedSplit() {
        long u = 0;
        for (LayerWeights l : layers) {
            if (l.q() != null) u = Math.max(u, l.k() == null ? splitUnits(l.q()) : splitUnits(l.q(), l.k(), l.v()));
            if (l.gate() != null && l.up() != null) u = Math.max(u, splitUnits(l.gate(), l.up()));
        }
        return u;
    }

    private long splitUnits(W... m) {
        if (!splitTogether(m)) return 0;
        long regions = java.util.Arrays.stream(m).mapToLong(W::colField).distinct().count();
        return regions * parts(m[0].dtype()) * m[0].cols();
    }

    /**
     * One r_split3 launch for up to 3 products of x: x read once, each distinct column-scale vector's parts at its
     * own place in ws.sB (the j-th at j·parts·t·cols) with its token scale in {@code ts[i]} of its first matrix; a
     * matrix whose column scales are an earlier one's (f16/bf16 weights share the folded norm's vector, or have none)
     * shares that one's parts and scale. Returns {parts, scale} per matrix.
     */
    private long[][] split3(Steps L, Arena a, String name, W[] m, long x, float normEps, int t, long[] ts) {
        boolean normed = !Float.isNaN(normEps);
        int parts = parts(m[0].dtype()), cols = m[0].cols();
        long region = 2L * parts * t * cols;
        long[] cf = new long[3], out = new long[3], scale = new long[3];
        long[][] at = new long[m.length][];
        int n = 0;
        for (int i = 0; i < m.length; i++) {
            int j = 0;
            while (j < n && cf[j] != m[i].colField()) j++;
            if (j == n) { cf[n] = m[i].colField(); out[n] = ws.sB + n * region; scale[n] = ts[i]; n++; }
            at[i] = new long[] {out[j], scale[j]};
        }
        L.add(launch(name + "_split", kernels.fnSplit3, t, 1, 1, 256, a, x, normed ? 1 : 0, normed ? normEps : 0f, t, cols,
                f16Parts(m[0].dtype()) ? 1 : 0, parts, n, cf[0], out[0], scale[0], cf[1], out[1], scale[1], cf[2], out[2], scale[2]));
        return at;
    }

    /** q, k and v of one input: one split (r_split3), three GEMMs, one epilogue (r_gemm_out3). */
    private void qkvGemm(Steps L, Arena a, LayerWeights w, SessionState s, long q, long k, long v, long x, float normEps, int t) {
        W[] m = {w.q(), w.k(), w.v()};
        long[] bias = {w.qBias(), w.kBias(), w.vBias()}, y = {q, k, v};
        long[][] at = split3(L, a, "qkv", m, x, normEps, t, new long[] {ws.sS1, ws.sS1 + 4L * t, ws.sS1 + 8L * t});
        int parts = parts(m[0].dtype());
        long[] c = {ws.sC1, ws.sC2, ws.sC2 + ((4L * m[1].rows() * parts * t + 255) & ~255L)};   // v's output 256-byte aligned (ws.sC2 is: float4 epilogue, cuBLAS)
        gemmParts(L, a, "q", m[0], at[0][0], t, c[0]);
        gemmPair(L, a, "k", "v", m[1], m[2], at[1][0], at[2][0], c[1], c[2], t, KV_PAIR_MAX_COLUMNS);
        int blocks = 0;
        for (W w1 : m) blocks += (w1.rows() + 1023) / 1024;
        boolean scaled = f16Parts(m[0].dtype());
        L.add(launch("qkv_out", kernels.fnGemmOut3, blocks, t, 1, 256, a,
                c[0], m[0].rowScales(), bias[0], y[0], m[0].rows(), scaled ? at[0][1] : NULL,
                c[1], m[1].rowScales(), bias[1], y[1], m[1].rows(), scaled ? at[1][1] : NULL,
                c[2], m[2].rowScales(), bias[2], y[2], m[2].rows(), scaled ? at[2][1] : NULL, t, parts, step(m[0].dtype())));
    }

    /**
     * Columns (parts · tokens) up to which gate and up go as one strided-batched GEMM, and k and v (H200, llama-8b, 32
     * layers of a 512-token chunk, tools/device-bench/gemm_batch.cu, µs: gate/up at 512 columns 5,583 → 4,950, at
     * 1,024 9,592 → 10,880; k/v 776 → 572 and 1,106 → 945, and in the chunk's sequence of products 10,803 → 10,250 and
     * 20,629 → 20,028). Wider chunks were not measured: two calls there.
     */
    static final int PAIR_GEMM_MAX_COLUMNS = 512, KV_PAIR_MAX_COLUMNS = 1024;

    /**
     * The GEMMs of two products of one input's parts (gate and up; k and v) into c1 and c2: one strided-batched call
     * where {@link #pairGemm} allows it, else one {@link #gemmParts} each. Returns their parts (the same for both: they
     * were split together).
     */
    private int gemmPair(Steps L, Arena a, String name1, String name2, W first, W second, long b1, long b2, long c1, long c2,
                         int t, int maxColumns) {
        Gemms pair = pairGemm(name1 + "_" + name2, first, second, b1, b2, c1, c2, t, maxColumns);
        if (pair != null) {
            L.add(pair);
            return parts(first.dtype());
        }
        int p1 = gemmParts(L, a, name1, first, b1, t, c1), p2 = gemmParts(L, a, name2, second, b2, t, c2);
        if (p1 != p2) throw new IllegalStateException(name1 + " and " + name2 + " of different precisions");
        return p1;
    }

    /**
     * Two products of one shape (gate and up; k and v) as one cuBLAS strided-batched call, or null for two calls: when
     * both are int8 matrices whose f16 copies lie one matrix apart (PrefillWorkspace copies them so), the second's parts
     * follow the first's (or are the same parts: stride 0) and so does its output, the chunk's parts·t columns are at
     * most {@code maxColumns}, and the library has the call.
     */
    private Gemms pairGemm(String name, W first, W second, long b1, long b2, long c1, long c2, int t, int maxColumns) {
        int parts = parts(first.dtype());
        if (!cublas.hasStridedBatched() || (long) parts * t > maxColumns || !PrefillWorkspace.pairable(first, second)
                || parts(second.dtype()) != parts || b2 < b1 || c2 < c1) return null;
        Long w1 = ws.copyOf(first.weights()), w2 = ws.copyOf(second.weights());
        long n = (long) first.rows() * first.cols();
        if (w1 == null || w2 == null || w2 - w1 != 2 * n) return null;
        return new Gemms(name, w1, n, Cublas.R_16F, b1, (b2 - b1) / 2, Cublas.R_16F, c1, (c2 - c1) / 4,
                first.rows(), parts * t, first.cols(), 2);
    }

    /** r_glu_split_N's index for a SwiGLU of {@code rows} feeding {@code down}, or -1 (then r_glu_out, then down's own split). */
    private int gluSplit(W down, int rows) {
        if (!fusePrefill || down.dtype() == DType.F32 || rows % 4 != 0) return -1;
        for (int i = 0; i < GLU_SPLIT_N.length; i++) if (rows <= GLU_SPLIT_N[i] * 2048) return i;
        return -1;
    }

    /**
     * Owner thread: the steps one by one, an event after each; their GPU times added to the profile under
     * {@code prefix + name} (a decode step counts towards the per-step average, a prefill chunk is reported whole).
     */
    private void profiled(List<Step> steps, MemorySegment stream, String prefix, boolean decodeStep) {
        int n = steps.size();
        MemorySegment[] ev = new MemorySegment[n + 1];
        for (int i = 0; i <= n; i++) ev[i] = cu.eventCreate();
        try {
            cu.eventRecord(ev[0], stream);
            for (int i = 0; i < n; i++) {
                run(steps.get(i), stream);
                cu.eventRecord(ev[i + 1], stream);
            }
            var into = decodeStep ? profile : prefillProfile;
            for (int i = 0; i < n; i++) {
                double[] p = into.computeIfAbsent(prefix + steps.get(i).name(), k -> new double[2]);
                p[0] += cu.elapsedMs(ev[i], ev[i + 1]);
                p[1]++;
            }
            if (decodeStep) profiledSteps++;
        } finally {
            for (MemorySegment e : ev) cu.eventDestroy(e);
        }
    }

    /** The profile as lines: per launch kind, µs per decode step and launches per step. */
    private String profileReport() {
        StringBuilder sb = new StringBuilder("cmf: cuda profile, " + profiledSteps + " decode steps (GPU µs per step, launches per step):");
        double total = 0;
        for (var e : profile.entrySet()) {
            double us = 1000 * e.getValue()[0] / Math.max(1, profiledSteps);
            total += us;
            sb.append(String.format(java.util.Locale.ROOT, "%n  %-22s %9.1f µs  %5.1f", e.getKey(), us, e.getValue()[1] / Math.max(1, profiledSteps)));
        }
        sb.append(String.format(java.util.Locale.ROOT, "%n  %-22s %9.1f µs", "total", total));
        if (!prefillProfile.isEmpty()) {
            sb.append(String.format("%ncmf: cuda profile, prefill chunks (GPU µs summed over every chunk of that size, launches):"));
            double all = 0;
            for (var e : prefillProfile.entrySet()) {
                all += 1000 * e.getValue()[0];
                sb.append(String.format(java.util.Locale.ROOT, "%n  %-32s %10.1f µs  %6d", e.getKey(), 1000 * e.getValue()[0], (long) e.getValue()[1]));
            }
            sb.append(String.format(java.util.Locale.ROOT, "%n  %-32s %10.1f µs", "total", all));
        }
        return sb.toString();
    }

    private void launch(Launch l, MemorySegment stream) {
        if (l.programmatic()) cu.launchProgrammatic(launchConfig, l.fn(), l.gx(), l.gy(), l.gz(), l.block(), 1, 1, 0, stream, l.params());
        else cu.launch(l.fn(), l.gx(), l.gy(), l.gz(), l.block(), 1, 1, 0, stream, l.params());
    }

    /**
     * A decode step's launches with programmatic dependent launch where it is safe: a kernel that waits (every
     * resident.cu product and the decode attention, which also does the step's rope and KV append, call
     * griddepcontrol.wait before touching another kernel's data) right after another kernel. Such a kernel's blocks
     * start while the previous kernel drains, once all of that kernel's blocks have started (the embedding, the
     * products and the attention trigger their dependents first thing; a kernel that does not, triggers them by
     * finishing), and issue their first weight loads before the wait (docs/GPU.md, "programmatic dependent launch
     * (decode)", has what it gains). Unchanged when the device or driver cannot.
     */
    private List<Step> programmatic(List<Step> steps) {
        if (!pdl) return steps;
        List<Step> out = new ArrayList<>(steps.size());
        for (Step st : steps) {   // a decode step is launches only (no cuBLAS GEMM); its first has no kernel before it
            if (!out.isEmpty() && st instanceof Launch l && waits.contains(l.fn().address()))
                st = new Launch(l.name(), l.fn(), l.gx(), l.gy(), l.gz(), l.block(), l.params(), true);
            out.add(st);
        }
        return out;
    }

    /**
     * One sequence's rows of layer {@code li} as a prompt chunk: q/k norm, rope and KV append, then flash-attention tiles,
     * K/V shared by a kv head's query heads, no combine. q is left normed and roped in place.
     */
    private void prefillAttention(Steps L, Arena a, SessionState s, LayerWeights w, DecoderPlan.Layer spec, int li, Seq sq, long kBuf,
                                  long vBuf, int qn, int kn, float eps, int off) {
        int heads = model.heads(), hd = spec.headDim(), kvHeads = spec.kvHeads(), qDim = heads * hd, kvDim = kvHeads * hd;
        long qo = 4L * sq.start() * qDim, ko = 4L * sq.start() * kvDim;
        long kqo = s.kq == NULL ? NULL : s.kq + ko, vqo = s.kq == NULL ? NULL : vBuf + ko;   // q8: the chunk's own rows
        // a warp per head row, 4 per block (ROPE_WARPS, resident.cu's R_ROPE_WARPS)
        L.add(launch("qk_norm_rope_append", kernels.fnRope, (heads + kvHeads + ROPE_WARPS - 1) / ROPE_WARPS, sq.tokens(), 1, 32 * ROPE_WARPS, a, s.q + qo, kBuf + ko, vBuf + ko, sq.kc()[li], sq.vc()[li], w.qNorm(), w.kNorm(), qn, kn, eps, off,
                w.invFreq(), spec.rope().rotaryDim(), spec.rope().attentionScaling(), heads, kvHeads, hd, sq.pos(), kqo));
        int b = prefillBucket(hd);
        boolean tc = b < PREFILL_TC_BUCKETS && kernels.fnPrefillTc[b] != null;   // tensor cores: sm_80+, hd ≤ 128
        int[] grid = prefillGrid(sq.tokens(), heads, kvHeads, hd, tc);
        L.add(launch("attn_prefill", tc ? kernels.fnPrefillTc[b] : kernels.fnPrefill[b], grid[0], grid[1], 1, 128, a, s.q + qo,
                sq.kc()[li], sq.vc()[li], s.att + qo, sq.tokens(), heads, kvHeads, hd, spec.scale(), sq.pos(), spec.window(), w.sinks(),
                kqo, vqo));
    }

    /**
     * A sealed ({@code --o1}) layer, per sequence: while exact, the prompt path over its own growing cache with the
     * rotated queries kept for the landmarks (decode steps too: they need their rotated q); once sealed, SealedSteps'
     * rope, ring + sinks + landmarks attention and ring commit.
     */
    private void sealedAttention(Steps L, Arena a, SessionState s, LayerWeights w, DecoderPlan.Layer spec, int li, Seq[] seqs, long kBuf,
                                 long vBuf, int qn, int kn, float eps, int off) {
        int qDim = model.heads() * spec.headDim(), kvDim = spec.kvHeads() * spec.headDim();
        for (Seq sq : seqs) {
            long qo = 4L * sq.start() * qDim, ko = 4L * sq.start() * kvDim;
            if (sq.sealed().isSealed()) {
                var rope = new SealedSteps.Rope(w.qNorm(), w.kNorm(), qn, kn, eps, off, w.invFreq(), spec.rope().rotaryDim(),
                        spec.rope().attentionScaling());
                o1.attention(L, a, li, sq.sealed(), rope, s.q + qo, kBuf + ko, vBuf + ko, s.att + qo, w.sinks(), sq.tokens(), sq.pos());
            } else {
                prefillAttention(L, a, s, w, spec, li, sq, kBuf, vBuf, qn, kn, eps, off);
                o1.keepQueries(L, a, li, sq.sealed(), s.q + qo, sq.tokens(), sq.pos());
            }
        }
    }

    static int kind(DType d) { return ResidentWeights.kind(d); }

    /**
     * The launches of one step of {@code t} token rows (ids and positions already on the device) in {@code s}'s
     * buffers; {@code seqs} says which rows belong to which sequence's KV cache (one for a session's own chunk).
     *
     * @param ids      the rows' token ids on the device
     * @param headRows -1 no head; 0 the head for every row; 1 for the last row only
     * @param out      where the logits go
     * @param L        where each step goes as it is made, in launch order
     */
    private void steps(SessionState s, long ids, Seq[] seqs, int t, int headRows, long out, Arena a, boolean gemm, Steps L) {
        steps(s, ids, seqs, NULL, 0, t, headRows, out, a, gemm, L);
    }

    /**
     * As above; the first {@code oneTokenSeqs} sequences are one token each (rows 0..n-1), and {@code rowCaches} (not 0)
     * holds every layer's table of their key caches and then of their value caches (layer l's at
     * {@code rowCaches + 8·l·n} and {@code + 8·(layers + l)·n}), each row's position at {@code seqs[r].pos()}: one
     * r_attn_rows launch a layer for those rows; the sequences after them (prompt chunks) each run their own.
     */
    private void steps(SessionState s, long ids, Seq[] seqs, long rowCaches, int oneTokenSeqs, int t, int headRows, long out,
                       Arena a, boolean gemm, Steps L) {
        int hidden = model.hidden(), heads = model.heads();
        embed(L, a, ids, s.x, t);
        if (pleTable != null) perLayerInputs(L, a, s, ids, t, gemm);
        int splits = splits(t);
        for (int li = 0; li < layers.length; li++) {
            LayerWeights w = layers[li];
            DecoderPlan.Layer spec = model.layers().get(li);
            int hd = spec.headDim(), kvHeads = spec.kvHeads(), qDim = heads * hd, kvDim = kvHeads * hd;
            // a layer that reads an earlier one's keys and values computes none: it appends that layer's raw rows again
            boolean shared = spec.sharesKv();
            int kvLayer = shared ? spec.kvSource() : li;
            long kBuf = s.kRaw[kvLayer] != NULL ? s.kRaw[kvLayer] : s.k, vBuf = s.vRaw[kvLayer] != NULL ? s.vRaw[kvLayer] : s.v;
            NormOp kNormOp = model.layers().get(kvLayer).kNorm();
            long mixOut = s.att;   // the mixer's output, the o product's input
            if (spec.deltaNet() != null) {
                deltaNet(L, a, s, w, spec, li, seqs, t, gemm);
                mixOut = s.dnCore;
            } else if (spec.anchor() != null) {   // Embryo's bounded anchor: q, k, v of every row, then per span its ring
                norm(L, a, s.x, w.attnNorm(), spec.attnNorm(), s.h, t);
                product(L, a, "q", w.q(), s.h, s.q, t, gemm);
                product(L, a, "k", w.k(), s.h, s.k, t, gemm);
                product(L, a, "v", w.v(), s.h, s.v, t, gemm);
                for (Seq sq : seqs)
                    embryo.anchor(L, a, li, s.q + 4L * sq.start() * qDim, s.k + 4L * sq.start() * kvDim, s.v + 4L * sq.start() * kvDim,
                            sq.kc()[li], sq.vc()[li], s.att + 4L * sq.start() * qDim, sq.tokens(), sq.pos());
            } else {
                long qOut = spec.outputGate() ? s.qg : s.q;
                // the attention norm: folded into q/k/v (weights in their column scales, 1/rms in the kernel), or its own kernel
                long ain = w.attnFolded() ? s.x : s.h;
                int an = w.attnFolded() ? 1 : 0;
                float ae = w.attnFolded() ? spec.attnNorm().eps() : Float.NaN;
                if (!w.attnFolded()) norm(L, a, s.x, w.attnNorm(), spec.attnNorm(), s.h, t);
                if (shared) {
                    if (gemm) gemm(L, a, "q", w.q(), w.qBias(), ain, qOut, t, false, ae);
                    else matvec(L, a, "q", w.q(), w.qBias(), ain, qOut, t, false, ae);
                } else if (gemm && splitTogether(w.q(), w.k(), w.v()) && !touched(w)) {
                    qkvGemm(L, a, w, s, qOut, kBuf, vBuf, ain, ae, t);
                } else if (gemm) {
                    gemm(L, a, "q", w.q(), w.qBias(), ain, qOut, t, false, ae);
                    gemm(L, a, "k", w.k(), w.kBias(), ain, kBuf, t, false, ae);
                    gemm(L, a, "v", w.v(), w.vBias(), ain, vBuf, t, false, ae);
                } else if (kind(w.q().dtype()) == kind(w.k().dtype()) && kind(w.q().dtype()) == kind(w.v().dtype()) && !touched(w)) {
                    W q = w.q(), k = w.k(), v = w.v();
                    int blocks = ArgPack.gridX(q.rows()) + ArgPack.gridX(k.rows()) + ArgPack.gridX(v.rows());
                    Object[] args = {q.weights(), q.rowScales(), q.colField(), w.qBias(), qOut, q.rows(),
                            k.weights(), k.rowScales(), k.colField(), w.kBias(), kBuf, k.rows(),
                            v.weights(), v.rowScales(), v.colField(), w.vBias(), vBuf, v.rows(), ain, hidden, an, an == 1 ? ae : 0f};
                    Launch small = smallBatch("qkv", kernels.fnSmallMatvec3, q, t, a, args, q.rows(), k.rows(), v.rows());
                    L.add(small != null ? small : launch("qkv", kernels.fnMatvec3[kind(q.dtype())], blocks, t, 1, 256, a, args));
                } else {
                    matvec(L, a, "q", w.q(), w.qBias(), ain, qOut, t, false, ae);
                    matvec(L, a, "k", w.k(), w.kBias(), ain, kBuf, t, false, ae);
                    matvec(L, a, "v", w.v(), w.vBias(), ain, vBuf, t, false, ae);
                }
                if (spec.outputGate())   // q then gate per head, apart
                    L.add(launch("split_gate", kernels.fnSplitGate, (t * qDim + 255) / 256, 1, 1, 256, a, s.qg, s.q, s.gate, t * qDim, hd));
                if (spec.vNorm() != null) archNorm(L, a, vBuf, w.vNorm(), spec.vNorm(), vBuf, t * kvHeads, false);   // gemma4's v norm, in place
                NormOp qk = spec.qNorm() != null ? spec.qNorm() : kNormOp;
                int qn = spec.qNorm() != null ? 1 : 0, kn = kNormOp != null ? 1 : 0, off = qk != null && qk.offset() ? 1 : 0;
                float eps = qk == null ? 0f : qk.eps();
                if (o1 != null && o1.seals(li)) {
                    sealedAttention(L, a, s, w, spec, li, seqs, kBuf, vBuf, qn, kn, eps, off);
                } else if (t == 1 && seqs.length == 1) {   // decode: the keys split over enough blocks to fill the GPU, merged by the
                                // last split; each block norms and ropes its q row (and the last split's the k row of key p,
                                // which it also appends to the caches): no rope launch
                    Seq sq = seqs[0];
                    L.add(launch("attention", kernels.fnAttn, heads, t, splits, 128, a, s.q, kBuf, vBuf, sq.kc()[li], sq.vc()[li],
                            w.qNorm(), w.kNorm(), qn, kn, eps, off, w.invFreq(), spec.rope().rotaryDim(), spec.rope().attentionScaling(),
                            s.pm, s.pl, s.pacc, heads, kvHeads, hd, spec.scale(), sq.pos(), splits, spec.window(), s.att, s.done, w.sinks()));
                } else {
                    int n = rowCaches == NULL ? 0 : oneTokenSeqs;
                    if (n > 0) {   // one token of each of n sequences: the same per row, each over its own caches
                        int rowSplits = splits(n);
                        L.add(launch("attention_rows", kernels.fnAttnRows, heads, n, rowSplits, 128, a, s.q, kBuf, vBuf,
                                rowCaches + 8L * li * n, rowCaches + 8L * (layers.length + li) * n,
                                w.qNorm(), w.kNorm(), qn, kn, eps, off, w.invFreq(), spec.rope().rotaryDim(), spec.rope().attentionScaling(),
                                s.pm, s.pl, s.pacc, heads, kvHeads, hd, spec.scale(), seqs[0].pos(), rowSplits, spec.window(), s.att, s.done, w.sinks()));
                    }
                    for (int si = n; si < seqs.length; si++)   // a prompt chunk, or each longer span of a batch
                        prefillAttention(L, a, s, w, spec, li, seqs[si], kBuf, vBuf, qn, kn, eps, off);
                }
                if (spec.outputGate())   // att ·= σ(gate)
                    L.add(launch("output_gate", kernels.fnSigmoidMul, (t * qDim + 255) / 256, 1, 1, 256, a, s.att, s.gate, t * qDim));
            }
            if (spec.postAttnNorm() == null) {                                              // x += o·att
                if (gemm) gemm(L, a, "o_residual", w.o(), w.oBias(), mixOut, s.x, t, true, Float.NaN);
                else matvec(L, a, "o_residual", w.o(), w.oBias(), mixOut, s.x, t, true, Float.NaN);
            } else {                                                                        // x += postNorm(o·att)
                if (gemm) gemm(L, a, "o", w.o(), w.oBias(), mixOut, s.m, t, false, Float.NaN);
                else matvec(L, a, "o", w.o(), w.oBias(), mixOut, s.m, t, false, Float.NaN);
                archNorm(L, a, s.m, w.postAttnNorm(), spec.postAttnNorm(), s.x, t, true);
            }
            if (spec.moe() != null && spec.gate() != null) {   // gemma4's 26B block: x += postFfn(postMlp(mlp) + postMoe(moe))
                denseFfn(L, a, s, w, spec, t, gemm, true);
                archNorm(L, a, s.m, w.postMlpNorm(), spec.postMlpNorm(), s.m, t, false);
                moe(L, a, s, w, spec, t, gemm);
                archNorm(L, a, s.m, w.postFfnNorm(), spec.postFfnNorm(), s.x, t, true);
            } else if (spec.moe() != null) moe(L, a, s, w, spec, t, gemm);
            else denseFfn(L, a, s, w, spec, t, gemm, false);
            if (w.pliGate() != null) perLayerInput(L, a, s, w, spec, li, t, gemm);
            if (spec.layerScalar() != 1f)
                L.add(launch("layer_scalar", kernels.fnScaleCap, (t * hidden + 255) / 256, 1, 1, 256, a, s.x, t * hidden, spec.layerScalar(), 0f));
        }
        if (headRows >= 0) {
            int rows = headRows == 0 ? t : 1;
            head(L, a, s, s.x + 4L * (t - rows) * hidden, rows, out, gemm && rows > 1);
        }
    }

    /**
     * The dense gated MLP of one layer: x += down(act(gate(x̂))·up(x̂)), or through its post norm; with {@code intoM}
     * the bare output into s.m (the MLP beside an MoE).
     */
    private void denseFfn(Steps L, Arena a, SessionState s, LayerWeights w, DecoderPlan.Layer spec, int t, boolean gemm, boolean intoM) {
        int hidden = model.hidden();
        {
            long fin = w.ffnFolded() ? s.x : s.h;   // the FFN norm, folded into gate/up or its own kernel
            float fe = w.ffnFolded() ? spec.ffnNorm().eps() : Float.NaN;
            if (!w.ffnFolded()) norm(L, a, s.x, w.ffnNorm(), spec.ffnNorm(), s.h, t);
            int inter = spec.gate().outDim();
            int gk = kind(w.gate().dtype()), uk = kind(w.up().dtype());
            boolean downSplit = false;   // the down product's parts already written (by the SwiGLU epilogue)
            boolean fuse = !touched(w);   // a skill's rows: gate, up and down as products of their own
            if (gemm && spec.act() == Activation.SILU && fuse) {
                int sg, su;
                long tsg = ws.sS1, tsu = ws.sS2;
                if (splitTogether(w.gate(), w.up())) {
                    long[][] at = split3(L, a, "gate_up", new W[] {w.gate(), w.up()}, fin, fe, t, new long[] {ws.sS1, ws.sS2});
                    sg = su = gemmPair(L, a, "gate", "up", w.gate(), w.up(), at[0][0], at[1][0], ws.sC1, ws.sC2, t, PAIR_GEMM_MAX_COLUMNS);
                    tsg = at[0][1];
                    tsu = at[1][1];
                } else {
                    sg = product(L, a, "gate", w.gate(), fin, fe, t, ws.sC1, ws.sS1);
                    su = product(L, a, "up", w.up(), fin, fe, t, ws.sC2, ws.sS2);
                }
                if (sg != su || f16Parts(w.gate().dtype()) != f16Parts(w.up().dtype()))
                    throw new IllegalStateException("gate and up of different precisions");
                boolean scaled = f16Parts(w.gate().dtype());
                int gs = gluSplit(w.down(), inter);
                if (gs >= 0) {   // silu(g)·u straight into the down product's parts (its token scale in ws.sS1's second slot)
                    W d = w.down();
                    L.add(launch("swiglu_down_split", kernels.fnGluSplit[gs], t, 1, 1, 512, a, ws.sC1, ws.sC2, w.gate().rowScales(),
                            w.up().rowScales(), scaled ? tsg : NULL, scaled ? tsu : NULL, step(w.gate().dtype()), sg, inter, t,
                            d.colField(), ws.sB, f16Parts(d.dtype()) ? 1 : 0, parts(d.dtype()), ws.sS1 + 4L * t));
                    downSplit = true;
                } else {
                    L.add(launch("swiglu_out", kernels.fnGluOut, (inter + 1023) / 1024, t, 1, 256, a, ws.sC1, ws.sC2, w.gate().rowScales(), w.up().rowScales(), s.g, inter, t, sg,
                                    scaled ? tsg : NULL, scaled ? tsu : NULL, step(w.gate().dtype())));
                }
            } else if (gemm) {
                gemm(L, a, "gate", w.gate(), NULL, fin, s.g, t, false, fe);
                gemm(L, a, "up", w.up(), NULL, fin, s.u, t, false, fe);
                gluAct(L, a, s.g, s.u, s.g, t * inter, spec.act());
            } else if (gk == uk && spec.act() == Activation.SILU && fuse) {
                Object[] args = {w.gate().weights(), w.gate().rowScales(), w.gate().colField(), w.up().weights(), w.up().rowScales(),
                        w.up().colField(), fin, s.g, inter, hidden, w.ffnFolded() ? 1 : 0, w.ffnFolded() ? fe : 0f};
                Launch small = smallBatch("gate_up_swiglu", kernels.fnSmallGlu, w.gate(), t, a, args, inter);
                L.add(small != null ? small : launch("gate_up_swiglu", kernels.fnGlu[gk], ArgPack.gridX(inter), t, 1, 256, a, args));
            } else {
                matvec(L, a, "gate", w.gate(), NULL, fin, s.g, t, false, fe);
                matvec(L, a, "up", w.up(), NULL, fin, s.u, t, false, fe);
                gluAct(L, a, s.g, s.u, s.g, t * inter, spec.act());   // silu, gelu-tanh or gelu
            }
            // x += down·glu, or down·glu into m and then x += postNorm(m)
            boolean residual = !intoM && spec.postFfnNorm() == null;
            String name = residual ? "down_residual" : "down";
            long y = residual ? s.x : s.m;
            if (downSplit) out(L, a, name, w.down(), NULL, y, t, residual, gemmParts(L, a, name, w.down(), ws.sB, t, ws.sC1), ws.sC1, ws.sS1 + 4L * t);
            else if (gemm) gemm(L, a, name, w.down(), NULL, s.g, y, t, residual, Float.NaN);
            else matvec(L, a, name, w.down(), NULL, s.g, y, t, residual, Float.NaN);
            if (!residual && !intoM) archNorm(L, a, s.m, w.postFfnNorm(), spec.postFfnNorm(), s.x, t, true);
        }
    }

    /**
     * Gemma4's per-layer inputs of the step's rows, once before the layers: the table rows (· tableScale) and the model
     * projection of the embedded x, then per layer slice pli = (norm(projection · projectionScale) + table) · combineScale.
     */
    private void perLayerInputs(Steps L, Arena a, SessionState s, long ids, int t, boolean gemm) {
        var ple = model.perLayerEmbedding();
        int width = ple.dim() * layers.length;
        L.add(launch("ple_embed", kernels.fnEmbed[kind(pleTable.dtype())], t, 1, 1, 256, a, pleTable.weights(), pleTable.rowScales(),
                pleTable.colField(), ids, s.pliTab, width, ple.tableScale()));
        if (gemm) gemm(L, a, "ple_projection", pleProj, NULL, s.x, s.pli, t, false, Float.NaN);
        else matvec(L, a, "ple_projection", pleProj, NULL, s.x, s.pli, t, false, Float.NaN);
        NormOp n = ple.projectionNorm();
        L.add(launch("ple_combine", kernels.fnPleCombine, t * layers.length, 1, 1, 256, a, s.pli, s.pliTab, pleNorm, ple.dim(), n.eps(),
                n.offset() ? 1 : 0, ple.projectionScale(), ple.combineScale()));
    }

    /** x += postNorm(proj(act(gate(x)) · pli[layer])): gemma4's per-layer input of layer {@code li}. */
    private void perLayerInput(Steps L, Arena a, SessionState s, LayerWeights w, DecoderPlan.Layer spec, int li, int t, boolean gemm) {
        var pi = spec.perLayerInput();
        int dim = model.perLayerEmbedding().dim();
        if (gemm) gemm(L, a, "pli_gate", w.pliGate(), NULL, s.x, s.g, t, false, Float.NaN);
        else matvec(L, a, "pli_gate", w.pliGate(), NULL, s.x, s.g, t, false, Float.NaN);
        L.add(launch("pli_gate", kernels.fnPliGate, (t * dim + 255) / 256, 1, 1, 256, a, s.g, s.pli, t * dim, dim, dim * layers.length, li,
                actCode(pi.act())));
        if (gemm) gemm(L, a, "pli_projection", w.pliProj(), NULL, s.g, s.m, t, false, Float.NaN);
        else matvec(L, a, "pli_projection", w.pliProj(), NULL, s.g, s.m, t, false, Float.NaN);
        archNorm(L, a, s.m, w.pliNorm(), pi.postNorm(), s.x, t, true);
    }

    /** logits = head(finalNorm(x)) for {@code rows} consecutive rows from {@code src}. */
    private void head(Steps L, Arena a, SessionState s, long src, int rows, long out, boolean g) {
        if (clusters != null) {   // Embryo's hierarchical head: log-probabilities, dropped clusters' rows unread
            norm(L, a, src, finalNorm, model.finalNorm(), s.h, rows);
            product(L, a, "head_clusters", clusters, s.h, s.lc, rows, g);
            embryo.clusterLogSoftmax(L, a, s.lc, rows);
            if (g) gemm(L, a, "head", head, NULL, s.h, out, rows, false, Float.NaN);   // every row: the gate still applies below
            else embryo.headRows(L, a, kind(head.dtype()), head.weights(), head.rowScales(), head.colField(), s.h, s.lc, s.gates,
                    !s.sequence, out, rows);
            embryo.headFinish(L, a, out, s.lc, s.gates, !s.sequence, rows);
            return;
        }
        if (headFolded) {   // final norm folded in
            if (g) gemm(L, a, "head", head, NULL, src, out, rows, false, model.finalNorm().eps());
            else matvec(L, a, "head", head, NULL, src, out, rows, false, model.finalNorm().eps());
        } else {
            norm(L, a, src, finalNorm, model.finalNorm(), s.h, rows);
            if (g) gemm(L, a, "head", head, NULL, s.h, out, rows, false, Float.NaN);
            else matvec(L, a, "head", head, NULL, s.h, out, rows, false, Float.NaN);
        }
        if (model.finalSoftcap() > 0f) {   // c·tanh(logits / c)
            long n = (long) rows * model.vocab();
            L.add(launch("softcap", kernels.fnScaleCap, (int) ((n + 255) / 256), 1, 1, 256, a, out, (int) n, 1f, model.finalSoftcap()));
        }
    }

    // ---- the architecture-specific launches (resident_arch.cu) ----

    /** y = norm(x) (or y += norm(x): a sandwich norm joining the residual), {@code rows} rows. */
    private void archNorm(Steps L, Arena a, long x, long w, NormOp n, long y, int rows, boolean accumulate) {
        L.add(launch(accumulate ? "post_norm_residual" : "moe_norm", kernels.fnArchNorm, rows, 1, 1, 256, a, x, w, y, n.dim(), n.eps(), n.offset() ? 1 : 0, accumulate ? 1 : 0));
    }

    /** y = act(g)·u over n elements (y may alias g). */
    private void gluAct(Steps L, Arena a, long g, long u, long y, int n, Activation act) {
        L.add(launch("glu_act", kernels.fnGluAct, (n + 255) / 256, 1, 1, 256, a, g, u, y, n, actCode(act)));
    }

    /** resident_arch.cu's activation codes (ra_act). */
    private static int actCode(Activation act) {
        return switch (act) { case SILU -> 0; case GELU_TANH -> 1; case GELU -> 2; };
    }

    /**
     * The MoE FFN of one layer: x̂ = ffnNorm(x), router logits, softmax top-k on the device (ids and weights stay
     * there), the chosen experts' gate/up/act, then their down products weighted into x (through the post norm
     * when the layer has one). No host round trip: a decode step still replays as one graph.
     */
    private void moe(Steps L, Arena a, SessionState s, LayerWeights w, DecoderPlan.Layer spec, int t, boolean gemm) {
        DecoderPlan.Moe moe = spec.moe();
        MoeWeights mw = w.moe();
        int hidden = model.hidden(), inter = moe.intermediate(), k = moe.topK();
        boolean beside = spec.gate() != null;   // beside a dense MLP (whose output is in s.m): experts read preMoe(x)
        if (beside) archNorm(L, a, s.x, w.preMoeNorm(), spec.preMoeNorm(), s.moeIn, t, false);
        else archNorm(L, a, s.x, w.ffnNorm(), spec.ffnNorm(), s.moeIn, t, false);
        long routerIn = s.moeIn;
        if (moe.routerNorm() != null) {   // the router's own norm of x (gemma4), into s.h (free after the dense MLP)
            archNorm(L, a, s.x, mw.routerNorm(), moe.routerNorm(), s.h, t, false);
            routerIn = s.h;
        }
        if (moe.resonance() != null) {   // Embryo: the best-reconstructing expert, weight 1
            embryo.route(L, a, moe, routerIn, s.moeIdx, s.moeWts, t);
        } else {
            matvec(L, a, "moe_router", mw.router(), mw.routerBias(), routerIn, s.moeLogits, t, false, Float.NaN);
            L.add(launch("moe_route", kernels.fnRoute, t, 1, 1, 32, a, s.moeLogits, s.moeIdx, s.moeWts, moe.experts(), k,
                    moe.normTopK() ? 1 : 0, moe.topKThenSoftmax() ? 1 : 0));
        }
        if (mw.expertScale() != NULL)
            L.add(launch("moe_expert_scale", kernels.fnExpertScale, (t * k + 255) / 256, 1, 1, 256, a, s.moeIdx, s.moeWts, mw.expertScale(), t * k));
        int act;
        float alpha = 0f, limit = 0f;
        switch (moe.glu()) {
            case Glu.Gated gated -> act = switch (gated.act()) { case SILU -> 0; case GELU_TANH -> 1; case GELU -> 2; };
            case Glu.ClampedSwiglu c -> { act = 3; alpha = c.alpha(); limit = c.limit(); }
        }
        int layout = moe.up() != null ? 0 : moe.interleaved() ? 2 : 1;
        Table g = mw.gate(), u = mw.up(), d = mw.down();
        // output-major experts: a warp per output row; input-major: a thread per output (coalesced across a warp)
        L.add(launch("moe_gate_up", kernels.fnMoeGlu[mw.gateKind()], g.inputMajor() ? (inter + 255) / 256 : ArgPack.gridX(inter), t * k, 1, 256, a,
                g.w(), g.rs(), g.cf(), g.outs(), g.inputMajor() ? 1 : 0, u.w(), u.rs(), u.cf(), u.outs(), u.inputMajor() ? 1 : 0,
                mw.gateBias(), mw.upBias(), s.moeIdx, s.moeIn, s.moeH, inter, hidden, k, layout, act, alpha, limit));
        boolean post = spec.postFfnNorm() != null;
        long y = beside ? s.moeOut : post ? s.m : s.x;
        L.add(launch("moe_down", kernels.fnMoeDown[mw.downKind()], d.inputMajor() ? (hidden + 255) / 256 : ArgPack.gridX(hidden), t, 1, 256, a,
                d.w(), d.rs(), d.cf(), d.outs(), d.inputMajor() ? 1 : 0, mw.downBias(), s.moeIdx, s.moeWts, s.moeH, y, hidden, inter, k,
                beside || post ? 0 : 1));
        if (mw.shared() != null) {   // y += σ(gateProj·x̂) · shared(x̂)
            SharedWeights se = mw.shared();
            int sin = se.gate().rows();
            product(L, a, "shared_gate", se.gate(), s.moeIn, s.g, t, gemm);
            product(L, a, "shared_up", se.up(), s.moeIn, s.u, t, gemm);
            gluAct(L, a, s.g, s.u, s.g, t * sin, moe.shared().act());
            product(L, a, "shared_down", se.down(), s.g, s.sharedOut, t, gemm);
            if (se.gateProj() != null) product(L, a, "shared_gate_proj", se.gateProj(), s.moeIn, s.sharedGate, t, gemm);
            L.add(launch("shared_add", kernels.fnGatedAdd, (t * hidden + 255) / 256, 1, 1, 256, a, y, s.sharedOut,
                    se.gateProj() != null ? s.sharedGate : NULL, hidden, t * hidden));
        }
        if (beside) archNorm(L, a, s.moeOut, w.postMoeNorm(), spec.postMoeNorm(), s.m, t, true);   // s.m += postMoe(moe)
        else if (post) archNorm(L, a, s.m, w.postFfnNorm(), spec.postFfnNorm(), s.x, t, true);
    }

    /** y = W·x over t rows: cuBLAS when the step takes GEMMs, else the matvec kernel. */
    private void product(Steps L, Arena a, String name, W w, long x, long y, int t, boolean gemm) {
        if (gemm) gemm(L, a, name, w, NULL, x, y, t, false, Float.NaN);
        else matvec(L, a, name, w, NULL, x, y, t, false, Float.NaN);
    }

    /**
     * A gated delta net layer into s.dnCore: the input norm and projections over every row, then per span its conv and
     * rule over that sequence's own state (a span at position 0 starts from zeros), the gated norm over every row.
     */
    private void deltaNet(Steps L, Arena a, SessionState s, LayerWeights w, DecoderPlan.Layer spec, int li, Seq[] seqs, int t, boolean gemm) {
        var dn = spec.deltaNet();
        DeltaNetWeights d = w.dn();
        int nk = dn.keyHeads(), nv = dn.valueHeads(), dk = dn.keyDim(), dv = dn.valueDim(), convDim = dn.convDim();
        norm(L, a, s.x, w.attnNorm(), spec.attnNorm(), s.h, t);
        if (d.qkvz() != null) {
            product(L, a, "gdn_qkvz", d.qkvz(), s.h, s.dnProj, t, gemm);
            product(L, a, "gdn_ba", d.ba(), s.h, s.dnBa, t, gemm);
            L.add(launch("gdn_unfuse", kernels.fnGdnUnfuse, t, 1, 1, 256, a, s.dnProj, s.dnBa, s.dnMixed, s.dnZ, s.dnB, s.dnA, nk, nv, dk, dv));
        } else {
            product(L, a, "gdn_qkv", d.qkv(), s.h, s.dnMixed, t, gemm);
            product(L, a, "gdn_z", d.z(), s.h, s.dnZ, t, gemm);
            product(L, a, "gdn_b", d.b(), s.h, s.dnB, t, gemm);
            product(L, a, "gdn_a", d.a(), s.h, s.dnA, t, gemm);
        }
        for (Seq sq : seqs)
            L.add(launch("gdn_conv", kernels.fnGdnConv, (convDim + 255) / 256, 1, 1, 256, a, s.dnMixed + 4L * sq.start() * convDim, d.conv(),
                    d.convBias(), sq.conv()[li], sq.tokens(), convDim, dn.convKernel(), sq.pos()));
        L.add(launch("gdn_gates", kernels.fnGdnGates, nv, t, 1, 32, a, s.dnMixed, s.dnB, s.dnA, d.negA(), d.dtBias(), s.dnQ, s.dnK, s.dnG,
                s.dnBeta, nk, nv, dk, convDim));
        for (Seq sq : seqs) {
            long r0 = sq.start();
            L.add(launch("gdn_rule", kernels.fnGdnRule, nv, 1, 1, (dv + 31) / 32 * 32, a, s.dnQ + 4L * r0 * nv * dk, s.dnK + 4L * r0 * nv * dk,
                    s.dnMixed + 4L * r0 * convDim, s.dnG + 4L * r0 * nv, s.dnBeta + 4L * r0 * nv, sq.dnS()[li],
                    s.dnCore + 4L * r0 * nv * dv, sq.tokens(), nv, dk, dv, convDim, 2 * dn.qkDim(), sq.pos()));
        }
        NormOp n = dn.norm();
        L.add(launch("gdn_norm", kernels.fnGdnNorm, t * nv, 1, 1, Math.min(256, (dv + 31) / 32 * 32), a, s.dnCore, s.dnZ, d.norm(), dv,
                n.eps(), n.offset() ? 1 : 0));
    }

    private void norm(Steps L, Arena a, long x, long w, NormOp n, long y, int rows) {
        L.add(launch("rmsnorm", kernels.fnArchNorm, rows, 1, 1, 256, a, x, w, y, n.dim(), n.eps(), n.offset() ? 1 : 0, 0));
    }

    /** {@code normEps}: the RMSNorm epsilon when x is normalised first (its weight folded into w), NaN for none. */
    private void matvec(Steps L, Arena a, String name, W w, long bias, long x, long y, int t, boolean accumulate,
                        float normEps) {
        if (runs != null && overlays.touches(runs, List.of(w), bias)) {   // once per group of rows reading one matrix
            for (OverlayWeights.Group g : overlays.groups(runs, w, bias))
                matvecRows(L, a, name, g.w(), g.bias(), x + 4L * g.start() * w.cols(),
                        y + 4L * g.start() * w.rows(), g.rows(), accumulate, normEps);
        } else {
            matvecRows(L, a, name, w, bias, x, y, t, accumulate, normEps);
        }
        lowRank(L, a, name, w, x, y, normEps);
    }

    private void matvecRows(Steps L, Arena a, String name, W w, long bias, long x, long y, int t, boolean accumulate,
                            float normEps) {
        int rows = w.rows(), cols = w.cols();
        boolean normed = !Float.isNaN(normEps);
        Object[] args = {w.weights(), w.rowScales(), w.colField(), bias, x, y, rows, cols, accumulate ? 1 : 0, normed ? 1 : 0, normed ? normEps : 0f};
        Launch small = smallBatch(name, kernels.fnSmallMatvec, w, t, a, args, rows);
        L.add(small != null ? small : launch(name, kernels.fnMatvec[kind(w.dtype())], ArgPack.gridX(rows), t, 1, 256, a, args));
    }

    /**
     * The small-batch launch (resident_mmvq.cu) of a product of {@code t} rows of x that the matvec kernels would take
     * with {@code args}, over matrices of {@code rows} weight rows each (q, k, v: three), or null for the matvec kernels:
     * the small-batch kernels are off, one row, or weights they do not read ({@link ResidentWeights#smallBatch(W)}). Their numbers are
     * the matvec kernels' row for row, so any t from 2 takes them: the weights read once per 4 or 8 rows, not per row.
     */
    private Launch smallBatch(String name, Kernel[][] family, W w, int t, Arena a, Object[] args, int... rows) {
        if (smallBatchRows == 0 || t < 2 || !ResidentWeights.smallBatch(w)) return null;
        int nt = t <= Kernels.SMALL_BATCH_ROWS[0] ? 0 : 1, per = Kernels.SMALL_BATCH_ROWS[nt], rb = Kernels.SMALL_BATCH_BLOCK_ROWS[smallBatchShape];
        int blocks = 0;
        for (int r : rows) blocks += (r + rb - 1) / rb;
        Object[] withT = java.util.Arrays.copyOf(args, args.length + 1);
        withT[args.length] = t;
        return launch(name, family[smallBatchShape][nt], blocks, (t + per - 1) / per, 1, 32 * rb, a, withT);
    }

    /** A launch of {@code k} with {@code args} packed as its signature says (a mismatch is an error naming the kernel). */
    static Launch launch(String name, Kernel k, int gx, int gy, int gz, int block, Arena a, Object... args) {
        return new Launch(name, k.fn(), gx, gy, gz, block, k.pack(a, args));
    }

    /** Owner thread: frees every session's device memory and the small vectors (the matrices belong to the matmul). */
    void closeOnOwner() {
        if (closed) return;
        closed = true;
        if (PROFILE && (profiledSteps > 0 || !prefillProfile.isEmpty())) System.err.println(profileReport());
        for (SessionState s : states) s.free();   // the batch scratch among them
        states.clear();
        batchRows = null;
        dropBatchGraphs();
        freeBatchTables();
        if (argmaxIds != NULL) cu.memFree(argmaxIds);
        if (argmaxHost != null) cu.memFreeHost(argmaxHost);
        argmaxIds = NULL;
        argmaxHost = null;
        if (overlays != null) overlays.close();
        weights.free(cu);
        ws.free();
        own.close();
    }
}
