package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Activation;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.Glu;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.cuda.KernelSignature.Kernel;
import dev.cmf4j.backend.cuda.ResidentWeights.DeltaNetWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.LayerWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.MoeWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.SharedWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.Table;
import dev.cmf4j.backend.cuda.ResidentWeights.W;
import dev.cmf4j.backend.cuda.Step.Gemm;
import dev.cmf4j.backend.cuda.Step.Gemms;
import dev.cmf4j.backend.cuda.Step.Launch;
import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.util.List;

/**
 * Lowers a {@link DecoderPlan} onto the resident kernels: the launches and cuBLAS GEMMs of one step of token rows, in
 * launch order, into a {@link Steps} sink (ResidentForward runs, captures or profiles them). A step's rows may belong to
 * several sequences ({@link Seq}): the products run over all rows, the attention and recurrent layers per sequence
 * (decode rows of many sequences in one launch). Products pick their kernel by the rows: the matvec kernels, the
 * small-batch int8 kernels, or cuBLAS on 16-bit parts with fused splits and epilogues (f32 for f32 weights and for
 * 4-bit ones widened to f32 first) over the
 * {@link PrefillWorkspace}; skills, adapters and task masks change the products of the rows that use them. Owner
 * thread only.
 */
final class ResidentLowering {
    private static final long NULL = 0L;
    /** Head rows per block of r_qk_rope_append (a warp each): resident_attn.cu's R_ROPE_WARPS. */
    private static final int ROPE_WARPS = 4;
    /** r_glu_split_N: the SwiGLU epilogue fused with the down product's split, rows ≤ N·2048 (blocks of 512). */
    static final int[] GLU_SPLIT_N = {1, 2, 4, 8};

    private final Cublas cublas;
    private final ResidentKernels kernels;
    private final DecoderPlan model;
    private final ResidentWeights weights;
    private final W embed, head, pleTable, pleProj, clusters;
    private final long pleNorm, finalNorm;
    private final boolean headFolded;
    private final LayerWeights[] layers;
    private final List<W> products;
    private final EmbryoSteps embryo;
    private final SealedSteps o1;
    private final int smCount;
    private final boolean fastPrefill, fusePrefill;
    private final int batchGemmMinRows, smallBatchRows, smallBatchShape;
    /** The prefill GEMMs' scratch, the kept f16 copies of int8 weights and the cuBLAS handle. */
    final PrefillWorkspace ws;
    /** The skills', adapters' and task masks' device weights (null: none installed); set by ResidentForward. */
    OverlayWeights overlays;
    /**
     * The overlay runs over the rows the products being made read (null: every row reads the backbone alone): the
     * step's rows while its layers are made, its logit rows around a gathered head. Set by ResidentForward.
     */
    OverlayWeights.Run[] runs;

    ResidentLowering(CudaDriver cu, Cublas cublas, ResidentKernels kernels, DecoderPlan model, ResidentWeights weights,
                     EmbryoSteps embryo, SealedSteps o1, int smCount, long deviceMemory, String prefillCache,
                     boolean fastPrefill, boolean fusePrefill, int batchGemmMinRows, int smallBatchRows, int smallBatchShape,
                     Runnable stale, TensorRank tp) {
        this.tp = tp;
        this.cublas = cublas;
        this.kernels = kernels;
        this.model = model;
        this.weights = weights;
        this.embed = weights.embed;
        this.head = weights.head;
        this.pleTable = weights.pleTable;
        this.pleProj = weights.pleProj;
        this.clusters = weights.clusters;
        this.pleNorm = weights.pleNorm;
        this.finalNorm = weights.finalNorm;
        this.headFolded = weights.headFolded;
        this.layers = weights.layers;
        this.products = weights.products;
        this.embryo = embryo;
        this.o1 = o1;
        this.smCount = smCount;
        this.fastPrefill = fastPrefill;
        this.fusePrefill = fusePrefill;
        this.batchGemmMinRows = batchGemmMinRows;
        this.smallBatchRows = smallBatchRows;
        this.smallBatchShape = smallBatchShape;
        this.ws = new PrefillWorkspace(cu, cublas, kernels, model, weights, prefillCache, deviceMemory, widestFusedSplit(),
                () -> overlays == null ? 0 : overlays.widestInt8(), stale);
    }

