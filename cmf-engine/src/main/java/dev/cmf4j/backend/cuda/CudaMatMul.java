package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.DeviceCopies;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TpLadder;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.Objects;

/**
 * The engine's {@link MatMul} on an NVIDIA GPU: every [out, in] weight matrix of a supported dtype (f32,
 * bf16, f16, q8_row, q8_2f, q4_block, q4tp) is uploaded to device memory once, in its stored dtype (q8
 * scale planes widened to f32; q4_block as stored; q4tp as stored plus exp2(lo), exp2(step) per row as f32),
 * on first use; each product then copies the activations in, runs one matvec kernel
 * launch over all rows and tokens, and copies the result back. Input-major matrices and other dtypes
 * go to {@code fallback} (the CPU kernels), so every architecture the CPU engine runs also runs here.
 *
 * <p>All CUDA work happens on the context's owner thread; the graph's other operators (norms, rope,
 * attention, activations) stay on the CPU. One instance per open model: its device copies are keyed by
 * the tensor's mapped memory ({@link DeviceCopies}), so {@link #close} it with the model.
 */
public final class CudaMatMul implements MatMul, AutoCloseable {
    /** {@code -Dcmf.cuda.resident=false}: dense models too run on the hybrid path (GPU products, CPU graph). */
    static final boolean RESIDENT = !"false".equalsIgnoreCase(System.getProperty("cmf.cuda.resident"));
    /** {@code -Dcmf.cuda.graphs=false}: resident decode steps launch kernel by kernel instead of replaying a CUDA graph. */
    static final boolean GRAPHS = !"false".equalsIgnoreCase(System.getProperty("cmf.cuda.graphs"));

    private final CudaContext ctx;
    private final CudaDriver cu;
    private final MatMul fallback;
    private final DeviceCopies<DeviceMatrix> uploaded = new DeviceCopies<>(this::free);
    private final MemorySegment fnF32, fnBf16, fnF16, fnQ8, fnQ4Block, fnQ4tp;
    private final Arena arena = Arena.ofShared();
    /** The kernel's 8 argument slots (56 bytes) and the void** array pointing at them, rewritten per launch. */
    private final MemorySegment args = arena.allocate(56, 8), params = arena.allocate(ValueLayout.ADDRESS, 8);
    /** x in and y out: pinned host buffers and their device twins, grown on demand. */
    private final Staging stageX = new Staging(), stageY = new Staging();
    private long deviceBytes;
    private boolean closed;
    private final java.util.List<ResidentForward> residents = new java.util.ArrayList<>();
    private java.util.function.Consumer<String> notes = System.err::println;
    private boolean graphs = GRAPHS;
    /** Where cuBLAS is looked for (tests point it at the mock), and the smallest prefill chunk that uses it. */
    private List<String> cublasNames = Cublas.LIBRARY;
    private int gemmMinTokens = Integer.getInteger("cmf.cuda.gemmMinTokens", 16);
    /** {@code -Dcmf.cuda.prefillCache=auto|true|false}: see {@link ResidentForward#widenOnce}. */
    private String prefillCache = ResidentForward.prefillCacheMode(System.getProperty("cmf.cuda.prefillCache", "auto"));
    /** {@code -Dcmf.cuda.prefillPrecision=exact|fast}: see {@link ResidentForward#parts}. */
    private String prefillPrecision = ResidentForward.prefillPrecisionMode(System.getProperty("cmf.cuda.prefillPrecision", "exact"));
    /** {@code -Dcmf.cuda.prefillFusion=false}: see {@link ResidentForward#fusePrefill}. */
    private boolean prefillFusion = !"false".equalsIgnoreCase(System.getProperty("cmf.cuda.prefillFusion"));
    /**
     * {@code -Dcmf.cuda.pdl=false}: decode steps launch plainly instead of by programmatic dependent launch (on by
     * default where the device and driver take it: see {@link ResidentForward#programmatic}).
     */
    private boolean programmaticLaunch = !"false".equalsIgnoreCase(System.getProperty("cmf.cuda.pdl"));
    /** {@code -Dcmf.cuda.smallBatchRows=N}: see {@link ResidentForward#smallBatchRows} (0, off, by default). */
    private int smallBatchRows = Integer.getInteger("cmf.cuda.smallBatchRows", 0);
    /** {@code -Dcmf.cuda.smallBatchBlockRows=8|16}: see {@link ResidentForward#smallBatchShape}. */
    private int smallBatchBlockRows = Integer.getInteger("cmf.cuda.smallBatchBlockRows", 8);

