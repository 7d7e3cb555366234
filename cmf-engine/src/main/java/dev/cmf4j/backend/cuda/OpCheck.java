package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Activation;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.OpResult;
import dev.cmf4j.backend.cpu.RmsNorm;
import dev.cmf4j.backend.cpu.Softmax;
import dev.cmf4j.backend.cpu.VectorMath;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * The resident kernels one at a time against the CPU's operators on random inputs (llama.cpp's test-backend-ops):
 * products of every weight kind (the 4-bit ones too), the standalone norm, activations, prefill and decode attention (windows, sinks, tensor
 * cores; the decode step's q/k norm, rope and KV append, one sequence and a batch of them),
 * embedding rows, expert routing and greedy picks,
 * each at a few shapes (odd widths, several tokens, the norm and residual variants). The error is the largest
 * difference over the reference's largest magnitude.
 */
final class OpCheck {
    private OpCheck() {}

    /** Each kernel at its shapes ({@code quick}: the small ones, for an emulated device) on {@code ctx}'s GPU. */
    static List<OpResult> run(CudaContext ctx, boolean quick) {
        return ctx.call(() -> {
            List<OpResult> out = new ArrayList<>();
            try (Arena a = Arena.ofConfined(); Device d = new Device(ctx.driver(), a)) {
                SplittableRandom r = new SplittableRandom(17);
                int[][] products = quick ? new int[][] {{13, 64, 1}, {9, 30, 3}} : new int[][] {{13, 64, 1}, {9, 30, 3}, {4096, 4096, 1}, {1000, 2048, 8}};
                for (int k = 0; k < 4; k++)
                    for (int[] s : products)
                        for (int variant = 0; variant < 2; variant++) out.add(matvec(ctx, d, a, r, k, s[0], s[1], s[2], variant == 1));
                // the 4-bit kinds (q4tp needs cols % 32 = 0; q4_block's 30 columns straddle its groups across rows)
                for (int k = 4; k < 6; k++)
                    for (int[] s : products)
                        for (int variant = 0; variant < 2; variant++)
                            out.add(matvecQ4(ctx, d, a, r, k, s[0], k == 5 && s[1] % 32 != 0 ? 96 : s[1], s[2], variant == 1));
                int[][] norms = quick ? new int[][] {{3, 7}, {2, 256}} : new int[][] {{3, 7}, {2, 256}, {64, 4096}};
                for (int[] s : norms)
                    for (int v = 0; v < 4; v++) out.add(rmsnorm(ctx, d, a, r, s[0], s[1], (v & 1) == 1, (v & 2) == 2));
                for (int n : quick ? new int[] {5, 300} : new int[] {5, 300, 14336 * 8})
                    for (Activation act : Activation.values()) out.add(gluAct(ctx, d, a, r, n, act));
                for (int[] s : quick ? new int[][] {{3, 7}, {2, 1000}} : new int[][] {{3, 7}, {2, 1000}, {64, 128256}}) out.add(argmax(ctx, d, a, r, s[0], s[1]));
                for (int[] s : new int[][] {{2, 8, 2}, {3, 128, 4}, {1, 32, 32}})
                    for (int v = 0; v < 3; v++) out.add(route(ctx, d, a, r, s[0], s[1], s[2], v == 1, v == 2));
                // prefill attention: {head dim, heads, kv heads, tokens, position of the first, window, sinks, ring chunk}
                // (a ring chunk c > 0 with a window w: the caches are rings of w + c rows, resident.cuh's r_kv_ring)
                int[][] attn = {{64, 4, 2, 5, 3, 0, 0, 0}, {128, 2, 1, 17, 10, 8, 1, 0}, {256, 2, 2, 3, 0, 0, 0, 0}, {32, 3, 1, 9, 40, 0, 1, 0},
                        {128, 2, 1, 17, 10, 8, 1, 17}, {64, 4, 2, 6, 40, 8, 0, 6}};
                boolean tensorCores = ResidentLowering.tensorCoreAttention(ctx.info().ccMajor());
                for (KvType kv : Kernels.KV_TYPES)
                    for (int[] s : attn)
                        for (boolean tc : new boolean[] {false, true})
                            if (!tc || (tensorCores && ResidentLowering.prefillBucket(s[0]) < Kernels.prefillTensorCoreBuckets(kv)))
                                out.add(prefillAttention(ctx, d, a, r, s[0], s[1], s[2], s[3], s[4], s[5], s[6] == 1, s[7], tc, kv));
                // decode attention: {head dim, heads, kv heads, key position, window, sinks, norm, rotary dims, splits, ring chunk}
                int[][] decode = {{128, 8, 2, 37, 0, 0, 1, 128, 4, 0}, {64, 4, 4, 70, 16, 1, 2, 32, 7, 0}, {256, 2, 1, 9, 4, 0, 0, 256, 2, 0},
                        {40, 6, 3, 100, 0, 1, 0, 40, 32, 0}, {64, 4, 4, 70, 16, 1, 2, 32, 7, 1}, {128, 8, 2, 37, 8, 0, 1, 128, 4, 5}};
                // a prompt chunk's q/k norm, rope and KV append: {head dim, heads, kv heads, tokens, first position, norm, rotary dims,
                // window, ring chunk}
                for (KvType kv : Kernels.KV_TYPES)
                    for (int[] s : new int[][] {{128, 8, 2, 5, 3, 1, 128, 0, 0}, {38, 4, 2, 3, 10, 2, 20, 0, 0}, {64, 4, 2, 5, 9, 1, 64, 4, 5}})
                        out.add(ropeAppend(ctx, d, a, r, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], kv));
                for (KvType kv : Kernels.KV_TYPES)
                    for (int[] s : decode) out.add(decodeAttention(ctx, d, a, r, s[0], s[1], s[2], s[3], s[4], s[5] == 1, s[6], s[7], s[8], s[9], kv));
                // batched decode attention: {head dim, heads, kv heads, rows, window, sinks, norm, splits, rings} (rings 1: row i's
                // caches are rings for a chunk of 1 + i % 3 tokens)
                for (KvType kv : Kernels.KV_TYPES)
                    for (int[] s : new int[][] {{128, 8, 2, 5, 0, 0, 1, 3, 0}, {64, 4, 2, 9, 12, 1, 2, 2, 0}, {40, 6, 2, 4, 0, 0, 0, 1, 0},
                            {64, 16, 2, 3, 0, 1, 1, 2, 0}, {32, 4, 4, 6, 7, 0, 0, 1, 0}, {64, 4, 2, 9, 12, 1, 2, 2, 1},
                            {256, 4, 2, 3, 0, 0, 1, 1, 0}})   // groups of 4, 2, 3, 8, 1; head dims 32 to 256 (each walk width)
                        out.add(decodeRows(ctx, d, a, r, s[0], s[1], s[2], s[3], s[4], s[5] == 1, s[6], s[7], s[8] == 1, kv));
                for (int k = 0; k < 4; k += 3) out.add(embed(ctx, d, a, r, k, quick ? 50 : 4000, quick ? 24 : 4096, 3));
            }
            return out;
        });
    }

    private static final String[] KINDS = Kernels.KINDS;

    private static String kvLabel(KvType kv) { return kv == KvType.F32 ? "" : " kv-" + kv.label(); }

    /** The spacing of a cache of this type's values near x (0 for f32: stored as computed; q8: {@link #q8Step}). */
    private static double kvStep(double x, KvType kv) {
        return kv == KvType.F16 ? Math.scalb(1.0, Math.max(Math.getExponent((float) x), -14) - 10) : 0;
    }

    /** A q8 cache's spacing for the head row x[off, off + hd): its scale, max |x| / 127 (0 for other types). */
    private static double q8Step(double[] x, int off, int hd, KvType kv) {
        double m = 0;
        for (int i = 0; i < hd; i++) m = Math.max(m, Math.abs(x[off + i]));
        return kv == KvType.Q8 ? m / 127 : 0;
    }

    private static double q8Step(float[] x, int off, int hd, KvType kv) {
        double[] d = new double[hd];
        for (int i = 0; i < hd; i++) d[i] = x[off + i];
        return q8Step(d, 0, hd, kv);
    }

    /** y[t, r] = rs[r]·Σ_c W[r, c]·x'[t, c] (+ bias) (+ y when accumulating); x' the RMS-normalized x when normed. */
    private static OpResult matvec(CudaContext ctx, Device d, Arena a, SplittableRandom r, int kind, int rows, int cols, int t,
                                   boolean variant) {
        float[] w = gauss(r, rows * cols, 0.5f), x = gauss(r, t * cols, 1f), bias = gauss(r, rows, 1f), y0 = gauss(r, t * rows, 1f);
        float[] rs = kind == 3 ? uniform(r, rows, 0.001f, 0.01f) : null;
        long dw;
        switch (kind) {
            case 0 -> dw = d.put(MemorySegment.ofArray(w));
            case 1, 2 -> {
                short[] h = new short[w.length];
                for (int i = 0; i < w.length; i++) {
                    h[i] = kind == 1 ? (short) (Float.floatToRawIntBits(w[i]) >>> 16) : Float.floatToFloat16(w[i]);
                    w[i] = kind == 1 ? Float.intBitsToFloat((h[i] & 0xffff) << 16) : Float.float16ToFloat(h[i]);   // what the GPU reads
                }
                dw = d.put(MemorySegment.ofArray(h));
            }
            default -> {
                byte[] q = new byte[w.length];
                for (int i = 0; i < w.length; i++) { q[i] = (byte) Math.max(-127, Math.min(127, Math.round(w[i] * 100))); w[i] = q[i] * rs[i / cols]; }
                dw = d.put(MemorySegment.ofArray(q));
            }
        }
        long drs = rs == null ? 0 : d.put(MemorySegment.ofArray(rs)), dx = d.put(MemorySegment.ofArray(x)), dy = d.put(MemorySegment.ofArray(y0));
        long db = variant ? d.put(MemorySegment.ofArray(bias)) : 0;
        float eps = 1e-5f;
        KernelSignature k = Kernels.matvec(KINDS[kind]);
        d.cu.launch(k.load(ctx).fn(), ArgPack.gridX(rows), t, 1, 256, 1, 1, 0,
                k.pack(a, dw, drs, 0L, db, dx, dy, rows, cols, variant ? 1 : 0, variant ? 1 : 0, variant ? eps : 0f));
        float[] got = d.get(dy, t * rows);
        double[] want = productReference(w, x, bias, y0, rows, cols, t, variant, eps);
        return result("matvec_" + KINDS[kind] + (variant ? " normed+bias+residual" : ""), rows + "x" + cols + ", " + t + " tokens",
                error(got, want), 2e-6 * Math.sqrt(cols));
    }

    /** W·x of t tokens in double; with {@code variant}, x RMS-normed first and the bias and y0 (the residual) added. */
    private static double[] productReference(float[] w, float[] x, float[] bias, float[] y0, int rows, int cols, int t, boolean variant,
                                             float eps) {
        double[] want = new double[t * rows];
        for (int tt = 0; tt < t; tt++) {
            double inv = 1;
            if (variant) {
                double ss = 0;
                for (int c = 0; c < cols; c++) ss += (double) x[tt * cols + c] * x[tt * cols + c];
                inv = 1 / Math.sqrt(ss / cols + eps);
            }
            for (int o = 0; o < rows; o++) {
                double s = 0;
                for (int c = 0; c < cols; c++) s += (double) w[o * cols + c] * x[tt * cols + c];
                s *= inv;
                if (variant) s += bias[o] + y0[tt * rows + o];
                want[tt * rows + o] = s;
            }
        }
        return want;
    }

    /**
     * The 4-bit products (kind 4 q4_block, 5 q4tp) on a random payload as the file stores it, planes as CudaMatMul
     * uploads them, against the CPU's dequantization (ReferenceKernels.dequantRow) in double; otherwise as {@link #matvec}
     * (no row scales: the 4-bit kinds carry their own).
     */
    private static OpResult matvecQ4(CudaContext ctx, Device d, Arena a, SplittableRandom r, int kind, int rows, int cols, int t,
                                     boolean variant) {
        dev.cmf4j.format.DType dt = kind == 4 ? dev.cmf4j.format.DType.Q4_BLOCK : dev.cmf4j.format.DType.Q4TP;
        long gpr = (cols + 31) / 32, n = (long) rows * cols;
        long plane = kind == 4 ? (n + 31) / 32 * 16 : rows * gpr * 16, codes = dev.cmf4j.format.quant.TpLadder.codeStride(gpr);
        MemorySegment data = a.allocate(kind == 4 ? plane / 16 * 18 : plane + 4L * rows + rows * codes, 16);
        for (long i = 0; i < data.byteSize(); i++) data.set(ValueLayout.JAVA_BYTE, i, (byte) r.nextInt(256));   // nibbles, codes
        if (kind == 4)
            for (long g = 0; g < plane / 16; g++) data.set(ArgPack.U16_LE, plane + 2 * g, Float.floatToFloat16(0.01f + 0.02f * (float) r.nextDouble()));
        else
            for (long sr = 0; sr < rows; sr++) {   // a ladder from 2^-7.5…-6.5 up by 2^0.02…0.1 a rung
                data.set(ArgPack.U16_LE, plane + 4 * sr, Float.floatToFloat16(-7.5f + (float) r.nextDouble()));
                data.set(ArgPack.U16_LE, plane + 4 * sr + 2, Float.floatToFloat16(0.02f + 0.08f * (float) r.nextDouble()));
            }
        float[] w = new float[rows * cols], row = new float[cols], x = gauss(r, t * cols, 1f), bias = gauss(r, rows, 1f), y0 = gauss(r, t * rows, 1f);
        for (int o = 0; o < rows; o++) {
            dev.cmf4j.backend.cpu.kernel.ReferenceKernels.dequantRow(dt, data, rows, cols, o, row);
            System.arraycopy(row, 0, w, o * cols, cols);
        }
        long dw = d.put(data);
        long drs = kind == 4 ? dw + plane : d.put(CudaMatMul.q4tpRungs(a, data, rows, cols)), dcf = kind == 4 ? 0 : dw + plane + 4L * rows;
        long dx = d.put(MemorySegment.ofArray(x)), dy = d.put(MemorySegment.ofArray(y0)), db = variant ? d.put(MemorySegment.ofArray(bias)) : 0;
        float eps = 1e-5f;
        KernelSignature k = Kernels.matvec(Kernels.Q4_KINDS[kind - 4]);
        d.cu.launch(k.load(ctx).fn(), ArgPack.gridX(rows), t, 1, 256, 1, 1, 0,
                k.pack(a, dw, drs, dcf, db, dx, dy, rows, cols, variant ? 1 : 0, variant ? 1 : 0, variant ? eps : 0f));
        float[] got = d.get(dy, t * rows);
        double[] want = productReference(w, x, bias, y0, rows, cols, t, variant, eps);
        return result("matvec_" + Kernels.Q4_KINDS[kind - 4] + (variant ? " normed+bias+residual" : ""), rows + "x" + cols + ", " + t + " tokens",
                error(got, want), 2e-6 * Math.sqrt(cols));
    }

    private static OpResult rmsnorm(CudaContext ctx, Device d, Arena a, SplittableRandom r, int rows, int dim, boolean offset,
                                    boolean accumulate) {
        float[] x = gauss(r, rows * dim, 2f), w = gauss(r, dim, 1f), y0 = gauss(r, rows * dim, 1f);
        float eps = 1e-6f;
        long dx = d.put(MemorySegment.ofArray(x)), dw = d.put(MemorySegment.ofArray(w)), dy = d.put(MemorySegment.ofArray(y0));
        KernelSignature k = Kernels.RMSNORM;
        d.cu.launch(k.load(ctx).fn(), rows, 1, 1, 256, 1, 1, 0, k.pack(a, dx, dw, dy, dim, eps, offset ? 1 : 0, accumulate ? 1 : 0));
        float[] ref = new float[rows * dim];
        for (int i = 0; i < rows; i++) RmsNorm.apply(x, i * dim, ref, i * dim, dim, w, offset, eps);
        double[] want = new double[ref.length];
        for (int i = 0; i < ref.length; i++) want[i] = ref[i] + (accumulate ? y0[i] : 0);
        return result("rmsnorm" + (offset ? " offset" : "") + (accumulate ? " residual" : ""), rows + "x" + dim, error(d.get(dy, rows * dim), want), 1e-5);
    }

    private static OpResult gluAct(CudaContext ctx, Device d, Arena a, SplittableRandom r, int n, Activation act) {
        float[] g = gauss(r, n, 3f), u = gauss(r, n, 1f);
        long dg = d.put(MemorySegment.ofArray(g)), du = d.put(MemorySegment.ofArray(u)), dy = d.put(MemorySegment.ofArray(new float[n]));
        KernelSignature k = Kernels.GLU_ACT;
        d.cu.launch(k.load(ctx).fn(), (n + 255) / 256, 1, 1, 256, 1, 1, 0, k.pack(a, dg, du, dy, n, act.ordinal()));
        double[] want = new double[n];
        for (int i = 0; i < n; i++) want[i] = act.apply(g[i]) * u[i];
        return result("glu_act " + act.name().toLowerCase(java.util.Locale.ROOT), Integer.toString(n), error(d.get(dy, n), want), 1e-5);
    }

    private static OpResult argmax(CudaContext ctx, Device d, Arena a, SplittableRandom r, int rows, int vocab) {
        float[] l = gauss(r, rows * vocab, 1f);
        for (int i = 0; i < rows; i++) l[i * vocab + r.nextInt(vocab)] = 50f;           // a tie with a later copy
        l[(rows - 1) * vocab + vocab - 1] = 50f;
        long dl = d.put(MemorySegment.ofArray(l)), dids = d.put(MemorySegment.ofArray(new int[rows]));
        KernelSignature k = Kernels.ARGMAX_ROWS;
        d.cu.launch(k.load(ctx).fn(), rows, 1, 1, 256, 1, 1, 0, k.pack(a, dl, dids, vocab));
        int[] got = d.getInts(dids, rows);
        int wrong = 0;
        for (int i = 0; i < rows; i++) if (got[i] != VectorMath.argmaxScalar(l, i * vocab, vocab)) wrong++;
        return result("argmax_rows", rows + "x" + vocab, wrong, 0);
    }

    /** Softmax over the experts then the top k (renormalized when normTopK), or the top k logits then their softmax. */
    private static OpResult route(CudaContext ctx, Device d, Arena a, SplittableRandom r, int t, int experts, int topK,
                                  boolean normTopK, boolean topKFirst) {
        float[] l = gauss(r, t * experts, 2f);
        long dl = d.put(MemorySegment.ofArray(l)), didx = d.put(MemorySegment.ofArray(new int[t * topK]));
        long dwts = d.put(MemorySegment.ofArray(new float[t * topK]));
        KernelSignature k = Kernels.MOE_ROUTE;
        d.cu.launch(k.load(ctx).fn(), t, 1, 1, 32, 1, 1, 0, k.pack(a, dl, didx, dwts, experts, topK, normTopK ? 1 : 0, topKFirst ? 1 : 0));
        int[] idx = d.getInts(didx, t * topK);
        float[] wts = d.get(dwts, t * topK);
        double[] want = new double[t * topK];
        int wrongIds = 0;
        for (int tt = 0; tt < t; tt++) {
            float[] row = java.util.Arrays.copyOfRange(l, tt * experts, (tt + 1) * experts);
            int[] top = new int[topK];
            Softmax.topK(row, experts, topK, top);
            float[] p = topKFirst ? new float[topK] : row.clone();
            if (topKFirst) { for (int j = 0; j < topK; j++) p[j] = row[top[j]]; Softmax.apply(p, 0, topK); }
            else Softmax.apply(p, 0, experts);
            double sum = 0;
            for (int j = 0; j < topK; j++) sum += topKFirst ? p[j] : p[top[j]];
            for (int j = 0; j < topK; j++) {
                if (idx[tt * topK + j] != top[j]) wrongIds++;
                double v = topKFirst ? p[j] : p[top[j]];
                want[tt * topK + j] = normTopK && !topKFirst ? v / sum : v;
            }
        }
        return result("moe_route" + (topKFirst ? " topk-then-softmax" : normTopK ? " renormalized" : ""), t + "x" + experts + " top " + topK,
                wrongIds > 0 ? Double.POSITIVE_INFINITY : error(wts, want), 1e-5);
    }

    /**
     * Causal attention of a prompt chunk over the cache (GQA; keys p − window < j ≤ p with a window; a sink logit per head
     * joining the softmax's denominator), against the same in double precision.
     */
    private static OpResult prefillAttention(CudaContext ctx, Device d, Arena a, SplittableRandom r, int hd, int heads, int kvHeads,
                                             int t, int pos0, int window, boolean sinks, int chunk, boolean tc, KvType kv) {
        int ctxLen = pos0 + t, kvDim = kvHeads * hd, group = heads / kvHeads, ring = KvLayout.ringRows(window, chunk);
        float scale = (float) (1 / Math.sqrt(hd));
        float[] q = gauss(r, t * heads * hd, 1f), kc = gauss(r, ctxLen * kvDim, 1f), vc = gauss(r, ctxLen * kvDim, 1f);
        float[] sink = gauss(r, heads, 1f), kExact = kc.clone(), vExact = vc.clone();
        long dq = d.put(MemorySegment.ofArray(q)), dk = d.putKv(kc, kvDim, ctxLen, ring, kv, hd),
                dv = d.putKv(vc, kvDim, ctxLen, ring, kv, hd), dkch = 0, dvch = 0;
        if (kv == KvType.Q8) {   // the chunk's own rows: read as f32 from kch/vch, never from the (rounded) cache
            System.arraycopy(kExact, pos0 * kvDim, kc, pos0 * kvDim, t * kvDim);
            System.arraycopy(vExact, pos0 * kvDim, vc, pos0 * kvDim, t * kvDim);
            dkch = d.put(MemorySegment.ofArray(java.util.Arrays.copyOfRange(kc, pos0 * kvDim, ctxLen * kvDim)));
            dvch = d.put(MemorySegment.ofArray(java.util.Arrays.copyOfRange(vc, pos0 * kvDim, ctxLen * kvDim)));
        }
        long dout = d.put(MemorySegment.ofArray(new float[t * heads * hd])), dpos = d.put(MemorySegment.ofArray(new int[] {pos0}));
        long dsinks = sinks ? d.put(MemorySegment.ofArray(sink)) : 0;
        int dim = ResidentLowering.PREFILL_DIMS[ResidentLowering.prefillBucket(hd)];
        KernelSignature k = tc ? Kernels.prefillTensorCores(dim, kv) : Kernels.prefill(dim, kv);
        int[] grid = ResidentLowering.prefillGrid(t, heads, kvHeads, hd, tc);
        d.cu.launch(k.load(ctx).fn(), grid[0], grid[1], 1, 128, 1, 1, 0,
                k.pack(a, dq, dk, dv, dout, t, heads, kvHeads, hd, scale, dpos, window, dsinks, dkch, dvch, chunk));
        double[] want = new double[t * heads * hd];
        for (int tt = 0; tt < t; tt++)
            for (int h = 0; h < heads; h++) {
                int p = pos0 + tt, first = window > 0 && p >= window ? p - window + 1 : 0, g = h / group;
                attend(q, (tt * heads + h) * hd, kc, vc, kvDim, g * hd, hd, first, p, scale, sinks ? sink[h] : Double.NaN,
                        want, (tt * heads + h) * hd);
            }
        return result("attn_prefill" + (tc ? "_tc" : "") + kvLabel(kv) + (window > 0 ? " window" : "") + (sinks ? " sinks" : "")
                        + (ring > 0 ? " ring" : ""),
                "hd " + hd + ", " + heads + "/" + kvHeads + " heads, " + t + " tokens at " + pos0, error(d.get(dout, t * heads * hd), want), 1e-5);
    }

    /**
     * A prompt chunk's r_qk_rope_append: q rows normed and roped in place, k rows normed, roped and stored with the v rows
     * at positions pos0.. of the caches, against the same in double precision (the stored rows within one step of the
     * cache's type). q8 also writes the roped k rows as f32 (kch, what the chunk's attention reads), and stores exactly
     * what {@link KvType#quantizeQ8} makes of those rows and of v: any other code or scale fails.
     */
    private static OpResult ropeAppend(CudaContext ctx, Device d, Arena a, SplittableRandom r, int hd, int heads, int kvHeads,
                                       int t, int pos0, int norm, int rot, int window, int chunk, KvType kv) {
        int ctxLen = pos0 + t, kvDim = kvHeads * hd, qDim = heads * hd, ring = KvLayout.ringRows(window, chunk), rows = ring > 0 ? ring : ctxLen;
        float ropeScale = 1.125f, eps = 1e-5f;
        float[] q = gauss(r, t * qDim, 1.5f), k = gauss(r, t * kvDim, 1.5f), v = gauss(r, t * kvDim, 1f);
        float[] qw = uniform(r, hd, 0.5f, 1.5f), kw = uniform(r, hd, -0.5f, 0.5f), invFreq = new float[rot / 2];
        for (int i = 0; i < rot / 2; i++) invFreq[i] = (float) Math.pow(10000, -2.0 * i / rot);
        long dq = d.put(MemorySegment.ofArray(q)), dk = d.put(MemorySegment.ofArray(k)), dv = d.put(MemorySegment.ofArray(v));
        long dkc = d.putKv(new float[rows * kvDim], kv, hd), dvc = d.putKv(new float[rows * kvDim], kv, hd);
        long dqw = norm > 0 ? d.put(MemorySegment.ofArray(qw)) : 0, dkw = norm > 0 ? d.put(MemorySegment.ofArray(kw)) : 0;
        long dinv = d.put(MemorySegment.ofArray(invFreq)), dpos = d.put(MemorySegment.ofArray(new int[] {pos0}));
        long dkch = kv == KvType.Q8 ? d.put(MemorySegment.ofArray(new float[t * kvDim])) : 0;
        KernelSignature kern = Kernels.qkRopeAppend(kv);
        d.cu.launch(kern.load(ctx).fn(), (heads + kvHeads + 3) / 4, t, 1, 128, 1, 1, 0, kern.pack(a, dq, dk, dv, dkc, dvc, dqw, dkw,
                norm > 0 ? 1 : 0, norm > 0 ? 1 : 0, eps, norm == 2 ? 1 : 0, dinv, rot, ropeScale, heads, kvHeads, hd, dpos, dkch, window, chunk));
        float[] qGot = d.get(dq, t * qDim), kcGot = d.getKv(dkc, rows * kvDim, kv, hd), vcGot = d.getKv(dvc, rows * kvDim, kv, hd);
        float[] kch = kv == KvType.Q8 ? d.get(dkch, t * kvDim) : null;
        double[] want = new double[t * qDim];
        double err = 0, mag = 0;
        boolean exact = true;
        for (int tt = 0; tt < t; tt++) {
            int p = pos0 + tt;
            for (int h = 0; h < heads; h++)
                System.arraycopy(normRope(q, (tt * heads + h) * hd, hd, norm, qw, eps, invFreq, rot, ropeScale, p), 0, want, (tt * heads + h) * hd, hd);
            for (int g = 0; g < kvHeads; g++) {
                double[] kr = normRope(k, (tt * kvHeads + g) * hd, hd, norm, kw, eps, invFreq, rot, ropeScale, p);
                int at = KvLayout.slot(p, ring) * kvDim + g * hd, raw = (tt * kvHeads + g) * hd;
                double kq = q8Step(kr, 0, hd, kv), vq = q8Step(v, raw, hd, kv);
                for (int c = 0; c < hd; c++) {
                    err = Math.max(err, Math.max(Math.max(0, Math.abs(kcGot[at + c] - kr[c]) - kvStep(kr[c], kv) - kq),
                            Math.max(0, Math.abs(vcGot[at + c] - v[raw + c]) - kvStep(v[raw + c], kv) - vq)));
                    if (kch != null) err = Math.max(err, Math.abs(kch[raw + c] - kr[c]));
                    mag = Math.max(mag, Math.abs(kr[c]));
                }
                if (kch != null) {   // the stored rows are exactly KvType's quantization of kch's row and of v's
                    float[] kx = java.util.Arrays.copyOfRange(kch, raw, raw + hd), vx = java.util.Arrays.copyOfRange(v, raw, raw + hd);
                    KvLayout.encode(a, kx, kv, hd);
                    KvLayout.encode(a, vx, kv, hd);
                    exact &= java.util.Arrays.equals(kx, java.util.Arrays.copyOfRange(kcGot, at, at + hd))
                            && java.util.Arrays.equals(vx, java.util.Arrays.copyOfRange(vcGot, at, at + hd));
                }
            }
        }
        double e = exact ? Math.max(error(qGot, want), err / Math.max(1e-30, mag)) : Double.POSITIVE_INFINITY;
        return result("qk_rope_append" + kvLabel(kv) + (norm == 1 ? " qk-norm" : norm == 2 ? " qk-norm offset" : "")
                + (rot < hd ? " partial rope" : "") + (ring > 0 ? " ring" : ""), "hd " + hd + ", " + heads + "/" + kvHeads + " heads, "
                + t + " tokens at " + pos0, e, 1e-5);
    }

    /**
     * One decode step of attention as r_attn_partial runs it: the q and k rows normed (0 none, 1 w·x, 2 (1+w)·x) and
     * roped at p, key p's k and v appended to the caches, then the split keys' partials merged: the output and the
     * appended rows against the same in double precision.
     */
    private static OpResult decodeAttention(CudaContext ctx, Device d, Arena a, SplittableRandom r, int hd, int heads, int kvHeads,
                                            int p, int window, boolean sinks, int norm, int rot, int splits, int chunk, KvType kv) {
        int ctxLen = p + 1, kvDim = kvHeads * hd, group = heads / kvHeads, ring = KvLayout.ringRows(window, chunk), rows = ring > 0 ? ring : ctxLen;
        float scale = (float) (1 / Math.sqrt(hd)), ropeScale = 1.125f, eps = 1e-5f;
        float[] kc = gauss(r, ctxLen * kvDim, 1f), vc = gauss(r, ctxLen * kvDim, 1f);
        float[] q = gauss(r, heads * hd, 1.5f), k = gauss(r, kvDim, 1.5f), v = gauss(r, kvDim, 1f);
        float[] qw = uniform(r, hd, 0.5f, 1.5f), kw = uniform(r, hd, -0.5f, 0.5f), sink = gauss(r, heads, 1f);
        float[] invFreq = new float[Math.max(1, rot / 2)];
        for (int i = 0; i < rot / 2; i++) invFreq[i] = (float) Math.pow(10000, -2.0 * i / rot);
        long dq = d.put(MemorySegment.ofArray(q)), dk = d.put(MemorySegment.ofArray(k)), dv = d.put(MemorySegment.ofArray(v));
        long dkc = d.putKv(kc, kvDim, ctxLen, ring, kv, hd), dvc = d.putKv(vc, kvDim, ctxLen, ring, kv, hd);
        long dqw = norm > 0 ? d.put(MemorySegment.ofArray(qw)) : 0, dkw = norm > 0 ? d.put(MemorySegment.ofArray(kw)) : 0;
        long dinv = d.put(MemorySegment.ofArray(invFreq)), dpos = d.put(MemorySegment.ofArray(new int[] {p}));
        long dpm = d.put(MemorySegment.ofArray(new float[heads * splits])), dpl = d.put(MemorySegment.ofArray(new float[heads * splits]));
        long dacc = d.put(MemorySegment.ofArray(new float[heads * splits * hd])), ddone = d.put(MemorySegment.ofArray(new int[heads]));
        long dout = d.put(MemorySegment.ofArray(new float[heads * hd])), dsinks = sinks ? d.put(MemorySegment.ofArray(sink)) : 0;
        KernelSignature kern = Kernels.attnPartial(kv);
        d.cu.launch(kern.load(ctx).fn(), heads, 1, splits, 128, 1, 1, 0, kern.pack(a, dq, dk, dv, dkc, dvc, dqw, dkw, norm > 0 ? 1 : 0,
                norm > 0 ? 1 : 0, eps, norm == 2 ? 1 : 0, dinv, rot, ropeScale, dpm, dpl, dacc, heads, kvHeads, hd, scale, dpos, splits,
                window, dout, ddone, dsinks, chunk));
        float[] got = d.get(dout, heads * hd), kcGot = d.getKv(dkc, rows * kvDim, kv, hd), vcGot = d.getKv(dvc, rows * kvDim, kv, hd);
        double appended = 0, appendedMag = 0;
        for (int g = 0; g < kvHeads; g++) {
            double[] kr = normRope(k, g * hd, hd, norm, kw, eps, invFreq, rot, ropeScale, p);
            double kq = q8Step(kr, 0, hd, kv), vq = q8Step(v, g * hd, hd, kv);
            for (int c = 0; c < hd; c++) {
                int i = p * kvDim + g * hd + c, at = KvLayout.slot(p, ring) * kvDim + g * hd + c;
                // the appended rows as the cache stores them (f16 / q8: within one step of the exact row, whose f32
                // rounding on the GPU may sit on the other side of a rounding boundary)
                appended = Math.max(appended, Math.max(Math.max(0, Math.abs(kcGot[at] - kr[c]) - kvStep(kr[c], kv) - kq),
                        Math.max(0, Math.abs(vcGot[at] - v[g * hd + c]) - kvStep(v[g * hd + c], kv) - vq)));
                appendedMag = Math.max(appendedMag, Math.abs(kr[c]));
                kc[i] = (float) kr[c];
                vc[i] = v[g * hd + c];
            }
        }
        float[] qr = new float[heads * hd];
        for (int h = 0; h < heads; h++) {
            double[] x = normRope(q, h * hd, hd, norm, qw, eps, invFreq, rot, ropeScale, p);
            for (int c = 0; c < hd; c++) qr[h * hd + c] = (float) x[c];
        }
        double[] want = new double[heads * hd];
        int first = window > 0 && p >= window ? p - window + 1 : 0;
        for (int h = 0; h < heads; h++)
            attend(qr, h * hd, kc, vc, kvDim, (h / group) * hd, hd, first, p, scale, sinks ? sink[h] : Double.NaN, want, h * hd);
        double err = Math.max(error(got, want), appended / Math.max(1e-30, appendedMag));
        return result("attn_decode" + kvLabel(kv) + (norm == 1 ? " qk-norm" : norm == 2 ? " qk-norm offset" : "") + (rot < hd ? " partial rope" : "")
                + (window > 0 ? " window" : "") + (sinks ? " sinks" : "") + (ring > 0 ? " ring" : ""),
                "hd " + hd + ", " + heads + "/" + kvHeads + " heads, key " + p + ", " + splits + " splits", err, 1e-5);
    }

    /**
     * One decode step of several sequences (r_attn_rows): row i is its own sequence's token at its own position over
     * its own caches (found through per-row address tables), normed, roped and appended as in {@link #decodeAttention}.
     */
    private static OpResult decodeRows(CudaContext ctx, Device d, Arena a, SplittableRandom r, int hd, int heads, int kvHeads,
                                       int rows, int window, boolean sinks, int norm, int splits, boolean rings, KvType kv) {
        int kvDim = kvHeads * hd, group = heads / kvHeads;
        float scale = (float) (1 / Math.sqrt(hd)), ropeScale = 1f, eps = 1e-6f;
        float[] q = gauss(r, rows * heads * hd, 1.5f), k = gauss(r, rows * kvDim, 1.5f), v = gauss(r, rows * kvDim, 1f);
        float[] qw = uniform(r, hd, 0.5f, 1.5f), kw = uniform(r, hd, -0.5f, 0.5f), sink = gauss(r, heads, 1f);
        float[] invFreq = new float[hd / 2];
        for (int i = 0; i < hd / 2; i++) invFreq[i] = (float) Math.pow(500000, -2.0 * i / hd);
        int[] pos = new int[rows], chunks = new int[rows];
        float[][] kc = new float[rows][], vc = new float[rows][];
        long[] dkc = new long[rows], dvc = new long[rows];
        for (int i = 0; i < rows; i++) {
            pos[i] = 3 + 7 * i;
            chunks[i] = rings ? 1 + i % 3 : 0;
            kc[i] = gauss(r, (pos[i] + 1) * kvDim, 1f);
            vc[i] = gauss(r, (pos[i] + 1) * kvDim, 1f);
            int ring = KvLayout.ringRows(window, chunks[i]);
            dkc[i] = d.putKv(kc[i], kvDim, pos[i] + 1, ring, kv, hd);
            dvc[i] = d.putKv(vc[i], kvDim, pos[i] + 1, ring, kv, hd);
        }
        long dq = d.put(MemorySegment.ofArray(q)), dk = d.put(MemorySegment.ofArray(k)), dv = d.put(MemorySegment.ofArray(v));
        long dkcs = d.put(MemorySegment.ofArray(dkc)), dvcs = d.put(MemorySegment.ofArray(dvc)), dpos = d.put(MemorySegment.ofArray(pos));
        long dqw = norm > 0 ? d.put(MemorySegment.ofArray(qw)) : 0, dkw = norm > 0 ? d.put(MemorySegment.ofArray(kw)) : 0;
        long dinv = d.put(MemorySegment.ofArray(invFreq)), dsinks = sinks ? d.put(MemorySegment.ofArray(sink)) : 0;
        long dchunks = d.put(MemorySegment.ofArray(chunks));
        long dpm = d.put(MemorySegment.ofArray(new float[rows * heads * splits])), dpl = d.put(MemorySegment.ofArray(new float[rows * heads * splits]));
        long dacc = d.put(MemorySegment.ofArray(new float[rows * heads * splits * hd])), ddone = d.put(MemorySegment.ofArray(new int[rows * heads]));
        long dout = d.put(MemorySegment.ofArray(new float[rows * heads * hd]));
        KernelSignature kern = Kernels.attnRows(kv);
        d.cu.launch(kern.load(ctx).fn(), heads, rows, splits, 128, 1, 1, 0, kern.pack(a, dq, dk, dv, dkcs, dvcs, dqw, dkw, norm > 0 ? 1 : 0,
                norm > 0 ? 1 : 0, eps, norm == 2 ? 1 : 0, dinv, hd, ropeScale, dpm, dpl, dacc, heads, kvHeads, hd, scale, dpos, splits,
                window, dout, ddone, dsinks, dchunks));
        float[] got = d.get(dout, rows * heads * hd);
        double[] want = new double[rows * heads * hd];
        for (int i = 0; i < rows; i++) {
            int p = pos[i];
            for (int g = 0; g < kvHeads; g++) {
                double[] kr = normRope(k, i * kvDim + g * hd, hd, norm, kw, eps, invFreq, hd, ropeScale, p);
                for (int c = 0; c < hd; c++) {
                    kc[i][p * kvDim + g * hd + c] = (float) kr[c];
                    vc[i][p * kvDim + g * hd + c] = v[i * kvDim + g * hd + c];
                }
            }
            int first = window > 0 && p >= window ? p - window + 1 : 0;
            for (int h = 0; h < heads; h++) {
                float[] qr = new float[hd];
                double[] x = normRope(q, (i * heads + h) * hd, hd, norm, qw, eps, invFreq, hd, ropeScale, p);
                for (int c = 0; c < hd; c++) qr[c] = (float) x[c];
                attend(qr, 0, kc[i], vc[i], kvDim, (h / group) * hd, hd, first, p, scale, sinks ? sink[h] : Double.NaN, want,
                        (i * heads + h) * hd);
            }
        }
        return result("attn_rows" + kvLabel(kv) + (norm == 1 ? " qk-norm" : norm == 2 ? " qk-norm offset" : "") + (window > 0 ? " window" : "")
                + (sinks ? " sinks" : "") + (rings ? " rings" : ""), "hd " + hd + ", " + heads + "/" + kvHeads + " heads, " + rows + " rows, " + splits + " splits",
                error(got, want), 1e-5);
    }

    /** A cache of {@code keys} position rows as a ring of {@code ring} rows (later keys over earlier ones), or as is (ring 0). */
    static float[] asRing(float[] byPosition, int kvDim, int keys, int ring) {
        if (ring == 0) return byPosition;
        float[] out = new float[ring * kvDim];
        for (int j = 0; j < keys; j++) System.arraycopy(byPosition, j * kvDim, out, KvLayout.slot(j, ring) * kvDim, kvDim);
        return out;
    }

    /** Row x[off, off + hd) normed (0 none, 1 w·x, 2 (1 + w)·x; RMS with eps) then rotate_half-roped at p, in double. */
    static double[] normRope(float[] x, int off, int hd, int norm, float[] w, float eps, float[] invFreq, int rot,
                                     float ropeScale, int p) {
        double[] b = new double[hd], o = new double[hd];
        double ss = 0;
        for (int i = 0; i < hd; i++) ss += (double) x[off + i] * x[off + i];
        double inv = 1 / Math.sqrt(ss / hd + eps);
        for (int i = 0; i < hd; i++) b[i] = norm == 0 ? x[off + i] : (norm == 1 ? w[i] : 1 + w[i]) * (x[off + i] * inv);
        int half = rot / 2;
        for (int i = 0; i < hd; i++) {
            if (i >= rot) { o[i] = b[i]; continue; }
            int j = i < half ? i : i - half;
            double angle = (float) ((float) p * invFreq[j]), c = Math.cos(angle) * ropeScale, s = Math.sin(angle) * ropeScale;
            o[i] = i < half ? b[i] * c - b[i + half] * s : b[i] * c + b[j] * s;
        }
        return o;
    }

    /** out[oOff..] += softmax(scale·q·k_j for first ≤ j ≤ p, with the sink's logit in the denominator unless NaN)·v. */
    private static void attend(float[] q, int qOff, float[] kc, float[] vc, int kvDim, int kvOff, int hd, int first, int p,
                               float scale, double sink, double[] out, int oOff) {
        double[] s = new double[p + 1];
        double max = Double.isNaN(sink) ? Double.NEGATIVE_INFINITY : sink;
        for (int j = first; j <= p; j++) {
            double dot = 0;
            for (int c = 0; c < hd; c++) dot += (double) q[qOff + c] * kc[j * kvDim + kvOff + c];
            s[j] = dot * scale;
            max = Math.max(max, s[j]);
        }
        double sum = Double.isNaN(sink) ? 0 : Math.exp(sink - max);
        for (int j = first; j <= p; j++) sum += s[j] = Math.exp(s[j] - max);
        for (int j = first; j <= p; j++)
            for (int c = 0; c < hd; c++) out[oOff + c] += s[j] / sum * vc[j * kvDim + kvOff + c];
    }

    private static OpResult embed(CudaContext ctx, Device d, Arena a, SplittableRandom r, int kind, int vocab, int cols, int t) {
        float[] e = gauss(r, vocab * cols, 1f);
        float[] rs = kind == 3 ? uniform(r, vocab, 0.001f, 0.01f) : null;
        long de;
        if (kind == 3) {
            byte[] q = new byte[e.length];
            for (int i = 0; i < e.length; i++) { q[i] = (byte) Math.max(-127, Math.min(127, Math.round(e[i] * 100))); e[i] = q[i] * rs[i / cols]; }
            de = d.put(MemorySegment.ofArray(q));
        } else de = d.put(MemorySegment.ofArray(e));
        int[] ids = new int[t];
        for (int i = 0; i < t; i++) ids[i] = r.nextInt(vocab);
        long drs = rs == null ? 0 : d.put(MemorySegment.ofArray(rs)), dids = d.put(MemorySegment.ofArray(ids));
        long dx = d.put(MemorySegment.ofArray(new float[t * cols]));
        float scale = 1.5f;
        KernelSignature k = Kernels.embed(KINDS[kind]);
        d.cu.launch(k.load(ctx).fn(), t, 1, 1, 256, 1, 1, 0, k.pack(a, de, drs, 0L, dids, dx, cols, scale));
        double[] want = new double[t * cols];
        for (int i = 0; i < t; i++) for (int c = 0; c < cols; c++) want[i * cols + c] = e[ids[i] * cols + c] * scale;
        return result("embed_" + KINDS[kind], vocab + "x" + cols + ", " + t + " ids", error(d.get(dx, t * cols), want), 1e-6);
    }

    private static OpResult result(String op, String shape, double error, double bound) { return new OpResult(op, shape, error, bound); }

    /** max |got − want| / max |want| (the differences of an all-zero reference as they are). */
    private static double error(float[] got, double[] want) {
        double diff = 0, mag = 0;
        for (int i = 0; i < want.length; i++) {
            double dv = Math.abs(got[i] - want[i]);
            diff = Double.isNaN(dv) ? Double.POSITIVE_INFINITY : Math.max(diff, dv);
            mag = Math.max(mag, Math.abs(want[i]));
        }
        return mag == 0 ? diff : diff / mag;
    }

    private static float[] gauss(SplittableRandom r, int n, float scale) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = (float) (gaussian(r) * scale);
        return v;
    }

    private static double gaussian(SplittableRandom r) {   // Box–Muller, from the seeded generator
        return Math.sqrt(-2 * Math.log(1 - r.nextDouble())) * Math.cos(2 * Math.PI * r.nextDouble());
    }

    private static float[] uniform(SplittableRandom r, int n, float lo, float hi) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = lo + (hi - lo) * (float) r.nextDouble();
        return v;
    }

    /** Device buffers of one check run (owner thread), freed together. */
    private static final class Device implements AutoCloseable {
        final CudaDriver cu;
        private final Arena arena;
        private final List<Long> owned = new ArrayList<>();

        Device(CudaDriver cu, Arena arena) { this.cu = cu; this.arena = arena; }

        long put(MemorySegment host) {
            long n = Math.max(16, host.byteSize());
            long p = cu.memAlloc(n);
            owned.add(p);
            MemorySegment staged = arena.allocate(n, 16);
            staged.copyFrom(host);
            cu.copyToDevice(p, staged, host.byteSize());
            return p;
        }

        float[] get(long p, int n) {
            cu.synchronize();
            MemorySegment s = arena.allocate(4L * n, 4);
            cu.copyToHost(s, p, 4L * n);
            return s.toArray(ValueLayout.JAVA_FLOAT);
        }

        /** A KV cache's rows in its type's layout (their values rounded in place first: what the kernels read). */
        long putKv(float[] x, KvType kv, int hd) { return put(KvLayout.encode(arena, x, kv, hd)); }

        /** {@link #putKv} of {@code keys} position rows laid out as a ring of {@code ring} rows ({@link #asRing}; 0: as is). */
        long putKv(float[] x, int kvDim, int keys, int ring, KvType kv, int hd) {
            if (ring == 0) return putKv(x, kv, hd);
            long p = put(KvLayout.encode(arena, asRing(x, kvDim, keys, ring), kv, hd));   // the rows encoded as putKv would
            KvLayout.encode(arena, x, kv, hd);   // x then holds what the cache holds, as after putKv
            return p;
        }

        float[] getKv(long p, int n, KvType kv, int hd) {
            cu.synchronize();
            long bytes = KvLayout.rowBytes(kv, n / hd, hd);
            MemorySegment s = arena.allocate(bytes, 4);
            cu.copyToHost(s, p, bytes);
            return KvLayout.decode(s, n, kv, hd);
        }

        int[] getInts(long p, int n) {
            cu.synchronize();
            MemorySegment s = arena.allocate(4L * n, 4);
            cu.copyToHost(s, p, 4L * n);
            return s.toArray(ValueLayout.JAVA_INT);
        }

        @Override public void close() { for (long p : owned) cu.memFree(p); }
    }
}