    /** The GPU's rank in a tensor-parallel group (its plan a rank's part), or null for a whole model. */
    private final TensorRank tp;

    private static int kind(DType d) { return ResidentWeights.kind(d); }

    /**
     * A rank's row-parallel product adds into x only on rank 0: the others zero their x first, so the all-reduce that
     * follows gives x + Σ partials and the product keeps its fused residual epilogue.
     */
    private void keepXOnRankZero(Steps L, Arena a, ResidentSession s, int t) {
        if (tp.rank() > 0)
            L.add(launch("tp_zero_x", kernels.fnScaleCap, (t * model.hidden() + 255) / 256, 1, 1, 256, a, s.x, t * model.hidden(), 0f, 0f));
    }

    private void allReduce(Steps L, String name, long buffer, int t) {
        L.add(new Step.AllReduce(name, buffer, (long) t * model.hidden()));
    }

    private static Launch launch(String name, Kernel k, int gx, int gy, int gz, int block, Arena a, Object... args) {
        return Launch.of(name, k, gx, gy, gz, block, a, args);
    }

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

    /**
     * An MTP head's input row made on the device, as {@code MtpInputRows} makes it on the host: [enorm(embed(id)·scale);
     * hnorm(the hidden row at {@code hiddenRow})] into s.mtpIn's first row (the embedding through s.h).
     */
    void mtpInput(Steps L, Arena a, ResidentSession s, long id, float scale, long enormW, NormOp enorm, long hiddenRow, long hnormW,
                  NormOp hnorm) {
        int hidden = model.hidden();
        L.add(launch("mtp_embed", kernels.fnEmbed[kind(embed.dtype())], 1, 1, 1, 256, a, embed.weights(), embed.rowScales(),
                embed.colField(), id, s.h, hidden, scale));
        norm(L, a, s.h, enormW, enorm, s.mtpIn, 1);
        norm(L, a, hiddenRow, hnormW, hnorm, s.mtpIn + 4L * hidden, 1);
    }

    /**
     * The rows [start, start + tokens) of a step that belong to one sequence: its KV caches (a device address per
     * layer), the device address of its first row's position, and the chunk bound its sliding layers' caches are rings
     * for ({@code kvChunk}: {@link KvLayout#ringRows}; 0: none).
     */
    record Seq(int start, int tokens, long pos, long[] kc, long[] vc, long[] conv, long[] dnS, SealedSteps.Sequence sealed, int kvChunk) {}

    /** A session's own chunk: every row is its, the position at {@code s.in}. */
    static Seq[] alone(ResidentSession s, int t) { return new Seq[] {new Seq(0, t, s.in, s.kc, s.vc, s.conv, s.dnS, s.sealed, s.kvChunk)}; }

    /**
     * Key splits of the attention for a chunk of t tokens: enough blocks to fill the GPU on a decode step, in one wave
     * (r_attn_partial's 111 registers on sm_90, under __launch_bounds__(128, 4), leave room for 4 blocks per SM). H200, llama-8b (16 splits): 32 splits
     * made gemv_bench's decode chain slower (2808 µs per token against 2719).
     */
    int splits(int t) {
        return Math.max(1, Math.min(32, 4 * smCount / Math.max(1, model.heads() * t)));
    }

    /**
     * Chunks of at most this many rows (a draft's verification, K + 1 rows) take r_attn_chunk after the rope: the keys
     * split over heads × rows × splits blocks, as decode rows' are, where r_attn_prefill gives such a chunk one query
     * tile per kv head (kvHeads blocks: 4 of the H200's 132 SMs for a model of 4 KV heads). Sessions size their
     * partials for it.
     */
    static final int CHUNK_ATTENTION_ROWS = 8;