    /**
     * A tensor resident on the GPU: the kernel's three data arguments (see kernels.cu and matvec_q4.cu for what
     * {@code rowScales} and {@code colField} point at per dtype; 0 = none), the allocations to free, their bytes.
     */
    record DeviceMatrix(MemorySegment source, DType dtype, long weights, long rowScales, long colField, long[] owned, long bytes)
            implements DeviceCopies.Copy {}

    /** The kernel file of the q4 matvecs, loaded beside kernels.cu. */
    static final String Q4_KERNELS = "matvec_q4.cu";

    public CudaMatMul(CudaContext ctx, MatMul fallback) {
        this.ctx = Objects.requireNonNull(ctx, "ctx");
        this.cu = ctx.driver();
        this.fallback = Objects.requireNonNull(fallback, "fallback");
        MemorySegment[] f = ctx.call(() -> new MemorySegment[] {cu.function(ctx.module(), "matvec_f32"),
                cu.function(ctx.module(), "matvec_bf16"), cu.function(ctx.module(), "matvec_f16"),
                cu.function(ctx.module(), "matvec_q8"), cu.function(ctx.module(Q4_KERNELS), "matvec_q4_block"),
                cu.function(ctx.module(Q4_KERNELS), "matvec_q4tp")});
        fnF32 = f[0]; fnBf16 = f[1]; fnF16 = f[2]; fnQ8 = f[3]; fnQ4Block = f[4]; fnQ4tp = f[5];
        long[] offsets = ArgPack.OFFSETS;
        for (int i = 0; i < offsets.length; i++) params.setAtIndex(ValueLayout.ADDRESS, i, args.asSlice(offsets[i]));
    }

    /** Whether the GPU path takes {@code w} (else the fallback does). */
    public static boolean supports(Matrix w) {
        return !w.inputMajor() && w.rows() > 0 && switch (w.dtype()) {
            case F32, BF16, F16, Q8_ROW, Q8_2F, Q4_BLOCK, Q4TP -> true;
            default -> false;
        };
    }

    /** Where the one-line notes on the path each model takes go (standard error by default). */
    public void notes(java.util.function.Consumer<String> sink) { this.notes = Objects.requireNonNull(sink); }

    /** One note line (e.g. a speed-up that could not be used). */
    void note(String message) { notes.accept("cmf: cuda: " + message); }

