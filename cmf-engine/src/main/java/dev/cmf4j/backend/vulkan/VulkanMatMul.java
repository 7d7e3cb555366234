package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.DeviceCopies;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

import static dev.cmf4j.backend.vulkan.Vk.PTR;
import static dev.cmf4j.backend.vulkan.Vk.U32;
import static dev.cmf4j.backend.vulkan.Vk.U64;

/**
 * The engine's {@link MatMul} on a Vulkan device: every [out, in] weight matrix of a supported dtype (f32, bf16, f16,
 * q8_row, q8_2f, q4_block, q4tp) is uploaded once, on first use, into device-local memory in its stored dtype (q8 scale planes widened
 * to f32 and appended to the same buffer), keyed by the tensor's mapped memory ({@link DeviceCopies}); a tensor
 * larger than the device's storage-buffer range is split by rows into several buffers. Each product then copies the
 * activations into a host-visible staging buffer, records one matvec dispatch per weight buffer (matvec.comp), submits,
 * waits on a fence and copies the outputs back. Input-major matrices and other dtypes go to
 * {@code fallback}, the CPU kernels.
 *
 * <p>One instance per open model (its buffers are keyed by the model's mapped memory); calls are serialised on it.
 */
public final class VulkanMatMul implements MatMul, AutoCloseable {
    /** Tokens one workgroup takes (matvec.comp's TT): the dispatch's y count is ceil(tokens / TT). */
    static final int TOKEN_TILE = 8;
    /** The most bytes one weight buffer holds (besides the device's storage-buffer range and allocation limits). */
    static final long PART_CAP = 1L << 31;
    static final ValueLayout.OfShort U16_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final int SETS_PER_POOL = 64;

