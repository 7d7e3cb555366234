package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.cuda.KernelSignature.Kernel;
import dev.cmf4j.backend.cuda.ResidentLowering.Seq;
import dev.cmf4j.backend.cuda.Step.Gemm;
import dev.cmf4j.backend.cuda.Step.Gemms;
import dev.cmf4j.backend.cuda.Step.Launch;
import dev.cmf4j.backend.cuda.ResidentWeights.W;
import dev.cmf4j.backend.cuda.ResidentWeights.LayerWeights;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

/**
 * The dense decoder's whole forward pass on the GPU ({@link Kernels#FILES}): weights resident in their CMF
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
    /** cuBLAS for prefill chunks of at least {@link #gemmMinTokens} tokens, or null (matvec kernels with a token dimension). */
    private final Cublas cublas;
    private final int gemmMinTokens;
    private final Arena own = Arena.ofShared();
    private final MemorySegment one = own.allocateFrom(ValueLayout.JAVA_FLOAT, 1f), zero = own.allocateFrom(ValueLayout.JAVA_FLOAT, 0f);
    /** The steps of a chunk or a batch step, made from the plan over the weights (and the prefill's workspace). */
    private final ResidentLowering lower;
    private final LayerWeights[] layers;
    /** The sealed ({@code --o1}) layers' launches and per-sequence state, or null. */
    private final SealedSteps o1;
    private final List<ResidentSession> states = new ArrayList<>();
    private boolean closed;



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
     * the attention module's loaded code compiled for compute_90 or newer and the driver has {@code cuLaunchKernelEx}.
     */
    private final boolean pdl;
    /** The programmatic launches' CUlaunchConfig (owner thread only), or null without {@link #pdl}. */
    private final MemorySegment launchConfig;

    /** Whether decode steps launch by programmatic dependent launch (said in the model's note, so a run shows it). */
    boolean programmaticLaunch() { return pdl; }
    /**
     * The kernels that call r_pdl_wait in every block before touching another kernel's data (resident.cu, resident_attn.cu): only
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
                    boolean programmaticLaunch, int smallBatchRows, int smallBatchBlockRows, TensorRank tp) {
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
        this.tp = tp;
        // a rank's steps hold NCCL calls, which the decode graphs would capture: launched one by one until measured on
        // a machine of several GPUs
        this.graphs = graphs && tp == null;
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
        if (kernels.fnAttnChunk != null) waits.add(kernels.fnAttnChunk.fn().address());
        weights = new ResidentWeights(mm, model);
        layers = weights.layers;
        int8Products = weights.int8Products;
        boolean recurrent = false;   // (an anchor's ring is per sequence, as a delta net's state)
        for (DecoderPlan.Layer l : model.layers()) recurrent |= l.deltaNet() != null || l.anchor() != null;
        EmbryoSteps embryo = EmbryoSteps.needed(model) ? new EmbryoSteps(ctx, model, weights::vector) : null;
        o1 = sealed == null ? null : new SealedSteps(ctx, model, sealed);
        recurrent |= o1 != null;   // (a sealed layer's ring and far sums are per sequence)
        lower = new ResidentLowering(cu, cublas, kernels, model, weights, embryo, o1, smCount, deviceMemory, this.prefillCache,
                fastPrefill, fusePrefill, batchGemmMinRows, smallBatchRows, smallBatchShape, () -> scratchEpoch++, tp);
        lower.ws.giveWayFirst(this::freeIdlePages);
        this.kvPages = KvPages.supported(cu, ctx.info().ordinal());
        this.recurrent = recurrent;
    }

    /** The GPU's rank in a tensor-parallel group, or null for a whole model. */
    private final TensorRank tp;

    /** Whether sequences' full-layer caches are paged ({@link KvPages#supported}), decided once. */
    private final boolean kvPages;

    /** The model's weights on the device, and (below) those of its parts the launches name most. */
    private final ResidentWeights weights;
    /** Whether every product is int8 (ResidentWeights#int8Products): small-batch kernels may take batched steps. */
    private final boolean int8Products;

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

    @Override public java.util.Map<String, String> skills(dev.cmf4j.backend.DeviceSkills table) {
        return mm.context().call(() -> {
            if (overlays != null) throw new IllegalStateException("the skills are installed before the adapters, once");
            overlays = new OverlayWeights(mm, cu, table, weights.sources, weights.vectorAt, weights::upload, weights::vector,
                    OverlayWeights.budget(deviceMemory));
            lower.overlays = overlays;
            return overlays.problems();
        });
    }

    @Override public String adapters(dev.cmf4j.backend.DeviceAdapters table) {
        return mm.context().call(() -> {
            if (overlays == null)
                lower.overlays = overlays = new OverlayWeights(mm, cu, dev.cmf4j.backend.DeviceSkills.NONE, weights.sources, weights.vectorAt, weights::upload, weights::vector, 0);
            overlays.installAdapters(table, ResidentWeights::normWeight);
            return null;
        });
    }

    @Override public java.util.Map<String, String> tasks(dev.cmf4j.backend.DeviceTasks table) {
        return mm.context().call(() -> {
            if (overlays == null)
                lower.overlays = overlays = new OverlayWeights(mm, cu, dev.cmf4j.backend.DeviceSkills.NONE, weights.sources, weights.vectorAt, weights::upload, weights::vector, 0);
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
            // a mask zeroes input columns through the product's column scales, which the 4-bit kernels do not take
            W masked = (off || heads != null) && ResidentWeights.q4(w.o().dtype()) ? w.o()
                    : (off || ffn != null) && ResidentWeights.q4(w.down().dtype()) ? w.down() : null;
            if (masked != null)
                return "layer " + l + "'s " + (masked == w.o() ? "o" : "down") + " product is " + masked.dtype().label
                        + ", whose resident kernels take no column scales to mask its inputs with";
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

    // ---- per-session state ----


    /** The largest chunk a session takes: its tokens are a grid dimension (≤ 65,535) of rope, products and epilogues. */
    static final int MAX_CHUNK = 65535;

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
            ResidentSession s = lower.ws.orMakingRoom(() -> new ResidentSession(cu, model, kv, o1, lower::splits, () -> scratchEpoch++, maxChunk, maxContext,
                    pagesFor(maxChunk, maxContext)));
            states.add(s);
            return s;
        });
    }

    @Override public void copyLayerState(Object state, int layer, float[] first, float[] second, boolean toDevice) {
        mm.context().call(() -> {
            if (closed) throw new IllegalStateException("the model's GPU memory was freed (model closed)");
            ResidentSession s = (ResidentSession) state;
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
        if (((ResidentSession) state).sealed != null) ((ResidentSession) state).sealed.requestSeal();
    }

    @Override public boolean sealed(Object state) {
        return ((ResidentSession) state).sealed == null || ((ResidentSession) state).sealed.isSealed();
    }

    /** Sealed layers once sealed, anchor rings, sliding layers' rings and delta-rule states; -1 while a layer keeps a full KV cache. */
    @Override public long stateBytes(Object state) {
        ResidentSession s = (ResidentSession) state;
        long sum = s.sealed == null ? 0 : s.sealed.sealedBytes();
        if (sum < 0) return -1;
        for (int i = 0; i < layers.length; i++) {
            DecoderPlan.Layer l = model.layers().get(i);
            if (o1 != null && o1.seals(i)) continue;
            if (l.anchor() != null) sum += 8L * l.anchor().window() * l.kvHeads() * l.headDim();
            else if (l.deltaNet() != null) {
                var dn = l.deltaNet();
                sum += 4L * ((long) dn.convDim() * (dn.convKernel() - 1) + (long) dn.valueHeads() * dn.keyDim() * dn.valueDim());
            } else if (!l.sharesKv()) {   // (a KV-sharing layer's cache is its source's)
                if (KvLayout.ringRows(l.window(), s.kvChunk) == 0) return -1;   // a full layer's grows with the context
                sum += 2L * KvLayout.rowBytes(kv, l.kvHeads(), l.headDim()) * s.cacheRows(l.window());
            }
        }
        return sum;
    }

    @Override public long heldBytes(Object state) {
        ResidentSession s = (ResidentSession) state;
        return mm.context().call(() -> s.heldBytes() + (s.sealed == null ? 0 : s.sealed.heldBytes()));
    }

    /** The session's hierarchical-head gate for its next steps (copied to the device with a step when it changed). */
    @Override public void gateHead(Object state, double gate) { ((ResidentSession) state).headGate = gate; }

    /** Frees a session's device memory (also from the engine's cleaner thread); nothing after the model closed. */
    @Override public void release(Object state) {
        try {
            mm.context().call(() -> {
                ResidentSession s = (ResidentSession) state;
                if (!closed && states.remove(s)) park(s.freeKeepingPages(), s.maxChunk, s.maxContext);
                return null;
            });
        } catch (IllegalStateException e) {
            // the context is gone (process exit): nothing left to free
        }
    }

    @Override public void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits) {
        forward(state, ids, off, tokens, pos0, logits, allLogits, null);
    }

    /** x, the residual stream, holds the last layer's rows after a step (the head norms them into h or in its product). */
    @Override public boolean handsBackHidden() { return true; }

    @Override public void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits,
                                  float[] hidden) {
        if (weights.mtpFc != null) throw new IllegalStateException("an MTP head's steps start from its input rows (forwardMtp)");
        if (model.inputRows()) throw new IllegalStateException("a later pipeline stage's steps start from the rows handed in (forwardRows)");
        step((ResidentSession) state, ids, off, tokens, pos0, logits, allLogits, hidden, null);
    }

    /**
     * A later pipeline stage's step: {@code rows} [tokens, hidden] copied from the host into x (the previous stage's
     * last layer, brought over through the host: a first version), then the stage's layers, and its head when asked.
     */
    @Override public void forwardRows(Object state, int tokens, int pos0, float[] rows, float[] logits, boolean allLogits, float[] hidden) {
        if (!model.inputRows()) throw new IllegalStateException("not a later pipeline stage's forward");
        if (rows.length < (long) tokens * model.hidden())
            throw new IllegalArgumentException("a buffer of " + rows.length + " floats for " + tokens + " rows of " + model.hidden());
        step((ResidentSession) state, null, 0, tokens, pos0, logits, allLogits, hidden, rows);
    }

    /** The fc, layer, final norm and head of an MTP head's plan run here; its input rows come from the host. */
    @Override public boolean runsMtpHeads() { return true; }

    @Override public void forwardMtp(Object state, int tokens, int pos0, float[] inputRows, float[] logits, boolean allLogits,
                                     float[] hidden) {
        if (weights.mtpFc == null) throw new IllegalStateException("not an MTP head's forward");
        if (inputRows.length < 2L * tokens * model.hidden())
            throw new IllegalArgumentException("a buffer of " + inputRows.length + " floats for " + tokens + " input rows of " + 2 * model.hidden());
        step((ResidentSession) state, null, 0, tokens, pos0, logits, allLogits, hidden, inputRows);
    }

    /**
     * A session's own step of {@code tokens} rows at {@code pos0}: ids (a model's) or an MTP head's input rows
     * ({@code mtpRows} not null: copied to the head's fc input, no captured decode step).
     */
    private void step(ResidentSession s, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits, float[] hidden,
                      float[] mtpRows) {
        if (hidden != null && hidden.length < (long) tokens * model.hidden())
            throw new IllegalArgumentException("a buffer of " + hidden.length + " floats for " + tokens + " hidden rows of " + model.hidden());
        if (tokens > s.maxChunk || pos0 + tokens > s.maxContext)
            throw new IllegalArgumentException("chunk of " + tokens + " at " + pos0 + " outside the session's " + s.maxChunk
                    + " tokens / " + s.maxContext + " positions");
        int vocab = model.vocab();
        int rows = logits == null ? 0 : allLogits ? tokens : 1;
        if (rows > 0 && !model.runsHead()) throw new IllegalStateException("a pipeline stage before the last runs no head");
        mm.context().call(() -> {
            if (closed) throw new IllegalStateException("the model's GPU memory was freed (model closed)");
            long out = enqueue(s, ids, off, tokens, pos0, rows, mtpRows, tokens);
            MemorySegment host = out == s.all ? s.hostAll : s.hostLast;
            if (rows > 0) cu.copyToHostAsync(host, out, 4L * rows * vocab, s.stream);
            MemorySegment hostHidden = hiddenAsync(s, tokens, hidden);
            cu.streamSynchronize(s.stream);
            if (rows > 0) MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, logits, 0, rows * vocab);
            if (hostHidden != null) MemorySegment.copy(hostHidden, ValueLayout.JAVA_FLOAT, 0, hidden, 0, tokens * model.hidden());
            return null;
        });
    }

    /**
     * Owner thread: queues a session's own step of {@code tokens} rows at {@code pos0} on its stream (the positions up to
     * {@code pos0 + positions} backed first), its head for {@code rows} rows (0, the last, or all); returns where the
     * logits go (s.last, or s.all for every row's).
     */
    private long enqueue(ResidentSession s, int[] ids, int off, int tokens, int pos0, int rows, float[] mtpRows, int positions) {
        lower.ws.orMakingRoom(() -> { s.ensurePositions(pos0 + positions); return null; });
        s.hostIn.set(ValueLayout.JAVA_INT, 0, pos0);
        for (int t = 0; t < tokens; t++) s.hostIn.setAtIndex(ValueLayout.JAVA_INT, 1 + t, ids == null ? 0 : ids[off + t]);
        if (s.sealed != null && s.sealed.prepare(s.stream, pos0, tokens)) dropDecode(s);
        cu.copyToDeviceAsync(s.in, s.hostIn, 4L * (1 + tokens), s.stream);
        if (mtpRows != null && model.inputRows()) {   // a later pipeline stage: x is the rows handed in
            MemorySegment rowsIn = s.hostMtpIn(tokens);
            MemorySegment.copy(mtpRows, 0, rowsIn, ValueLayout.JAVA_FLOAT, 0, tokens * model.hidden());
            cu.copyToDeviceAsync(s.x, rowsIn, 4L * tokens * model.hidden(), s.stream);
        } else if (mtpRows != null) {
            MemorySegment rowsIn = s.hostMtpIn(tokens);
            MemorySegment.copy(mtpRows, 0, rowsIn, ValueLayout.JAVA_FLOAT, 0, 2 * tokens * model.hidden());
            cu.copyToDeviceAsync(s.mtpIn, rowsIn, 8L * tokens * model.hidden(), s.stream);
        }
        if (s.gates != NULL && Double.compare(s.headGate, s.gateOnDevice) != 0) {   // the head gate, when it changed
            s.hostGates.set(ValueLayout.JAVA_DOUBLE, 0, s.headGate);
            cu.copyToDeviceAsync(s.gates, s.hostGates, 8, s.stream);
            s.gateOnDevice = s.headGate;
        }
        if (tokens == 1) {   // a model's decode step, or an MTP head's one-row step (its fc reads s.mtpIn): one graph
            decodeStep(s);
            return s.last;
        }
        boolean many = rows > 1;
        if (many) s.ensureAll(tokens);
        long out = many ? s.all : s.last;
        // a chunk whose every row's logits are wanted (a draft's verification) takes the products that read each
        // weight once from as few rows as a batched step does, not once per row below gemmMinTokens: cuBLAS, or the
        // int8 small-batch products where a batched step of as many rows would take them
        boolean gemm = cublas != null && (tokens >= gemmMinTokens
                || many && tokens >= batchGemmMinRows && !(int8Products && tokens <= smallBatchRows));
        if (gemm) lower.ws.prepare(s.stream, tokens, many);
        int headRows = rows == 0 ? -1 : many ? 0 : 1;
        // chunks of few rows recur with the same few row counts while drafting (a verification, every row's logits;
        // an MTP head's rows; a draft model's catch-up on the kept tokens, a chunk after decode steps): each shape
        // captured once per session and replayed, as the decode step is (a prompt's first chunk launches one by one)
        boolean drafting = many || mtpRows != null || s.exec != null;
        CapturedSteps cg = drafting && tokens <= CAPTURED_CHUNK_ROWS && graphs && chunkCapture && !recurrent && s.sealed == null
                && !PROFILE ? chunkGraph(s, tokens, headRows, out, gemm) : null;
        if (cg != null) cu.graphLaunch(cg.exec(), s.stream);
        else try (Arena a = Arena.ofConfined()) {
            // cuLaunchKernel copies the argument values when it enqueues: the arena may close after
            if (PROFILE) {
                List<Step> chunk = new ArrayList<>();
                lower.steps(s, s.in + 4, ResidentLowering.alone(s, tokens), tokens, headRows, out, a, gemm, chunk::add);
                profiled(chunk, s.stream, "prefill " + tokens + ": ", false);
            } else {
                lower.steps(s, s.in + 4, ResidentLowering.alone(s, tokens), tokens, headRows, out, a, gemm, st -> run(st, s.stream));
            }
        }
        return out;
    }

    @Override public boolean draftsMtpGreedily() { return weights.mtpFc != null; }

    /**
     * An MTP head's catch-up rows, then {@code k} greedy drafts chained on the stream with one wait at the end: draft i
     * is ra_argmax_rows of the head's last logits (the lower id among equal maxima, as the host's argmax); for each draft
     * but the last the next row's input is made here ([enorm(embed(draft)·scale); hnorm(the layer's last output row)],
     * as {@code MtpInputRows} makes it on the host) and the head's decode graph runs at the next position. Only the k
     * ids come back.
     */
    @Override public void forwardMtpGreedy(Object state, int tokens, int pos0, float[] inputRows, NormOp embeddingNorm,
                                           NormOp hiddenNorm, float embedScale, int k, int[] drafts) {
        if (weights.mtpFc == null) throw new IllegalStateException("not an MTP head's forward");
        ResidentSession s = (ResidentSession) state;
        int hidden = model.hidden();
        if (inputRows.length < 2L * tokens * hidden)
            throw new IllegalArgumentException("a buffer of " + inputRows.length + " floats for " + tokens + " input rows of " + 2 * hidden);
        if (k < 1 || k > ResidentSession.MAX_DRAFTS || drafts.length < k)
            throw new IllegalArgumentException(k + " drafts: 1.." + ResidentSession.MAX_DRAFTS + " into a buffer of " + drafts.length);
        if (tokens > s.maxChunk || pos0 + tokens + k - 1 > s.maxContext)
            throw new IllegalArgumentException("chunk of " + tokens + " and " + (k - 1) + " drafts at " + pos0 + " outside the session's "
                    + s.maxChunk + " tokens / " + s.maxContext + " positions");
        if (embeddingNorm.w() == null || hiddenNorm.w() == null || embeddingNorm.dim() != hidden || hiddenNorm.dim() != hidden)
            throw new IllegalArgumentException("the MTP head's input norms need weights of " + hidden);
        mm.context().call(() -> {
            if (closed) throw new IllegalStateException("the model's GPU memory was freed (model closed)");
            long logits = enqueue(s, null, 0, tokens, pos0, 1, inputRows, tokens + k - 1);
            long en = mtpNorms.computeIfAbsent(embeddingNorm.w(), weights::vector);   // (ra_rmsnorm applies an offset itself)
            long hn = mtpNorms.computeIfAbsent(hiddenNorm.w(), weights::vector);
            long ids = s.draftIds();
            MemorySegment host = s.hostDrafts;
            try (Arena a = Arena.ofConfined()) {
                for (int i = 0; i < k; i++) {
                    run(launch("argmax", kernels.fnArgmax, 1, 1, 1, 256, a, logits, ids + 4L * i, model.vocab()), s.stream);
                    if (i == k - 1) break;
                    long carried = s.x + 4L * (i == 0 ? tokens - 1 : 0) * hidden;   // the layer's last output row
                    List<Step> input = new ArrayList<>();
                    lower.mtpInput(input::add, a, s, ids + 4L * i, embedScale, en, embeddingNorm, carried, hn, hiddenNorm);
                    for (Step st : input) run(st, s.stream);
                    // the next position, from a pinned slot of its own (the copy reads it when the stream gets there)
                    host.setAtIndex(ValueLayout.JAVA_INT, ResidentSession.MAX_DRAFTS + i, pos0 + tokens + i);
                    cu.copyToDeviceAsync(s.in, host.asSlice(4L * (ResidentSession.MAX_DRAFTS + i)), 4, s.stream);
                    decodeStep(s);
                }
            }
            cu.copyToHostAsync(host, ids, 4L * k, s.stream);
            cu.streamSynchronize(s.stream);
            MemorySegment.copy(host, ValueLayout.JAVA_INT, 0, drafts, 0, k);
            return null;
        });
    }

    /** An MTP head's input norms' weights on the device, by their host arrays. */
    private final java.util.Map<float[], Long> mtpNorms = new java.util.IdentityHashMap<>();

    /** The scratch of batched steps (a session-shaped set of row buffers with no KV cache) and its span positions. */
    private ResidentSession batchRows;
    /**
     * Captured steps of one-token rows by row count (and which rows read which skill), valid while {@link #scratchEpoch} is what it was at the capture
     * (any scratch, table or f16 copy reallocated since makes it stale).
     */
    private final java.util.Map<Object, CapturedSteps> batchGraphs = new java.util.HashMap<>();
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
    @Override public void forward(List<Span> spans, float[] logits, int vocab) { step(spans, logits, null, vocab, null); }

    /** As {@link #forward(List, float[], int)}; {@code hidden} (not null) receives every row of x after the last layer. */
    @Override public void forward(List<Span> spans, float[] logits, int vocab, float[] hidden) {
        checkHidden(spans, hidden);
        step(spans, logits, null, vocab, hidden);
    }

    /** Throws when {@code hidden} (not null) cannot hold every row of {@code spans}. */
    private void checkHidden(List<Span> spans, float[] hidden) {
        int rows = 0;
        for (Span sp : spans) rows += sp.tokens();
        if (hidden != null && hidden.length < (long) rows * model.hidden())
            throw new IllegalArgumentException("a buffer of " + hidden.length + " floats for " + rows + " hidden rows of " + model.hidden());
    }

    /** As {@link #forward(List, float[], int)}, each logit row's argmax taken on the GPU (ra_argmax_rows): only the ids come back. */
    @Override public void forwardArgmax(List<Span> spans, int[] ids, int vocab) { step(spans, null, ids, vocab, null); }

    @Override public void forwardArgmax(List<Span> spans, int[] ids, int vocab, float[] hidden) {
        checkHidden(spans, hidden);
        step(spans, null, ids, vocab, hidden);
    }

    /**
     * Owner thread: queues the copy of the step's {@code t} rows of x (the last layer's output, before the final norm)
     * to the session's pinned host room on its stream; null when {@code hidden} is (nothing asked).
     */
    private MemorySegment hiddenAsync(ResidentSession s, int t, float[] hidden) {
        if (hidden == null) return null;
        MemorySegment host = s.hostHidden(t);
        cu.copyToHostAsync(host, s.x, 4L * t * model.hidden(), s.stream);
        return host;
    }

    /**
     * A batched step; its logit rows come back whole into {@code logits}, or (ids not null) as their argmaxes. Spans of
     * skills run in an order of their own (one-token spans first, as before, then by skill: each skill's rows one
     * group for its products) and their rows come back in the caller's order.
     */
    private void step(List<Span> spans, float[] logits, int[] ids, int vocab, float[] hidden) {
        if (weights.mtpFc != null) throw new IllegalStateException("an MTP head's steps start from its input rows (forwardMtp)");
        if (spans.stream().allMatch(Span::plain)) {
            stepInOrder(spans, logits, ids, vocab, hidden);
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
        int[] firstToken = new int[spans.size() + 1];   // and its first token row
        for (int i = 0; i < order.length; i++) {
            sorted.add(spans.get(order[i]));
            firstRow[i + 1] = firstRow[i] + spans.get(i).logitRows();
            firstToken[i + 1] = firstToken[i] + spans.get(i).tokens();
        }
        int want = firstRow[spans.size()], width = model.hidden();
        float[] lg = logits == null ? null : new float[want * vocab];
        int[] id = ids == null ? null : new int[want];
        float[] hid = hidden == null ? null : new float[firstToken[spans.size()] * width];
        stepInOrder(sorted, lg, id, vocab, hid);
        for (int i = 0, r = 0, tr = 0; i < order.length; i++) {   // back to the caller's order
            Span sp = spans.get(order[i]);
            int n = sp.logitRows(), to = firstRow[order[i]];
            if (lg != null) System.arraycopy(lg, r * vocab, logits, to * vocab, n * vocab);
            if (id != null) System.arraycopy(id, r, ids, to, n);
            if (hid != null) System.arraycopy(hid, tr * width, hidden, firstToken[order[i]] * width, sp.tokens() * width);
            r += n;
            tr += sp.tokens();
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

    /** The step's logit-row runs (see ResidentLowering#runs), for a gathered head. */
    private OverlayWeights.Run[] logitRuns;

    private void stepInOrder(List<Span> spans, float[] logits, int[] ids, int vocab, float[] hidden) {
        int rows = 0, want = 0;
        for (Span sp : spans) {
            ResidentSession st = (ResidentSession) sp.state();
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
                lower.runs = stepRuns;
                logitRuns = skillRuns(spans, true);
                return stepOnOwner(spans, logits, ids, vocab, t, logitRows, hidden);
            } finally {
                lower.runs = logitRuns = null;
            }
        });
    }

    /** Owner thread: the step of {@link #stepInOrder} with the skill runs set. */
    private Void stepOnOwner(List<Span> spans, float[] logits, int[] ids, int vocab, int t, int logitRows, float[] hiddenRows) {
        {
            for (Span sp : spans) {   // every row's KV pages before anything changes (a failure leaves each sequence as it was)
                ResidentSession st = (ResidentSession) sp.state();
                if (states.contains(st)) lower.ws.orMakingRoom(() -> { st.ensurePositions(sp.pos0() + sp.tokens()); return null; });
            }
            ResidentSession w = batchScratch(t, spans.size());
            Seq[] seqs = new Seq[spans.size()];
            boolean allRows = logitRows == t;
            for (int i = 0, r = 0; i < seqs.length; i++) {
                Span sp = spans.get(i);
                ResidentSession st = (ResidentSession) sp.state();
                if (!states.contains(st)) throw new IllegalStateException("span " + i + ": a released or foreign session state");
                batchHostPos.setAtIndex(ValueLayout.JAVA_INT, i, sp.pos0());
                for (int k = 0; k < sp.tokens(); k++) w.hostIn.setAtIndex(ValueLayout.JAVA_INT, 1 + r + k, sp.ids()[sp.off() + k]);
                if (st.sealed != null && st.sealed.prepare(st.stream, sp.pos0(), sp.tokens())) dropDecode(st);
                batchHostPos.setAtIndex(ValueLayout.JAVA_INT, batchSpans + i, st.kvChunk);   // the rows' ring chunks, after the positions
                seqs[i] = new Seq(r, sp.tokens(), batchPos + 4L * i, st.kc, st.vc, st.conv, st.dnS, st.sealed, st.kvChunk);
                r += sp.tokens();
            }
            cu.copyToDeviceAsync(w.in, w.hostIn, 4L * (1 + t), w.stream);
            cu.copyToDeviceAsync(batchPos, batchHostPos, 4L * (batchSpans + seqs.length), w.stream);
            if (w.gates != NULL && logitRows > 0) {   // each logit row's head gate, in span order
                for (int i = 0, g = 0; i < seqs.length; i++)
                    for (int k = 0; k < spans.get(i).logitRows(); k++)
                        w.hostGates.setAtIndex(ValueLayout.JAVA_DOUBLE, g++, ((ResidentSession) spans.get(i).state()).headGate);
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
            if (gemm) lower.ws.prepare(w.stream, t, headGemm);
            if (logitRows > 1) w.ensureAll(logitRows);
            long out = logitRows > 1 ? w.all : w.last;
            MemorySegment host = logitRows > 1 ? w.hostAll : w.hostLast;
            if (decodeRows && allRows && graphs && batchCapture && !recurrent && !PROFILE) {
                // the same launches for any t sessions' one-token rows (ids, positions and cache tables are read from
                // device memory): captured once per row count, replayed while the scratch stays where it was
                Object key = lower.runs == null ? (Object) t : t + " " + java.util.Arrays.toString(lower.runs);   // which rows read which skill
                CapturedSteps bg = batchGraphs.get(key);
                if (bg != null && bg.epoch() != scratchEpoch) { dropBatchGraphs(); bg = null; }
                if (bg == null && batchGraphs.size() >= 64) dropBatchGraphs();   // (skill arrangements come and go)
                if (bg == null) bg = captureBatch(key, w, seqs, t, out, gemm);
                if (bg != null) {
                    cu.graphLaunch(bg.exec(), w.stream);
                    MemorySegment hostHidden = hiddenAsync(w, t, hiddenRows);
                    logitsBack(w, out, host, logitRows, vocab, logits, ids);
                    if (hostHidden != null) MemorySegment.copy(hostHidden, ValueLayout.JAVA_FLOAT, 0, hiddenRows, 0, t * model.hidden());
                    return null;
                }
            }
            try (Arena a = Arena.ofConfined()) {
                List<Step> profiledSteps = PROFILE ? new ArrayList<>() : null;
                Steps L = PROFILE ? profiledSteps::add : st -> run(st, w.stream);
                lower.steps(w, w.in + 4, seqs, oneToken > 0 ? batchKv : NULL, batchPos + 4L * batchSpans, oneToken, t, allRows ? 0 : -1, out, a, gemm, L);
                if (!allRows && logitRows > 0) {   // the rows asked for, gathered in span order, then the head
                    int hidden = model.hidden(), g = 0;
                    for (int i = 0; i < seqs.length; i++) {
                        int n = spans.get(i).logitRows();
                        if (n == 0) continue;
                        long from = w.x + 4L * (seqs[i].start() + seqs[i].tokens() - n) * hidden;
                        cu.copyDeviceAsync(w.g + 4L * g * hidden, from, 4L * n * hidden, w.stream);
                        g += n;
                    }
                    OverlayWeights.Run[] stepRuns = lower.runs;
                    lower.runs = logitRuns;
                    lower.head(L, a, w, w.g, logitRows, out, headGemm);
                    lower.runs = stepRuns;
                }
                if (PROFILE) profiled(profiledSteps, w.stream, "batch " + t + (decodeRows ? " rows: " : ": "), false);
            }
            MemorySegment hostHidden = hiddenAsync(w, t, hiddenRows);
            logitsBack(w, out, host, logitRows, vocab, logits, ids);
            if (hostHidden != null) MemorySegment.copy(hostHidden, ValueLayout.JAVA_FLOAT, 0, hiddenRows, 0, t * model.hidden());
            return null;
        }
    }

    /** Owner thread: the step's logit rows (at {@code out}) to the host whole, or their argmaxes into {@code ids}; then waits. */
    private void logitsBack(ResidentSession w, long out, MemorySegment host, int logitRows, int vocab, float[] logits, int[] ids) {
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

    /**
     * A captured batch step or session chunk: its graph, executable, the arena holding its launch arguments, and the
     * epoch it belongs to.
     */
    record CapturedSteps(MemorySegment graph, MemorySegment exec, Arena args, long epoch) {
        void free(CudaDriver cu) {
            cu.graphExecDestroy(exec);
            cu.graphDestroy(graph);
            args.close();
        }
    }

    private void dropBatchGraphs() {
        for (CapturedSteps g : batchGraphs.values()) g.free(cu);
        batchGraphs.clear();
    }

    /**
     * Owner thread: captures the step of {@code t} one-token rows; null (and no capture from now on, with a note) when
     * the driver or cuBLAS refuses it, so the caller launches one by one.
     */
    private CapturedSteps captureBatch(Object key, ResidentSession w, Seq[] seqs, int t, long out, boolean gemm) {
        Arena args = Arena.ofShared();
        try {
            List<Step> made = new ArrayList<>();
            lower.steps(w, w.in + 4, seqs, batchKv, batchPos + 4L * batchSpans, t, t, 0, out, args, gemm, made::add);
            Captured c = capture(w.stream, made);
            CapturedSteps bg = new CapturedSteps(c.graph(), c.exec(), args, scratchEpoch);
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
    private ResidentSession batchScratch(int rows, int spans) {
        if (batchRows == null || batchRows.maxChunk < rows) {
            if (batchRows != null) { states.remove(batchRows); batchRows.free(); batchRows = null; }
            scratchEpoch++;
            int cap = Math.min(MAX_CHUNK, Math.max(rows, 64));
            batchRows = lower.ws.orMakingRoom(() -> new ResidentSession(cu, model, kv, o1, lower::splits, () -> scratchEpoch++, cap, 1, cap, null, false));
            states.add(batchRows);
        }
        if (batchSpans < spans) {
            freeBatchTables();
            int cap = Math.max(spans, 64);
            long kvBytes = 2L * 8 * layers.length * cap;   // per layer, the rows' key then value cache addresses
            try {
                batchPos = cu.memAlloc(8L * cap);   // the spans' positions, then their ring chunks
                batchHostPos = cu.memAllocHost(8L * cap);
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

    /**
     * The most rows of a session's chunk that is captured as a graph (verifications of up to 63 drafts, a head's or a
     * draft model's catch-up on as many kept positions, a short prompt); longer chunks launch one by one.
     */
    static final int CAPTURED_CHUNK_ROWS = 64;
    /** Cleared when a chunk could not be captured (a note says why): chunks launch one by one from then on. */
    private boolean chunkCapture = true;

    /**
     * Owner thread: the session's captured chunk of {@code tokens} rows with {@code headRows} (and the products
     * {@code gemm} says), made at the shape's second use and again once the scratch moved ({@link #scratchEpoch}); null
     * for a shape's first use, and null (and no chunk
     * capture from now on, with a note) when the driver or cuBLAS refuses it, so the caller launches one by one. The
     * launches read the position and ids from the session's device memory, and its caches' addresses do not move (KV
     * pages are mapped into a range reserved whole), so one capture serves every position.
     */
    private CapturedSteps chunkGraph(ResidentSession s, int tokens, int headRows, long out, boolean gemm) {
        long key = ((long) tokens << 8) | ((headRows + 1) << 1) | (gemm ? 1 : 0);
        CapturedSteps cg = s.chunkGraphs.get(key);
        if (cg != null && cg.epoch() == scratchEpoch) return cg;
        if (cg != null) s.dropChunkGraphs();
        // a shape's first chunk launches one by one: instantiating a graph of the whole model costs about what it saves
        // once, and the shapes near a generation's end (K shrinks) come once
        if (s.chunkShapes.add(key)) return null;
        Arena args = Arena.ofShared();
        try {
            List<Step> made = new ArrayList<>();
            lower.steps(s, s.in + 4, ResidentLowering.alone(s, tokens), tokens, headRows, out, args, gemm, made::add);
            // without GEMMs a chunk is the decode step's kernels with a row dimension (each waits before it reads another
            // kernel's data, whatever the rows): programmatic launches as there; cuBLAS's kernels do not wait
            Captured c = capture(s.stream, gemm ? made : programmatic(made));
            cg = new CapturedSteps(c.graph(), c.exec(), args, scratchEpoch);
            s.chunkGraphs.put(key, cg);
            return cg;
        } catch (RuntimeException e) {
            args.close();
            if (!(e instanceof CudaException)) throw e;
            chunkCapture = false;
            mm.note("chunks of few rows (drafts, their verification) launch one by one: capturing one failed (" + e.getMessage() + ")");
            return null;
        }
    }

    /** Owner thread: forgets the session's decode step (its sealed layers' buffers or phase changed): made again at the next. */
    private void dropDecode(ResidentSession s) {
        if (s.exec != null) cu.graphExecDestroy(s.exec);
        if (s.graph != null) cu.graphDestroy(s.graph);
        s.exec = s.graph = null;
        s.decode = null;
    }

    /** Owner thread: one token's step, as a replayed graph (captured on first use) or launch by launch. */
    private void decodeStep(ResidentSession s) {
        if (s.decode == null) {
            List<Step> made = new ArrayList<>();
            // a pipeline stage before the last hands its rows on: its decode step runs no head
            lower.steps(s, s.in + 4, ResidentLowering.alone(s, 1), 1, model.runsHead() ? 1 : -1, s.last, s.arena, false, made::add);
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
    private MemorySegment capture(ResidentSession s) {
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
            case Gemm g -> cublas.gemm(lower.ws.cublasHandle(), Cublas.OP_T, Cublas.OP_N, g.m(), g.n(), g.k(), one, g.a(), g.aType(), g.k(),
                    g.b(), g.bType(), g.k(), zero, g.c(), Cublas.R_32F, g.m());
            case Gemms g -> cublas.gemmStridedBatched(lower.ws.cublasHandle(), Cublas.OP_T, Cublas.OP_N, g.m(), g.n(), g.k(), one, g.a(),
                    g.aType(), g.k(), g.strideA(), g.b(), g.bType(), g.k(), g.strideB(), zero, g.c(), Cublas.R_32F, g.m(),
                    g.strideC(), g.count());
            case Step.AllReduce r -> {
                if (tp == null) throw new IllegalStateException("an all-reduce in the steps of a forward that is no rank of a group");
                tp.nccl().allReduceSum(r.buffer(), r.buffer(), r.count(), tp.comm(), stream);
            }
        }
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
        String whose = weights.mtpFc != null ? "the MTP head's " : "";   // (a head is a forward of its own, profiled apart)
        StringBuilder sb = new StringBuilder("cmf: cuda profile, " + whose + profiledSteps + " decode steps (GPU µs per step, launches per step):");
        double total = 0;
        for (var e : profile.entrySet()) {
            double us = 1000 * e.getValue()[0] / Math.max(1, profiledSteps);
            total += us;
            sb.append(String.format(java.util.Locale.ROOT, "%n  %-22s %9.1f µs  %5.1f", e.getKey(), us, e.getValue()[1] / Math.max(1, profiledSteps)));
        }
        sb.append(String.format(java.util.Locale.ROOT, "%n  %-22s %9.1f µs", "total", total));
        if (!prefillProfile.isEmpty()) {
            sb.append(String.format("%ncmf: cuda profile, " + whose + "prefill chunks (GPU µs summed over every chunk of that size, launches):"));
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
            // (not right after an all-reduce: NCCL's kernels are not ours to order)
            if (!out.isEmpty() && !(out.getLast() instanceof Step.AllReduce) && st instanceof Launch l && waits.contains(l.fn().address()))
                st = new Launch(l.name(), l.fn(), l.gx(), l.gy(), l.gz(), l.block(), l.params(), true);
            out.add(st);
        }
        return out;
    }

    /** A launch of {@code k} with {@code args} packed as its signature says (see {@link Launch#of}). */
    static Launch launch(String name, Kernel k, int gx, int gy, int gz, int block, Arena a, Object... args) {
        return Launch.of(name, k, gx, gy, gz, block, a, args);
    }

    /**
     * Freed sequences' KV pages by the chunk and context they were made for, kept for the next sequence of that shape
     * (mapping a fresh sequence's first pages costs three driver calls per cache, a visible part of a prompt's prefill:
     * docs/GPU.md), while they hold at most 1/{@link #IDLE_PAGES_SHARE} of device memory; given back first when memory
     * runs out ({@link PrefillWorkspace#orMakingRoom}).
     */
    private final java.util.Map<Long, java.util.ArrayDeque<KvPages>> idlePages = new java.util.HashMap<>();
    private long idlePageBytes;
    static final int IDLE_PAGES_SHARE = 16;

    /** Owner thread: KV pages for a new sequence: a freed one's of the same shape, or fresh ones (null: caches whole). */
    private KvPages pagesFor(int maxChunk, int maxContext) {
        var q = idlePages.get(((long) maxChunk << 32) | maxContext);
        KvPages p = q == null ? null : q.pollFirst();
        if (p != null) {
            idlePageBytes -= p.mappedBytes();
            return p.reuse();
        }
        return kvPages ? KvPages.create(cu, mm.context().info().ordinal()) : null;
    }

    /** Owner thread: keeps a freed sequence's pages for the next one of its shape, or gives them back. */
    private void park(KvPages p, int maxChunk, int maxContext) {
        if (p == null) return;
        if (idlePageBytes + p.mappedBytes() > deviceMemory / IDLE_PAGES_SHARE) {
            p.free();
            return;
        }
        idlePages.computeIfAbsent(((long) maxChunk << 32) | maxContext, k -> new java.util.ArrayDeque<>()).addFirst(p);
        idlePageBytes += p.mappedBytes();
    }

    /** Owner thread: gives back every idle sequence's pages; whether there were any. */
    private boolean freeIdlePages() {
        boolean any = idlePageBytes > 0;
        for (var q : idlePages.values()) for (KvPages p : q) p.free();
        idlePages.clear();
        idlePageBytes = 0;
        return any;
    }

    /** Owner thread: frees every session's device memory and the small vectors (the matrices belong to the matmul). */
    void closeOnOwner() {
        if (closed) return;
        closed = true;
        if (PROFILE && (profiledSteps > 0 || !prefillProfile.isEmpty())) System.err.println(profileReport());
        for (ResidentSession s : states) s.free();   // the batch scratch among them
        states.clear();
        freeIdlePages();
        batchRows = null;
        dropBatchGraphs();
        freeBatchTables();
        if (argmaxIds != NULL) cu.memFree(argmaxIds);
        if (argmaxHost != null) cu.memFreeHost(argmaxHost);
        argmaxIds = NULL;
        argmaxHost = null;
        if (overlays != null) overlays.close();
        weights.free(cu);
        lower.ws.free();
        own.close();
    }
}