    /**
     * A dense decoder runs GPU-resident ({@link ResidentForward}) when every matrix is of a dtype the resident
     * kernels read; otherwise (or with {@code -Dcmf.cuda.resident=false}) null: the CPU graph with this matmul.
     */
    DeviceForward denseForward(DecoderPlan model, KvType kv, dev.cmf4j.backend.SealedLayers sealed) {
        String arch = model.label();
        if (!RESIDENT) {
            notes.accept("cmf: cuda: " + arch + ": hybrid path (GPU weight products, CPU graph): -Dcmf.cuda.resident=false");
            return null;
        }
        for (Matrix w : model.matrices())
            if (!ResidentWeights.supports(w)) {
                notes.accept("cmf: cuda: " + arch + ": hybrid path (GPU weight products, CPU graph): " + w.name() + " is "
                        + w.dtype().label + ", which the resident kernels do not read");
                return null;
            }
        String experts = ResidentWeights.unsupportedExperts(model);
        if (experts != null) {
            notes.accept("cmf: cuda: " + arch + ": hybrid path (GPU weight products, CPU graph): " + experts);
            return null;
        }
        if (model.headClusters() != null && ResidentWeights.q4(model.head().dtype())) {
            notes.accept("cmf: cuda: " + arch + ": hybrid path (GPU weight products, CPU graph): " + model.head().name() + " is "
                    + model.head().dtype().label + ", which the clustered head's kernel (re_head_rows) does not read");
            return null;
        }
        String why = sealed == null ? null : kv != KvType.F32 ? "--o1 with a " + kv.label() + " KV cache" : SealedSteps.unsupported(model, sealed);
        if (why != null) {
            notes.accept("cmf: cuda: " + arch + ": hybrid path (GPU weight products, CPU graph): the resident forward does not seal " + why);
            return null;
        }
        ResidentForward f = ctx.call(() -> {
            if (closed) throw new IllegalStateException("CudaMatMul closed");
            ResidentForward r = new ResidentForward(this, ctx, model, kv, sealed, graphs, Cublas.find(cublasNames), gemmMinTokens, prefillCache,
                    prefillPrecision, prefillFusion, programmaticLaunch, smallBatchRows, smallBatchBlockRows, tensorRank);
            residents.add(r);
            return r;
        });
        notes.accept("cmf: cuda: " + arch + ": GPU-resident forward (every operator on the GPU; " + kv.label() + " KV cache"
                + (sealed == null ? "" : "; --o1 sealed layers")
                + (tensorRank == null ? "" : "; rank " + tensorRank.rank() + " of " + tensorRank.ranks() + ", NCCL all-reduces")
                + "; decode as one CUDA graph "
                + (tensorRank != null ? "- off for a rank of a group" : graphs ? "per step" : "- off, -Dcmf.cuda.graphs=false")
                + (f.programmaticLaunch() ? ", programmatic dependent launch" : "") + ")");
        return f;
    }

    void hostGraph(String label, String why) {
        notes.accept("cmf: cuda: " + label + ": hybrid path (GPU weight products, CPU graph): " + why);
    }

    /** This GPU's rank in a tensor-parallel group (null: a whole model), for the resident forwards made from now on. */
    private TensorRank tensorRank;

    void useTensorRank(TensorRank rank) { this.tensorRank = rank; }

    /** The tensor-parallel group this GPU's resident forwards are one rank of; 1 when none. */
    int tensorRanks() { return tensorRank == null ? 1 : tensorRank.ranks(); }

    /** Whether resident forwards made from now on replay decode steps as CUDA graphs (default: {@code cmf.cuda.graphs}). */
    void useGraphs(boolean on) { this.graphs = on; }

    /** Tests: whether the resident forward keeps f16 copies of int8 matrices for prefill (auto, true, false). */
    void usePrefillCache(String mode) { this.prefillCache = ResidentForward.prefillCacheMode(mode); }

    /** Tests: the precision of the prefill GEMMs' activations (exact, fast). */
    void usePrefillPrecision(String mode) { this.prefillPrecision = ResidentForward.prefillPrecisionMode(mode); }

    /** Tests: whether the prefill fuses its splits and epilogues (default: {@code cmf.cuda.prefillFusion}, on). */
    void usePrefillFusion(boolean on) { this.prefillFusion = on; }

    /** Tests: whether decode steps may launch programmatically (default: {@code cmf.cuda.pdl}, on). */
    void useProgrammaticLaunch(boolean on) { this.programmaticLaunch = on; }

    /** Tests: the small-batch products on (up to {@code rows} rows of a batched step) or off (0), blocks of {@code blockRows}. */
    void useSmallBatchRows(int rows, int blockRows) { this.smallBatchRows = rows; this.smallBatchBlockRows = blockRows; }

    /** Tests: cuBLAS from {@code names}, used for prefill chunks of at least {@code minTokens}. */
    void useCublas(List<String> names, int minTokens) { this.cublasNames = names; this.gemmMinTokens = minTokens; }

    /** Bytes of device memory this instance holds for weights. */
    public long deviceBytes() { return deviceBytes; }

    public CudaContext context() { return ctx; }

