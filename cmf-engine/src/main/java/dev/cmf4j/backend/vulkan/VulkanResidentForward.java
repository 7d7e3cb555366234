package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.RopeTable;
import dev.cmf4j.backend.cpu.Rotary;
import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

import static dev.cmf4j.backend.vulkan.Vk.PTR;
import static dev.cmf4j.backend.vulkan.Vk.U32;
import static dev.cmf4j.backend.vulkan.Vk.U64;

/**
 * A decoder run whole on a Vulkan device: the hidden state, every operator of a layer (RMSNorm, the products,
 * per-head q/k norms, rotary, the KV cache append, causal GQA attention with an optional sliding window and attention
 * sinks, the gated MLP or a mixture of experts, the residual adds, sandwich norms, projection biases; gemma4's per-layer
 * inputs, v norm, layer scalars and layers reading an earlier layer's caches) and the head stay on the device, one
 * submission per forward call; the host gathers the embedding rows (and per-layer table rows) and computes the rotary
 * tables (as the CPU graph does, so both paths rotate by the same cos and sin), and takes back the logits. Supports the
 * plan shapes {@link #unsupported} does not name (llama, qwen3, gemma3, gemma4, qwen3_moe, gpt_oss and alike with an f32
 * or f16 KV cache); anything else runs the hybrid path. Operators: ops.comp; products: matvec.comp over the weights
 * {@link VulkanMatMul} holds; experts: moe.comp over the forward's own expert stacks. All calls are serialised on the
 * matmul.
 */
final class VulkanResidentForward implements DeviceForward {
    private final VulkanMatMul mm;
    private final VulkanContext ctx;
    private final Vk vk;
    private final DecoderPlan plan;
    private final int qDimMax, kvDimMax, interMax, maxHalf, headDimMax;
    /** embryo.comp's scores of one anchor query in shared memory: sinks + window at most. */
    static final int MAX_ANCHOR_SCORES = 160;

    /** Whether {@code plan} needs embryo.comp's 64-bit sums (the resonance router, the clustered head). */
    static boolean needsFloat64(DecoderPlan plan) {
        if (plan.headClusters() != null) return true;
        for (DecoderPlan.Layer l : plan.layers()) if (l.moe() != null && l.moe().resonance() != null) return true;
        return false;
    }

