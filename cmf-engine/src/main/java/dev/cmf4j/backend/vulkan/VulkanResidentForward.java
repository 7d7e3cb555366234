package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.RopeTable;
import dev.cmf4j.backend.cpu.Rotary;

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
 * A dense decoder run whole on a Vulkan device: the hidden state, every operator of a layer (RMSNorm, the products,
 * per-head q/k norms, rotary, the KV cache append, causal GQA attention with an optional sliding window, the gated MLP,
 * the residual adds, sandwich norms, projection biases) and the head stay on the device, one submission per forward call; the host gathers
 * the embedding rows and computes the rotary tables (as the CPU graph does, so both paths rotate by the same cos and
 * sin), and takes back the logits. Supports the plan shapes {@link #unsupported} does not name (llama, qwen3, gemma3 and
 * alike with an f32 KV cache); anything else runs the hybrid path. Operators: ops.comp; products: matvec.comp over the
 * weights {@link VulkanMatMul} holds. All calls are serialised on the matmul.
 */
final class VulkanResidentForward implements DeviceForward {
    private final VulkanMatMul mm;
    private final VulkanContext ctx;
    private final Vk vk;
    private final DecoderPlan plan;
    private final int qDimMax, kvDimMax, interMax, maxHalf;
    /** Every norm weight the plan has, uploaded once, by the norm's identity: its float offset in {@link #params}. */
    private final Map<NormOp, Integer> normAt = new IdentityHashMap<>();
    /** Every projection bias, likewise by identity: its float offset in {@link #params}. */
    private final Map<float[], Integer> biasAt = new IdentityHashMap<>();
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
    /** The command buffer being recorded (the shared one, or a state's decode buffer). */
    private MemorySegment rec;
    /** Begin info for a command buffer recorded once and submitted many times (no one-time flag). */
    private final MemorySegment beginReusable = Vk.struct(arena, 32, Vk.ST_COMMAND_BUFFER_BEGIN_INFO);

    /** Why {@code plan} with a {@code kv} cache cannot run here, or null when it can. */
    static String unsupported(DecoderPlan plan, KvType kv) {
        if (kv != KvType.F32) return "a " + kv.label() + " KV cache (the Vulkan forward keeps f32)";
        if (plan.perLayerEmbedding() != null) return "per-layer embeddings";
        if (plan.headClusters() != null) return "a hierarchical head";
        if (!VulkanMatMul.supports(plan.head())) return plan.head().name() + " is " + plan.head().dtype().label;
        for (DecoderPlan.Layer l : plan.layers()) {
            String at = "layer " + plan.layers().indexOf(l) + ": ";
            if (l.deltaNet() != null) return at + "a gated delta net";
            if (l.anchor() != null) return at + "a bounded anchor";
            if (l.moe() != null) return at + "a mixture of experts";
            if (l.perLayerInput() != null || l.postMlpNorm() != null || l.vNorm() != null) return at + "gemma4's per-layer parts";
            if (l.outputGate()) return at + "a gated attention output";
            if (l.sharesKv()) return at + "a shared KV cache";
            if (l.sinks() != null) return at + "attention sinks";
            if (l.layerScalar() != 1f) return at + "a layer scalar";
            if (l.headDim() > DecoderPlan.MAX_HEAD_DIM) return at + "head dim " + l.headDim();
            if (plan.heads() % l.kvHeads() != 0) return at + plan.heads() + " heads over " + l.kvHeads() + " KV heads";
            if (l.rope() != null && l.rope().rotaryDim() % 2 != 0) return at + "an odd rotary width";
            for (Matrix m : List.of(l.q(), l.k(), l.v(), l.o(), l.gate(), l.up(), l.down()))
                if (!VulkanMatMul.supports(m)) return m.name() + " is " + m.dtype().label + (m.inputMajor() ? ", input-major" : "");
        }
        return null;
    }