    @Override
    public void apply(Matrix w, float[] x, int tokens, float[] y) {
        if (!supports(w)) { fallback.apply(w, x, tokens, y); return; }
        int in = w.inDim(), out = w.outDim();
        if (x.length < (long) tokens * in || y.length < (long) tokens * out)
            throw new IllegalArgumentException(w.name() + ": x or y shorter than " + tokens + " tokens");
        ctx.call(() -> { run(w, x, tokens, y); return null; });
    }

    /**
     * The products sharing {@code x} go to the GPU in one owner-thread submission: x is copied in once, each
     * product launches into its own slice of the device output, and one copy brings all outputs back (one
     * synchronisation instead of one per product). Matrices the GPU does not take run on the fallback.
     */
    @Override
    public void applyShared(Matrix[] ws, float[] x, int tokens, float[][] ys) {
        if (ws.length != ys.length) throw new IllegalArgumentException(ws.length + " matrices, " + ys.length + " outputs");
        int onGpu = 0;
        for (int i = 0; i < ws.length; i++) {
            Matrix w = ws[i];
            if (!supports(w)) { fallback.apply(w, x, tokens, ys[i]); continue; }
            if (w.inDim() != ws[0].inDim()) throw new IllegalArgumentException(w.name() + ": input width " + w.inDim()
                    + " differs from " + ws[0].name() + "'s " + ws[0].inDim() + " in one shared product");
            if (x.length < (long) tokens * w.inDim() || ys[i].length < (long) tokens * w.outDim())
                throw new IllegalArgumentException(w.name() + ": x or y shorter than " + tokens + " tokens");
            onGpu++;
        }
        if (onGpu == 0) return;
        ctx.call(() -> { runShared(ws, x, tokens, ys); return null; });
    }

    /** Owner thread: upload (first time), copy x in, launch, copy y out. */
    private void run(Matrix w, float[] x, int tokens, float[] y) {
        DeviceMatrix d = resident(w);
        int in = w.inDim(), out = w.outDim();
        long xb = 4L * tokens * in, yb = 4L * tokens * out;
        ensure(xb, yb);
        MemorySegment.copy(x, 0, stageX.host, ValueLayout.JAVA_FLOAT, 0, tokens * in);
        // one stream, one wait: the host queues copy-in, kernels and copy-out, then blocks once
        cu.copyToDeviceAsync(stageX.dev, stageX.host, xb);
        launch(d, w, tokens, stageY.dev);
        cu.copyToHostAsync(stageY.host, stageY.dev, yb);
        cu.syncDefaultStream();
        MemorySegment.copy(stageY.host, ValueLayout.JAVA_FLOAT, 0, y, 0, tokens * out);
    }

    /** Owner thread: {@link #run} for several matrices of one input; outputs lie back to back in stageY.dev. */
    private void runShared(Matrix[] ws, float[] x, int tokens, float[][] ys) {
        int in = -1;
        long yb = 0;
        for (Matrix w : ws) if (supports(w)) { in = w.inDim(); yb += 4L * tokens * w.outDim(); }
        long xb = 4L * tokens * in;
        ensure(xb, yb);
        MemorySegment.copy(x, 0, stageX.host, ValueLayout.JAVA_FLOAT, 0, tokens * in);
        cu.copyToDeviceAsync(stageX.dev, stageX.host, xb);
        long off = 0;
        for (Matrix w : ws) {
            if (!supports(w)) continue;
            launch(resident(w), w, tokens, stageY.dev + off);
            off += 4L * tokens * w.outDim();
        }
        cu.copyToHostAsync(stageY.host, stageY.dev, yb);
        cu.syncDefaultStream();   // one wait for all the products
        off = 0;
        for (int i = 0; i < ws.length; i++) {
            if (!supports(ws[i])) continue;
            int n = tokens * ws[i].outDim();
            MemorySegment.copy(stageY.host, ValueLayout.JAVA_FLOAT, off, ys[i], 0, n);
            off += 4L * n;
        }
    }