    /** gdn.comp's conv window in registers: the widest causal conv of a delta net it takes. */
    static final int MAX_CONV_KERNEL = 8;
    /**
     * Widest rows of the delta nets' buffers (floats a token; 0 without delta nets): the fused projections, b and a
     * fused, the conv input [q; k; v], z and the core, a value per value head, q and k per value head.
     */
    private final int dnProjMax, dnBaMax, dnConvMax, dnVMax, dnHeadsMax, dnQkMax;
    /** Whether a layer has the attention output gate (its q product twice as wide: q and the gate per head). */
    private final boolean outputGates;
    /**
     * Every projection bias, every attention layer's sinks (a logit per head), the delta nets' vectors (conv weights and bias, −exp(A_log), dt
     * bias), the anchors' (sinks, rotation tables) and the resonance routers' descriptors, by identity: float offsets in
     * {@link #params}.
     */
    private final Map<float[], Integer> vectorAt = new IdentityHashMap<>();
    /** Keys per chunk of the split decode attention (ops.comp OP 7's SPLIT), and its most workgroups per head. */
    static final int ATTENTION_SPLIT = 64, ATTENTION_PER_HEAD = 32;
    /** Every norm weight the plan has, uploaded once, by the norm's identity: its float offset in {@link #params}. */
    private final Map<NormOp, Integer> normAt = new IdentityHashMap<>();
    /** The plan's distinct rotary tables (index per layer). */
    private final List<RopeTable> ropes = new ArrayList<>();
    private final int[] ropeOf;
    private final VulkanContext.Buffer params;
    private final long commandPool, fence;
    private final MemorySegment commandBuffer;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment push = arena.allocate(VulkanContext.OPS_PUSH_BYTES, 4), mvPush = arena.allocate(MatvecPush.BYTES, 4),
            setArray = arena.allocate(U64), fenceArray = arena.allocate(U64), region = Vk.plain(arena, 24),
            beginInfo = Vk.struct(arena, 32, Vk.ST_COMMAND_BUFFER_BEGIN_INFO), submitInfo = Vk.struct(arena, 72, Vk.ST_SUBMIT_INFO),
            commandBuffers = arena.allocate(PTR), computeToCompute = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER),
            transferToCompute = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER), computeToTransfer = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER),
            transferToHost = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER);
    private final List<State> states = new ArrayList<>();
    private boolean closed;
    /**
     * A one-token row's rotary, cache append and combine folded into its attention (OP 9, attend_decode.comp: two phases a layer
     * fewer); -Dcmf.vulkan.foldAttention=false keeps them apart (OP 1, OP 4, OP 7, OP 8) to measure one against the
     * other. Read when a step is recorded (tests flip it for states made after).
     */
    boolean foldAttention = !"false".equals(System.getProperty("cmf.vulkan.foldAttention"));
    /** Bytes of the step buffer: the position (4 words), then OP 9's counter per head (zero at every submission's start). */
    private final int stepBytes;
    /**
     * -Dcmf.vulkan.profile=true: decode steps and prompt chunks timed phase by phase (timestamps between their dispatches),
     * printed per state.
     */
    static final boolean PROFILE = Boolean.getBoolean("cmf.vulkan.profile");
    /**
     * A decode step's down product of rows wider than a tile reads act(gate)·up, made once by an operator before it, from
     * memory (-Dcmf.vulkan.directDown=false: each workgroup stages it tile by tile, as before).
     */
    static final boolean DIRECT_DOWN = !"false".equalsIgnoreCase(System.getProperty("cmf.vulkan.directDown"));
    /**
     * -Dcmf.vulkan.gluProducts=true: a decode step's gate and up products in one dispatch writing act(gate)·up times the
     * down product's column scales, which the down product reads from memory, where down's rows are wider than a tile,
     * instead of two products and the GLU operator's phase. Off until it is timed on a GPU (docs/VULKAN.md, session 29).
     */
    boolean gateUpTogether = Boolean.getBoolean("cmf.vulkan.gluProducts");
    /**
     * -Dcmf.vulkan.foldRows=false: a batched step of decode rows normalises, adds and applies the GLU by separate
     * operators around plain products (as a prompt chunk does) instead of folding them as a sequence's own decode step.
     */
    static final boolean FOLD_ROWS = !"false".equalsIgnoreCase(System.getProperty("cmf.vulkan.foldRows"));
    /**
     * A decode step's phases chained without barriers (-Dcmf.vulkan.chain): a one-tile product after a phase of
     * products or the folded attention (down, then the next layer's q/k/v, then the attention, then o, then gate/up; the
     * last down, then the head) issues its first weight loads at once and waits on a counter of the phase's finished
     * workgroups before it reads x (the attention waits before it reads q, k and v), as CUDA's programmatic dependent
     * launch overlaps a kernel's start with its predecessor's tail. It relies on the device
     * starting a dispatch's workgroups only after the previous dispatch's have all started (so a waiting workgroup never
     * holds back the ones it waits for); a wait gives up after SPIN_LIMIT polls rather than hang. On by default on
     * NVIDIA's devices, where that order was seen to hold (docs/VULKAN.md), off elsewhere; the property decides where
     * set. Read when a step is recorded (tests flip it for states made after).
     */
    boolean chain;
    static final int NVIDIA = 0x10de;
    /** Counters a state's chained phases can use a step. */
    private static final int CHAIN_COUNTERS = 1024;
    /** While a step is recorded: whether its products chain, the counter this phase's products signal, ... */
    private boolean chaining;
    private int chainCounter, nextCounter;
    /** ... this phase's workgroups that signal it, whether all of its dispatches do, ... */
    private long chainGroups;
    private boolean chainAll;
    /** ... and the barrier left out after the phase before (0: none), its counter (1 + index) and workgroups. */
    private int pendingWait;
    private long pendingWaitFor;
    /** Dispatches recorded to wait on a counter instead of a barrier, so far (tests see that chains were made). */
    long chainedWaits;
    /** Tests only: workgroups added to what each chained product waits for (so every such wait gives up), and its polls. */
    int chainWaitSlack, chainSpins;
    private static final int PROFILE_QUERIES = 1024;
    private long queryPool;
    /** Whether the command buffer being recorded is profiled (a decode step or a prompt chunk); the phase each of its timestamps ends. */
    private boolean profiling;
    /** Whether the last command buffer recorded was profiled: its timestamps are collected after its submission. */
    private boolean lastRecordingTimed;
    private final List<String> phases = new ArrayList<>();
    /** Per phase: nanoseconds summed over the decode steps (and over the prompt chunks), and timestamps per step (chunk). */
    private final Map<String, double[]> profile = new java.util.LinkedHashMap<>(), chunkProfile = new java.util.LinkedHashMap<>();
    private int profiledSteps, profiledChunks, profiledChunkTokens;
    /** The command buffer being recorded (the shared one, or a state's decode buffer). */
    private MemorySegment rec;
    /** Begin info for a command buffer recorded once and submitted many times (no one-time flag). */
    private final MemorySegment beginReusable = Vk.struct(arena, 32, Vk.ST_COMMAND_BUFFER_BEGIN_INFO);

    /** Why {@code plan} with a {@code kv} cache cannot run here, or null when it can. */
    static String unsupported(DecoderPlan plan, KvType kv) {
        if (kv != KvType.F32 && kv != KvType.F16) return "a " + kv.label() + " KV cache (the Vulkan forward keeps f32 or f16)";
        DecoderPlan.PerLayerEmbedding pe = plan.perLayerEmbedding();
        if (pe != null && !VulkanMatMul.supports(pe.projection())) return pe.projection().name() + " is " + pe.projection().dtype().label;
        if (pe != null && (pe.projection().outDim() != pe.dim() * plan.layers().size() || pe.table().cols() != pe.projection().outDim()))
            return "per-layer inputs of " + pe.projection().outDim() + " for " + plan.layers().size() + " layers of " + pe.dim();
        if (plan.mtpProjection() != null) return "an MTP head (its input rows come from the host)";
        if (plan.inputRows()) return "a pipeline stage's input rows (--split layers runs on CUDA)";
        DecoderPlan.HeadClusters hc = plan.headClusters();
        if (hc != null && plan.vocab() % hc.count() != 0) return "a hierarchical head of " + hc.count() + " clusters over " + plan.vocab() + " tokens";
        if (hc != null && !VulkanMatMul.supports(hc.clusters())) return hc.clusters().name() + " is " + hc.clusters().dtype().label;
        if (!VulkanMatMul.supports(plan.head())) return plan.head().name() + " is " + plan.head().dtype().label;
        for (DecoderPlan.Layer l : plan.layers()) {
            String at = "layer " + plan.layers().indexOf(l) + ": ";
            DecoderPlan.Anchor an = l.anchor();
            if (an != null && an.sinks() + an.window() > MAX_ANCHOR_SCORES)
                return at + "an anchor of " + an.sinks() + " sinks and a window of " + an.window() + " (embryo.comp takes " + MAX_ANCHOR_SCORES + " scores)";
            if (an != null && (an.rotaryDim() % 2 != 0 || an.rotaryDim() > l.headDim())) return at + "an anchor's rotary width " + an.rotaryDim();
            if (l.moe() != null) {
                String why = moeUnsupported(plan, l);
                if (why != null) return at + why;
            }
            if (l.perLayerInput() != null && (pe == null || l.perLayerInput().gate().outDim() != pe.dim()))
                return at + "a per-layer input without per-layer embeddings of its width";
            if (l.sinks() != null && l.sinks().length != plan.heads()) return at + l.sinks().length + " attention sinks for " + plan.heads() + " heads";
            if (l.sharesKv()) {   // it attends over the source's caches: they must be its shape
                DecoderPlan.Layer src = l.kvSource() < plan.layers().indexOf(l) ? plan.layers().get(l.kvSource()) : null;
                if (src == null || src.sharesKv() || src.deltaNet() != null || src.kvHeads() != l.kvHeads() || src.headDim() != l.headDim()
                        || src.window() != l.window())
                    return at + "keys and values shared with layer " + l.kvSource() + " of another shape";
            }
            List<Matrix> ms = new ArrayList<>();
            DecoderPlan.DeltaNet dn = l.deltaNet();
            if (dn != null) {
                if (dn.convKernel() > MAX_CONV_KERNEL) return at + "a causal conv of " + dn.convKernel() + " taps (gdn.comp takes " + MAX_CONV_KERNEL + ")";
                ms.addAll(dn.inputs());
                ms.add(dn.outProj());
            } else {
                if (l.headDim() > DecoderPlan.MAX_HEAD_DIM) return at + "head dim " + l.headDim();
                if (plan.heads() % l.kvHeads() != 0) return at + plan.heads() + " heads over " + l.kvHeads() + " KV heads";
                if (kv == KvType.F16 && l.headDim() % 2 != 0) return at + "an f16 KV cache of odd head dim " + l.headDim() + " (stored by pairs)";
                if (l.rope() != null && l.rope().rotaryDim() % 2 != 0) return at + "an odd rotary width";
                for (Matrix m : new Matrix[] {l.q(), l.k(), l.v(), l.o()}) if (m != null) ms.add(m);   // k, v: none when shared
            }
            for (Matrix m : new Matrix[] {l.gate(), l.up(), l.down()}) if (m != null) ms.add(m);
            if (l.perLayerInput() != null) ms.addAll(List.of(l.perLayerInput().gate(), l.perLayerInput().projection()));
            for (Matrix m : ms)
                if (!VulkanMatMul.supports(m)) return m.name() + " is " + m.dtype().label + (m.inputMajor() ? ", input-major" : "");
        }
        return null;
    }

    /**
     * Whether the KV caches hold IEEE halves (--kv f16; anchors' rings and delta-net states stay f32): OPs 1, 2, 4, 7 and
     * 9 run their KV_HALF pipelines, and attention reads the chunk's own keys and values unrounded (as the CPU's cache
     * reads its pending chunk) from the k and v rows, or from {@link State#kPending} where a later layer reads the caches.
     */
    private final boolean kvHalf;
    /** Per layer: whether a later layer reads its caches (gemma4's KV sharing). */
    private final boolean[] kvShared;

    /** With an f32 KV cache. */
    VulkanResidentForward(VulkanMatMul mm, DecoderPlan plan) { this(mm, plan, KvType.F32); }

    VulkanResidentForward(VulkanMatMul mm, DecoderPlan plan, KvType kv) {
        this.mm = mm;
        this.ctx = mm.context();
        String chainProperty = System.getProperty("cmf.vulkan.chain");
        chain = chainProperty != null ? Boolean.parseBoolean(chainProperty) : ctx.info().vendorId() == NVIDIA;
        this.vk = ctx.vk;
        this.plan = plan;
        this.kvHalf = kv == KvType.F16;
        kvShared = new boolean[plan.layers().size()];
        for (DecoderPlan.Layer l : plan.layers()) if (l.sharesKv()) kvShared[l.kvSource()] = true;
        int q = 0, kvd = 0, in = 0, half = 0, hdm = 0;
        ropeOf = new int[plan.layers().size()];
        List<float[]> weights = new ArrayList<>();
        List<Integer> offsets = new ArrayList<>();
        int[] size = {0};
        // each starts on 4 floats, so matvec_decode.comp stages a folded norm's weight 16 bytes at a time
        java.util.function.Consumer<float[]> place = w -> {
            offsets.add(size[0]);
            weights.add(w);
            size[0] += (w.length + 3) & ~3;
        };
        java.util.function.Consumer<NormOp> norm = n -> {
            if (n == null || n.w() == null || normAt.containsKey(n)) return;
            normAt.put(n, size[0]);
            place.accept(n.w());
        };
        norm.accept(plan.finalNorm());
        if (plan.perLayerEmbedding() != null) norm.accept(plan.perLayerEmbedding().projectionNorm());
        int proj = 0, ba = 0, conv = 0, vd = 0, nv = 0, qk = 0;
        boolean gates = false;
        for (int i = 0; i < plan.layers().size(); i++) {
            DecoderPlan.Layer l = plan.layers().get(i);
            gates |= l.outputGate();
            java.util.function.Consumer<float[]> vector = v -> {
                if (v != null && !vectorAt.containsKey(v)) {
                    vectorAt.put(v, size[0]);
                    place.accept(v);
                }
            };
            if (l.anchor() != null) for (float[] v : new float[][] {l.anchor().sinkK(), l.anchor().sinkV(), l.anchor().cos(), l.anchor().sin()}) vector.accept(v);
            DecoderPlan.Resonance res = l.moe() == null ? null : l.moe().resonance();
            if (res != null) for (float[] v : new float[][] {res.mu(), res.rank() == 0 ? null : res.u(), res.bias()}) vector.accept(v);
            DecoderPlan.DeltaNet dn = l.deltaNet();
            if (dn != null) {
                proj = Math.max(proj, dn.qkvz() != null ? dn.qkvz().outDim() : 0);
                ba = Math.max(ba, dn.ba() != null ? dn.ba().outDim() : 0);
                conv = Math.max(conv, dn.convDim());
                vd = Math.max(vd, dn.vDim());
                nv = Math.max(nv, dn.valueHeads());
                qk = Math.max(qk, dn.valueHeads() * dn.keyDim());
                norm.accept(dn.norm());
                for (float[] v : new float[][] {dn.conv(), dn.convBias(), dn.negA(), dn.dtBias()}) vector.accept(v);
            }
            q = Math.max(q, plan.heads() * l.headDim());
            hdm = Math.max(hdm, l.headDim());
            kvd = Math.max(kvd, l.kvHeads() * l.headDim());
            if (l.gate() != null) in = Math.max(in, Math.max(l.gate().outDim(), l.up().outDim()));
            if (l.perLayerInput() != null) in = Math.max(in, l.perLayerInput().gate().outDim());   // its gate's rows go to g too
            if (l.moe() != null) moeParams(l, place, size);
            for (NormOp n : new NormOp[] {l.attnNorm(), l.qNorm(), l.kNorm(), l.vNorm(), l.postAttnNorm(), l.ffnNorm(), l.postFfnNorm(),
                    l.perLayerInput() == null ? null : l.perLayerInput().postNorm(), l.postMlpNorm(), l.preMoeNorm(), l.postMoeNorm(),
                    l.moe() == null ? null : l.moe().routerNorm()}) norm.accept(n);
            for (float[] b : new float[][] {l.qBias(), l.kBias(), l.vBias(), l.oBias()}) vector.accept(b);
            vector.accept(l.sinks());
            int r = -1;
            for (int j = 0; j < ropes.size() && l.rope() != null; j++) if (ropes.get(j) == l.rope()) r = j;
            if (r < 0 && l.rope() != null && l.rope().rotaryDim() > 0) { ropes.add(l.rope()); r = ropes.size() - 1; }
            ropeOf[i] = l.rope() == null || l.rope().rotaryDim() == 0 ? -1 : r;
            if (l.rope() != null) half = Math.max(half, l.rope().rotaryDim() / 2);
        }
        qDimMax = q; kvDimMax = kvd; interMax = Math.max(1, Math.max(in, moeSharedInter)); maxHalf = half; headDimMax = hdm;
        dnProjMax = proj; dnBaMax = ba; dnConvMax = conv; dnVMax = vd; dnHeadsMax = nv; dnQkMax = qk;
        outputGates = gates;
        stepBytes = 16 + 4 * plan.heads();
        // device-local: every norm's workgroups read them each step
        params = mm.bufferFilled(4L * Math.max(1, size[0]), dst -> {
            for (int i = 0; i < weights.size(); i++)
                MemorySegment.copy(weights.get(i), 0, dst, ValueLayout.JAVA_FLOAT, 4L * offsets.get(i), weights.get(i).length);
        });
        try {
            moeStacks();
        } catch (RuntimeException e) {
            for (MoeLayer m : moeLayers.values()) m.free(mm);
            ctx.free(params);
            throw e;
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ci = Vk.struct(a, 24, Vk.ST_COMMAND_POOL_CREATE_INFO);
            ci.set(U32, 16, 2);
            ci.set(U32, 20, ctx.info().computeQueueFamily());
            MemorySegment out = Vk.out(a);
            vk.check("vkCreateCommandPool", ctx.device, ci, MemorySegment.NULL, out);
            commandPool = out.get(U64, 0);
            MemorySegment ai = Vk.struct(a, 32, Vk.ST_COMMAND_BUFFER_ALLOCATE_INFO);
            ai.set(U64, 16, commandPool);
            ai.set(U32, 28, 1);
            MemorySegment cb = a.allocate(PTR);
            vk.check("vkAllocateCommandBuffers", ctx.device, ai, cb);
            commandBuffer = cb.get(PTR, 0);
            vk.check("vkCreateFence", ctx.device, Vk.struct(a, 24, Vk.ST_FENCE_CREATE_INFO), MemorySegment.NULL, out);
            fence = out.get(U64, 0);
            if (PROFILE && ctx.info().timestampPeriod() > 0) {
                MemorySegment qi = Vk.struct(a, 32, Vk.ST_QUERY_POOL_CREATE_INFO);
                qi.set(U32, 20, Vk.QUERY_TYPE_TIMESTAMP);
                qi.set(U32, 24, PROFILE_QUERIES);
                vk.check("vkCreateQueryPool", ctx.device, qi, MemorySegment.NULL, out);
                queryPool = out.get(U64, 0);
            }
        }
        fenceArray.set(U64, 0, fence);
        commandBuffers.set(PTR, 0, commandBuffer);
        submitInfo.set(U32, 40, 1);
        submitInfo.set(PTR, 48, commandBuffers);
        beginInfo.set(U32, 16, 1);
        barrier(computeToCompute, Vk.ACCESS_SHADER_WRITE, Vk.ACCESS_SHADER_READ | Vk.ACCESS_SHADER_WRITE);
        barrier(transferToCompute, Vk.ACCESS_TRANSFER_WRITE, Vk.ACCESS_SHADER_READ | Vk.ACCESS_SHADER_WRITE);
        // (transfers after shaders also write where shaders wrote: a batch's q/k/v rows into each state, attention rows back)
        barrier(computeToTransfer, Vk.ACCESS_SHADER_WRITE, Vk.ACCESS_TRANSFER_READ | Vk.ACCESS_TRANSFER_WRITE);
        barrier(transferToHost, Vk.ACCESS_TRANSFER_WRITE, Vk.ACCESS_HOST_READ);
    }

    private static void barrier(MemorySegment b, int src, int dst) {
        b.set(U32, 16, src);
        b.set(U32, 20, dst);
    }

    /** One sequence's device buffers: activations for a chunk, its KV caches, the attention scores. */
    final class State {
        final int chunk, context;
        final VulkanContext.Buffer input, out, step, tables, stepDev, x, xn, q, k, v, att, tmp, g, u, logits, chain;
        /** Gemma4's per-layer inputs: the table's rows the host gathers (times its scale), and pli [chunk, layers·dim]; else null. */
        VulkanContext.Buffer pleRows, pli;
        /** A mixture of experts' router logits, expert ids and weights, and the chosen experts' GLU rows (null without experts). */
        final VulkanContext.Buffer moeLogits, moeRoute, moeH;
        /** A chunk's picks' down products before their weighted sum (moe.comp OP 5, then OP 6), or null without experts. */
        VulkanContext.Buffer moeY;
        /** Beside a dense MLP (gemma4): the router's normed rows and the experts' output rows (null otherwise). */
        VulkanContext.Buffer moeRouterIn, moeOut;
        /** The decode step (one token, its logits) recorded once for this state and replayed, or null until the first. */
        MemorySegment decode;
        /** Whether {@link #decode} copies the step's last-layer row back too. */
        boolean decodeHidden;
        /** The chained phases' counters {@link #decode} uses (0: it does not chain), copied back with the logits. */
        int decodeCounters;
        VulkanContext.Buffer chainBack;
        /** The last layer's rows read back (an MTP head's input): made when first asked for. */
        VulkanContext.Buffer hiddenOut;
        final VulkanContext.Buffer[] kCache, vCache;
        /**
         * With an f16 cache, per attention layer: the chunk's own keys (rotated) and values in f32, which its attention
         * reads instead of their halves: k and v, or buffers of their own for a layer whose caches a later layer reads
         * (that layer's too). Else null.
         */
        final VulkanContext.Buffer[] kPending, vPending;
        /** With output gates: q and the gate per head as the q product leaves them, and the gate. Else null. */
        final VulkanContext.Buffer qg, gate;
        /** With delta nets: their rows of a step (see dnProjMax …), and per delta-net layer its conv inputs and state S. Else null. */
        final VulkanContext.Buffer dnProj, dnBa, dnMixed, dnZ, dnB, dnA, dnQ, dnK, dnCore;
        final VulkanContext.Buffer[] dnConv, dnS;
        /** With a hierarchical head: the cluster log-probabilities of the logit rows. Else null. */
        final VulkanContext.Buffer lc;
        /** The head gate ({@link #gateHead}): clusters of lower log-probability are dropped; written to the step buffer. */
        double headGate = Double.NEGATIVE_INFINITY;
        final List<VulkanContext.Buffer> all = new ArrayList<>();
        final Map<List<Long>, Long> sets = new HashMap<>();
        final Map<Object, Long> matvecSets = new HashMap<>();
        boolean released;

        State(int chunk, int context) { this(chunk, context, chunk); }

        /** With room for {@code logitRows} rows of logits (a batch's wanted rows may be fewer than its rows). */
        State(int chunk, int context, int logitRows) {
            this.chunk = chunk;
            this.context = context;
            int hidden = plan.hidden(), heads = plan.heads();
            try {
                input = host(4L * chunk * hidden + 4L * Math.max(1, ropes.size()) * 2 * chunk * Math.max(1, maxHalf), "inputs");
                out = add(ctx.buffer(4L * logitRows * plan.vocab(), ctx.readbackFlags(), "logits (host)"));
                step = host(stepBytes, "step");
                step.mapped().fill((byte) 0);   // the counters stay zero: copied in with the position
                // device-local twins of the rotary tables and the step's position, copied in by each submission:
                // every rotary and attention workgroup reads them, and host-visible memory may be across the bus
                tables = dev(input.bytes(), "rotary tables");
                stepDev = dev(stepBytes, "step (device)");
                x = dev(4L * chunk * hidden, "hidden");
                xn = dev(4L * chunk * hidden, "normed hidden");
                q = dev(4L * chunk * qDimMax, "q");
                k = dev(4L * chunk * kvDimMax, "k");
                v = dev(4L * chunk * kvDimMax, "v");
                // the scores of a chunk, or the split decode attention's partial sums (OP 7: hd + 2 floats per workgroup)
                att = dev(4L * chunk * qDimMax + 4L * Math.max((long) heads * chunk * context, (long) heads * attentionPerHead(context) * (headDimMax + 2)),
                        "attention and its scores");
                tmp = dev(4L * chunk * hidden, "projection");
                g = dev(4L * chunk * interMax, "gate");
                u = dev(4L * chunk * interMax, "up");
                logits = dev(4L * logitRows * plan.vocab(), "logits");
                chain = dev(4L * CHAIN_COUNTERS, "chained phases' counters");
                chainBack = add(ctx.buffer(4L * CHAIN_COUNTERS, ctx.readbackFlags(), "chained phases' counters (host)"));
                if (plan.perLayerEmbedding() != null) {
                    long bytes = 4L * chunk * plan.perLayerEmbedding().projection().outDim();
                    pleRows = host(bytes, "per-layer table rows");   // read once a step by OP 16: no device twin
                    pli = dev(bytes, "per-layer inputs");
                }
                moeLogits = moeExperts == 0 ? null : dev(4L * chunk * moeExperts, "router logits");
                moeRoute = moeExperts == 0 ? null : dev(8L * chunk * moeTopK, "expert ids and weights");
                moeH = moeExperts == 0 ? null : dev(4L * chunk * moeTopK * moeInter, "experts' GLU rows");
                if (moeExperts > 0 && chunk >= ctx.gemmMinTokens) moeY = dev(4L * chunk * moeTopK * hidden, "experts' down rows");
                if (plan.layers().stream().anyMatch(l -> l.moe() != null && l.gate() != null)) {
                    moeRouterIn = dev(4L * chunk * hidden, "router's normed rows");
                    moeOut = dev(4L * chunk * hidden, "experts' output rows");
                }
                int n = plan.layers().size();
                kCache = new VulkanContext.Buffer[n];
                vCache = new VulkanContext.Buffer[n];
                kPending = kvHalf ? new VulkanContext.Buffer[n] : null;
                vPending = kvHalf ? new VulkanContext.Buffer[n] : null;
                dnConv = new VulkanContext.Buffer[n];
                dnS = new VulkanContext.Buffer[n];
                for (int l = 0; l < n; l++) {
                    DecoderPlan.Layer layer = plan.layers().get(l);
                    DecoderPlan.DeltaNet dn = layer.deltaNet();
                    if (dn != null) {   // no KV cache: its conv's last inputs and the delta rule's state
                        dnConv[l] = dev(4L * Math.max(1, dn.convDim() * (dn.convKernel() - 1)), "delta net conv inputs");
                        dnS[l] = dev(4L * dn.valueHeads() * dn.keyDim() * dn.valueDim(), "delta net state");
                        continue;
                    }
                    if (layer.sharesKv()) {   // it reads its source's caches (an earlier layer's): none of its own
                        kCache[l] = kCache[layer.kvSource()];
                        vCache[l] = vCache[layer.kvSource()];
                        if (kvHalf) { kPending[l] = kPending[layer.kvSource()]; vPending[l] = vPending[layer.kvSource()]; }
                        continue;
                    }
                    if (kvHalf && layer.anchor() == null) {
                        kPending[l] = kvShared[l] ? dev(4L * chunk * layer.kvHeads() * layer.headDim(), "pending keys") : k;
                        vPending[l] = kvShared[l] ? dev(4L * chunk * layer.kvHeads() * layer.headDim(), "pending values") : v;
                    }
                    // an anchor keeps a ring of its window's keys and values, slot p mod W, instead of a cache (f32 always)
                    long bytes = (kvHalf && layer.anchor() == null ? 2L : 4L) * (layer.anchor() != null ? layer.anchor().window() : context)
                            * layer.kvHeads() * layer.headDim();
                    kCache[l] = dev(bytes, layer.anchor() != null ? "anchor key ring" : "key cache");
                    vCache[l] = dev(bytes, layer.anchor() != null ? "anchor value ring" : "value cache");
                }
                qg = outputGates ? dev(8L * chunk * qDimMax, "q and output gate") : null;
                gate = outputGates ? dev(4L * chunk * qDimMax, "output gate") : null;
                boolean dn = dnConvMax > 0;
                dnProj = dn && dnProjMax > 0 ? dev(4L * chunk * dnProjMax, "delta net projections") : null;
                dnBa = dn && dnBaMax > 0 ? dev(4L * chunk * dnBaMax, "delta net b and a") : null;
                dnMixed = dn ? dev(4L * chunk * dnConvMax, "delta net conv rows") : null;
                dnZ = dn ? dev(4L * chunk * dnVMax, "delta net z") : null;
                dnB = dn ? dev(4L * chunk * dnHeadsMax, "delta net b and beta") : null;
                dnA = dn ? dev(4L * chunk * dnHeadsMax, "delta net a and g") : null;
                dnQ = dn ? dev(4L * chunk * dnQkMax, "delta net q") : null;
                dnK = dn ? dev(4L * chunk * dnQkMax, "delta net k") : null;
                dnCore = dn ? dev(4L * chunk * dnVMax, "delta net output") : null;
                lc = plan.headClusters() != null ? dev(4L * logitRows * plan.headClusters().count(), "cluster log-probabilities") : null;
            } catch (RuntimeException e) {
                free();
                throw e;
            }
        }

        private VulkanContext.Buffer dev(long bytes, String what) {
            // one binding covers each buffer whole: past the device's range it would be undefined, so say so instead
            if (bytes > ctx.info().maxStorageBufferRange())
                throw new IllegalArgumentException("the Vulkan forward's " + what + " for chunks of " + chunk + " and a context of "
                        + context + " take " + bytes + " bytes, more than this device's storage-buffer range ("
                        + ctx.info().maxStorageBufferRange() + "): use a shorter context or -Dcmf.vulkan.resident=false");
            return add(ctx.buffer(bytes, Vk.MEMORY_DEVICE_LOCAL, what));
        }

        private VulkanContext.Buffer host(long bytes, String what) {
            return add(ctx.buffer(bytes, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, what));
        }

        /** Makes {@link #hiddenOut} when rows are wanted and it is not there yet (before a step that copies into it is recorded). */
        void wantRows(boolean rows) {
            if (rows && hiddenOut == null) hiddenOut = add(ctx.buffer(4L * chunk * plan.hidden(), ctx.readbackFlags(), "last layer's rows (host)"));
        }

        private VulkanContext.Buffer add(VulkanContext.Buffer b) {
            all.add(b);
            return b;
        }

        void free() {
            if (decode != null) {
                freeCommandBuffer(decode);
                decode = null;
            }
            for (VulkanContext.Buffer b : all) ctx.free(b);
            all.clear();
            released = true;
        }
    }

    @Override public Object newState(int maxChunk, int maxContext) {
        synchronized (mm) {
            if (closed) throw new IllegalStateException("Vulkan forward closed");
            State s = new State(maxChunk, maxContext);
            states.add(s);
            return s;
        }
    }

    @Override public void gateHead(Object state, double gate) { ((State) state).headGate = gate; }

    @Override public void release(Object state) {
        synchronized (mm) {
            State s = (State) state;
            if (!s.released && !closed) {
                dropBatchSteps();   // their commands name its buffers
                s.free();
            }
            states.remove(s);
            printProfile();
        }
    }

    @Override public void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits) {
        forward(state, ids, off, tokens, pos0, logits, allLogits, null);
    }

    /** x after the last layer (before the final norm) is copied back with the logits when asked for: an MTP head's input. */
    @Override public boolean handsBackHidden() { return true; }

    @Override public void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits, float[] hidden) {
        if (hidden != null && hidden.length < (long) tokens * plan.hidden())
            throw new IllegalArgumentException("a buffer of " + hidden.length + " floats for " + tokens + " hidden rows of " + plan.hidden());
        synchronized (mm) {
            State s = (State) state;
            if (closed || s.released) throw new IllegalStateException("Vulkan state released");
            if (tokens > s.chunk || pos0 + tokens > s.context)
                throw new IllegalArgumentException(tokens + " tokens at " + pos0 + " exceed the state's chunk " + s.chunk + " or context " + s.context);
            run(s, ids, off, tokens, pos0, logits, allLogits, hidden);
        }
    }

    /** Host: the embedding rows of {@code T} tokens into {@code into}'s input buffer from row {@code row0}. */
    private void embed(State into, int row0, int[] ids, int off, int T) {
        int hidden = plan.hidden();
        MemorySegment in = into.input.mapped();
        float[] row = new float[hidden];
        for (int t = 0; t < T; t++) {
            plan.embedding().decodeRow(ids[off + t], row, 0);
            if (plan.embedScale() != 1f) for (int i = 0; i < hidden; i++) row[i] *= plan.embedScale();
            MemorySegment.copy(row, 0, in, ValueLayout.JAVA_FLOAT, 4L * (row0 + t) * hidden, hidden);
        }
        perLayerRows(into, row0, ids, off, T);
    }

    /** Host: gemma4's per-layer table rows of {@code T} tokens, times the table's scale (as the CPU graph), from row {@code row0}. */
    private void perLayerRows(State into, int row0, int[] ids, int off, int T) {
        DecoderPlan.PerLayerEmbedding pe = plan.perLayerEmbedding();
        if (pe == null) return;
        int width = pe.projection().outDim();
        float[] row = new float[width];
        for (int t = 0; t < T; t++) {
            int id = ids[off + t];
            if (id < 0 || id >= pe.table().rows())
                throw new IllegalArgumentException("token id " + id + " outside the per-layer table [0, " + pe.table().rows() + ")");
            pe.table().decodeRow(id, row, 0);
            for (int i = 0; i < width; i++) row[i] *= pe.tableScale();
            MemorySegment.copy(row, 0, into.pleRows.mapped(), ValueLayout.JAVA_FLOAT, 4L * (row0 + t) * width, width);
        }
    }


    /** Host: each rotary table of {@code s}'s {@code T} positions from {@code pos0} into its input buffer, and its step's position. */
    private void positions(State s, int T, int pos0) {
        int hidden = plan.hidden();
        MemorySegment in = s.input.mapped();
        long[] ropeOff = new long[ropes.size()];
        for (int r = 0; r < ropes.size(); r++) {
            RopeTable rt = ropes.get(r);
            int half = rt.rotaryDim() / 2;
            ropeOff[r] = (long) s.chunk * hidden + (long) r * 2 * s.chunk * maxHalf;
            float[] cos = new float[half], sin = new float[half];
            float[] inv = java.util.Arrays.copyOf(rt.invFreq(), half);
            for (int t = 0; t < T; t++) {
                Rotary.table(pos0 + t, inv, rt.attentionScaling(), cos, sin);
                MemorySegment.copy(cos, 0, in, ValueLayout.JAVA_FLOAT, 4 * (ropeOff[r] + (long) t * half), half);
                MemorySegment.copy(sin, 0, in, ValueLayout.JAVA_FLOAT, 4 * (ropeOff[r] + (long) T * half + (long) t * half), half);
            }
        }
        s.step.mapped().set(ValueLayout.JAVA_INT, 0, pos0);
        s.step.mapped().set(ValueLayout.JAVA_DOUBLE, 8, s.headGate);   // (embryo.comp's head finish reads it)
    }

    /** A batched step's activations: rows for the largest step so far, no context of its own (its rows attend in their states). */
    private State batch;
    /**
     * Batched steps recorded once and replayed, by their composition (each span's state, rows and wanted rows): a batch of
     * decode rows is the same commands step after step (positions, tables and embedding rows are in buffers the host
     * writes). Dropped when the batch workspace grows or a state is released; at most BATCH_STEPS kept.
     */
    private final Map<List<Object>, MemorySegment> batchSteps = new HashMap<>();
    private static final int BATCH_STEPS = 16;
    /** Batched steps replayed from batchSteps (for tests). */
    int batchReplays;
    /** Gate and up products recorded as one dispatch of the gated-MLP pipeline ({@link #gateUp}; for tests). */
    int gateUpDispatches;

    private void dropBatchSteps() {
        if (batchSteps.isEmpty()) return;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment cbs = a.allocate(PTR.byteSize() * batchSteps.size(), 8);
            int i = 0;
            for (MemorySegment cb : batchSteps.values()) cbs.setAtIndex(PTR, i++, cb);
            vk.call("vkFreeCommandBuffers", ctx.device, commandPool, i, cbs);
        }
        batchSteps.clear();
    }

    /**
     * Several sequences' spans as one submission: their rows' norms and products together (one pass over the weights for
     * the step), each sequence's rows attending over its own caches.
     */
    @Override public void forward(List<Span> spans, float[] logits, int vocab) { forward(spans, logits, vocab, null); }

    @Override public void forward(List<Span> spans, float[] logits, int vocab, float[] hidden) {
        for (Span sp : spans) if (!sp.plain()) throw new UnsupportedOperationException("this device runs no skills or adapters per row");
        synchronized (mm) {
            if (closed) throw new IllegalStateException("Vulkan forward closed");
            List<Part> parts = new ArrayList<>();
            int[] logitRows = new int[2 * spans.size()];
            int T = 0, want = 0, n = 0;
            for (Span sp : spans) {
                State st = (State) sp.state();
                if (st.released) throw new IllegalStateException("Vulkan state released");
                if (sp.tokens() > st.chunk || sp.pos0() + sp.tokens() > st.context)
                    throw new IllegalArgumentException(sp.tokens() + " tokens at " + sp.pos0() + " exceed the state's chunk " + st.chunk
                            + " or context " + st.context);
                for (Part pt : parts) if (pt.state() == st) throw new IllegalArgumentException("one sequence twice in a step");
                parts.add(new Part(st, T, sp.tokens()));
                if (sp.logitRows() > 0) {
                    logitRows[n++] = T + sp.tokens() - sp.logitRows();
                    logitRows[n++] = sp.logitRows();
                }
                T += sp.tokens();
                want += sp.logitRows();
            }
            if (batch == null || batch.chunk < T || batch.out.bytes() < 4L * want * vocab) {
                // grown, never shrunk: rows for the largest step so far, logits for the most rows wanted so far
                dropBatchSteps();
                int rows = Math.max(T, batch == null ? 0 : batch.chunk);
                int room = Math.max(Math.max(want, 1), batch == null ? 0 : (int) (batch.out.bytes() / (4L * vocab)));
                if (batch != null) {
                    batch.free();
                    states.remove(batch);
                    batch = null;   // (stays null if the new one cannot be made)
                }
                batch = new State(rows, 1, room);
                states.add(batch);
            }
            for (int i = 0, row = 0; i < spans.size(); row += spans.get(i).tokens(), i++) {
                Span sp = spans.get(i);
                embed(batch, row, sp.ids(), sp.off(), sp.tokens());
                positions((State) sp.state(), sp.tokens(), sp.pos0());
            }
            if (hidden != null && hidden.length < (long) T * plan.hidden())
                throw new IllegalArgumentException("a buffer of " + hidden.length + " floats for " + T + " hidden rows of " + plan.hidden());
            List<Object> key = new ArrayList<>();
            for (Span sp : spans) { key.add(sp.state()); key.add(sp.tokens()); key.add(sp.logitRows()); }
            key.add(hidden != null);
            batch.wantRows(hidden != null);
            MemorySegment cb = batchSteps.get(key);
            if (cb != null) batchReplays++;
            if (cb == null) {
                if (batchSteps.size() >= BATCH_STEPS) dropBatchSteps();
                cb = newCommandBuffer();
                record(batch, parts, cb, beginReusable, T, java.util.Arrays.copyOf(logitRows, n), hidden != null);
                batchSteps.put(List.copyOf(key), cb);
            }
            commandBuffers.set(PTR, 0, cb);
            ctx.submit(submitInfo, fence);
            vk.waitAndReset(ctx.device, fenceArray);
            logitsBack(batch, want, logits);
            hiddenBack(batch, T, hidden);
        }
    }

    /** Gives a command buffer of {@link #newCommandBuffer} back to the pool. */
    private void freeCommandBuffer(MemorySegment cb) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment one = a.allocate(PTR);
            one.set(PTR, 0, cb);
            vk.call("vkFreeCommandBuffers", ctx.device, commandPool, 1, one);
        }
    }

    /** A command buffer of the pool, to be recorded once and submitted many times. */
    private MemorySegment newCommandBuffer() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ai = Vk.struct(a, 32, Vk.ST_COMMAND_BUFFER_ALLOCATE_INFO);
            ai.set(U64, 16, commandPool);
            ai.set(U32, 28, 1);
            MemorySegment one = a.allocate(PTR);
            vk.check("vkAllocateCommandBuffers", ctx.device, ai, one);
            return one.get(PTR, 0);
        }
    }

    /** The {@code rows} logit rows the submission left in {@code s}'s read-back buffer into {@code logits}, soft-capped. */
    private void logitsBack(State s, int rows, float[] logits) {
        if (rows == 0) return;
        int vocab = plan.vocab();
        MemorySegment.copy(s.out.mapped(), ValueLayout.JAVA_FLOAT, 0, logits, 0, rows * vocab);
        float c = plan.finalSoftcap();
        if (c != 0f) for (int i = 0; i < rows * vocab; i++) logits[i] = c * (float) Math.tanh(logits[i] / c);
    }

    /** The {@code rows} last-layer rows the submission left in {@code s}'s read-back buffer into {@code hidden} (if not null). */
    private void hiddenBack(State s, int rows, float[] hidden) {
        if (hidden != null) MemorySegment.copy(s.hiddenOut.mapped(), ValueLayout.JAVA_FLOAT, 0, hidden, 0, rows * plan.hidden());
    }

    private void run(State s, int[] ids, int off, int T, int pos0, float[] logits, boolean allLogits, float[] hidden) {
        boolean timed = queryPool != 0;   // the profile's host times
        long t0 = timed ? System.nanoTime() : 0;
        s.wantRows(hidden != null);
        embed(s, 0, ids, off, T);
        positions(s, T, pos0);
        int rows = logits == null ? 0 : allLogits ? T : 1;
        MemorySegment cb;
        if (T == 1 && rows == 1) {
            // a decode step: the same commands every time (its position is in the step buffer): recorded once
            if (s.decode != null && s.decodeHidden != (hidden != null)) {
                freeCommandBuffer(s.decode);
                s.decode = null;
            }
            if (s.decode == null) {
                s.decode = newCommandBuffer();
                s.decodeHidden = hidden != null;
                record(s, s.decode, beginReusable, 1, 1, s.decodeHidden);
            }
            cb = s.decode;
        } else {
            vk.resetCommandBuffer(commandBuffer);
            record(s, commandBuffer, beginInfo, T, rows, hidden != null);
            cb = commandBuffer;
        }
        commandBuffers.set(PTR, 0, cb);
        long t1 = timed ? System.nanoTime() : 0;
        ctx.submit(submitInfo, fence);
        vk.waitAndReset(ctx.device, fenceArray);
        long t2 = timed ? System.nanoTime() : 0;
        if (queryPool != 0) {
            if (cb == s.decode) profiledSteps = collectProfile(profile, profiledSteps);
            else if (lastRecordingTimed) {
                profiledChunks = collectProfile(chunkProfile, profiledChunks);
                profiledChunkTokens += T;
            }
        }
        if (cb == s.decode && s.decodeCounters > 0) chainedWaitsHeld(s);
        logitsBack(s, rows, logits);
        hiddenBack(s, T, hidden);
        if (timed && cb == s.decode) {
            // the host's share of a decode step: before the submission, submission to fence, after; and since the last step
            long t3 = System.nanoTime();
            host[0] += t1 - t0;
            host[1] += t2 - t1;
            host[2] += t3 - t2;
            if (lastStepEnd != 0) host[3] += t0 - lastStepEnd;
            lastStepEnd = t3;
            hostSteps++;
        }
    }

    /**
     * Fails the decode step just run if one of its chained waits gave up (its counter's top bit set: the device started a
     * dispatch's workgroups before those of the one before it had all started, so a wait could not end); the state's
     * steps are recorded with barriers from then on.
     */
    private void chainedWaitsHeld(State s) {
        for (int i = 0; i < s.decodeCounters; i++)
            if (s.chainBack.mapped().getAtIndex(ValueLayout.JAVA_INT, i) < 0) {
                chain = false;
                freeCommandBuffer(s.decode);
                s.decode = null;
                throw new VulkanException("a chained decode phase on " + ctx.info().name() + " waited for the one before it and gave up: "
                        + "this device does not start dispatches in order; its steps now keep every barrier (-Dcmf.vulkan.chain=false "
                        + "from the start)");
            }
    }

    /** With the profile: nanoseconds of decode steps' host work (see run), and the steps counted. */
    private final long[] host = new long[4];
    private long hostSteps, lastStepEnd;

    /**
     * Records a forward of {@code T} tokens whose last {@code rows} want logits into {@code cb} (positions: the step
     * buffer). Between dependent dispatches one compute-to-compute memory barrier; dispatches that read the same inputs
     * (q, k and v; gate and up; the rotary and the value copy) go without one between them. A decode step folds what
     * matvec_decode.comp can into its products (the RMSNorms before q/k/v, gate/up and the head, the biases, the GLU
     * before down, the residual adds after o and down) and attends over splits of the context (OP 9, which also rotates,
     * appends to the caches and combines; unfolded: OP 1, OP 4, OP 7, OP 8). An MoE layer's FFN is {@link #moeFfn}.
     */
    private void record(State s, MemorySegment cb, MemorySegment begin, int T, int rows, boolean rowsBack) {
        record(s, List.of(new Part(s, 0, T)), cb, begin, T, rows == 0 ? new int[0] : new int[] {T - rows, rows}, rowsBack);
    }

    /** A sequence's rows in a step: its state (KV caches, position, rotary tables) and where its rows start among the step's. */
    private record Part(State state, int row0, int tokens) {}

    /**
     * Records a forward of {@code T} rows in {@code s}'s activation buffers, the rows of each part attending over its own
     * state's caches (a part other than s gets its q, k and v rows copied into its state's buffers and its attention
     * rows copied back); {@code logitRows} pairs (first row, count) of the rows whose logits are wanted, in order; with
     * {@code rowsBack} every row of x after the last layer copied to {@code s.hiddenOut} too.
     */
    private void record(State s, List<Part> parts, MemorySegment cb, MemorySegment begin, int T, int[] logitRows, boolean rowsBack) {
        int hidden = plan.hidden(), heads = plan.heads(), vocab = plan.vocab();
        boolean step = T == 1 && parts.size() == 1;
        // a batch of decode rows (one token a sequence, fewer than gemmMinTokens): its products fold what a decode step's
        // fold, through the several-token pipeline, so each row gets the bits its sequence's own step gives it
        boolean rowsFold = step || FOLD_ROWS && T > 1 && T < ctx.gemmMinTokens && parts.stream().allMatch(pt -> pt.tokens() == 1);
        boolean own = parts.size() == 1 && parts.get(0).state() == s;
        int rows = 0;
        for (int i = 1; i < logitRows.length; i += 2) rows += logitRows[i];
        rec = cb;
        vk.beginCommandBuffer(cb, begin);
        profiling = queryPool != 0 && (cb == s.decode || cb == commandBuffer && parts.size() == 1 && T > 1);
        if (profiling) {
            phases.clear();
            vk.call("vkCmdResetQueryPool", cb, queryPool, 0, PROFILE_QUERIES);
            vk.call("vkCmdWriteTimestamp", cb, Vk.PIPELINE_STAGE_BOTTOM, queryPool, 0);
        }
        chaining = chain && step && own && !profiling && cb == s.decode && logitRows.length > 0;
        nextCounter = 0;
        pendingWait = 0;
        newPhase();
        if (chaining) vk.call("vkCmdFillBuffer", rec, s.chain.buffer(), 0L, 4L * CHAIN_COUNTERS, 0);
        copy(s.input, 0, s.x, 0, 4L * T * hidden);
        for (Part pt : parts) {
            State ps = pt.state();
            long ropeBytes = 4L * ropes.size() * 2 * ps.chunk * maxHalf;
            if (ropeBytes > 0) copy(ps.input, 4L * ps.chunk * hidden, ps.tables, 4L * ps.chunk * hidden, ropeBytes);
            copy(ps.step, 0, ps.stepDev, 0, stepBytes);
        }
        mark("copy in");
        cmdBarrier(Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_COMPUTE, transferToCompute);
        perLayerInputs(s, T);
        for (int li = 0; li < plan.layers().size(); li++) {
            DecoderPlan.Layer l = plan.layers().get(li);
            DecoderPlan.DeltaNet dn = l.deltaNet();
            if (dn != null) deltaNet(s, parts, l, li, T);
            else if (l.anchor() != null) anchor(s, parts, l, li, T, rowsFold);
            else attention(s, parts, l, li, T, rowsFold, own);
            // the mixer's output projection: o of the attention, or the delta net's
            Matrix o = dn != null ? dn.outProj() : l.o();
            VulkanContext.Buffer mixed = dn != null ? s.dnCore : s.att;
            if (rowsFold && l.postAttnNorm() == null && folds(T, o)) {
                folded(s, o, mixed, s.x, null, l.oBias(), MatvecPush.ADD, null, false, T);
                sync("o");
            } else {
                matvec(s, o, mixed, s.tmp, T);
                sync("o");
                if (l.oBias() != null) { bias(s, l.oBias(), s.tmp, T, hidden); sync("bias"); }
                if (l.postAttnNorm() != null) normAdd(s, l.postAttnNorm(), s.tmp, T, 1f);
                else op(s, 5, s.x, s.tmp, s.x, s.x, groups(T * hidden), T * hidden);
                sync("add");
            }
            if (l.moe() != null && l.gate() == null) {
                moeFfn(s, l, T);
                perLayerInput(s, l, li, T, false);
                continue;
            }
            boolean gluProducts = T == 1 && rowsFold && gluProducts(l);
            if (gluProducts) {
                gateUp(s, l);
            } else if (rowsFold && folds(T, l.gate(), l.up())) {
                folded(s, l.gate(), s.x, s.g, l.ffnNorm(), null, 0, null, false, T);
                folded(s, l.up(), s.x, s.u, l.ffnNorm(), null, 0, null, false, T);
            } else {
                norm(s, l.ffnNorm(), s.x, s.xn, T, hidden, 0, 0);
                sync("norm");
                matvec(s, l.gate(), s.xn, s.g, T);
                matvec(s, l.up(), s.xn, s.u, T);
            }
            sync("gate/up");
            if (rowsFold && folds(T, l.down())) {
                boolean add = l.postFfnNorm() == null;
                if (gluProducts) {
                    // act(gate)·up times the column scales made by the gate and up products
                    folded(s, l.down(), s.g, add ? s.x : s.tmp, null, null, add ? MatvecPush.ADD : 0, null, true, T);
                } else if (DIRECT_DOWN && l.down().inDim() > VulkanContext.DECODE_TILE && (l.down().inDim() & 3) == 0) {
                    // a row of several tiles: act(gate)·up (times the column scales) once into g, which the product
                    // then reads from memory instead of each workgroup staging it tile by tile
                    glu(s, l, T);
                    sync("glu");
                    folded(s, l.down(), s.g, add ? s.x : s.tmp, null, null, add ? MatvecPush.ADD : 0, null, true, T);
                } else {
                    // act(gate)·up staged by the product itself
                    folded(s, l.down(), s.g, add ? s.x : s.tmp, null, null, add ? MatvecPush.ADD : 0, l, false, T);
                }
                sync("down");   // the residual added by the product too unless a norm comes between
            } else {
                op(s, 3, s.g, s.u, s.g, s.g, groups(T * l.gate().outDim()), T * l.gate().outDim(), l.act().ordinal());
                sync("glu");
                matvec(s, l.down(), s.g, s.tmp, T);
                sync("down");
            }
            if (l.moe() != null) moeBesideMlp(s, l, T);
            boolean scaled = false;   // the layer scalar applied with the post-FFN norm's add (no per-layer input after it)
            if (!rowsFold || l.postFfnNorm() != null || !folds(T, l.down())) {
                if (l.postFfnNorm() != null) {
                    scaled = l.perLayerInput() == null;
                    normAdd(s, l.postFfnNorm(), s.tmp, T, scaled ? l.layerScalar() : 1f);
                } else {
                    op(s, 5, s.x, s.tmp, s.x, s.x, groups(T * hidden), T * hidden);
                }
                sync("add");
            }
            perLayerInput(s, l, li, T, scaled);
        }
        if (rowsBack) {
            cmdBarrier(Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_TRANSFER, computeToTransfer);
            copy(s.x, 0, s.hiddenOut, 0, 4L * T * hidden);
            if (rows == 0) cmdBarrier(Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_HOST, transferToHost);
        }
        if (rows > 0) {
            Matrix clusters = plan.headClusters() == null ? null : plan.headClusters().clusters();
            if (rowsFold && rows == T && folds(T, plan.head()) && (clusters == null || folds(T, clusters))) {   // (every row wants its logits: none to gather)
                folded(s, plan.head(), s.x, s.logits, plan.finalNorm(), null, 0, null, false, T);
                if (clusters != null) folded(s, clusters, s.x, s.lc, plan.finalNorm(), null, 0, null, false, T);
            } else {
                VulkanContext.Buffer src = s.x;
                int from = logitRows[0];
                if (logitRows.length > 2) {   // the wanted rows of several sequences gathered first
                    cmdBarrier(Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_TRANSFER, computeToTransfer);
                    for (int i = 0, to = 0; i < logitRows.length; to += logitRows[i + 1], i += 2)
                        copy(s.x, 4L * logitRows[i] * hidden, s.tmp, 4L * to * hidden, 4L * logitRows[i + 1] * hidden);
                    cmdBarrier(Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_COMPUTE, transferToCompute);
                    src = s.tmp;
                    from = 0;
                }
                norm(s, plan.finalNorm(), src, s.xn, rows, hidden, from * hidden, 0);
                sync("norm");
                matvec(s, plan.head(), s.xn, s.logits, rows);
                if (clusters != null) matvec(s, clusters, s.xn, s.lc, rows);
            }
            if (clusters != null) clusteredHead(s, parts, logitRows, rows);
            mark("head");
            cmdBarrier(Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_TRANSFER, computeToTransfer);
            copy(s.logits, 0, s.out, 0, 4L * rows * vocab);
            // the counters too: a wait that gave up marked its counter (the step's results are then wrong)
            if (chaining) copy(s.chain, 0, s.chainBack, 0, 4L * nextCounter);
            mark("copy out");
            cmdBarrier(Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_HOST, transferToHost);
        }
        vk.endCommandBuffer(rec);
        if (cb == s.decode) s.decodeCounters = chaining ? nextCounter : 0;
        lastRecordingTimed = profiling;
        profiling = false;
    }

    /**
     * An Embryo bounded anchor (swa_sink_v1) of {@code T} rows into s.att (embryo.comp; CUDA's EmbryoSteps.anchor): the
     * norm and q/k/v products over every row (folded for decode rows), then per part one softmax over its sinks and
     * window (the window's earlier keys from the part's ring, this step's from the rows) and its rows into the ring.
     */
    private void anchor(State s, List<Part> parts, DecoderPlan.Layer l, int li, int T, boolean rowsFold) {
        DecoderPlan.Anchor an = l.anchor();
        int heads = plan.heads(), hd = l.headDim(), kvd = l.kvHeads() * hd;
        if (rowsFold && folds(T, l.q(), l.k(), l.v())) {
            folded(s, l.q(), s.x, s.q, l.attnNorm(), null, 0, null, false, T);
            folded(s, l.k(), s.x, s.k, l.attnNorm(), null, 0, null, false, T);
            folded(s, l.v(), s.x, s.v, l.attnNorm(), null, 0, null, false, T);
        } else {
            norm(s, l.attnNorm(), s.x, s.xn, T, plan.hidden(), 0, 0);
            sync("norm");
            matvec(s, l.q(), s.xn, s.q, T);
            matvec(s, l.k(), s.xn, s.k, T);
            matvec(s, l.v(), s.xn, s.v, T);
        }
        sync("q/k/v");
        for (Part pt : parts) {
            State ps = pt.state();
            op(ps, VulkanContext.OP_ANCHOR_ATTEND, new VulkanContext.Buffer[] {s.q, s.k, s.v, ps.kCache[li], ps.vCache[li], s.q, s.att},
                    heads * pt.tokens(), heads, l.kvHeads(), hd, an.window(), an.sinks(), an.rotaryDim() / 2, Float.floatToRawIntBits(l.scale()),
                    pt.row0(), 0, vectorAt.get(an.sinkK()), vectorAt.get(an.sinkV()), vectorAt.get(an.cos()), vectorAt.get(an.sin()));
        }
        sync("anchor attend");
        for (Part pt : parts) {   // (after every head has read the ring)
            State ps = pt.state();
            op(ps, VulkanContext.OP_ANCHOR_COMMIT, s.k, s.v, ps.kCache[li], ps.vCache[li], Math.min(pt.tokens(), an.window()),
                    pt.tokens(), an.window(), kvd, pt.row0());
        }
        sync("anchor commit");
    }

    /**
     * The hierarchical head over the {@code rows} logit rows whose z = head·x̂ are in s.logits and cluster logits in s.lc
     * (embryo.comp): the clusters' log-softmax, then per cluster of each row log p = z − logsumexp(cluster's z) + its
     * log-probability, or for a cluster below the row's sequence's gate its spread mass. Every head row is computed (the
     * CPU reads only kept clusters' rows; the kept ones' values are the same).
     */
    private void clusteredHead(State s, List<Part> parts, int[] logitRows, int rows) {
        int count = plan.headClusters().count(), size = plan.vocab() / count;
        sync("head");
        op(s, VulkanContext.OP_CLUSTER_LOGSOFTMAX, s.lc, s.lc, s.lc, s.lc, rows, count);
        sync("cluster log-softmax");
        for (int i = 0, at = 0; i < logitRows.length; at += logitRows[i + 1], i += 2) {
            State ps = s;   // the gate is the sequence's: the part whose rows hold these logit rows
            for (Part pt : parts) if (logitRows[i] >= pt.row0() && logitRows[i] < pt.row0() + pt.tokens()) ps = pt.state();
            op(ps, VulkanContext.OP_HEAD_FINISH, s.logits, s.lc, s.logits, s.logits, logitRows[i + 1] * count, plan.vocab(), count, size,
                    Float.floatToRawIntBits((float) Math.log(size)), at);
        }
    }

    /**
     * A gated delta net layer of {@code T} rows into s.dnCore (gdn.comp; CUDA's ResidentLowering.deltaNet): the norm and
     * the input projections over every row (fused ones unfused), then per part its causal conv and delta rule over its
     * own state's conv inputs and S (a part at position 0 starts from zeros), the gates and the gated norm over every row.
     */
    private void deltaNet(State s, List<Part> parts, DecoderPlan.Layer l, int li, int T) {
        DecoderPlan.DeltaNet dn = l.deltaNet();
        int nk = dn.keyHeads(), nv = dn.valueHeads(), dk = dn.keyDim(), dv = dn.valueDim(), convDim = dn.convDim();
        norm(s, l.attnNorm(), s.x, s.xn, T, plan.hidden(), 0, 0);
        sync("norm");
        if (dn.qkvz() != null) {
            matvec(s, dn.qkvz(), s.xn, s.dnProj, T);
            matvec(s, dn.ba(), s.xn, s.dnBa, T);
            sync("delta net products");
            op(s, VulkanContext.OP_GDN_UNFUSE, new VulkanContext.Buffer[] {s.dnProj, s.dnBa, s.dnMixed, s.dnZ, s.dnB, s.dnA}, T, nk, nv, dk, dv);
            sync("delta net unfuse");
        } else {
            matvec(s, dn.qkv(), s.xn, s.dnMixed, T);
            matvec(s, dn.z(), s.xn, s.dnZ, T);
            matvec(s, dn.b(), s.xn, s.dnB, T);
            matvec(s, dn.a(), s.xn, s.dnA, T);
            sync("delta net products");
        }
        for (Part pt : parts) {   // each part's conv over its own carried inputs (its step buffer's position: 0 starts afresh)
            State ps = pt.state();
            op(ps, VulkanContext.OP_GDN_CONV, new VulkanContext.Buffer[] {s.dnMixed, params, ps.dnConv[li]}, (convDim + 63) / 64,
                    pt.tokens(), convDim, dn.convKernel(), pt.row0(), vectorAt.get(dn.conv()),
                    dn.convBias() == null ? 0 : vectorAt.get(dn.convBias()), dn.convBias() == null ? 0 : 1);
        }
        sync("delta net conv");
        op(s, VulkanContext.OP_GDN_GATES, new VulkanContext.Buffer[] {s.dnMixed, s.dnB, s.dnA, params, s.dnQ, s.dnK}, T * nv,
                nk, nv, dk, convDim, vectorAt.get(dn.negA()), vectorAt.get(dn.dtBias()));
        sync("delta net gates");
        for (Part pt : parts) {
            State ps = pt.state();
            op(ps, VulkanContext.OP_GDN_RULE, new VulkanContext.Buffer[] {s.dnQ, s.dnK, s.dnMixed, s.dnA, s.dnB, ps.dnS[li], s.dnCore}, nv,
                    pt.tokens(), nv, dk, dv, convDim, 2 * dn.qkDim(), pt.row0());
        }
        sync("delta net rule");
        NormOp n = dn.norm();
        Integer w = normAt.get(n);
        op(s, VulkanContext.OP_GDN_NORM, s.dnCore, s.dnZ, params, s.dnCore, T * nv, 0, dv, w == null ? 0 : w,
                (w != null ? 1 : 0) | (w != null && n.offset() ? 2 : 0), Float.floatToRawIntBits(n.eps()));
        sync("delta net norm");
    }

    /**
     * A layer's attention of {@code T} rows into s.att: the norm and the q/k/v products (folded for decode rows), q/k norms,
     * each part's rotary and cache append and its attention over its own state's caches (a part other than s gets its
     * q, k and v rows copied into its state's buffers and its attention rows copied back).
     */
    private void attention(State s, List<Part> parts, DecoderPlan.Layer l, int li, int T, boolean rowsFold, boolean own) {
        int hidden = plan.hidden(), heads = plan.heads();
        int hd = l.headDim(), kvh = l.kvHeads(), qd = heads * hd, kvd = kvh * hd;
        // with the output gate the q product leaves q and the gate per head, split apart after it
        VulkanContext.Buffer qOut = l.outputGate() ? s.qg : s.q;
        // a layer reading an earlier one's caches (gemma4) makes no keys or values: that layer appended this step's
        boolean shared = l.sharesKv();
        int kvLayer = shared ? l.kvSource() : li;
        if (rowsFold && (shared ? folds(T, l.q()) : folds(T, l.q(), l.k(), l.v()))) {
            folded(s, l.q(), s.x, qOut, l.attnNorm(), l.qBias(), 0, null, false, T);
            if (!shared) {
                folded(s, l.k(), s.x, s.k, l.attnNorm(), l.kBias(), 0, null, false, T);
                folded(s, l.v(), s.x, s.v, l.attnNorm(), l.vBias(), 0, null, false, T);
            }
            sync("q/k/v");
        } else {
            norm(s, l.attnNorm(), s.x, s.xn, T, hidden, 0, 0);
            sync("norm");
            matvec(s, l.q(), s.xn, qOut, T);
            if (!shared) {
                matvec(s, l.k(), s.xn, s.k, T);
                matvec(s, l.v(), s.xn, s.v, T);
            }
            sync("q/k/v");
            if (l.qBias() != null || l.kBias() != null || l.vBias() != null) {
                bias(s, l.qBias(), qOut, T, l.q().outDim());
                bias(s, l.kBias(), s.k, T, kvd);
                bias(s, l.vBias(), s.v, T, kvd);
                sync("bias");
            }
        }
        if (l.outputGate()) {
            op(s, VulkanContext.OP_SPLIT_GATE, s.qg, s.q, s.gate, s.qg, groups((long) T * qd), T * qd, hd);
            sync("output gate split");
        }
        if (l.qNorm() != null) norm(s, l.qNorm(), s.q, s.q, T * heads, hd, 0, 0);
        if (l.kNorm() != null) norm(s, l.kNorm(), s.k, s.k, T * kvh, hd, 0, 0);
        if (l.vNorm() != null) norm(s, l.vNorm(), s.v, s.v, T * kvh, hd, 0, 0);
        if (l.qNorm() != null || l.kNorm() != null || l.vNorm() != null) sync("q/k norm");
        if (!own) {   // each sequence's q, k and v rows into its own buffers
            cmdBarrier(Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_TRANSFER, computeToTransfer);
            for (Part pt : parts) {
                copy(s.q, 4L * pt.row0() * qd, pt.state().q, 0, 4L * pt.tokens() * qd);
                if (shared) continue;
                copy(s.k, 4L * pt.row0() * kvd, pt.state().k, 0, 4L * pt.tokens() * kvd);
                copy(s.v, 4L * pt.row0() * kvd, pt.state().v, 0, 4L * pt.tokens() * kvd);
            }
            cmdBarrier(Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_COMPUTE, transferToCompute);
        }
        // each chunk's keys (rotated on the way) and values into its cache at their positions (a one-token row's
        // by its attention when folded)
        // (an f16 cache: a layer whose caches another reads, and that one, unfolded: OP 9 keeps the step's own key
        // rotated in f32 nowhere a later layer could read it)
        boolean fold = foldAttention && !(kvHalf && (shared || kvShared[li]));
        int rd = ropeOf[li] >= 0 ? l.rope().rotaryDim() : 0;
        for (Part pt : parts) {
            State ps = pt.state();
            int n = pt.tokens();
            if (fold && n == 1) continue;
            if (ropeOf[li] >= 0) {
                int ropeOff = ps.chunk * hidden + ropeOf[li] * 2 * ps.chunk * maxHalf, kRows = shared ? 0 : n * kvh;
                VulkanContext.Buffer[] bufs = kvHalf ? new VulkanContext.Buffer[] {ps.q, ps.k, ps.tables, ps.kCache[kvLayer], ps.kPending[kvLayer]}
                        : new VulkanContext.Buffer[] {ps.q, ps.k, ps.tables, ps.kCache[kvLayer]};
                op(ps, 1, bufs, n * heads + kRows, n * heads, heads, hd, rd, ropeOff, n, 0, kRows, kvh, kvd);
            } else if (!shared) {
                cacheAppend(ps, ps.k, ps.kCache[li], kvHalf ? ps.kPending[li] : null, n * kvd, kvd);
            }
            if (!shared) cacheAppend(ps, ps.v, ps.vCache[li], kvHalf ? ps.vPending[li] : null, n * kvd, kvd);
        }
        if (!fold || parts.stream().anyMatch(pt -> pt.tokens() > 1)) sync("rotary, cache");
        int scale = Float.floatToRawIntBits(l.scale());
        int sink = l.sinks() == null ? 0 : 1 + vectorAt.get(l.sinks());   // OP 2, 8 and 9: the sinks' offset + 1 in P (0: none)
        // one-token rows attend over splits of the context (OP 7, then OP 8 combines; folded: OP 9 with its rotary,
        // cache append and combine), chunks row by row (OP 2)
        for (Part pt : parts) {
            State ps = pt.state();
            int n = pt.tokens();
            if (n == 1 && fold) {
                int per = attentionPerHead(ps.context);
                int ropeOff = ropeOf[li] < 0 ? 0 : ps.chunk * hidden + ropeOf[li] * 2 * ps.chunk * maxHalf;
                VulkanContext.Buffer[] bufs = {ps.q, ps.kCache[kvLayer], ps.vCache[kvLayer], ps.att, ps.k, ps.v, ps.tables};
                // (a layer reading an earlier layer's caches keeps its barrier: it reads them through the caches)
                if (chaining && !shared) attendChained(ps, bufs, heads * per, 1, heads, kvh, hd, ropeOff, l.window(), scale, kvd, rd, shared ? 1 : 0, qd, per, sink);
                else op(ps, 9, bufs, heads * per, 1, heads, kvh, hd, ropeOff, l.window(), scale, kvd, rd, shared ? 1 : 0, qd, per, sink);
            } else if (n == 1) {
                int per = attentionPerHead(ps.context);
                op(ps, 7, attentionBuffers(ps, kvLayer), heads * per, 1, heads, kvh, hd, 0, l.window(), scale, kvd, 0, 0, qd, per);
            } else {
                op(ps, 2, attentionBuffers(ps, kvLayer), n * heads, n, heads, kvh, hd, 0, l.window(), scale, kvd, ps.context, qd, n * qd,
                        0, sink);
            }
        }
        if (!fold && parts.stream().anyMatch(pt -> pt.tokens() == 1)) {
            sync("attention");
            for (Part pt : parts) {
                State ps = pt.state();
                if (pt.tokens() == 1)
                    op(ps, 8, ps.q, ps.kCache[kvLayer], ps.vCache[kvLayer], ps.att, heads, 1, heads, kvh, hd, 0, l.window(), scale, kvd, 0, 0, qd,
                            attentionPerHead(ps.context), sink);
            }
        }
        sync(fold ? "attention" : "attention combine");
        if (!own) {   // their attention rows back among the step's
            cmdBarrier(Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_TRANSFER, computeToTransfer);
            for (Part pt : parts) copy(pt.state().att, 0, s.att, 4L * pt.row0() * qd, 4L * pt.tokens() * qd);
            cmdBarrier(Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_COMPUTE, transferToCompute);
        }
        if (l.outputGate()) {   // att ·= σ(gate)
            op(s, VulkanContext.OP_SIGMOID_MUL, s.att, s.gate, s.att, s.att, groups((long) T * qd), T * qd);
            sync("output gate");
        }
    }

    /** OP 2's and OP 7's buffers: q, the caches, the output; with an f16 cache the chunk's own keys and values (E, F). */
    private static VulkanContext.Buffer[] attentionBuffers(State ps, int kvLayer) {
        return ps.kPending == null ? new VulkanContext.Buffer[] {ps.q, ps.kCache[kvLayer], ps.vCache[kvLayer], ps.att}
                : new VulkanContext.Buffer[] {ps.q, ps.kCache[kvLayer], ps.vCache[kvLayer], ps.att, ps.kPending[kvLayer], ps.vPending[kvLayer]};
    }

    /**
     * OP 4: {@code count} floats of {@code rows} into {@code cache} at the step's position (rows of {@code stride}); with an
     * f16 cache as halves, and into {@code pending} in f32 too where that is not {@code rows} itself.
     */
    private void cacheAppend(State ps, VulkanContext.Buffer rows, VulkanContext.Buffer cache, VulkanContext.Buffer pending, int count, int stride) {
        if (pending == null) op(ps, 4, rows, cache, rows, rows, groups(count), count, 0, 0, stride);
        else op(ps, 4, new VulkanContext.Buffer[] {rows, cache, rows, rows, pending}, groups(count), count, 0, 0, stride, pending != rows ? 1 : 0);
    }

    /**
     * Gemma4's per-layer inputs of the step's rows, once before the layers: pli = (norm(P·x · projScale) + rows) ·
     * combineScale per layer slice (OP 16), P the model projection of the embedded rows x, rows the table's (the host's).
     */
    private void perLayerInputs(State s, int T) {
        DecoderPlan.PerLayerEmbedding pe = plan.perLayerEmbedding();
        if (pe == null) return;
        matvec(s, pe.projection(), s.x, s.pli, T);
        sync("per-layer projection");
        NormOp n = pe.projectionNorm();
        Integer w = normAt.get(n);
        int rows = T * plan.layers().size();
        op(s, 16, s.pli, s.pleRows, params, s.pli, Math.min(rows, ctx.info().maxGroupCount()[0]), rows, pe.dim(), w == null ? 0 : w,
                (w != null ? 1 : 0) | (w != null && n.offset() ? 2 : 0), Float.floatToRawIntBits(n.eps()),
                Float.floatToRawIntBits(pe.projectionScale()), Float.floatToRawIntBits(pe.combineScale()), 0);
        sync("per-layer inputs");
    }

    /**
     * The end of gemma4's layer {@code li}: x += postNorm(proj(act(gate·x) · pli[li])) (gate's rows in g, OP 17), then x
     * times the layer scalar (with the post norm's add, OP 20; else OP 18), unless {@code scaled} (done already);
     * nothing for a layer without them.
     */
    private void perLayerInput(State s, DecoderPlan.Layer l, int li, int T, boolean scaled) {
        int hidden = plan.hidden();
        DecoderPlan.PerLayerInput pi = l.perLayerInput();
        if (pi != null) {
            int dim = plan.perLayerEmbedding().dim(), n = T * pi.gate().outDim();
            matvec(s, pi.gate(), s.x, s.g, T);
            sync("per-layer gate");
            op(s, 17, s.g, s.pli, s.g, s.g, groups(n), n, pi.act().ordinal(), li * dim, dim, plan.perLayerEmbedding().projection().outDim());
            sync("per-layer act");
            matvec(s, pi.projection(), s.g, s.tmp, T);
            sync("per-layer projection");
            if (pi.postNorm() != null) {
                normAdd(s, pi.postNorm(), s.tmp, T, scaled ? 1f : l.layerScalar());
                scaled = true;
            } else {
                op(s, 5, s.x, s.tmp, s.x, s.x, groups((long) T * hidden), T * hidden);
            }
            sync("add");
        }
        if (!scaled && l.layerScalar() != 1f) {
            op(s, 18, s.x, s.x, s.x, s.x, groups((long) T * hidden), T * hidden, Float.floatToRawIntBits(l.layerScalar()));
            sync("layer scalar");
        }
    }

    /** The split decode attention's workgroups per head for a context: one per chunk of keys, at most ATTENTION_PER_HEAD. */
    static int attentionPerHead(int context) { return Math.min(ATTENTION_PER_HEAD, (context + ATTENTION_SPLIT - 1) / ATTENTION_SPLIT); }

    private void copy(VulkanContext.Buffer src, long srcOff, VulkanContext.Buffer dst, long dstOff, long bytes) {
        unchained();
        region.set(U64, 0, srcOff);
        region.set(U64, 8, dstOff);
        region.set(U64, 16, bytes);
        vk.cmdCopyBuffer(rec, src.buffer(), dst.buffer(), region);
    }

    /** Whether matvec_decode.comp takes every one of {@code ms} (f32, bf16, f16, int8 weights), so an operator can fold into it. */
    private boolean folds(Matrix... ms) { return folds(1, ms); }

    /** As above for products of {@code T} rows: more than one take the several-token pipeline (it takes only some widths). */
    private boolean folds(int T, Matrix... ms) {
        for (Matrix m : ms) {
            int kind = mm.resident(m).kind();
            if (kind > Shaders.KIND_I8 || T > 1 && !ctx.tokenProducts(kind, m.cols(), T)) return false;
        }
        return true;
    }

    private int groups(long n) { return (int) Math.max(1, Math.min((n + 63) / 64, Integer.toUnsignedLong(ctx.info().maxGroupCount()[0]))); }

    /** The barrier after the dispatches of {@code phase} (with the profile, a timestamp first). */
    private void sync(String phase) {
        mark(phase);
        if (chaining && chainAll && chainGroups > 0) {
            // left out: the next phase's products wait for this one's counter, anything else gets the barrier first
            pendingWait = chainCounter + 1;
            pendingWaitFor = chainGroups;
        } else {
            pendingWait = 0;
            vk.cmdBarrier(rec, Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_COMPUTE, computeToCompute);
        }
        newPhase();
    }

    /** A barrier between commands of other kinds (transfers, the host), after the one a chain left out. */
    private void cmdBarrier(int src, int dst, MemorySegment barrier) {
        unchained();
        vk.cmdBarrier(rec, src, dst, barrier);
    }

    /** A new phase: its products signal a fresh counter (none when they run out). */
    private void newPhase() {
        chainCounter = nextCounter++;
        chainAll = chainCounter < CHAIN_COUNTERS;
        chainGroups = 0;
    }

    /** Before a command that is not a chained product: the barrier left out, and this phase no longer chains. */
    private void unchained() {
        chainAll = false;
        barrierLeftOut();
    }

    /** The barrier a chain left out, before a command that does not wait for its counter. */
    private void barrierLeftOut() {
        if (pendingWait != 0) {
            pendingWait = 0;
            vk.cmdBarrier(rec, Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_COMPUTE, computeToCompute);
        }
    }

    /** With the profile, while a decode step or prompt chunk is recorded: a timestamp once the commands before it are done, ending {@code phase}. */
    private void mark(String phase) {
        if (!profiling) return;
        if (phases.size() + 1 >= PROFILE_QUERIES) throw new IllegalStateException("more than " + PROFILE_QUERIES + " timestamps a step");
        vk.call("vkCmdWriteTimestamp", rec, Vk.PIPELINE_STAGE_BOTTOM, queryPool, phases.size() + 1);
        phases.add(phase);
    }

    /** Adds the last step's or chunk's phase times (its timestamps) to {@code profile}; returns the steps counted, {@code counted} + 1. */
    private int collectProfile(Map<String, double[]> profile, int counted) {
        int n = phases.size() + 1;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ticks = a.allocate(8L * n, 8);
            vk.check("vkGetQueryPoolResults", ctx.device, queryPool, 0, n, 8L * n, ticks, 8L, Vk.QUERY_RESULT_64 | Vk.QUERY_RESULT_WAIT);
            double ns = ctx.info().timestampPeriod();
            for (int i = 1; i < n; i++)
                profile.computeIfAbsent(phases.get(i - 1), k -> new double[2])[0] += ns * (ticks.get(U64, 8L * i) - ticks.get(U64, 8L * (i - 1)));
            if (counted == 0) for (String p : phases) profile.get(p)[1]++;
            return counted + 1;
        }
    }

    /** The profile so far on standard error (µs per decode step by phase, summed over layers), then cleared. */
    private void printProfile() {
        if (profiledChunks > 0) {
            double total = chunkProfile.values().stream().mapToDouble(v -> v[0]).sum() / profiledChunks / 1e3;
            StringBuilder b = new StringBuilder(String.format(java.util.Locale.ROOT,
                    "vulkan profile: %d prompt chunks of %.0f tokens on average, %.1f us a chunk on the device:", profiledChunks,
                    (double) profiledChunkTokens / profiledChunks, total));
            chunkProfile.forEach((k, v) -> b.append(String.format(java.util.Locale.ROOT, " %s %.1f (%d)", k, v[0] / profiledChunks / 1e3, (long) v[1])));
            System.err.println(b);
            chunkProfile.clear();
            profiledChunks = profiledChunkTokens = 0;
        }
        if (profiledSteps == 0) return;
        double total = profile.values().stream().mapToDouble(v -> v[0]).sum() / profiledSteps / 1e3;
        StringBuilder b = new StringBuilder(String.format(java.util.Locale.ROOT, "vulkan profile: %d decode steps, %.1f us a step on the device:",
                profiledSteps, total));
        profile.forEach((k, v) -> b.append(String.format(java.util.Locale.ROOT, " %s %.1f (%d)", k, v[0] / profiledSteps / 1e3, (long) v[1])));
        System.err.println(b);
        if (hostSteps > 0)
            System.err.printf(java.util.Locale.ROOT, "vulkan host: %d decode steps, us a step: recording and inputs %.1f, submission to fence %.1f,"
                    + " logits back %.1f, between steps %.1f%n", hostSteps, host[0] / 1e3 / hostSteps, host[1] / 1e3 / hostSteps,
                    host[2] / 1e3 / hostSteps, host[3] / 1e3 / Math.max(1, hostSteps - 1));
        java.util.Arrays.fill(host, 0);
        hostSteps = lastStepEnd = 0;
        profile.clear();
        profiledSteps = 0;
    }

    /** RMSNorm of {@code rows} rows of width {@code dim} from {@code src} (from float {@code srcOff}) into {@code dst}. */
    private void norm(State s, NormOp n, VulkanContext.Buffer src, VulkanContext.Buffer dst, int rows, int dim, int srcOff, int dstOff) {
        Integer w = normAt.get(n);
        int flags = (w != null ? 1 : 0) | (w != null && n.offset() ? 2 : 0);
        op(s, 0, src, dst, params, src, Math.min(rows, ctx.info().maxGroupCount()[0]), rows, dim, srcOff, dstOff, w == null ? 0 : w, flags,
                Float.floatToRawIntBits(n.eps()), dim, dim);
    }

    /**
     * x = (x + RMSNorm(src)) · scale for {@code rows} rows of the hidden width (OP 20: a sandwich norm's output added to
     * the residual, a layer scalar after it, in one phase).
     */
    private void normAdd(State s, NormOp n, VulkanContext.Buffer src, int rows, float scale) {
        Integer w = normAt.get(n);
        int flags = (w != null ? 1 : 0) | (w != null && n.offset() ? 2 : 0), dim = plan.hidden();
        op(s, 20, src, s.x, params, src, Math.min(rows, ctx.info().maxGroupCount()[0]), rows, dim, 0, 0, w == null ? 0 : w, flags,
                Float.floatToRawIntBits(n.eps()), dim, dim, Float.floatToRawIntBits(scale));
    }

    /** x[t, i] += b[i] for {@code T} rows of {@code width} (nothing when b is null). */
    private void bias(State s, float[] b, VulkanContext.Buffer x, int T, int width) {
        if (b != null) op(s, 6, x, x, params, x, groups((long) T * width), T * width, vectorAt.get(b), width);
    }

    /** One ops.comp dispatch of {@code groups} workgroups over buffers a..d with push constants {@code u}. */
    private void op(State s, int op, VulkanContext.Buffer a, VulkanContext.Buffer b, VulkanContext.Buffer c, VulkanContext.Buffer d,
                    int groups, int... u) {
        op(s, op, new VulkanContext.Buffer[] {a, b, c, d}, groups, u);
    }

    /** As above over buffers A..D then E..G (those not given: A), S the state's step buffer. */
    private void op(State s, int op, VulkanContext.Buffer[] bufs, int groups, int... u) {
        dispatch(s, kvHalf && VulkanContext.readsKvCache(op) ? ctx.opKvHalf(op) : ctx.ops[op], bufs, groups, 1, u);
    }

    /**
     * One dispatch of {@code pipeline} (ops.comp's layout: ops.comp, attend_decode.comp, gdn.comp, embryo.comp, moe.comp)
     * of {@code gx} × {@code gy} workgroups over buffers A..D then E..G (those not given: A), S the state's step buffer and
     * P the parameters, push constants {@code u}; the state keeps a descriptor set per set of buffers.
     */
    private void dispatch(State s, long pipeline, VulkanContext.Buffer[] bufs, int gx, int gy, int[] u) {
        unchained();
        recordDispatch(s, pipeline, bufs, gx, gy, u);
    }

    /**
     * The folded decode attention (OP 9) of a chained step: it waits for the q/k/v products' counter where their barrier
     * was left out, and counts its workgroups into this phase's, so the o product after it can chain (attend_decode.comp's
     * u13-u15).
     */
    private void attendChained(State s, VulkanContext.Buffer[] bufs, int groups, int... u) {
        int[] w = java.util.Arrays.copyOf(u, 16);
        if (pendingWait != 0) {
            w[14] = pendingWait;
            w[15] = Math.toIntExact(pendingWaitFor);
            chainedWaits++;
        }
        if (chainAll) {
            w[13] = chainCounter + 1;
            chainGroups += groups;
        }
        recordDispatch(s, kvHalf ? ctx.opKvHalf(9) : ctx.ops[9], bufs, groups, 1, w);
    }

    /** dispatch's recording. */
    private void recordDispatch(State s, long pipeline, VulkanContext.Buffer[] bufs, int gx, int gy, int[] u) {
        long[] handles = new long[VulkanContext.OPS_BUFFERS];
        for (int i = 0; i < handles.length; i++) {
            int at = i < 4 ? i : i - 1;   // binding 4 is S, binding 8 P (the parameters), binding 9 the chain's counters
            handles[i] = i == 4 ? s.stepDev.buffer() : i == 8 ? params.buffer() : i == 9 ? s.chain.buffer()
                    : (at < bufs.length ? bufs[at] : bufs[0]).buffer();
        }
        List<Long> key = java.util.Arrays.stream(handles).boxed().toList();
        Long set = s.sets.get(key);
        if (set == null) {
            set = mm.allocateSet(ctx.opsSetLayout);
            mm.writeSet(set, handles);
            s.sets.put(key, set);
        }
        for (int i = 0; i < 16; i++) push.setAtIndex(ValueLayout.JAVA_INT, i, i < u.length ? u[i] : 0);
        vk.cmdBindPipeline(rec, pipeline);
        setArray.set(U64, 0, set);
        vk.cmdBindDescriptorSet(rec, ctx.opsPipelineLayout, setArray);
        vk.cmdPushConstants(rec, ctx.opsPipelineLayout, VulkanContext.OPS_PUSH_BYTES, push);
        vk.cmdDispatch(rec, Math.max(1, Math.min(gx, ctx.info().maxGroupCount()[0])), gy, 1);
    }

    /** y = W·x for {@code tokens} rows: one matvec.comp dispatch per weight buffer of W. */
    private void matvec(State s, Matrix w, VulkanContext.Buffer x, VulkanContext.Buffer y, int tokens) {
        unchained();
        VulkanMatMul.Resident r = mm.resident(w);
        vk.cmdBindPipeline(rec, ctx.matvecPipeline(r.kind(), w.inDim(), tokens));
        long first = w.firstRow(), end = first + w.rows();
        for (VulkanMatMul.Part p : r.parts()) {
            long lo = Math.max(first, p.firstRow), hi = Math.min(end, p.firstRow + p.rows);
            if (lo >= hi) continue;
            bindMatvecSet(s, p, x, y, x);
            MatvecPush.write(mvPush, (int) (hi - lo), w.cols(), tokens, lo - p.firstRow, lo - first, w.outDim(), p.rsOff, p.cfOff, r.flags());
            vk.cmdPushConstants(rec, ctx.pipelineLayout, MatvecPush.BYTES, mvPush);
            int[] g = ctx.matvecGroups(r.kind(), (int) (hi - lo), w.cols(), tokens, VulkanMatMul.TOKEN_TILE);
            vk.cmdDispatch(rec, g[0], g[1], 1);
        }
    }

    /**
     * A decode step's product y = W·x' by matvec_decode.comp (one token) with what folds into it: x' the RMSNorm of x by
     * {@code norm} (null: x), or act(x)·up for {@code glu}'s layer (x the gate); {@code bias} added; {@code extra} flags
     * (ADD: y += the product).
     */
    private void folded(State s, Matrix w, VulkanContext.Buffer x, VulkanContext.Buffer y, NormOp norm, float[] bias, int extra, DecoderPlan.Layer glu) {
        folded(s, w, x, y, norm, bias, extra, glu, false, 1);
    }

    /**
     * As above for {@code T} rows of x and y (more than one: the several-token pipeline, each row's result that of the
     * row alone); {@code direct}: x is x' already (nothing to fold, column scales applied), read from memory without
     * staging by one row (by the several-token pipeline, which stages it, for more).
     */
    private void folded(State s, Matrix w, VulkanContext.Buffer x, VulkanContext.Buffer y, NormOp norm, float[] bias, int extra,
                        DecoderPlan.Layer glu, boolean direct, int T) {
        int flags = extra | normFlags(norm), pOff = normWeightAt(norm), word = norm == null ? 0 : Float.floatToRawIntBits(norm.eps()), biasOff = 0;
        VulkanContext.Buffer p = params;
        if (bias != null) { flags |= MatvecPush.BIAS; biasOff = vectorAt.get(bias); }
        if (glu != null) { flags |= MatvecPush.GLU; p = s.u; word = glu.act().ordinal(); }
        VulkanMatMul.Resident r = mm.resident(w);
        // chained: a one-tile product waits for the phase before if its barrier was left out; it and a direct one signal
        boolean oneTile = T == 1 && !direct && w.cols() <= VulkanContext.DECODE_TILE;
        if (!oneTile) barrierLeftOut();
        if (!(chaining && (oneTile || direct && T == 1))) chainAll = false;
        int wait = oneTile ? pendingWait : 0;
        // x from memory: the pipeline without staging, its column scales already in x, grids as for a row of one tile
        int kindFlags = direct ? r.flags() & ~MatvecPush.COL_SCALES : r.flags(), width = direct && T == 1 ? VulkanContext.DECODE_TILE : w.cols();
        vk.cmdBindPipeline(rec, direct && T == 1 ? ctx.matvecDecodeDirect(r.kind()) : ctx.matvecPipeline(r.kind(), w.inDim(), T));
        long first = w.firstRow(), end = first + w.rows();
        for (VulkanMatMul.Part part : r.parts()) {
            long lo = Math.max(first, part.firstRow), hi = Math.min(end, part.firstRow + part.rows);
            if (lo >= hi) continue;
            bindMatvecSet(s, part, x, y, p);
            // a bias is indexed by the product's row: its part starts lo - first rows in
            int[] g = ctx.matvecGroups(r.kind(), (int) (hi - lo), width, T, VulkanMatMul.TOKEN_TILE);
            MatvecPush.write(mvPush, (int) (hi - lo), w.cols(), T, lo - part.firstRow, lo - first, w.outDim(), part.rsOff, part.cfOff,
                    kindFlags | flags, pOff, word, biasOff + (int) (lo - first), chainSpins, wait, wait == 0 ? 0 : pendingWaitFor + chainWaitSlack,
                    chainAll ? chainCounter + 1 : 0);
            if (chainAll) chainGroups += (long) g[0] * g[1];
            if (wait != 0) chainedWaits++;
            vk.cmdPushConstants(rec, ctx.pipelineLayout, MatvecPush.BYTES, mvPush);
            vk.cmdDispatch(rec, g[0], g[1], 1);
        }
    }

    /** matvec_decode.comp's flags for a folded RMSNorm by {@code norm} (0 for none): the norm, its weight's kind. */
    private int normFlags(NormOp norm) {
        if (norm == null) return 0;
        boolean weight = normAt.containsKey(norm);
        return MatvecPush.NORM | (weight ? MatvecPush.NORM_WEIGHT : 0) | (weight && norm.offset() ? MatvecPush.NORM_OFFSET : 0);
    }

    /** Where {@code norm}'s weight starts in the parameters (0 without one). */
    private int normWeightAt(NormOp norm) {
        Integer at = norm == null ? null : normAt.get(norm);
        return at == null ? 0 : at;
    }

    /**
     * Whether {@code l}'s gate and up products of one token can take the gated-MLP pipeline ({@link #gateUp}): one
     * weight kind and the same scales, rows of at most the pipeline's tile and a multiple of 4 wide (x' staged 4 columns
     * at a time: column scales and norm weight 16-byte aligned), each matrix in one part, and a down product whose rows
     * are wider than a tile, which reads its input from memory after the GLU operator otherwise (a narrower one stages
     * act(gate)·up itself and its phase chains after gate/up's, which a product reading memory cannot).
     */
    private boolean gluProducts(DecoderPlan.Layer l) {
        Matrix gate = l.gate(), up = l.up(), down = l.down();
        if (!gateUpTogether || !DIRECT_DOWN || gate == null || up == null || down == null || !folds(gate, up, down)) return false;
        VulkanMatMul.Resident rg = mm.resident(gate), ru = mm.resident(up);
        VulkanMatMul.Part pg = partOf(rg, gate), pu = partOf(ru, up);
        if (rg.kind() != ru.kind() || rg.flags() != ru.flags() || pg == null || pu == null) return false;
        if (gate.outDim() != up.outDim() || gate.cols() != up.cols() || gate.cols() > ctx.gluTile || (gate.cols() & 3) != 0) return false;
        if ((rg.flags() & MatvecPush.COL_SCALES) != 0 && ((pg.cfOff & 3) != 0 || (pu.cfOff & 3) != 0)) return false;
        if ((normWeightAt(l.ffnNorm()) & 3) != 0) return false;
        return down.inDim() == gate.outDim() && down.inDim() > VulkanContext.DECODE_TILE && (down.inDim() & 3) == 0;
    }

    /** The part of {@code r} holding all of {@code w}'s rows, or null. */
    private static VulkanMatMul.Part partOf(VulkanMatMul.Resident r, Matrix w) {
        for (VulkanMatMul.Part part : r.parts())
            if (part.firstRow <= w.firstRow() && w.firstRow() + w.rows() <= part.firstRow + part.rows) return part;
        return null;
    }

    /**
     * A decode step's gate and up products of {@code l} (x' the ffn norm of x) in one dispatch: g = act(gate·x')·(up·x')
     * times the down product's column scales, bit for bit what the two products and {@link #glu} make, for the down
     * product to read from memory. A one-tile product for the chained phases (it waits and signals).
     */
    private void gateUp(State s, DecoderPlan.Layer l) {
        Matrix gate = l.gate(), up = l.up();
        VulkanMatMul.Resident rg = mm.resident(gate), ru = mm.resident(up), rd = mm.resident(l.down());
        VulkanMatMul.Part pg = partOf(rg, gate), pu = partOf(ru, up), pd = rd.parts().get(0);   // every part holds the column scales
        NormOp norm = l.ffnNorm();
        int flags = rg.flags() | normFlags(norm);
        boolean downScales = (rd.flags() & MatvecPush.COL_SCALES) != 0;
        if (downScales) flags |= MatvecPush.DOWN_SCALES;
        if (!chaining) chainAll = false;
        int wait = pendingWait;
        vk.cmdBindPipeline(rec, ctx.matvecDecodeGlu(rg.kind()));
        bindMatvecSet(s, pg, s.x, s.g, params, pu, pd);
        int[] g = ctx.matvecGroups(rg.kind(), gate.rows(), gate.cols(), 1, VulkanMatMul.TOKEN_TILE);
        MatvecPush.write(mvPush, gate.rows(), gate.cols(), 1, gate.firstRow() - pg.firstRow, 0, gate.outDim(), pg.rsOff, pg.cfOff, flags,
                normWeightAt(norm), norm == null ? 0 : Float.floatToRawIntBits(norm.eps()), 0, chainSpins, wait, wait == 0 ? 0 : pendingWaitFor + chainWaitSlack, chainAll ? chainCounter + 1 : 0);
        MatvecPush.gluWords(mvPush, up.firstRow() - pu.firstRow, pu.rsOff, pu.cfOff, downScales ? pd.cfOff : 0, l.act().ordinal());
        if (chainAll) chainGroups += (long) g[0] * g[1];
        if (wait != 0) chainedWaits++;
        vk.cmdPushConstants(rec, ctx.pipelineLayout, MatvecPush.BYTES, mvPush);
        vk.cmdDispatch(rec, g[0], g[1], 1);
        gateUpDispatches++;
    }

    /**
     * g = act(g)·u, times the down product's column scales where it has them (the x' its staged product would make, in
     * the same order of operations), for a direct product ({@link #folded}).
     */
    private void glu(State s, DecoderPlan.Layer l, int T) {
        VulkanMatMul.Resident r = mm.resident(l.down());
        VulkanMatMul.Part first = r.parts().get(0);   // every part holds the column scales
        boolean cf = (r.flags() & MatvecPush.COL_SCALES) != 0;
        int n = l.gate().outDim();
        op(s, 3, s.g, s.u, cf ? first.buffer : params, s.g, groups((long) T * n), T * n, l.act().ordinal(), cf ? Math.toIntExact(first.cfOff) : 0,
                cf ? 1 : 0, n);
    }

    private void bindMatvecSet(State s, VulkanMatMul.Part part, VulkanContext.Buffer x, VulkanContext.Buffer y, VulkanContext.Buffer p) {
        bindMatvecSet(s, part, x, y, p, part, part);
    }

    /** As above with the gated-MLP pipeline's up weights and the down product's column scales in their parts. */
    private void bindMatvecSet(State s, VulkanMatMul.Part part, VulkanContext.Buffer x, VulkanContext.Buffer y, VulkanContext.Buffer p,
                               VulkanMatMul.Part up, VulkanMatMul.Part down) {
        List<Object> key = List.of(part, x.buffer(), y.buffer(), p.buffer(), up, down);
        Long set = s.matvecSets.get(key);
        if (set == null) {
            set = mm.allocateSet(ctx.descriptorSetLayout);
            mm.writeProductSet(set, part.buffer.buffer(), x.buffer(), y.buffer(), p.buffer(), s.chain.buffer(), up.buffer.buffer(), down.buffer.buffer());
            s.matvecSets.put(key, set);
        }
        setArray.set(U64, 0, set);
        vk.cmdBindDescriptorSet(rec, ctx.pipelineLayout, setArray);
    }

    // ---- mixture of experts (moe.comp) ----

    /** Why {@code l}'s mixture of experts cannot run here, or null. */
    private static String moeUnsupported(DecoderPlan plan, DecoderPlan.Layer l) {
        DecoderPlan.Moe m = l.moe();
        if (m.resonance() != null && m.topK() != 1) return "a resonance router with top-k " + m.topK();
        if (m.router() == null && m.resonance() == null) return "an MoE without a router";
        if (m.expertScale() != null && m.expertScale().length != m.experts()) return m.expertScale().length + " expert scales for " + m.experts() + " experts";
        if (m.shared() != null && (l.postFfnNorm() != null || l.gate() != null)) return "a shared expert with a post-FFN norm or a dense MLP";
        if (m.shared() != null)
            for (Matrix w : new Matrix[] {m.shared().gate(), m.shared().up(), m.shared().down(), m.shared().gateProj()})
                if (w != null && !VulkanMatMul.supports(w)) return "shared expert " + w.name() + " is " + w.dtype().label + (w.inputMajor() ? ", input-major" : "");
        if (l.gate() != null && (l.postMlpNorm() == null || l.preMoeNorm() == null || l.postMoeNorm() == null || l.postFfnNorm() == null))
            return "a dense MLP beside the experts without its norms";   // (gemma4's block has all four)
        if (m.experts() > DecoderPlan.MAX_EXPERTS || m.topK() > DecoderPlan.MAX_TOP_K)
            return m.experts() + " experts, top " + m.topK() + " (moe.comp takes at most " + DecoderPlan.MAX_EXPERTS + ", top " + DecoderPlan.MAX_TOP_K + ")";
        List<List<Matrix>> groups = new ArrayList<>(List.of(m.gate(), m.down()));
        if (m.up() != null) groups.add(m.up());
        if (m.router() != null) groups.add(0, List.of(m.router()));   // (a resonance router has descriptors, no matrix)
        DType expertType = m.gate().get(0).dtype();
        for (List<Matrix> g : groups)
            for (Matrix w : g) {
                String what = w == m.router() ? "router " : "expert ";
                if (w.inputMajor() && (w == m.router() || w.dtype() == DType.Q4_BLOCK || w.dtype() == DType.Q4TP))
                    return what + w.name() + " is input-major " + w.dtype().label + " (the Vulkan experts read input-major f32, bf16, f16 and int8 only)";
                if (w.inputMajor() != g.get(0).inputMajor() || g == m.up() && w.inputMajor() != m.gate().get(0).inputMajor())
                    return "experts of mixed layouts (" + w.name() + (w.inputMajor() ? " is" : " is not") + " input-major)";
                if (!stackable(w.dtype())) return what + w.name() + " is " + w.dtype().label + " (the Vulkan experts read f32, bf16, f16, q8_row, q8_2f, q4_block, q4tp)";
                if ((w.dtype() == DType.Q4_BLOCK || w.dtype() == DType.Q4TP) && w.cols() % 32 != 0)
                    return what + w.name() + " is " + w.dtype().label + " of " + w.cols() + " columns (the Vulkan experts read whole groups of 32 a row)";
                if (w != m.router() && w.dtype() != expertType) return "experts of mixed dtypes (" + w.name() + " is " + w.dtype().label + ")";
                if (w.cols() != g.get(0).cols() || w.rows() != g.get(0).rows()) return "experts of different shapes (" + w.name() + ")";
            }
        return stackTooLarge(m, VulkanMatMul.PART_CAP);
    }

    /** Why one of {@code plan}'s expert stacks would not fit a buffer of {@code range} bytes (this device's), or null. */
    static String expertsTooLarge(DecoderPlan plan, long range) {
        for (DecoderPlan.Layer l : plan.layers()) {
            String why = l.moe() == null || l.moe().router() == null ? null : stackTooLarge(l.moe(), range);
            if (why != null) return "layer " + plan.layers().indexOf(l) + ": " + why;
        }
        return null;
    }

    /** Why a stack of {@code m}'s (as {@link #moeStacks} makes them) would exceed {@code range} bytes, or null. */
    private static String stackTooLarge(DecoderPlan.Moe m, long range) {
        List<List<Matrix>> stacks = new ArrayList<>();
        if (m.router() != null) stacks.add(List.of(m.router()));   // (a resonance router has descriptors, no matrix)
        List<Matrix> gu = new ArrayList<>(m.gate());
        if (m.up() != null) gu.addAll(m.up());
        stacks.add(gu);
        stacks.add(m.down());
        for (List<Matrix> st : stacks) {
            Matrix w = st.get(0);
            long bytes = stackBytes(w.dtype(), (long) st.size() * w.rows(), w.cols(), st.size());
            if (bytes > range)
                return "experts' " + w.name() + " stack of " + bytes + " bytes, more than one Vulkan buffer holds here (" + range + ")";
        }
        return null;
    }

    /** Whether an expert stack takes {@code dt}: moe.comp's kinds f32, bf16, f16, int8, q4_block and q4tp (rows of whole groups). */
    private static boolean stackable(DType dt) {
        return dt == DType.F32 || dt == DType.BF16 || dt == DType.F16 || dt == DType.Q8_ROW || dt == DType.Q8_2F || dt == DType.Q4_BLOCK
                || dt == DType.Q4TP;
    }

    /** Bytes of a stack of {@code rows} rows of {@code cols} with at most {@code colVectors} column-scale vectors. */
    private static long stackBytes(DType dt, long rows, int cols, long colVectors) {
        if (dt == DType.Q4_BLOCK) return rows * cols / 2 + 4 * (rows * cols / 32);   // nibbles, an f32 scale a group
        if (dt == DType.Q4TP)   // nibbles, {exp2(lo), exp2(step)} a row, the rows' group codes (to a whole word)
            return rows * cols / 2 + 8 * rows + ((rows * dev.cmf4j.format.quant.TpLadder.codeStride(cols / 32) + 3) & ~3L);
        int elem = dt == DType.F32 ? 4 : dt == DType.BF16 || dt == DType.F16 ? 2 : 1;
        boolean q8 = dt == DType.Q8_ROW || dt == DType.Q8_2F;
        return ((rows * cols * elem + 3) & ~3L) + (q8 ? 4 * rows : 0) + (dt == DType.Q8_2F ? 4L * colVectors * cols : 0);
    }

    /**
     * One product's rows for every expert back to back in one device buffer, as moe.comp reads them: the weights in their
     * stored dtype, then (int8) an f32 scale per row from word {@code rsOff}, then (q8_2f) one f32 column-scale vector per
     * run of {@code cfRows} rows from word {@code cfOff}; q4_block: the nibbles of whole groups of 32 a row, then an f32
     * scale per group from word {@code rsOff}; q4tp: the nibbles, each row's {exp2(lo), exp2(step)} from word
     * {@code rsOff}, the rows' group codes from word {@code cfOff}. Expert e's rows from stack row e·{@code rowsPerExpert}.
     */
    record Stack(VulkanContext.Buffer buffer, int kind, int flags, int rsOff, int cfOff, int cfRows, int rowsPerExpert) {}

    /** A layer's experts on the device: the router's, gate/up's and down's stacks, and their biases' offsets in P (-1: none). */
    private static final class MoeLayer {
        Stack router, gateUp, down;
        int routerBias = -1, gateUpBias = -1, downBias = -1;
        /** Gemma4's per-expert scales' offset in P, or -1. */
        int expertScale = -1;

        long bytes() {
            long b = 0;
            for (Stack st : new Stack[] {router, gateUp, down}) if (st != null) b += st.buffer().bytes();
            return b;
        }

        /** Whether {@link #bytes} are in the matmul's count of weight bytes. */
        boolean counted;

        /** Frees the stacks (and takes them off {@code mm}'s count of weight bytes). */
        void free(VulkanMatMul mm) {
            if (counted) mm.countWeights(-bytes());
            counted = false;
            for (Stack st : new Stack[] {router, gateUp, down}) if (st != null) mm.context().free(st.buffer());
            router = gateUp = down = null;
        }
    }

    /** The plan this forward runs (tests). */
    DecoderPlan plan() { return plan; }

    /** The distinct weight kinds of the experts' stacks (gate/up and down; tests). */
    java.util.Set<Integer> expertKinds() {
        java.util.Set<Integer> kinds = new java.util.TreeSet<>();
        for (MoeLayer m : moeLayers.values()) { kinds.add(m.gateUp.kind()); kinds.add(m.down.kind()); }
        return kinds;
    }

    /** Every MoE layer's stacks (made in the constructor), by layer identity. */
    private final Map<DecoderPlan.Layer, MoeLayer> moeLayers = new IdentityHashMap<>();
    /** The widest routing, top-k and expert width of the plan's MoE layers (0: none): the states' MoE buffers. */
    private int moeExperts, moeTopK, moeInter;
    /** The widest shared expert (its gate and up rows go to the states' g and u). */
    private int moeSharedInter;

    /** {@code l}'s expert biases into the parameters ({@code place}), laid out by stack row; its widths into the maxima. */
    private void moeParams(DecoderPlan.Layer l, java.util.function.Consumer<float[]> place, int[] size) {
        DecoderPlan.Moe m = l.moe();
        int n = m.experts(), in = m.intermediate();
        MoeLayer ml = new MoeLayer();
        moeLayers.put(l, ml);
        moeExperts = Math.max(moeExperts, n);
        moeTopK = Math.max(moeTopK, m.topK());
        moeInter = Math.max(moeInter, in);
        if (m.shared() != null) moeSharedInter = Math.max(moeSharedInter, Math.max(m.shared().gate().outDim(), m.shared().up().outDim()));
        if (m.routerBias() != null) { ml.routerBias = size[0]; place.accept(m.routerBias()); }
        if (m.expertScale() != null) { ml.expertScale = size[0]; place.accept(m.expertScale()); }
        float[] gateUp = m.gateBias();   // fused: [experts, 2I] as the stack's rows already
        if (m.up() != null && (m.gateBias() != null || m.upBias() != null)) {
            // separate: expert e's stack rows are its gate's I rows, then its up's
            gateUp = new float[2 * n * in];
            for (int e = 0; e < n; e++) {
                if (m.gateBias() != null) System.arraycopy(m.gateBias(), e * in, gateUp, 2 * e * in, in);
                if (m.upBias() != null) System.arraycopy(m.upBias(), e * in, gateUp, (2 * e + 1) * in, in);
            }
        }
        if (gateUp != null) { ml.gateUpBias = size[0]; place.accept(gateUp); }
        if (m.downBias() != null) { ml.downBias = size[0]; place.accept(m.downBias()); }
    }

    /** Uploads every MoE layer's stacks. */
    private void moeStacks() {
        long range = Math.min(VulkanMatMul.PART_CAP, ctx.info().maxStorageBufferRange());
        for (DecoderPlan.Layer l : plan.layers()) {
            MoeLayer ml = moeLayers.get(l);
            if (ml == null) continue;
            DecoderPlan.Moe m = l.moe();
            List<Matrix> gu = new ArrayList<>();
            for (int e = 0; e < m.experts(); e++) {
                gu.add(m.gate().get(e));
                if (m.up() != null) gu.add(m.up().get(e));
            }
            ml.router = m.router() == null ? null : stack(mm, List.of(m.router()), m.experts(), range);
            ml.gateUp = stack(mm, gu, 2 * m.intermediate(), range);
            ml.down = stack(mm, m.down(), plan.hidden(), range);
            mm.countWeights(ml.bytes());
            ml.counted = true;
        }
    }

    /**
     * {@code pieces} (each a row window of its tensor, the same shape and dtype) stacked in order into one buffer of
     * {@code mm}'s device (a column-scale vector per piece), at most {@code range} bytes.
     */
    static Stack stack(VulkanMatMul mm, List<Matrix> pieces, int rowsPerExpert, long range) {
        Matrix first = pieces.get(0);
        DType dt = first.dtype();
        if (dt == DType.Q4_BLOCK) return stackQ4(mm, pieces, rowsPerExpert, range);
        if (dt == DType.Q4TP) return stackQ4tp(mm, pieces, rowsPerExpert, range);
        int rows = first.rows(), cols = first.cols(), elem = dt == DType.F32 ? 4 : dt == DType.BF16 || dt == DType.F16 ? 2 : 1;
        boolean q8 = dt == DType.Q8_ROW || dt == DType.Q8_2F, colScales = dt == DType.Q8_2F;
        long total = (long) pieces.size() * rows, bytes = stackBytes(dt, total, cols, pieces.size());
        if (bytes > range)
            throw new IllegalArgumentException(first.name() + ": the experts' stack takes " + bytes + " bytes, more than this device's buffer range ("
                    + range + "): use -Dcmf.vulkan.resident=false");
        long wBytes = total * cols * elem, rsOff = (wBytes + 3) / 4, cfOff = rsOff + (q8 ? total : 0);
        VulkanContext.Buffer buf = mm.bufferFilled(bytes, dst -> {
            for (int i = 0; i < pieces.size(); i++) {
                Matrix w = pieces.get(i);
                MemorySegment src = w.data();
                long stored = w.storedRows() * cols * elem, at = (long) i * rows;
                MemorySegment.copy(src, w.firstRow() * cols * elem, dst, at * cols * elem, (long) rows * cols * elem);
                if (q8) for (int r = 0; r < rows; r++)
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (rsOff + at + r), Float.float16ToFloat(src.get(VulkanMatMul.U16_LE, stored + 2 * (w.firstRow() + r))));
                if (colScales) for (int c = 0; c < cols; c++)
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (cfOff + (long) i * cols + c),
                            Float.float16ToFloat(src.get(VulkanMatMul.U16_LE, stored + 2 * w.storedRows() + 2L * c)));
            }
        });
        int flags = (q8 ? MatvecPush.ROW_SCALES : 0) | (colScales ? MatvecPush.COL_SCALES : 0);
        return new Stack(buf, VulkanMatMul.kind(dt), flags, Math.toIntExact(rsOff), Math.toIntExact(cfOff), rows, rowsPerExpert);
    }

    /**
     * Gemma4's experts beside its dense MLP, whose output is in tmp: tmp = postMlp(tmp) + postMoe(moe(preMoe(x))), the
     * router reading its own norm of x (its weight the router scale · hidden^-½); the post-FFN norm and the add follow.
     */
    private void moeBesideMlp(State s, DecoderPlan.Layer l, int T) {
        int hidden = plan.hidden();
        norm(s, l.postMlpNorm(), s.tmp, s.tmp, T, hidden, 0, 0);
        norm(s, l.preMoeNorm(), s.x, s.xn, T, hidden, 0, 0);
        VulkanContext.Buffer routerIn = s.x;
        if (l.moe().routerNorm() != null) {
            norm(s, l.moe().routerNorm(), s.x, s.moeRouterIn, T, hidden, 0, 0);
            routerIn = s.moeRouterIn;
        }
        sync("moe norms");
        moeRoute(s, l, routerIn, T);
        moeExperts(s, l, s.xn, s.moeOut, T, false);
        norm(s, l.postMoeNorm(), s.moeOut, s.moeOut, T, hidden, 0, 0);
        sync("norm");
        op(s, 5, s.tmp, s.moeOut, s.tmp, s.tmp, groups((long) T * hidden), T * hidden);
        sync("add");
    }

    /** q4_block pieces (rows of whole groups of 32) stacked: their groups' nibbles in order, then each group's scale as f32. */
    private static Stack stackQ4(VulkanMatMul mm, List<Matrix> pieces, int rowsPerExpert, long range) {
        Matrix first = pieces.get(0);
        int rows = first.rows(), cols = first.cols();
        if (cols % 32 != 0) throw new IllegalArgumentException(first.name() + ": q4_block experts of " + cols + " columns (whole groups of 32 a row)");
        long groups = (long) rows * cols / 32, total = groups * pieces.size(), bytes = stackBytes(DType.Q4_BLOCK, (long) pieces.size() * rows, cols, 0);
        if (bytes > range)
            throw new IllegalArgumentException(first.name() + ": the experts' stack takes " + bytes + " bytes, more than this device's buffer range ("
                    + range + "): use -Dcmf.vulkan.resident=false");
        long rsOff = total * 16 / 4;
        VulkanContext.Buffer buf = mm.bufferFilled(bytes, dst -> {
            for (int i = 0; i < pieces.size(); i++) {
                Matrix w = pieces.get(i);
                MemorySegment src = w.data();
                long plane = w.storedRows() * cols / 32 * 16, g0 = w.firstRow() * cols / 32;
                MemorySegment.copy(src, g0 * 16, dst, i * groups * 16, groups * 16);
                for (long g = 0; g < groups; g++)
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (rsOff + i * groups + g), Float.float16ToFloat(src.get(VulkanMatMul.U16_LE, plane + 2 * (g0 + g))));
            }
        });
        return new Stack(buf, Shaders.KIND_Q4_BLOCK, 0, Math.toIntExact(rsOff), 0, rows, rowsPerExpert);
    }

    /** q4tp pieces (rows of whole groups of 32) stacked as VulkanMatMul uploads q4tp: nibbles, row ladders, codes. */
    private static Stack stackQ4tp(VulkanMatMul mm, List<Matrix> pieces, int rowsPerExpert, long range) {
        Matrix first = pieces.get(0);
        int rows = first.rows(), cols = first.cols();
        if (cols % 32 != 0) throw new IllegalArgumentException(first.name() + ": q4tp experts of " + cols + " columns (whole groups of 32 a row)");
        long gpr = cols / 32, stride = dev.cmf4j.format.quant.TpLadder.codeStride(gpr), total = (long) pieces.size() * rows;
        long bytes = stackBytes(DType.Q4TP, total, cols, 0);
        if (bytes > range)
            throw new IllegalArgumentException(first.name() + ": the experts' stack takes " + bytes + " bytes, more than this device's buffer range ("
                    + range + "): use -Dcmf.vulkan.resident=false");
        long nib = total * gpr * 16, rsOff = nib / 4, cfOff = rsOff + 2 * total;
        VulkanContext.Buffer buf = mm.bufferFilled(bytes, dst -> {
            for (int i = 0; i < pieces.size(); i++) {
                Matrix w = pieces.get(i);
                MemorySegment src = w.data();
                long plane = w.storedRows() * gpr * 16, at = (long) i * rows;
                MemorySegment.copy(src, w.firstRow() * gpr * 16, dst, at * gpr * 16, rows * gpr * 16);
                for (int r = 0; r < rows; r++) {
                    long sc = plane + 4 * (w.firstRow() + r);
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (rsOff + 2 * (at + r)), dev.cmf4j.format.quant.TpLadder.exp2(Float.float16ToFloat(src.get(VulkanMatMul.U16_LE, sc))));
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (rsOff + 2 * (at + r) + 1), dev.cmf4j.format.quant.TpLadder.exp2(Float.float16ToFloat(src.get(VulkanMatMul.U16_LE, sc + 2))));
                }
                MemorySegment.copy(src, plane + 4 * w.storedRows() + w.firstRow() * stride, dst, 4 * cfOff + at * stride, rows * stride);
            }
        });
        return new Stack(buf, Shaders.KIND_Q4TP, 0, Math.toIntExact(rsOff), Math.toIntExact(cfOff), rows, rowsPerExpert);
    }

    /**
     * An MoE layer's FFN: x += moe(ffnNorm(x)) (with a post-FFN norm: x += postFfnNorm(moe(ffnNorm(x)))); a shared expert
     * (qwen3-next) adds σ(gateProj·x')·mlp(x') after the routed ones, as MoeStep does.
     */
    private void moeFfn(State s, DecoderPlan.Layer l, int T) {
        int hidden = plan.hidden();
        norm(s, l.ffnNorm(), s.x, s.xn, T, hidden, 0, 0);
        sync("norm");
        boolean post = l.postFfnNorm() != null;
        DecoderPlan.SharedExpert se = l.moe().shared();
        if (se != null) {   // (unsupported: none with a post-FFN norm)
            moeRoute(s, l, s.xn, T);
            sharedExpert(s, se, T);   // into tmp, its gate logits into moeLogits (the routing is done with them)
            moeExperts(s, l, s.xn, s.x, T, true);
            op(s, VulkanContext.OP_GATED_ADD, s.x, s.tmp, s.moeLogits, s.x, groups((long) T * hidden), T * hidden, hidden, se.gateProj() != null ? 1 : 0);
            sync("shared expert add");
            return;
        }
        moe(s, l, s.xn, post ? s.tmp : s.x, T, !post);
        if (post) {
            norm(s, l.postFfnNorm(), s.tmp, s.tmp, T, hidden, 0, 0);
            sync("norm");
            op(s, 5, s.x, s.tmp, s.x, s.x, groups((long) T * hidden), T * hidden);
            sync("add");
        }
    }

    /** A shared expert over {@code T} rows of xn: mlp(xn) into tmp, gateProj·xn (when it has one) into moeLogits[t]. */
    private void sharedExpert(State s, DecoderPlan.SharedExpert se, int T) {
        matvec(s, se.gate(), s.xn, s.g, T);
        matvec(s, se.up(), s.xn, s.u, T);
        if (se.gateProj() != null) matvec(s, se.gateProj(), s.xn, s.moeLogits, T);
        sync("shared gate/up");
        int n = se.gate().outDim();
        op(s, 3, s.g, s.u, s.g, s.g, groups((long) T * n), T * n, se.act().ordinal());
        sync("shared glu");
        matvec(s, se.down(), s.g, s.tmp, T);
        sync("shared down");
    }

    /**
     * {@code l}'s mixture of experts over {@code T} rows of {@code in} (the experts' input, normed) into {@code out}
     * ({@code add}: added to it, as to the residual; else written): the router's logits (+ bias), the routing into
     * the state's expert ids and weights (on the device: a recorded step replays it), each chosen expert's gate and up
     * through the GLU, and the chosen experts' down products weighted and summed (moe.comp).
     */
    void moe(State s, DecoderPlan.Layer l, VulkanContext.Buffer in, VulkanContext.Buffer out, int T, boolean add) {
        moeRoute(s, l, in, T);
        moeExperts(s, l, in, out, T, add);
    }

    /**
     * {@code l}'s router over {@code T} rows of {@code routerIn} (+ bias) and the routing into {@code s.moeRoute}: per row t
     * and pick j, at 2·(t·k + j), the expert id (its bits) then its weight. Another router fills those pairs and calls
     * {@link #moeExperts}.
     */
    void moeRoute(State s, DecoderPlan.Layer l, VulkanContext.Buffer routerIn, int T) {
        DecoderPlan.Moe m = l.moe();
        MoeLayer ml = moeLayers.get(l);
        int n = m.experts(), k = m.topK();
        DecoderPlan.Resonance res = m.resonance();
        if (res != null) {   // Embryo: the expert that reconstructs the row best, weight 1 (embryo.comp)
            op(s, VulkanContext.OP_RESONANCE_ROUTE, routerIn, s.moeRoute, s.moeRoute, s.moeRoute, T, n, res.rank(), plan.hidden(),
                    vectorAt.get(res.mu()), res.rank() == 0 ? 0 : vectorAt.get(res.u()), vectorAt.get(res.bias()));
            sync("route");
            return;
        }
        moeOp(s, VulkanContext.MOE_PRODUCT, ml.router, routerIn, s.moeRoute, s.moeLogits, n, T, ml.routerBias, n, plan.hidden(), 0, 0, 0, 0, 0);
        sync("router");
        int mode = (m.normTopK() ? 1 : 0) | (m.topKThenSoftmax() ? 2 : 0);
        moeOp(s, VulkanContext.MOE_ROUTE, ml.router, s.moeLogits, s.moeRoute, s.moeLogits, Math.min(T, ctx.info().maxGroupCount()[0]), 1,
                n, k, mode, T);
        sync("route");
        if (ml.expertScale >= 0) {   // each pick's weight times its expert's scale (OP 19)
            op(s, 19, s.moeRoute, s.moeRoute, params, s.moeRoute, groups((long) T * k), T * k, ml.expertScale);
            sync("expert scales");
        }
    }

    /**
     * The experts {@code s.moeRoute} names for {@code T} rows of {@code in}: each pick's gate and up through the GLU, then
     * per row the picks' down products weighted and summed into {@code out} ({@code add}: added to it, else written).
     */
    void moeExperts(State s, DecoderPlan.Layer l, VulkanContext.Buffer in, VulkanContext.Buffer out, int T, boolean add) {
        DecoderPlan.Moe m = l.moe();
        MoeLayer ml = moeLayers.get(l);
        int hidden = plan.hidden(), k = m.topK(), inter = m.intermediate();
        if ((long) T * k > ctx.info().maxGroupCount()[1])
            throw new IllegalArgumentException(T + " rows of top " + k + " experts exceed the device's workgroup count");
        int glu, alpha = 0, limit = 0;
        switch (m.glu()) {
            case dev.cmf4j.backend.Glu.Gated g -> glu = g.act().ordinal();
            case dev.cmf4j.backend.Glu.ClampedSwiglu c -> { glu = 3; alpha = Float.floatToRawIntBits(c.alpha()); limit = Float.floatToRawIntBits(c.limit()); }
        }
        boolean interleaved = m.up() == null && m.interleaved();
        boolean gateIm = m.gate().get(0).inputMajor(), downIm = m.down().get(0).inputMajor();
        if (gateIm || downIm) {
            // input-major pieces ([in, out], gpt-oss's HF layout): an invocation an output, so a warp reads consecutive columns
            if (gateIm) moeOp(s, VulkanContext.MOE_GATE_UP_INPUT_MAJOR, ml.gateUp, in, s.moeRoute, s.moeH, (inter + 63) / 64, T * k, ml.gateUpBias,
                    inter, hidden, k, m.up() != null ? 0 : interleaved ? 1 : 2, glu, alpha, limit, 0, m.gate().get(0).cols());
            else moeOp(s, VulkanContext.MOE_GATE_UP, ml.gateUp, in, s.moeRoute, s.moeH, inter, T * k, ml.gateUpBias, inter, hidden, k,
                    interleaved ? 1 : 0, glu, alpha, limit);
            sync("experts gate/up");
            if (downIm) moeOp(s, VulkanContext.MOE_DOWN_INPUT_MAJOR, ml.down, s.moeH, s.moeRoute, out, (hidden + 63) / 64, T, ml.downBias, hidden,
                    inter, k, add ? 1 : 0, 0, 0, 0, 0, hidden);
            else moeOp(s, VulkanContext.MOE_DOWN, ml.down, s.moeH, s.moeRoute, out, hidden, T, ml.downBias, hidden, inter, k, add ? 1 : 0, 0, 0, 0);
            sync("experts down");
            return;
        }
        if (T >= ctx.gemmMinTokens && s.moeY != null) {
            // a chunk: by expert, each taking its picks 8 at a time, so an expert's rows are read once for 8 picks instead
            // of once a pick (the same sums as below, bit for bit: the op checks)
            int n = m.experts(), slots = T * k;
            moeOp(s, VulkanContext.MOE_GATE_UP_BY_EXPERT, ml.gateUp, in, s.moeRoute, s.moeH, inter, n, ml.gateUpBias, inter, hidden, k,
                    interleaved ? 1 : 0, glu, alpha, limit, slots);
            sync("experts gate/up");
            moeOp(s, VulkanContext.MOE_DOWN_BY_EXPERT, ml.down, s.moeH, s.moeRoute, s.moeY, hidden, n, ml.downBias, hidden, inter, k,
                    0, 0, 0, 0, slots);
            sync("experts down");
            moeOp(s, VulkanContext.MOE_SUM, ml.down, s.moeY, s.moeRoute, out, (hidden + 63) / 64, T, -1, hidden, 0, k, add ? 1 : 0, 0, 0, 0);
            sync("experts sum");
            return;
        }
        moeOp(s, VulkanContext.MOE_GATE_UP, ml.gateUp, in, s.moeRoute, s.moeH, inter, T * k, ml.gateUpBias, inter, hidden, k,
                interleaved ? 1 : 0, glu, alpha, limit);
        sync("experts gate/up");
        moeOp(s, VulkanContext.MOE_DOWN, ml.down, s.moeH, s.moeRoute, out, hidden, T, ml.downBias, hidden, inter, k, add ? 1 : 0, 0, 0, 0);
        sync("experts down");
    }

    /**
     * One moe.comp dispatch of {@code op} over {@code w}'s stack (A), b, c (the routing) and d: {@code gx} × {@code gy}
     * workgroups. Products: u0 {@code rows}, u1 {@code cols}, u2 {@code k}, the stack's scales, {@code bias}'s offset,
     * then {@code u9}..{@code u12} (and u13, u14 when given); the routing (gx its workgroups): u0 experts, u1 k, u2 mode, u3
     * tokens.
     */
    private void moeOp(State s, int op, Stack w, VulkanContext.Buffer b, VulkanContext.Buffer c, VulkanContext.Buffer d, int gx, int gy,
                       int... u) {
        int[] push;
        if (op == VulkanContext.MOE_ROUTE) {
            push = u;
        } else {
            int bias = u[0], rows = u[1], cols = u[2], k = u[3];
            push = new int[] {rows, cols, k, w.rsOff(), w.cfOff(), w.flags(), bias < 0 ? 0 : bias + 1, w.cfRows(), w.rowsPerExpert(),
                    u[4], u[5], u[6], u[7], u.length > 8 ? u[8] : 0, u.length > 9 ? u[9] : 0};
        }
        dispatch(s, ctx.moePipeline(op, w.kind()), new VulkanContext.Buffer[] {w.buffer(), b, c, d}, gx, gy, push);
    }

    @Override public int preferredChunk() { return 64; }

    /** The state's device buffers: KV caches, activations, scores, staging. */
    @Override public long heldBytes(Object state) {
        synchronized (mm) {
            State s = (State) state;
            return s.released ? 0 : s.all.stream().mapToLong(VulkanContext.Buffer::bytes).sum();
        }
    }

    /** Frees every state's buffers and this forward's own (the matmul's weights stay). Called with the matmul's lock. */
    void closeOnOwner() {
        if (closed) return;
        closed = true;
        printProfile();
        for (State s : states) if (!s.released) s.free();
        states.clear();
        batchSteps.clear();   // freed with the command pool below
        if (queryPool != 0) vk.call("vkDestroyQueryPool", ctx.device, queryPool, MemorySegment.NULL);
        ctx.free(params);
        for (MoeLayer m : moeLayers.values()) m.free(mm);
        moeLayers.clear();
        vk.call("vkDestroyFence", ctx.device, fence, MemorySegment.NULL);
        vk.call("vkDestroyCommandPool", ctx.device, commandPool, MemorySegment.NULL);
        arena.close();
    }
}