    private final VulkanContext ctx;
    /** Prompt products on matmul.comp even where matmul_coop.comp is chosen: the op checks compare the two. */
    volatile boolean plainPrompts;
    private final Vk vk;
    private final MatMul fallback;
    private final long budget;
    /** The most bytes one staging buffer (activations or outputs) may have: the chunk is sliced by tokens to fit. */
    private final long stagingLimit;
    private final DeviceCopies<Resident> uploaded = new DeviceCopies<>(this::free);
    private final long commandPool, fence;
    private final MemorySegment commandBuffer;
    private final List<Long> descriptorPools = new ArrayList<>();
    private int setsLeft;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment push = arena.allocate(MatvecPush.BYTES, 4), fenceArray = arena.allocate(U64),
            barrier = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER), beginInfo = Vk.struct(arena, 32, Vk.ST_COMMAND_BUFFER_BEGIN_INFO),
            setArray = arena.allocate(U64);
    private final MemorySegment submitInfo = Vk.struct(arena, 72, Vk.ST_SUBMIT_INFO), commandBuffers = arena.allocate(PTR),
            region = Vk.plain(arena, 24), toCompute = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER),
            toTransfer = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER), toHost = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER);
    /** x and y as the host writes and reads them (host-visible), and, where that memory is not device-local, their device twins. */
    private VulkanContext.Buffer stageX, stageY, deviceX, deviceY;
    /**
     * Whether x and y go through device-local twins (copied in and out by the same submission): where host-visible
     * memory is not device-local (a discrete GPU without resizable BAR), so the shader never reads the activations or
     * writes its outputs across the bus once per workgroup. Tests force it on lavapipe.
     */
    private final boolean copyActivations;
    /** Whether weights go up through a staging buffer and a copy (device-local memory the host cannot map); tests force it. */
    private final boolean stagedUploads;
    /** Bumped whenever the staging buffers are replaced: each part's descriptor set is rewritten before its next use. */
    private int stagingGeneration;
    private long deviceBytes;
    private boolean closed;
    /** {@code -Dcmf.vulkan.resident=false}: dense models too run the hybrid path (device products, CPU graph). */
    static final boolean RESIDENT = !"false".equalsIgnoreCase(System.getProperty("cmf.vulkan.resident"));
    private boolean resident = RESIDENT;
    private final List<VulkanResidentForward> forwards = new ArrayList<>();

    /** A run of stored rows in one device buffer: weights, then (q8) f32 row scales, then (q8_2f) f32 column scales. */
    static final class Part {
        final long firstRow;
        final int rows;
        final VulkanContext.Buffer buffer;
        final long rsOff, cfOff;   // in 32-bit words
        long set;
        int generation = -1;

        Part(long firstRow, int rows, VulkanContext.Buffer buffer, long rsOff, long cfOff) {
            this.firstRow = firstRow; this.rows = rows; this.buffer = buffer; this.rsOff = rsOff; this.cfOff = cfOff;
        }
    }

    /** A tensor resident on the device: its parts by stored rows, the shader kind and scale flags. */
    record Resident(MemorySegment source, int kind, int flags, List<Part> parts, long bytes) implements DeviceCopies.Copy {}

    public VulkanMatMul(VulkanContext ctx, MatMul fallback) { this(ctx, fallback, PART_CAP, false); }

    /**
     * Tests: weight buffers of at most {@code partCap} bytes, so a small tensor is split by rows as a large one is;
     * {@code copies}: the discrete GPU's paths (activations through device-local twins, weights through staging) even
     * where every buffer is host-visible.
     */
    VulkanMatMul(VulkanContext ctx, MatMul fallback, long partCap, boolean copies) {
        this.ctx = Objects.requireNonNull(ctx, "ctx");
        this.vk = ctx.vk;
        this.fallback = Objects.requireNonNull(fallback, "fallback");
        VulkanDeviceInfo info = ctx.info();
        long b = Math.min(partCap, info.maxStorageBufferRange());
        if (info.maxAllocationSize() > 0) b = Math.min(b, info.maxAllocationSize());
        budget = b & ~15L;
        long range = Math.min(PART_CAP, info.maxStorageBufferRange());
        stagingLimit = (info.maxAllocationSize() > 0 ? Math.min(range, info.maxAllocationSize()) : range) & ~15L;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ci = Vk.struct(a, 24, Vk.ST_COMMAND_POOL_CREATE_INFO);
            ci.set(U32, 16, 2);   // VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT: one buffer re-recorded per product
            ci.set(U32, 20, info.computeQueueFamily());
            MemorySegment out = Vk.out(a);
            vk.check("vkCreateCommandPool", ctx.device, ci, MemorySegment.NULL, out);
            commandPool = out.get(U64, 0);
            MemorySegment ai = Vk.struct(a, 32, Vk.ST_COMMAND_BUFFER_ALLOCATE_INFO);
            ai.set(U64, 16, commandPool);
            ai.set(U32, 24, 0);
            ai.set(U32, 28, 1);
            MemorySegment cb = a.allocate(PTR);
            vk.check("vkAllocateCommandBuffers", ctx.device, ai, cb);
            commandBuffer = cb.get(PTR, 0);
            MemorySegment fi = Vk.struct(a, 24, Vk.ST_FENCE_CREATE_INFO);
            vk.check("vkCreateFence", ctx.device, fi, MemorySegment.NULL, out);
            fence = out.get(U64, 0);
        }
        fenceArray.set(U64, 0, fence);
        copyActivations = copies || (ctx.memoryFlags(ctx.stagingType) & Vk.MEMORY_DEVICE_LOCAL) == 0;
        stagedUploads = copies || !ctx.weightsMappable;
        commandBuffers.set(PTR, 0, commandBuffer);
        submitInfo.set(U32, 40, 1);
        submitInfo.set(PTR, 48, commandBuffers);
        toCompute.set(U32, 16, Vk.ACCESS_TRANSFER_WRITE);
        toCompute.set(U32, 20, Vk.ACCESS_SHADER_READ);
        toTransfer.set(U32, 16, Vk.ACCESS_SHADER_WRITE);
        toTransfer.set(U32, 20, Vk.ACCESS_TRANSFER_READ);
        toHost.set(U32, 16, Vk.ACCESS_TRANSFER_WRITE);
        toHost.set(U32, 20, Vk.ACCESS_HOST_READ);
        barrier.set(U32, 16, Vk.ACCESS_SHADER_WRITE);
        barrier.set(U32, 20, Vk.ACCESS_HOST_READ);
        beginInfo.set(U32, 16, 1);   // ONE_TIME_SUBMIT
    }

    /** Whether the device path takes {@code w} (else the fallback does). */
    public static boolean supports(Matrix w) {
        // q4tp's rows are whole groups of 32 (the format requires it; the shader indexes nibbles by row·cols)
        return !w.inputMajor() && w.rows() > 0 && w.cols() > 0 && kind(w.dtype()) >= 0 && (w.dtype() != DType.Q4TP || w.cols() % 32 == 0);
    }

    /** matvec.comp's kind for {@code dt}, -1 when the shader does not read it. */
    static int kind(DType dt) {
        return switch (dt) {
            case F32 -> Shaders.KIND_F32;
            case BF16 -> Shaders.KIND_BF16;
            case F16 -> Shaders.KIND_F16;
            case Q8_ROW, Q8_2F -> Shaders.KIND_I8;
            case Q4_BLOCK -> Shaders.KIND_Q4_BLOCK;
            case Q4TP -> Shaders.KIND_Q4TP;
            default -> -1;
        };
    }

    public VulkanContext context() { return ctx; }

    /** Tests: whether models opened from now on may run whole on the device (default {@code cmf.vulkan.resident}, on). */
    public void useResident(boolean on) { this.resident = on; }

    /**
     * The whole-model forward for {@code plan} when this device runs it ({@link VulkanResidentForward#unsupported} names
     * none of its parts), else null with {@code notes} told why: the host graph with these products.
     */
    synchronized dev.cmf4j.backend.DeviceForward denseForward(dev.cmf4j.backend.DecoderPlan plan, dev.cmf4j.backend.KvType kv,
                                                            java.util.function.Consumer<String> notes) {
        String hybrid = "vulkan: " + plan.label() + ": hybrid path (weight products on the device, every other operator on the CPU): ";
        if (!resident) { notes.accept(hybrid + "-Dcmf.vulkan.resident=false"); return null; }
        String why = VulkanResidentForward.unsupported(plan, kv);
        if (why == null) why = VulkanResidentForward.expertsTooLarge(plan, Math.min(PART_CAP, ctx.info().maxStorageBufferRange()));
        if (why == null && VulkanResidentForward.needsFloat64(plan) && !ctx.float64)
            why = "this device has no 64-bit floats in shaders (the Embryo head's and router's sums need them)";
        if (why != null) { notes.accept(hybrid + why); return null; }
        if (closed) throw new IllegalStateException("VulkanMatMul closed");
        VulkanResidentForward f = new VulkanResidentForward(this, plan, kv);
        forwards.add(f);
        notes.accept("vulkan: " + plan.label() + ": device-resident forward (every operator on the device, one submission per step)");
        return f;
    }

    /** A resident forward's own weight buffers (its expert stacks) made ({@code bytes} > 0) or freed, in {@link #deviceBytes}. */
    synchronized void countWeights(long bytes) { deviceBytes += bytes; }

    /** Bytes of device memory this instance holds for weights. */
    public synchronized long deviceBytes() { return deviceBytes; }

    @Override
    public void apply(Matrix w, float[] x, int tokens, float[] y) {
        if (!supports(w)) { fallback.apply(w, x, tokens, y); return; }
        applyShared(new Matrix[] {w}, x, tokens, new float[][] {y});
    }

    /** The products sharing {@code x} in one submission: x copied in once, one dispatch per weight buffer, one wait. */
    @Override
    public void applyShared(Matrix[] ws, float[] x, int tokens, float[][] ys) {
        if (ws.length != ys.length) throw new IllegalArgumentException(ws.length + " matrices, " + ys.length + " outputs");
        int in = -1;
        long yFloats = 0;
        for (int i = 0; i < ws.length; i++) {
            Matrix w = ws[i];
            if (!supports(w)) { fallback.apply(w, x, tokens, ys[i]); continue; }
            if (in >= 0 && w.inDim() != in) throw new IllegalArgumentException(w.name() + ": input width " + w.inDim()
                    + " differs from " + in + " in one shared product");
            in = w.inDim();
            if (x.length < (long) tokens * in || ys[i].length < (long) tokens * w.outDim())
                throw new IllegalArgumentException(w.name() + ": x or y shorter than " + tokens + " tokens");
            yFloats += (long) tokens * w.outDim();
        }
        if (in < 0 || tokens == 0) return;
        // a long chunk goes in slices of tokens whose activations and outputs each fit one staging buffer
        long perToken = Math.max(4L * in, 4 * (yFloats / tokens));
        int slice = (int) Math.max(1, Math.min(tokens, stagingLimit / perToken));
        synchronized (this) {
            for (int t0 = 0; t0 < tokens; t0 += slice) run(ws, x, t0, Math.min(slice, tokens - t0), ys, in, yFloats / tokens);
        }
    }

    /** Tokens {@code [t0, t0 + tokens)} of every device product of {@code ws}: one submission, one wait. */
    private void run(Matrix[] ws, float[] x, int t0, int tokens, float[][] ys, int in, long yPerToken) {
        if (closed) throw new IllegalStateException("VulkanMatMul closed");
        Resident[] rs = new Resident[ws.length];
        for (int i = 0; i < ws.length; i++) if (supports(ws[i])) rs[i] = resident(ws[i]);
        ensureStaging(4L * tokens * in, 4L * tokens * yPerToken);
        MemorySegment.copy(x, t0 * in, stageX.mapped(), ValueLayout.JAVA_FLOAT, 0, tokens * in);
        vk.resetCommandBuffer(commandBuffer);
        vk.beginCommandBuffer(commandBuffer, beginInfo);
        if (copyActivations) {
            region.set(U64, 16, 4L * tokens * in);
            vk.cmdCopyBuffer(commandBuffer, stageX.buffer(), deviceX.buffer(), region);
            vk.cmdBarrier(commandBuffer, Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_COMPUTE, toCompute);
        }
        long yOff = 0;
        long bound = 0;
        for (int i = 0; i < ws.length; i++) {
            if (rs[i] == null) continue;
            Matrix w = ws[i];
            Resident r = rs[i];
            long pipeline = plainPrompts && tokens >= ctx.gemmMinTokens ? ctx.plainGemm(r.kind(), tokens) : ctx.matvecPipeline(r.kind(), w.inDim(), tokens);
            if (bound != pipeline) {
                vk.cmdBindPipeline(commandBuffer, pipeline);
                bound = pipeline;
            }
            long first = w.firstRow(), end = first + w.rows();
            for (Part p : r.parts()) {
                long lo = Math.max(first, p.firstRow), hi = Math.min(end, p.firstRow + p.rows);
                if (lo >= hi) continue;
                bindSet(p);
                MatvecPush.write(push, (int) (hi - lo), w.cols(), tokens, lo - p.firstRow, yOff + (lo - first), w.outDim(),
                        p.rsOff, p.cfOff, r.flags());
                vk.cmdPushConstants(commandBuffer, ctx.pipelineLayout, MatvecPush.BYTES, push);
                int[] g = ctx.matvecGroups(r.kind(), (int) (hi - lo), w.cols(), tokens, TOKEN_TILE);
                vk.cmdDispatch(commandBuffer, g[0], g[1], 1);
            }
            yOff += (long) tokens * w.outDim();
        }
        if (copyActivations) {
            vk.cmdBarrier(commandBuffer, Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_TRANSFER, toTransfer);
            region.set(U64, 16, 4 * yOff);
            vk.cmdCopyBuffer(commandBuffer, deviceY.buffer(), stageY.buffer(), region);
            vk.cmdBarrier(commandBuffer, Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_HOST, toHost);
        } else {
            // the shader's writes made visible to the host's reads after the fence
            vk.cmdBarrier(commandBuffer, Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_HOST, barrier);
        }
        vk.endCommandBuffer(commandBuffer);
        submitAndWait();
        yOff = 0;
        for (int i = 0; i < ws.length; i++) {
            if (rs[i] == null) continue;
            int n = tokens * ws[i].outDim();
            MemorySegment.copy(stageY.mapped(), ValueLayout.JAVA_FLOAT, 4 * yOff, ys[i], t0 * ws[i].outDim(), n);
            yOff += n;
        }
    }

    /** Records what {@code record} writes into this instance's command buffer, submits it and waits (the op checks). */
    synchronized void submitRecorded(java.util.function.Consumer<MemorySegment> record) {
        if (closed) throw new IllegalStateException("VulkanMatMul closed");
        vk.resetCommandBuffer(commandBuffer);
        vk.beginCommandBuffer(commandBuffer, beginInfo);
        record.accept(commandBuffer);
        vk.cmdBarrier(commandBuffer, Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_HOST, barrier);
        vk.endCommandBuffer(commandBuffer);
        submitAndWait();
    }

    private void submitAndWait() {
        ctx.submit(submitInfo, fence);
        vk.waitAndReset(ctx.device, fenceArray);
    }

    /** Binds {@code p}'s descriptor set, (re)written first when the staging buffers changed since. */
    private void bindSet(Part p) {
        if (p.set == 0) p.set = allocateSet(ctx.descriptorSetLayout);
        if (p.generation != stagingGeneration) {
            long xb = (copyActivations ? deviceX : stageX).buffer();
            // P (binding 3) is matvec_decode.comp's folded operators' and unused here: x stands in
            writeProductSet(p.set, p.buffer.buffer(), xb, (copyActivations ? deviceY : stageY).buffer(), xb, 0, 0, 0);
            p.generation = stagingGeneration;
        }
        setArray.set(U64, 0, p.set);
        vk.cmdBindDescriptorSet(commandBuffer, ctx.pipelineLayout, setArray);
    }

    /** A descriptor set of {@code layout} (at most {@link VulkanContext#OPS_BUFFERS} storage buffers) from this instance's pools. */
    long allocateSet(long layout) {
        try (Arena a = Arena.ofConfined()) {
            if (setsLeft == 0) {
                MemorySegment size = Vk.plain(a, 8);
                size.set(U32, 0, Vk.DESCRIPTOR_STORAGE_BUFFER);
                size.set(U32, 4, VulkanContext.OPS_BUFFERS * SETS_PER_POOL);
                MemorySegment ci = Vk.struct(a, 40, Vk.ST_DESCRIPTOR_POOL_CREATE_INFO);
                ci.set(U32, 20, SETS_PER_POOL);
                ci.set(U32, 24, 1);
                ci.set(PTR, 32, size);
                MemorySegment out = Vk.out(a);
                vk.check("vkCreateDescriptorPool", ctx.device, ci, MemorySegment.NULL, out);
                descriptorPools.add(out.get(U64, 0));
                setsLeft = SETS_PER_POOL;
            }
            MemorySegment layouts = a.allocate(U64);
            layouts.set(U64, 0, layout);
            MemorySegment ai = Vk.struct(a, 40, Vk.ST_DESCRIPTOR_SET_ALLOCATE_INFO);
            ai.set(U64, 16, descriptorPools.getLast());
            ai.set(U32, 24, 1);
            ai.set(PTR, 32, layouts);
            MemorySegment out = Vk.out(a);
            vk.check("vkAllocateDescriptorSets", ctx.device, ai, out);
            setsLeft--;
            return out.get(U64, 0);
        }
    }

    /**
     * {@code set}'s bindings 0, 1, … to {@code buffers}, then its last binding (both layouts': the chained phases'
     * counters, VulkanResidentForward) to a buffer none of its dispatches counts into.
     */
    void writeSetUnchained(long set, long... buffers) {
        long[] all = java.util.Arrays.copyOf(buffers, buffers.length + 1);
        all[buffers.length] = noCounters().buffer();
        writeSet(set, all);
    }

    /**
     * A product set's bindings ({@link VulkanContext#descriptorSetLayout}): the weights, x, y, P, the chained phases'
     * counters (0: a buffer none of its dispatches counts into), then the gated-MLP pipeline's up weights and the buffer of
     * the down product's column scales (0: the weights again, for every other pipeline).
     */
    void writeProductSet(long set, long weights, long x, long y, long p, long counters, long upWeights, long downWeights) {
        writeSet(set, weights, x, y, p, counters != 0 ? counters : noCounters().buffer(), upWeights != 0 ? upWeights : weights,
                downWeights != 0 ? downWeights : weights);
    }

    /** {@code set}'s bindings 0, 1, … to {@code buffers}, every binding of its layout. */
    void writeSet(long set, long... buffers) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment infos = Vk.plain(a, 24L * buffers.length);
            MemorySegment writes = Vk.plain(a, 64L * buffers.length);
            for (int i = 0; i < buffers.length; i++) {
                infos.set(U64, 24L * i, buffers[i]);
                infos.set(U64, 24L * i + 16, Vk.WHOLE_SIZE);
                MemorySegment wr = writes.asSlice(64L * i, 64);
                wr.set(U32, 0, Vk.ST_WRITE_DESCRIPTOR_SET);
                wr.set(U64, 16, set);
                wr.set(U32, 24, i);
                wr.set(U32, 32, 1);
                wr.set(U32, 36, Vk.DESCRIPTOR_STORAGE_BUFFER);
                wr.set(PTR, 48, infos.asSlice(24L * i, 24));
            }
            vk.call("vkUpdateDescriptorSets", ctx.device, buffers.length, writes, 0, MemorySegment.NULL);
        }
    }

    /** Host-visible buffers for x and y of at least these sizes (grown by doubling; the device is idle between products). */
    private void ensureStaging(long xBytes, long yBytes) {
        if (stageX != null && stageX.bytes() >= xBytes && stageY.bytes() >= yBytes) return;
        long xb = Math.min(stagingLimit, Math.max(xBytes, stageX == null ? 1 << 16 : 2 * stageX.bytes()));
        long yb = Math.min(stagingLimit, Math.max(yBytes, stageY == null ? 1 << 16 : 2 * stageY.bytes()));
        if (xb < xBytes || yb < yBytes)
            throw new IllegalArgumentException("one token's product of " + xBytes + " input / " + yBytes + " output bytes exceeds the device's "
                    + stagingLimit + "-byte buffer range");
        freeStaging();
        int want = Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT;
        stageX = ctx.buffer(xb, want, "activations");
        stageY = ctx.buffer(yb, ctx.readbackFlags(), "outputs");
        if (copyActivations) {
            deviceX = ctx.buffer(xb, Vk.MEMORY_DEVICE_LOCAL, "activations (device)");
            deviceY = ctx.buffer(yb, Vk.MEMORY_DEVICE_LOCAL, "outputs (device)");
        }
        stagingGeneration++;
    }

    private void freeStaging() {
        ctx.free(stageX);
        ctx.free(stageY);
        ctx.free(deviceX);
        ctx.free(deviceY);
        stageX = stageY = deviceX = deviceY = null;
    }

    /** The device copy of {@code w}'s tensor, uploaded on first use. */
    Resident resident(Matrix w) { return uploaded.get(w, this::upload); }

    private Resident upload(Matrix w) {
        DType dt = w.dtype();
        if (dt == DType.Q4_BLOCK || dt == DType.Q4TP) return uploadQ4(w);
        long rows = w.storedRows();
        int cols = w.cols();
        MemorySegment data = w.data();
        boolean q8 = dt == DType.Q8_ROW || dt == DType.Q8_2F, colScales = dt == DType.Q8_2F;
        int elem = q8 ? 1 : dt == DType.F32 ? 4 : 2;
        long wBytes = rows * cols * elem;
        checkPayload(w, wBytes + (q8 ? 2 * rows : 0) + (colScales ? 2L * cols : 0));
        long rowBytes = (long) cols * elem, perRow = rowBytes + (q8 ? 4 : 0), fixed = (colScales ? 4L * cols : 0) + 16;
        long partRows = Math.min(rows, (budget - fixed) / perRow);
        if (partRows < 1) throw new IllegalArgumentException(w.name() + ": one row does not fit the device's buffer range");
        int flags = (q8 ? MatvecPush.ROW_SCALES : 0) | (colScales ? MatvecPush.COL_SCALES : 0);
        return inParts(w, flags, partRows, (r0, n) -> {
            long wb = n * rowBytes, wb4 = (wb + 3) & ~3L;
            // the column scales start on 16 bytes: matvec_decode.comp stages them with x 4 at a time
            long rsOff = wb4 / 4, cfOff = (rsOff + (q8 ? n : 0) + 3) & ~3L;
            VulkanContext.Buffer buf = bufferFilled(4 * cfOff + (colScales ? 4L * cols : 0), dst -> {
                MemorySegment.copy(data, r0 * rowBytes, dst, 0, wb);
                if (q8) for (int i = 0; i < n; i++)
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (rsOff + i), Float.float16ToFloat(data.get(U16_LE, wBytes + 2 * (r0 + i))));
                if (colScales) for (int c = 0; c < cols; c++)
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (cfOff + c), Float.float16ToFloat(data.get(U16_LE, wBytes + 2 * rows + 2L * c)));
            });
            return new Part(r0, n, buf, rsOff, cfOff);
        });
    }

    /**
     * q4_block and q4tp (CMF_FORMAT.md §2), split by rows like the others: q4_block's nibbles as stored with its f16 group
     * scales widened to f32 (groups run over the flattened tensor, so a split needs whole groups per row: cols a
     * multiple of 32, else the tensor must fit one buffer); q4tp's nibbles and codes as stored, with each row's
     * {exp2(lo), exp2(step)} as f32 (correctly rounded on the host, as CMF defines the ladder) between them.
     */
    private Resident uploadQ4(Matrix w) {
        DType dt = w.dtype();
        long rows = w.storedRows();
        int cols = w.cols();
        MemorySegment data = w.data();
        boolean block = dt == DType.Q4_BLOCK;
        long gpr = (cols + 31) / 32, codeStride = dev.cmf4j.format.quant.TpLadder.codeStride(gpr);
        long groups = (rows * cols + 31) / 32, plane = block ? groups * 16 : rows * gpr * 16;
        checkPayload(w, block ? groups * 18 : plane + 4 * rows + rows * codeStride);
        long perRow = block ? cols / 2 + 4L * (cols / 32) : gpr * 16 + 8 + codeStride;
        long partRows = block && cols % 32 != 0 ? rows : Math.min(rows, (budget - 8) / perRow);
        if (partRows < 1 || (block && cols % 32 != 0 && groups * 16 + 4 * groups > budget))
            throw new IllegalArgumentException(w.name() + ": " + dt.label + " [" + rows + ", " + cols + "] does not fit the device's buffer range");
        return inParts(w, 0, partRows, (r0, n) -> {
            if (block) {
                long g0 = r0 * cols / 32, ng = n == rows ? groups : (long) n * cols / 32;
                long rsOff = ng * 16 / 4;
                VulkanContext.Buffer buf = bufferFilled(ng * 16 + 4 * ng, dst -> {
                    MemorySegment.copy(data, g0 * 16, dst, 0, ng * 16);
                    for (long g = 0; g < ng; g++)
                        dst.set(ValueLayout.JAVA_FLOAT, 4 * (rsOff + g), Float.float16ToFloat(data.get(U16_LE, plane + 2 * (g0 + g))));
                });
                return new Part(r0, n, buf, rsOff, 0);
            }
            long nib = n * gpr * 16, codes = n * codeStride;
            long rsOff = nib / 4, cfOff = rsOff + 2L * n;
            VulkanContext.Buffer buf = bufferFilled(4 * cfOff + ((codes + 3) & ~3L), dst -> {
                MemorySegment.copy(data, r0 * gpr * 16, dst, 0, nib);
                for (int i = 0; i < n; i++) {
                    long at = plane + 4 * (r0 + i);
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (rsOff + 2L * i), dev.cmf4j.format.quant.TpLadder.exp2(Float.float16ToFloat(data.get(U16_LE, at))));
                    dst.set(ValueLayout.JAVA_FLOAT, 4 * (rsOff + 2L * i + 1), dev.cmf4j.format.quant.TpLadder.exp2(Float.float16ToFloat(data.get(U16_LE, at + 2))));
                }
                MemorySegment.copy(data, plane + 4 * rows + r0 * codeStride, dst, 4 * cfOff, codes);
            });
            return new Part(r0, n, buf, rsOff, cfOff);
        });
    }

    /** Throws unless {@code w}'s payload has the {@code need} bytes its dtype and shape call for. */
    private static void checkPayload(Matrix w, long need) {
        if (w.data().byteSize() != need)
            throw new IllegalArgumentException(w.name() + ": " + w.dtype().label + " [" + w.storedRows() + ", " + w.cols() + "] needs "
                    + need + " bytes, payload has " + w.data().byteSize());
    }

    /** One part's upload: stored rows [r0, r0 + n) into a buffer of their own. */
    private interface PartUpload { Part upload(long r0, int n); }

    /** {@code w}'s tensor in parts of {@code partRows} stored rows (the last shorter); if one fails, those made are freed. */
    private Resident inParts(Matrix w, int flags, long partRows, PartUpload part) {
        long rows = w.storedRows(), bytes = 0;
        List<Part> parts = new ArrayList<>();
        try {
            for (long r0 = 0; r0 < rows; r0 += partRows) {
                Part p = part.upload(r0, (int) Math.min(partRows, rows - r0));
                parts.add(p);
                bytes += p.buffer.bytes();
            }
        } catch (RuntimeException e) {
            for (Part p : parts) ctx.free(p.buffer);
            throw e;
        }
        deviceBytes += bytes;
        return new Resident(w.data(), kind(w.dtype()), flags, List.copyOf(parts), bytes);
    }

    /**
     * A device-local buffer of {@code bytes} filled by {@code fill}: written in place where device-local memory is
     * host-visible (lavapipe, integrated GPUs, resizable BAR), else through a host-visible staging buffer and a copy.
     */
    synchronized VulkanContext.Buffer bufferFilled(long bytes, java.util.function.Consumer<MemorySegment> fill) {
        int coherent = Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT;
        if (!stagedUploads) {
            VulkanContext.Buffer b = ctx.buffer(bytes, ctx.weightType >= 0 ? Vk.MEMORY_DEVICE_LOCAL | coherent : coherent, "weights");
            fill.accept(b.mapped());
            return b;
        }
        VulkanContext.Buffer staging = ctx.buffer(bytes, coherent, "weight staging");
        try {
            fill.accept(staging.mapped());
            VulkanContext.Buffer b = ctx.buffer(bytes, Vk.MEMORY_DEVICE_LOCAL, "weights");
            try (Arena a = Arena.ofConfined()) {
                MemorySegment copy = Vk.plain(a, 24);
                copy.set(U64, 16, bytes);
                vk.resetCommandBuffer(commandBuffer);
                vk.beginCommandBuffer(commandBuffer, beginInfo);
                vk.cmdCopyBuffer(commandBuffer, staging.buffer(), b.buffer(), copy);
                vk.cmdBarrier(commandBuffer, Vk.PIPELINE_STAGE_TRANSFER, Vk.PIPELINE_STAGE_COMPUTE, toCompute);
                vk.endCommandBuffer(commandBuffer);
                submitAndWait();
            } catch (RuntimeException e) {
                ctx.free(b);
                throw e;
            }
            return b;
        } finally {
            ctx.free(staging);
        }
    }

    private void free(Resident d) {
        for (Part p : d.parts()) ctx.free(p.buffer);
        deviceBytes -= d.bytes();
    }

    /** The counters' binding of the sets that chain nothing (made on first use). */
    private VulkanContext.Buffer noCounters;

    private VulkanContext.Buffer noCounters() {
        if (noCounters == null) noCounters = ctx.buffer(16, Vk.MEMORY_DEVICE_LOCAL, "no chained counters");
        return noCounters;
    }

    /** Frees the device buffers, descriptor pools and command pool (the fallback is not closed). */
    @Override public synchronized void close() {
        if (closed) return;
        closed = true;
        for (VulkanResidentForward f : forwards) f.closeOnOwner();
        forwards.clear();
        uploaded.clear();
        freeStaging();
        if (noCounters != null) ctx.free(noCounters);
        for (long p : descriptorPools) vk.call("vkDestroyDescriptorPool", ctx.device, p, MemorySegment.NULL);
        vk.call("vkDestroyFence", ctx.device, fence, MemorySegment.NULL);
        vk.call("vkDestroyCommandPool", ctx.device, commandPool, MemorySegment.NULL);
        arena.close();
    }
}