    /** Owner thread: the device copy of {@code w}, uploaded on first use. */
    DeviceMatrix resident(Matrix w) {
        if (closed) throw new IllegalStateException("CudaMatMul closed");
        return uploaded.get(w, this::upload);
    }

    /** Owner thread: frees the device copy of {@code w} (a skill's replacement given back), if it has one. */
    void release(Matrix w) { uploaded.release(w); }

    /** Owner thread: the matvec launches of one product, reading stageX.dev, writing {@code tokens × out} floats at {@code yDev}. */
    private void launch(DeviceMatrix d, Matrix w, int tokens, long yDev) {
        int in = w.inDim(), out = w.outDim();
        MemorySegment fn = switch (d.dtype()) {
            case F32 -> fnF32;
            case BF16 -> fnBf16;
            case F16 -> fnF16;
            case Q4_BLOCK -> fnQ4Block;
            case Q4TP -> fnQ4tp;
            default -> fnQ8;
        };
        for (int t0 = 0; t0 < tokens; t0 += ArgPack.MAX_GRID_Y) {
            int nt = Math.min(ArgPack.MAX_GRID_Y, tokens - t0);
            ArgPack.write(args, d.weights(), d.rowScales(), d.colField(), stageX.dev + 4L * t0 * in, yDev + 4L * t0 * out,
                    w.firstRow(), out, in);
            cu.launch(fn, ArgPack.gridX(out), nt, 1, ArgPack.BLOCK, 1, 1, 0, params);
        }
    }

    private void ensure(long xb, long yb) {
        stageX.ensure(xb);
        stageY.ensure(yb);
    }

    /** A pinned host buffer and its device twin of the same size, grown by doubling. Owner thread only. */
    private final class Staging {
        MemorySegment host;
        long dev, cap;

        void ensure(long bytes) {
            if (bytes <= cap) return;
            long want = Math.max(bytes, 2 * cap);
            free();   // the old pair goes before the new one is asked for: a failed allocation leaves nothing freed twice
            dev = cu.memAlloc(want);
            host = cu.memAllocHost(want);
            cap = want;
        }

        void free() {
            if (dev != 0) cu.memFree(dev);
            if (host != null) cu.memFreeHost(host);
            dev = 0;
            host = null;
            cap = 0;
        }
    }

    private DeviceMatrix upload(Matrix w) {
        DType dt = w.dtype();
        if (dt == DType.Q4_BLOCK || dt == DType.Q4TP) return uploadQ4(w);
        long before = deviceBytes;
        long rows = w.storedRows();
        int cols = w.cols();
        MemorySegment data = w.data();
        boolean q8 = dt == DType.Q8_ROW || dt == DType.Q8_2F;
        long wBytes = q8 ? rows * cols : rows * cols * (dt == DType.F32 ? 4L : 2L);
        long need = wBytes + (q8 ? 2 * rows : 0) + (dt == DType.Q8_2F ? 2L * cols : 0);
        if (data.byteSize() != need)
            throw new IllegalArgumentException(w.name() + ": " + dt.label + " [" + rows + ", " + cols + "] needs " + need
                    + " bytes, payload has " + data.byteSize());
        long dw = toDevice(data.asSlice(0, wBytes));
        long rs = 0, cf = 0;
        if (q8) {
            // the f32 staging of the scale planes lives only until copied up (not in the matmul's lifetime arena,
            // which would grow with every upload, e.g. a model reopened on the same matmul)
            try (Arena a = Arena.ofConfined()) {
                rs = toDevice(widenF16(a, data.asSlice(wBytes, 2 * rows), rows));
                if (dt == DType.Q8_2F) cf = toDevice(widenF16(a, data.asSlice(wBytes + 2 * rows, 2L * cols), cols));
            }
        }
        return new DeviceMatrix(data, dt, dw, rs, cf, new long[] {dw, rs, cf}, deviceBytes - before);
    }