    VulkanResidentForward(VulkanMatMul mm, DecoderPlan plan) {
        this.mm = mm;
        this.ctx = mm.context();
        this.vk = ctx.vk;
        this.plan = plan;
        int q = 0, kvd = 0, in = 0, half = 0;
        ropeOf = new int[plan.layers().size()];
        List<float[]> weights = new ArrayList<>();
        int[] size = {0};
        java.util.function.Consumer<NormOp> norm = n -> {
            if (n == null || n.w() == null || normAt.containsKey(n)) return;
            normAt.put(n, size[0]);
            weights.add(n.w());
            size[0] += n.w().length;
        };
        norm.accept(plan.finalNorm());
        for (int i = 0; i < plan.layers().size(); i++) {
            DecoderPlan.Layer l = plan.layers().get(i);
            q = Math.max(q, plan.heads() * l.headDim());
            kvd = Math.max(kvd, l.kvHeads() * l.headDim());
            in = Math.max(in, Math.max(l.gate().outDim(), l.up().outDim()));
            for (NormOp n : new NormOp[] {l.attnNorm(), l.qNorm(), l.kNorm(), l.postAttnNorm(), l.ffnNorm(), l.postFfnNorm()}) norm.accept(n);
            for (float[] b : new float[][] {l.qBias(), l.kBias(), l.vBias(), l.oBias()})
                if (b != null && !biasAt.containsKey(b)) {
                    biasAt.put(b, size[0]);
                    weights.add(b);
                    size[0] += b.length;
                }
            int r = -1;
            for (int j = 0; j < ropes.size() && l.rope() != null; j++) if (ropes.get(j) == l.rope()) r = j;
            if (r < 0 && l.rope() != null && l.rope().rotaryDim() > 0) { ropes.add(l.rope()); r = ropes.size() - 1; }
            ropeOf[i] = l.rope() == null || l.rope().rotaryDim() == 0 ? -1 : r;
            if (l.rope() != null) half = Math.max(half, l.rope().rotaryDim() / 2);
        }
        qDimMax = q; kvDimMax = kvd; interMax = in; maxHalf = half;
        // device-local: every norm's workgroups read them each step
        params = mm.bufferFilled(4L * Math.max(1, size[0]), dst -> {
            int off = 0;
            for (float[] w : weights) {
                MemorySegment.copy(w, 0, dst, ValueLayout.JAVA_FLOAT, 4L * off, w.length);
                off += w.length;
            }
        });
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
        }
        fenceArray.set(U64, 0, fence);
        commandBuffers.set(PTR, 0, commandBuffer);
        submitInfo.set(U32, 40, 1);
        submitInfo.set(PTR, 48, commandBuffers);
        beginInfo.set(U32, 16, 1);
        barrier(computeToCompute, Vk.ACCESS_SHADER_WRITE, Vk.ACCESS_SHADER_READ | Vk.ACCESS_SHADER_WRITE);
        barrier(transferToCompute, Vk.ACCESS_TRANSFER_WRITE, Vk.ACCESS_SHADER_READ | Vk.ACCESS_SHADER_WRITE);
        barrier(computeToTransfer, Vk.ACCESS_SHADER_WRITE, Vk.ACCESS_TRANSFER_READ);
        barrier(transferToHost, Vk.ACCESS_TRANSFER_WRITE, Vk.ACCESS_HOST_READ);
    }

    private static void barrier(MemorySegment b, int src, int dst) {
        b.set(U32, 16, src);
        b.set(U32, 20, dst);
    }

    /** One sequence's device buffers: activations for a chunk, its KV caches, the attention scores. */
    final class State {
        final int chunk, context;
        final VulkanContext.Buffer input, out, step, x, xn, q, k, v, att, tmp, g, u, logits;
        /** The decode step (one token, its logits) recorded once for this state and replayed, or null until the first. */
        MemorySegment decode;
        final VulkanContext.Buffer[] kCache, vCache;
        final List<VulkanContext.Buffer> all = new ArrayList<>();
        final Map<List<Long>, Long> sets = new HashMap<>();
        final Map<Object, Long> matvecSets = new HashMap<>();
        boolean released;

        State(int chunk, int context) {
            this.chunk = chunk;
            this.context = context;
            int hidden = plan.hidden(), heads = plan.heads();
            try {
                input = host(4L * chunk * hidden + 4L * Math.max(1, ropes.size()) * 2 * chunk * Math.max(1, maxHalf), "inputs");
                out = host(4L * chunk * plan.vocab(), "logits (host)");
                step = host(16, "step");
                x = dev(4L * chunk * hidden, "hidden");
                xn = dev(4L * chunk * hidden, "normed hidden");
                q = dev(4L * chunk * qDimMax, "q");
                k = dev(4L * chunk * kvDimMax, "k");
                v = dev(4L * chunk * kvDimMax, "v");
                att = dev(4L * chunk * qDimMax + 4L * heads * chunk * context, "attention and its scores");
                tmp = dev(4L * chunk * hidden, "projection");
                g = dev(4L * chunk * interMax, "gate");
                u = dev(4L * chunk * interMax, "up");
                logits = dev(4L * chunk * plan.vocab(), "logits");
                int n = plan.layers().size();
                kCache = new VulkanContext.Buffer[n];
                vCache = new VulkanContext.Buffer[n];
                for (int l = 0; l < n; l++) {
                    DecoderPlan.Layer layer = plan.layers().get(l);
                    long bytes = 4L * context * layer.kvHeads() * layer.headDim();
                    kCache[l] = dev(bytes, "key cache");
                    vCache[l] = dev(bytes, "value cache");
                }
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

        private VulkanContext.Buffer add(VulkanContext.Buffer b) {
            all.add(b);
            return b;
        }

        void free() {
            if (decode != null) {
                try (Arena a = Arena.ofConfined()) {
                    MemorySegment one = a.allocate(PTR);
                    one.set(PTR, 0, decode);
                    vk.call("vkFreeCommandBuffers", ctx.device, commandPool, 1, one);
                }
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

    @Override public void release(Object state) {
        synchronized (mm) {
            State s = (State) state;
            if (!s.released && !closed) s.free();
            states.remove(s);
        }
    }

    @Override public void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits) {
        synchronized (mm) {
            State s = (State) state;
            if (closed || s.released) throw new IllegalStateException("Vulkan state released");
            if (tokens > s.chunk || pos0 + tokens > s.context)
                throw new IllegalArgumentException(tokens + " tokens at " + pos0 + " exceed the state's chunk " + s.chunk + " or context " + s.context);
            run(s, ids, off, tokens, pos0, logits, allLogits);
        }
    }

    private void run(State s, int[] ids, int off, int T, int pos0, float[] logits, boolean allLogits) {
        int hidden = plan.hidden(), heads = plan.heads(), vocab = plan.vocab();
        // host: the embedding rows and each rotary table for these positions
        MemorySegment in = s.input.mapped();
        float[] row = new float[hidden];
        for (int t = 0; t < T; t++) {
            plan.embedding().decodeRow(ids[off + t], row, 0);
            if (plan.embedScale() != 1f) for (int i = 0; i < hidden; i++) row[i] *= plan.embedScale();
            MemorySegment.copy(row, 0, in, ValueLayout.JAVA_FLOAT, 4L * t * hidden, hidden);
        }
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
        int rows = logits == null ? 0 : allLogits ? T : 1;
        MemorySegment cb;
        if (T == 1 && rows == 1) {
            // a decode step: the same commands every time (its position is in the step buffer): recorded once
            if (s.decode == null) {
                try (Arena a = Arena.ofConfined()) {
                    MemorySegment ai = Vk.struct(a, 32, Vk.ST_COMMAND_BUFFER_ALLOCATE_INFO);
                    ai.set(U64, 16, commandPool);
                    ai.set(U32, 28, 1);
                    MemorySegment one = a.allocate(PTR);
                    vk.check("vkAllocateCommandBuffers", ctx.device, ai, one);
                    s.decode = one.get(PTR, 0);
                }
                record(s, s.decode, beginReusable, 1, 1);
            }
            cb = s.decode;
        } else {
            vk.resetCommandBuffer(commandBuffer);
            record(s, commandBuffer, beginInfo, T, rows);
            cb = commandBuffer;
        }
        commandBuffers.set(PTR, 0, cb);
        ctx.submit(submitInfo, fence);
        vk.waitAndReset(ctx.device, fenceArray);
        if (rows > 0) {
            MemorySegment.copy(s.out.mapped(), ValueLayout.JAVA_FLOAT, 0, logits, 0, rows * vocab);
            float c = plan.finalSoftcap();
            if (c != 0f) for (int i = 0; i < rows * vocab; i++) logits[i] = c * (float) Math.tanh(logits[i] / c);
        }
    }

    /** Records a forward of {@code T} tokens whose last {@code rows} want logits into {@code cb} (positions: the step buffer). */
    private void record(State s, MemorySegment cb, MemorySegment begin, int T, int rows) {
        int hidden = plan.hidden(), heads = plan.heads(), vocab = plan.vocab();
        rec = cb;
        vk.beginCommandBuffer(cb, begin);
        region.set(U64, 0, 0L);
        region.set(U64, 8, 0L);
        region.set(U64, 16, 4L * T * hidden);
        vk.cmdCopyBuffer(rec, s.input.buffer(), s.x.buffer(), region);
        vk.cmdBarrier(rec, Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_COMPUTE, transferToCompute);
        long[] ropeOff = new long[ropes.size()];
        for (int r = 0; r < ropes.size(); r++) ropeOff[r] = (long) s.chunk * hidden + (long) r * 2 * s.chunk * maxHalf;
        for (int li = 0; li < plan.layers().size(); li++) {
            DecoderPlan.Layer l = plan.layers().get(li);
            int hd = l.headDim(), kvh = l.kvHeads(), qd = heads * hd, kvd = kvh * hd;
            norm(s, l.attnNorm(), s.x, s.xn, T, hidden, 0, 0);
            sync();
            matvec(s, l.q(), s.xn, s.q, T);
            matvec(s, l.k(), s.xn, s.k, T);
            matvec(s, l.v(), s.xn, s.v, T);
            sync();
            if (l.qBias() != null || l.kBias() != null || l.vBias() != null) {
                bias(s, l.qBias(), s.q, T, qd);
                bias(s, l.kBias(), s.k, T, kvd);
                bias(s, l.vBias(), s.v, T, kvd);
                sync();
            }
            if (l.qNorm() != null) norm(s, l.qNorm(), s.q, s.q, T * heads, hd, 0, 0);
            if (l.kNorm() != null) norm(s, l.kNorm(), s.k, s.k, T * kvh, hd, 0, 0);
            if (l.qNorm() != null || l.kNorm() != null) sync();
            if (ropeOf[li] >= 0) {
                int rd = l.rope().rotaryDim();
                op(s, 1, s.q, s.q, s.input, s.q, T * heads, T * heads, heads, hd, rd, (int) ropeOff[ropeOf[li]], T, 0);
                op(s, 1, s.k, s.k, s.input, s.k, T * kvh, T * kvh, kvh, hd, rd, (int) ropeOff[ropeOf[li]], T, 0);
                sync();
            }
            // the chunk's keys and values into the cache at their positions
            op(s, 4, s.k, s.kCache[li], s.k, s.k, groups(T * kvd), T * kvd, 0, 0, kvd);
            op(s, 4, s.v, s.vCache[li], s.v, s.v, groups(T * kvd), T * kvd, 0, 0, kvd);
            sync();
            op(s, 2, s.q, s.kCache[li], s.vCache[li], s.att, T * heads, T, heads, kvh, hd, 0, l.window(),
                    Float.floatToRawIntBits(l.scale()), kvd, s.context, qd, T * qd);
            sync();
            matvec(s, l.o(), s.att, s.tmp, T);
            sync();
            if (l.oBias() != null) { bias(s, l.oBias(), s.tmp, T, hidden); sync(); }
            if (l.postAttnNorm() != null) { norm(s, l.postAttnNorm(), s.tmp, s.tmp, T, hidden, 0, 0); sync(); }
            op(s, 5, s.x, s.tmp, s.x, s.x, groups(T * hidden), T * hidden);
            sync();
            norm(s, l.ffnNorm(), s.x, s.xn, T, hidden, 0, 0);
            sync();
            matvec(s, l.gate(), s.xn, s.g, T);
            matvec(s, l.up(), s.xn, s.u, T);
            sync();
            op(s, 3, s.g, s.u, s.g, s.g, groups(T * l.gate().outDim()), T * l.gate().outDim(), l.act().ordinal());
            sync();
            matvec(s, l.down(), s.g, s.tmp, T);
            sync();
            if (l.postFfnNorm() != null) { norm(s, l.postFfnNorm(), s.tmp, s.tmp, T, hidden, 0, 0); sync(); }
            op(s, 5, s.x, s.tmp, s.x, s.x, groups(T * hidden), T * hidden);
            sync();
        }
        if (rows > 0) {
            norm(s, plan.finalNorm(), s.x, s.xn, rows, hidden, (T - rows) * hidden, 0);
            sync();
            matvec(s, plan.head(), s.xn, s.logits, rows);
            vk.cmdBarrier(rec, Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_TRANSFER, computeToTransfer);
            region.set(U64, 16, 4L * rows * vocab);
            vk.cmdCopyBuffer(rec, s.logits.buffer(), s.out.buffer(), region);
            vk.cmdBarrier(rec, Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_HOST, transferToHost);
        }
        vk.endCommandBuffer(rec);
    }

    private int groups(long n) { return (int) Math.max(1, Math.min((n + 63) / 64, Integer.toUnsignedLong(ctx.info().maxGroupCount()[0]))); }

    private void sync() { vk.cmdBarrier(rec, Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_COMPUTE, computeToCompute); }

    /** RMSNorm of {@code rows} rows of width {@code dim} from {@code src} (from float {@code srcOff}) into {@code dst}. */
    private void norm(State s, NormOp n, VulkanContext.Buffer src, VulkanContext.Buffer dst, int rows, int dim, int srcOff, int dstOff) {
        Integer w = normAt.get(n);
        int flags = (w != null ? 1 : 0) | (w != null && n.offset() ? 2 : 0);
        op(s, 0, src, dst, params, src, Math.min(rows, ctx.info().maxGroupCount()[0]), rows, dim, srcOff, dstOff, w == null ? 0 : w, flags,
                Float.floatToRawIntBits(n.eps()), dim, dim);
    }

    /** x[t, i] += b[i] for {@code T} rows of {@code width} (nothing when b is null). */
    private void bias(State s, float[] b, VulkanContext.Buffer x, int T, int width) {
        if (b != null) op(s, 6, x, x, params, x, groups((long) T * width), T * width, biasAt.get(b), width);
    }

    /** One ops.comp dispatch of {@code groups} workgroups over buffers a..d with push constants {@code u}. */
    private void op(State s, int op, VulkanContext.Buffer a, VulkanContext.Buffer b, VulkanContext.Buffer c, VulkanContext.Buffer d,
                    int groups, int... u) {
        List<Long> key = List.of(a.buffer(), b.buffer(), c.buffer(), d.buffer());
        Long set = s.sets.get(key);
        if (set == null) {
            set = mm.allocateSet(ctx.opsSetLayout);
            mm.writeSet(set, a.buffer(), b.buffer(), c.buffer(), d.buffer(), s.step.buffer());
            s.sets.put(key, set);
        }
        for (int i = 0; i < 16; i++) push.setAtIndex(ValueLayout.JAVA_INT, i, i < u.length ? u[i] : 0);
        vk.cmdBindPipeline(rec, ctx.ops[op]);
        setArray.set(U64, 0, set);
        vk.cmdBindDescriptorSet(rec, ctx.opsPipelineLayout, setArray);
        vk.cmdPushConstants(rec, ctx.opsPipelineLayout, VulkanContext.OPS_PUSH_BYTES, push);
        vk.cmdDispatch(rec, Math.max(1, Math.min(groups, ctx.info().maxGroupCount()[0])), 1, 1);
    }

    /** y = W·x for {@code tokens} rows: one matvec.comp dispatch per weight buffer of W. */
    private void matvec(State s, Matrix w, VulkanContext.Buffer x, VulkanContext.Buffer y, int tokens) {
        VulkanMatMul.Resident r = mm.resident(w);
        vk.cmdBindPipeline(rec, ctx.matvecPipeline(r.kind(), tokens));
        long first = w.firstRow(), end = first + w.rows();
        for (VulkanMatMul.Part p : r.parts()) {
            long lo = Math.max(first, p.firstRow), hi = Math.min(end, p.firstRow + p.rows);
            if (lo >= hi) continue;
            List<Object> key = List.of(p, x.buffer(), y.buffer());
            Long set = s.matvecSets.get(key);
            if (set == null) {
                set = mm.allocateSet(ctx.descriptorSetLayout);
                mm.writeSet(set, p.buffer.buffer(), x.buffer(), y.buffer(), x.buffer());   // P: unused here
                s.matvecSets.put(key, set);
            }
            setArray.set(U64, 0, set);
            vk.cmdBindDescriptorSet(rec, ctx.pipelineLayout, setArray);
            MatvecPush.write(mvPush, (int) (hi - lo), w.cols(), tokens, lo - p.firstRow, lo - first, w.outDim(), p.rsOff, p.cfOff, r.flags());
            vk.cmdPushConstants(rec, ctx.pipelineLayout, MatvecPush.BYTES, mvPush);
            int[] g = ctx.matvecGroups(r.kind(), (int) (hi - lo), tokens, VulkanMatMul.TOKEN_TILE);
            vk.cmdDispatch(rec, g[0], g[1], 1);
        }
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
        for (State s : states) if (!s.released) s.free();
        states.clear();
        ctx.free(params);
        vk.call("vkDestroyFence", ctx.device, fence, MemorySegment.NULL);
        vk.call("vkDestroyCommandPool", ctx.device, commandPool, MemorySegment.NULL);
        arena.close();
    }
}