    /** {@code -Dcmf.cuda.chunkAttention=false}: every chunk's attention on r_attn_prefill (as before r_attn_chunk). */
    private static final boolean CHUNK_ATTENTION = !"false".equalsIgnoreCase(System.getProperty("cmf.cuda.chunkAttention"));

    /** Head-dimension buckets of r_attn_prefill_D (resident_attn.cu) and the query rows per block of each. */
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

    /** Whether a product's activations go in as scaled f16 parts (f16 and int8 weights, exact in f16), else bf16. */
    private static boolean f16Parts(DType weights) { return weights == DType.F16 || kind(weights) == 3; }

    /**
     * Parts an f32 activation is split into for a GEMM on 16-bit inputs (see r_split): 22 significant bits (2 scaled
     * f16 parts) or 24 (3 bf16 parts); with {@link #fastPrefill} 11 (1 scaled f16 part) or 16 (2 bf16 parts).
     */
    private int parts(DType weights) {
        if (weights == DType.F32 || ResidentWeights.q4(weights)) return 1;
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
        if (ResidentWeights.q4(w.dtype())) {   // widened to f32 (exact for q4_block), then the f32 GEMM of x as it is
            if (normed) throw new IllegalStateException(name + ": 4-bit weights with a folded norm");
            L.add(launch(name + "_widen", kernels.fnWidenQ4[kind(w.dtype()) - 4], w.rows(), 1, 1, 256, a, w.weights(), w.rowScales(),
                    w.colField(), ws.sQ4, w.rows(), w.cols()));
            L.add(new Gemm(name, ws.sQ4, Cublas.R_32F, x, Cublas.R_32F, c, w.rows(), t, w.cols()));
            return 1;
        }
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

    /**
     * The row scales a GEMM's epilogue applies to {@code w}'s product: its f32 row scales, or none for a 4-bit matrix
     * (its rowScales point at its own scale planes, already applied by the widening: {@link #product}).
     */
    private static long epilogueScales(W w) { return ResidentWeights.q4(w.dtype()) ? NULL : w.rowScales(); }

    /** The epilogue of a product whose GEMM wrote {@code c} (its f16 parts' token scales at {@code ts}). */
    private void out(Steps L, Arena a, String name, W w, long bias, long y, int t, boolean accumulate, int parts, long c, long ts) {
        L.add(launch(name + "_out", kernels.fnGemmOut, (w.rows() + 1023) / 1024, t, 1, 256, a, c, epilogueScales(w), bias, y, w.rows(), t, parts, accumulate ? 1 : 0, f16Parts(w.dtype()) ? ts : NULL, step(w.dtype())));
    }

    /**
     * A residual epilogue (y += W·x's parts, {@link #out} with accumulation) held back to run in one launch with the split
     * of the products that read y next (r_residual_split3): o's before gate and up, down's before the next layer's q, k, v.
     */
    private record Residual(String name, W w, long bias, long y, int t, int parts, long c, long ts) {}

    /** A held epilogue's launch on its own, when what follows cannot take it; null: nothing. */
    private void flush(Steps L, Arena a, Residual r) {
        if (r != null) out(L, a, r.name(), r.w(), r.bias(), r.y(), r.t(), true, r.parts(), r.c(), r.ts());
    }

    /**
     * Whether products of one input (q, k, v; gate, up) take their parts from one r_split3 launch: fusion on, 16-bit
     * weights (f32 and widened 4-bit ones take x as it is) of one precision.
     */
    private boolean splitTogether(W... m) {
        if (!fusePrefill) return false;
        for (W w : m)
            if (w.dtype() == DType.F32 || ResidentWeights.q4(w.dtype()) || f16Parts(w.dtype()) != f16Parts(m[0].dtype()) || parts(w.dtype()) != parts(m[0].dtype())
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
        return split3(L, a, name, m, x, normEps, t, ts, null);
    }

    /** As above, with {@code held}'s epilogue (into x) in the same launch when not null. */
    private long[][] split3(Steps L, Arena a, String name, W[] m, long x, float normEps, int t, long[] ts, Residual held) {
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
        if (held != null) {
            if (held.y() != x || held.w().rows() != cols || held.t() != t) throw new IllegalStateException(held.name() + " held for another split");
            W h = held.w();
            L.add(launch(held.name() + "_out+" + name + "_split", kernels.fnResidualSplit3, t, 1, 1, 1024, a, held.c(), epilogueScales(h),
                    held.bias(), x, cols, t, held.parts(), f16Parts(h.dtype()) ? held.ts() : NULL, step(h.dtype()), normed ? 1 : 0,
                    normed ? normEps : 0f, f16Parts(m[0].dtype()) ? 1 : 0, parts, n, cf[0], out[0], scale[0], cf[1], out[1], scale[1],
                    cf[2], out[2], scale[2]));
            return at;
        }
        L.add(launch(name + "_split", kernels.fnSplit3, t, 1, 1, 256, a, x, normed ? 1 : 0, normed ? normEps : 0f, t, cols,
                f16Parts(m[0].dtype()) ? 1 : 0, parts, n, cf[0], out[0], scale[0], cf[1], out[1], scale[1], cf[2], out[2], scale[2]));
        return at;
    }

    /** q, k and v of one input: one split (r_split3), three GEMMs, one epilogue (r_gemm_out3). */
    private void qkvGemm(Steps L, Arena a, LayerWeights w, ResidentSession s, long q, long k, long v, long x, float normEps, int t,
                         Residual held) {
        W[] m = {w.q(), w.k(), w.v()};
        long[] bias = {w.qBias(), w.kBias(), w.vBias()}, y = {q, k, v};
        long[][] at = split3(L, a, "qkv", m, x, normEps, t, new long[] {ws.sS1, ws.sS1 + 4L * t, ws.sS1 + 8L * t}, held);
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
        if (!fusePrefill || down.dtype() == DType.F32 || ResidentWeights.q4(down.dtype()) || rows % 4 != 0) return -1;
        for (int i = 0; i < GLU_SPLIT_N.length; i++) if (rows <= GLU_SPLIT_N[i] * 2048) return i;
        return -1;
    }

    /**
     * One sequence's rows of layer {@code li} as a prompt chunk: q/k norm, rope and KV append, then flash-attention tiles,
     * K/V shared by a kv head's query heads, no combine. q is left normed and roped in place.
     */
    private void prefillAttention(Steps L, Arena a, ResidentSession s, LayerWeights w, DecoderPlan.Layer spec, int li, Seq sq, long kBuf,
                                  long vBuf, int qn, int kn, float eps, int off) {
        int heads = model.heads(), hd = spec.headDim(), kvHeads = spec.kvHeads(), qDim = heads * hd, kvDim = kvHeads * hd;
        long qo = 4L * sq.start() * qDim, ko = 4L * sq.start() * kvDim;
        long kqo = s.kq == NULL ? NULL : s.kq + ko, vqo = s.kq == NULL ? NULL : vBuf + ko;   // q8: the chunk's own rows
        // a warp per head row, 4 per block (ROPE_WARPS, resident_attn.cu's R_ROPE_WARPS)
        L.add(launch("qk_norm_rope_append", kernels.fnRope, (heads + kvHeads + ROPE_WARPS - 1) / ROPE_WARPS, sq.tokens(), 1, 32 * ROPE_WARPS, a, s.q + qo, kBuf + ko, vBuf + ko, sq.kc()[li], sq.vc()[li], w.qNorm(), w.kNorm(), qn, kn, eps, off,
                w.invFreq(), spec.rope().rotaryDim(), spec.rope().attentionScaling(), heads, kvHeads, hd, sq.pos(), kqo, spec.window(), sq.kvChunk()));
        int t = sq.tokens();
        if (CHUNK_ATTENTION && t <= CHUNK_ATTENTION_ROWS && hd <= 256 && kernels.fnAttnChunk != null) {   // a draft's verification: split over the keys
            int splits = splits(t);
            L.add(launch("attn_chunk", kernels.fnAttnChunk, heads, t, splits, 128, a, s.q + qo, sq.kc()[li], sq.vc()[li],
                    s.pm, s.pl, s.pacc, heads, kvHeads, hd, spec.scale(), sq.pos(), splits, spec.window(), s.att + qo, s.done,
                    w.sinks(), sq.kvChunk()));
            return;
        }
        int b = prefillBucket(hd);
        boolean tc = b < PREFILL_TC_BUCKETS && kernels.fnPrefillTc[b] != null;   // tensor cores: sm_80+, hd ≤ 128
        int[] grid = prefillGrid(sq.tokens(), heads, kvHeads, hd, tc);
        L.add(launch("attn_prefill", tc ? kernels.fnPrefillTc[b] : kernels.fnPrefill[b], grid[0], grid[1], 1, 128, a, s.q + qo,
                sq.kc()[li], sq.vc()[li], s.att + qo, sq.tokens(), heads, kvHeads, hd, spec.scale(), sq.pos(), spec.window(), w.sinks(),
                kqo, vqo, sq.kvChunk()));
    }

    /**
     * A sealed ({@code --o1}) layer, per sequence: while exact, the prompt path over its own growing cache with the
     * rotated queries kept for the landmarks (decode steps too: they need their rotated q); once sealed, SealedSteps'
     * rope, ring + sinks + landmarks attention and ring commit.
     */
    private void sealedAttention(Steps L, Arena a, ResidentSession s, LayerWeights w, DecoderPlan.Layer spec, int li, Seq[] seqs, long kBuf,
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

    /**
     * The launches of one step of {@code t} token rows (ids and positions already on the device) in {@code s}'s
     * buffers; {@code seqs} says which rows belong to which sequence's KV cache (one for a session's own chunk).
     *
     * @param ids      the rows' token ids on the device
     * @param headRows -1 no head; 0 the head for every row; 1 for the last row only
     * @param out      where the logits go
     * @param L        where each step goes as it is made, in launch order
     */
    void steps(ResidentSession s, long ids, Seq[] seqs, int t, int headRows, long out, Arena a, boolean gemm, Steps L) {
        steps(s, ids, seqs, NULL, NULL, 0, t, headRows, out, a, gemm, L);
    }

    /**
     * As above; the first {@code oneTokenSeqs} sequences are one token each (rows 0..n-1), and {@code rowCaches} (not 0)
     * holds every layer's table of their key caches and then of their value caches (layer l's at
     * {@code rowCaches + 8·l·n} and {@code + 8·(layers + l)·n}), each row's position at {@code seqs[r].pos()} and its
     * {@link Seq#kvChunk} at {@code rowChunks + 4·r}: one r_attn_rows launch a layer for those rows; the sequences after
     * them (prompt chunks) each run their own.
     */
    void steps(ResidentSession s, long ids, Seq[] seqs, long rowCaches, long rowChunks, int oneTokenSeqs, int t, int headRows, long out,
                       Arena a, boolean gemm, Steps L) {
        int hidden = model.hidden(), heads = model.heads();
        if (weights.mtpFc != null) matvec(L, a, "mtp_fc", weights.mtpFc, NULL, s.mtpIn, s.x, t, false, Float.NaN);   // an MTP head's x
        else if (!model.inputRows()) embed(L, a, ids, s.x, t);   // a later pipeline stage's x: the rows the host copied in
        if (pleTable != null) perLayerInputs(L, a, s, ids, t, gemm);
        int splits = splits(t);
        Residual held = null;   // the previous layer's down epilogue, for this layer's q/k/v split
        for (int li = 0; li < layers.length; li++) {
            LayerWeights w = layers[li];
            DecoderPlan.Layer spec = model.layers().get(li);
            if (tp != null && (spec.deltaNet() != null || spec.anchor() != null || o1 != null))
                throw new IllegalStateException("layer " + li + ": a rank's plan splits attention, dense MLPs and MoEs only");
            int hd = spec.headDim(), kvHeads = spec.kvHeads(), qDim = heads * hd, kvDim = kvHeads * hd;
            // a layer that reads an earlier one's keys and values computes none: it appends that layer's raw rows again
            boolean shared = spec.sharesKv();
            int kvLayer = shared ? spec.kvSource() : li;
            long kBuf = s.kRaw[kvLayer] != NULL ? s.kRaw[kvLayer] : s.k, vBuf = s.vRaw[kvLayer] != NULL ? s.vRaw[kvLayer] : s.v;
            NormOp kNormOp = model.layers().get(kvLayer).kNorm();
            long mixOut = s.att;   // the mixer's output, the o product's input
            boolean qkvSplit = spec.deltaNet() == null && spec.anchor() == null && !shared && gemm && splitTogether(w.q(), w.k(), w.v())
                    && !touched(w);
            if (!(qkvSplit && w.attnFolded())) {   // the held epilogue fuses only with a split that norms x itself
                flush(L, a, held);
                held = null;
            }
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
                } else if (qkvSplit) {
                    qkvGemm(L, a, w, s, qOut, kBuf, vBuf, ain, ae, t, held);
                    held = null;
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
                            s.pm, s.pl, s.pacc, heads, kvHeads, hd, spec.scale(), sq.pos(), splits, spec.window(), s.att, s.done, w.sinks(),
                            sq.kvChunk()));
                } else {
                    int n = rowCaches == NULL ? 0 : oneTokenSeqs;
                    if (n > 0) {   // one token of each of n sequences: the same per row, each over its own caches
                        int rowSplits = splits(n);
                        L.add(launch("attention_rows", kernels.fnAttnRows, heads, n, rowSplits, 128, a, s.q, kBuf, vBuf,
                                rowCaches + 8L * li * n, rowCaches + 8L * (layers.length + li) * n,
                                w.qNorm(), w.kNorm(), qn, kn, eps, off, w.invFreq(), spec.rope().rotaryDim(), spec.rope().attentionScaling(),
                                s.pm, s.pl, s.pacc, heads, kvHeads, hd, spec.scale(), seqs[0].pos(), rowSplits, spec.window(), s.att, s.done, w.sinks(),
                                rowChunks));
                    }
                    for (int si = n; si < seqs.length; si++)   // a prompt chunk, or each longer span of a batch
                        prefillAttention(L, a, s, w, spec, li, seqs[si], kBuf, vBuf, qn, kn, eps, off);
                }
                if (spec.outputGate())   // att ·= σ(gate)
                    L.add(launch("output_gate", kernels.fnSigmoidMul, (t * qDim + 255) / 256, 1, 1, 256, a, s.att, s.gate, t * qDim));
            }
            Residual oHeld = null;   // o's epilogue, for the gate/up split
            if (tp != null && spec.postAttnNorm() == null) {                                // x = Σ ranks (x or 0) + o·att
                keepXOnRankZero(L, a, s, t);
                if (gemm) gemm(L, a, "o_residual", w.o(), w.oBias(), mixOut, s.x, t, true, Float.NaN);
                else matvec(L, a, "o_residual", w.o(), w.oBias(), mixOut, s.x, t, true, Float.NaN);
                allReduce(L, "o_all_reduce", s.x, t);
            } else if (spec.postAttnNorm() == null) {                                       // x += o·att
                if (gemm && ffnSplit(w, spec)) oHeld = heldProduct(L, a, "o_residual", w.o(), w.oBias(), mixOut, s.x, t);
                else if (gemm) gemm(L, a, "o_residual", w.o(), w.oBias(), mixOut, s.x, t, true, Float.NaN);
                else matvec(L, a, "o_residual", w.o(), w.oBias(), mixOut, s.x, t, true, Float.NaN);
            } else {                                                                        // x += postNorm(o·att)
                if (gemm) gemm(L, a, "o", w.o(), w.oBias(), mixOut, s.m, t, false, Float.NaN);
                else matvec(L, a, "o", w.o(), w.oBias(), mixOut, s.m, t, false, Float.NaN);
                if (tp != null) allReduce(L, "o_all_reduce", s.m, t);
                archNorm(L, a, s.m, w.postAttnNorm(), spec.postAttnNorm(), s.x, t, true);
            }
            if (spec.moe() != null && spec.gate() != null) {   // gemma4's 26B block: x += postFfn(postMlp(mlp) + postMoe(moe))
                denseFfn(L, a, s, w, spec, t, gemm, true);
                archNorm(L, a, s.m, w.postMlpNorm(), spec.postMlpNorm(), s.m, t, false);
                moe(L, a, s, w, spec, t, gemm);
                archNorm(L, a, s.m, w.postFfnNorm(), spec.postFfnNorm(), s.x, t, true);
            } else if (spec.moe() != null) moe(L, a, s, w, spec, t, gemm);
            else held = denseFfn(L, a, s, w, spec, t, gemm, false, oHeld, tp == null && w.pliGate() == null && spec.layerScalar() == 1f);
            if (w.pliGate() != null) perLayerInput(L, a, s, w, spec, li, t, gemm);
            if (spec.layerScalar() != 1f)
                L.add(launch("layer_scalar", kernels.fnScaleCap, (t * hidden + 255) / 256, 1, 1, 256, a, s.x, t * hidden, spec.layerScalar(), 0f));
        }
        flush(L, a, held);
        if (headRows >= 0) {
            int rows = headRows == 0 ? t : 1;
            head(L, a, s, s.x + 4L * (t - rows) * hidden, rows, out, gemm && rows > 1);
        }
    }

    /**
     * The dense gated MLP of one layer: x += down(act(gate(x̂))·up(x̂)), or through its post norm; with {@code intoM}
     * the bare output into s.m (the MLP beside an MoE).
     */
    private void denseFfn(Steps L, Arena a, ResidentSession s, LayerWeights w, DecoderPlan.Layer spec, int t, boolean gemm, boolean intoM) {
        flush(L, a, denseFfn(L, a, s, w, spec, t, gemm, intoM, null, false));
    }

    /**
     * Whether layer w's gate and up take their parts from one split that also norms x (the FFN norm folded): then o's
     * residual epilogue can run in that launch (r_residual_split3).
     */
    private boolean ffnSplit(LayerWeights w, DecoderPlan.Layer spec) {
        return spec.moe() == null && spec.gate() != null && w.ffnFolded() && spec.act() == Activation.SILU && !touched(w)
                && splitTogether(w.gate(), w.up());
    }

    /** A prefill product's split and GEMM into y's parts, its residual epilogue held (for the split that reads y next). */
    private Residual heldProduct(Steps L, Arena a, String name, W w, long bias, long x, long y, int t) {
        int parts = product(L, a, name, w, x, Float.NaN, t, ws.sC1, ws.sS1);
        return new Residual(name, w, bias, y, t, parts, ws.sC1, ws.sS1);
    }

    /**
     * As above; {@code held} (o's epilogue into x, when {@link #ffnSplit}) runs in the gate/up split's launch, and with
     * {@code holdDown} the down product's residual epilogue is returned instead of launched (for the next layer's q/k/v
     * split), else null.
     */
    private Residual denseFfn(Steps L, Arena a, ResidentSession s, LayerWeights w, DecoderPlan.Layer spec, int t, boolean gemm, boolean intoM,
                              Residual held, boolean holdDown) {
        int hidden = model.hidden();
        if (held != null && !(gemm && ffnSplit(w, spec))) {
            flush(L, a, held);
            held = null;
        }
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
                    long[][] at = split3(L, a, "gate_up", new W[] {w.gate(), w.up()}, fin, fe, t, new long[] {ws.sS1, ws.sS2}, held);
                    held = null;
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
                    L.add(launch("swiglu_down_split", kernels.fnGluSplit[gs], t, 1, 1, 512, a, ws.sC1, ws.sC2, epilogueScales(w.gate()),
                            epilogueScales(w.up()), scaled ? tsg : NULL, scaled ? tsu : NULL, step(w.gate().dtype()), sg, inter, t,
                            d.colField(), ws.sB, f16Parts(d.dtype()) ? 1 : 0, parts(d.dtype()), ws.sS1 + 4L * t));
                    downSplit = true;
                } else {
                    L.add(launch("swiglu_out", kernels.fnGluOut, (inter + 1023) / 1024, t, 1, 256, a, ws.sC1, ws.sC2, epilogueScales(w.gate()),
                            epilogueScales(w.up()), s.g, inter, t, sg,
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
            if (held != null) throw new IllegalStateException("o's epilogue held past the gate/up split");
            if (tp != null && intoM) throw new IllegalStateException("a rank's plan has no MLP beside an MoE");
            if (tp != null && residual) keepXOnRankZero(L, a, s, t);   // (gate and up have read x)
            if (downSplit) {
                int parts = gemmParts(L, a, name, w.down(), ws.sB, t, ws.sC1);
                if (residual && holdDown) return new Residual(name, w.down(), NULL, y, t, parts, ws.sC1, ws.sS1 + 4L * t);
                out(L, a, name, w.down(), NULL, y, t, residual, parts, ws.sC1, ws.sS1 + 4L * t);
            }
            else if (gemm) gemm(L, a, name, w.down(), NULL, s.g, y, t, residual, Float.NaN);
            else matvec(L, a, name, w.down(), NULL, s.g, y, t, residual, Float.NaN);
            if (tp != null) allReduce(L, "down_all_reduce", residual ? s.x : s.m, t);
            if (!residual && !intoM) archNorm(L, a, s.m, w.postFfnNorm(), spec.postFfnNorm(), s.x, t, true);
            return null;
        }
    }

    /**
     * Gemma4's per-layer inputs of the step's rows, once before the layers: the table rows (· tableScale) and the model
     * projection of the embedded x, then per layer slice pli = (norm(projection · projectionScale) + table) · combineScale.
     */
    private void perLayerInputs(Steps L, Arena a, ResidentSession s, long ids, int t, boolean gemm) {
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
    private void perLayerInput(Steps L, Arena a, ResidentSession s, LayerWeights w, DecoderPlan.Layer spec, int li, int t, boolean gemm) {
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
    void head(Steps L, Arena a, ResidentSession s, long src, int rows, long out, boolean g) {
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
    private void moe(Steps L, Arena a, ResidentSession s, LayerWeights w, DecoderPlan.Layer spec, int t, boolean gemm) {
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
        if (tp != null && beside) throw new IllegalStateException("a rank's plan has no MLP beside an MoE");
        if (tp != null && !post) keepXOnRankZero(L, a, s, t);   // (the norms of x are taken)
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
        if (tp != null) allReduce(L, "moe_all_reduce", y, t);   // the experts' and the shared expert's partial sums
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
    private void deltaNet(Steps L, Arena a, ResidentSession s, LayerWeights w, DecoderPlan.Layer spec, int li, Seq[] seqs, int t, boolean gemm) {
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

}