    /**
     * q4_block and q4tp: the payload goes up as stored (CMF_FORMAT.md §2) and the kernel's pointers go into it —
     * q4_block: weights = nibble plane, rowScales = the f16 scale plane; q4tp: weights = nibble plane, colField =
     * the codes plane, rowScales = a small f32 plane {exp2(lo), exp2(step)} per row computed here (correctly
     * rounded, as CMF defines the ladder; the GPU's exp2f is not), from which the kernel builds each row's ladder.
     */
    private DeviceMatrix uploadQ4(Matrix w) {
        DType dt = w.dtype();
        long rows = w.storedRows();
        int cols = w.cols();
        MemorySegment data = w.data();
        long gpr = (cols + 31) / 32, plane = dt == DType.Q4_BLOCK ? (rows * cols + 31) / 32 * 16 : rows * gpr * 16;
        long need = dt == DType.Q4_BLOCK ? plane / 16 * 18 : plane + 4 * rows + rows * TpLadder.codeStride(gpr);
        if (data.byteSize() != need)
            throw new IllegalArgumentException(w.name() + ": " + dt.label + " [" + rows + ", " + cols + "] needs " + need
                    + " bytes, payload has " + data.byteSize());
        long dw = toDevice(data);
        if (dt == DType.Q4_BLOCK) return new DeviceMatrix(data, dt, dw, dw + plane, 0, new long[] {dw}, need);
        long ds;
        try (Arena a = Arena.ofConfined()) {
            ds = toDevice(q4tpRungs(a, data, rows, cols));
        }
        return new DeviceMatrix(data, dt, dw, ds, dw + plane + 4 * rows, new long[] {dw, ds}, need + 8 * rows);
    }

    /**
     * A q4tp payload's per-row {exp2(lo), exp2(step)} as f32 pairs in {@code a} (correctly rounded, as CMF defines the
     * ladder; the GPU's exp2f is not): the kernels' {@code rs} plane, from which each row's ladder is built.
     */
    static MemorySegment q4tpRungs(Arena a, MemorySegment data, long rows, int cols) {
        long plane = rows * ((cols + 31) / 32) * 16;
        MemorySegment steps = a.allocate(8 * rows, 16);
        for (long r = 0; r < rows; r++) {
            steps.setAtIndex(ValueLayout.JAVA_FLOAT, 2 * r, TpLadder.exp2(Float.float16ToFloat(data.get(ArgPack.U16_LE, plane + 4 * r))));
            steps.setAtIndex(ValueLayout.JAVA_FLOAT, 2 * r + 1, TpLadder.exp2(Float.float16ToFloat(data.get(ArgPack.U16_LE, plane + 4 * r + 2))));
        }
        return steps;
    }

    /** f16 little-endian values as an f32 host segment of {@code a}. */
    private static MemorySegment widenF16(Arena a, MemorySegment h, long n) {
        MemorySegment f = a.allocate(4 * n, 16);
        for (long i = 0; i < n; i++)
            f.setAtIndex(ValueLayout.JAVA_FLOAT, i, Float.float16ToFloat(h.getAtIndex(ArgPack.U16_LE, i)));
        return f;
    }

    long toDevice(MemorySegment host) {
        long n = host.byteSize();
        long d = cu.memAlloc(Math.max(n, 16));
        if (host.isNative()) {
            cu.copyToDevice(d, host, n);
        } else {
            try (Arena a = Arena.ofConfined()) {
                MemorySegment tmp = a.allocate(n, 16);
                tmp.copyFrom(host);
                cu.copyToDevice(d, tmp, n);
            }
        }
        deviceBytes += n;
        return d;
    }

    private void free(DeviceMatrix d) {
        for (long p : d.owned()) if (p != 0) cu.memFree(p);
        deviceBytes -= d.bytes();
    }

    /** Frees the device copies and staging buffers (the fallback is not closed). */
    @Override public void close() {
        if (!ctx.call(() -> {
            if (closed) return false;
            closed = true;
            for (ResidentForward r : residents) r.closeOnOwner();
            residents.clear();
            uploaded.clear();
            stageX.free();
            stageY.free();
            return true;
        })) return;
        arena.close();
    }
}
