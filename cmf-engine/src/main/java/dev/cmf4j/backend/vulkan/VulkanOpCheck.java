package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.OpResult;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * The device's products one dtype and shape at a time against the CPU's on random inputs (llama.cpp's test-backend-ops):
 * each weight is written in its CMF layout (f32, bf16, f16, q8_row, q8_2f, q4_block, q4tp), and the device's y = W·x is
 * compared with the CPU's reference products ({@link CpuBackend#reference}) on the same {@link Matrix} and with a float64
 * sum over the dtype's own row decoder. The error is the largest difference over the float64 reference's largest
 * magnitude; the bound is 2e-6·√cols (f32 sums in another order). Where the device takes prompt products on cooperative
 * matrices (matmul_coop.comp: f16 and int8 weights, activations in two f16 parts), those checks are named {@code matmul_coop_*} and bounded by {@link #COOP_BOUND},
 * and the same shapes also run through matmul.comp under the f32 bound.
 */
final class VulkanOpCheck {
    private VulkanOpCheck() {}

    static final DType[] DTYPES = {DType.F32, DType.BF16, DType.F16, DType.Q8_ROW, DType.Q8_2F, DType.Q4_BLOCK, DType.Q4TP};
    private static final ValueLayout.OfShort U16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /**
     * {rows, cols, tokens}: one token (matvec_decode.comp, 8 rows a workgroup; a width of 4s and an odd one, and both past
     * its 4096-column tile), odd widths (the shader's one-element path), a tile of 8 tokens and one more, a row count over
     * the 64-invocation workgroup and a wide one; from 32 tokens matmul.comp's 64 × 64 tiles, from 128 its 128 × 64
     * ones: rows and tokens past one tile and short of the next, an odd width; not quick: larger products.
     */
    static final int[][] QUICK = {{13, 64, 1}, {11, 30, 1}, {19, 4500, 1}, {6, 4099, 1}, {9, 30, 3}, {70, 256, 9}, {5, 7, 17},
            {19, 4500, 5}, {33, 1024, 31}, {70, 256, 40}, {5, 7, 33}, {130, 96, 70}, {130, 96, 130}, {5, 7, 129}};
    static final int[][] FULL = {{1000, 2048, 8}, {4096, 4096, 1}, {300, 1000, 33}};

    /**
     * matmul_coop.comp's products (only where the device has them) {rows, cols, tokens}: partial tiles of rows and tokens,
     * whole ones, an odd width (the one-element loads), a width of 4s that ends within a step of 32 columns and one that
     * ends within an invocation's 8 activations, a width of 16s that ends halfway through a step.
     */
    static final int[][] COOP = {{70, 256, 40}, {130, 96, 70}, {64, 64, 64}, {5, 7, 33}, {129, 4100, 100}, {260, 1004, 65},
            {300, 4112, 130}};
    /** The benchmark's shape (llama-8b's q, o: 4096 × 4096 at a 512-token prompt), int8 with column scales only: its reference takes seconds. */
    static final int[] COOP_LARGE = {4096, 4096, 512};
    /**
     * The bound of matmul_coop.comp's products over the reference's largest magnitude beyond their f32 sums'
     * {@link #COOP_SUMS}·√cols: 2^-20. The weights are exact in f16; an activation u (times its column scale, over its token's power of two just
     * above the token's largest) goes in as p0 + p1·2^-11 with p0 to nearest at 11 bits and p1 to nearest in f16, within
     * 2^-22 of u (subnormal parts: 2^-36 of the token's largest), and each part's products are summed in their own f32
     * accumulators. A lost part (one f16 part: about 2^-12, sessions 21 and 23 on the H200) fails it, and so does a lost
     * or doubled tile, step or scale at any width.
     */
    static final double COOP_BOUND = 0x1p-20;
    /**
     * The f32 sums' share of matmul_coop.comp's bound, per √cols: a quarter of the other products' 2e-6, so that one f16
     * part (about 1e-4 at 4096 columns) fails it at every width; measured: 5e-8·√cols (lavapipe, emulated) and 9e-8·√cols (H200).
     */
    static final double COOP_SUMS = 5e-7;

    static List<OpResult> run(VulkanMatMul device, boolean quick) {
        List<OpResult> out = new ArrayList<>();
        MatMul cpu = CpuBackend.reference().matmul();
        SplittableRandom r = new SplittableRandom(24);
        List<int[]> shapes = new ArrayList<>(List.of(QUICK));
        if (!quick) shapes.addAll(List.of(FULL));
        for (DType dt : DTYPES)
            for (int[] s : shapes)
                if (dt != DType.Q4TP || s[1] % 32 == 0)   // q4tp: whole groups
                    out.addAll(product(device, cpu, r, dt, s[0], s[1], s[2]));
        out.addAll(operators(device, r));
        out.addAll(deltaNet(device, r));
        if (device.context().float64) out.addAll(embryo(device, r));
        out.addAll(foldedProducts(device, r));
        out.addAll(foldedTokens(device, r));
        out.addAll(foldedGateUp(device, r));
        out.addAll(moeRouting(device, r));
        out.addAll(moeExperts(device, r));
        out.addAll(kvHalf(device, new SplittableRandom(16)));
        if (device.context().gemmCoop != null) out.addAll(coopProducts(device, cpu, r, quick));
        return out;
    }

    /**
     * ops.comp's operators of the resident forward, each against the CPU's operator ({@code RmsNorm}, {@code Rotary},
     * {@code Activation}) or, for attention, a float64 softmax over the cache; error over the reference's largest
     * magnitude.
     */
    static List<OpResult> operators(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        // RMSNorm {rows, width}: plain weight, offset (gemma) weight, none
        for (int[] sh : new int[][] {{3, 7}, {2, 256}, {5, 1000}})
            for (int variant = 0; variant < 3; variant++) {
                int rows = sh[0], n = sh[1];
                float[] x = gauss(r, rows * n, 2), y = new float[rows * n], w = gauss(r, n, 1), want = new float[rows * n];
                float eps = 1e-6f;
                for (int i = 0; i < rows; i++)
                    dev.cmf4j.backend.cpu.RmsNorm.apply(x, i * n, want, i * n, n, variant == 2 ? null : w, variant == 1, eps);
                run(mm, 0, rows, new int[] {rows, n, 0, 0, 0, variant == 2 ? 0 : variant == 1 ? 3 : 1, Float.floatToRawIntBits(eps), n, n}, x, y, w, x);
                out.add(new OpResult("rmsnorm" + (variant == 0 ? "" : variant == 1 ? " offset" : " no weight"), rows + "x" + n, error(y, want), 1e-5));
            }
        // rotary {tokens, heads, head dim, rotary dims}
        for (int[] sh : new int[][] {{3, 4, 64, 64}, {2, 2, 128, 32}, {5, 3, 40, 40}}) {
            int T = sh[0], heads = sh[1], hd = sh[2], rd = sh[3], half = rd / 2, pos0 = 7;
            float[] inv = new float[half];
            for (int i = 0; i < half; i++) inv[i] = (float) Math.pow(10000, -2.0 * i / rd);
            float[] x = gauss(r, T * heads * hd, 1), want = x.clone(), table = new float[2 * T * half], cos = new float[half], sin = new float[half];
            for (int t = 0; t < T; t++) {
                dev.cmf4j.backend.cpu.Rotary.table(pos0 + t, inv, 1.1f, cos, sin);
                System.arraycopy(cos, 0, table, t * half, half);
                System.arraycopy(sin, 0, table, T * half + t * half, half);
                dev.cmf4j.backend.cpu.Rotary.apply(want, t * heads * hd, heads, hd, rd, cos, sin);
            }
            run(mm, 1, T * heads, new int[] {T * heads, heads, hd, rd, 0, T, 0}, x, x, table, x);
            out.add(new OpResult("rope", T + " tokens, " + heads + "x" + hd + ", " + rd + " rotary", error(x, want), 1e-6));
            // as keys: T tokens of `heads` kv heads rotated into a cache at position 2 + t (the step buffer's), rows of
            // heads*hd + 3 floats (dims past the rotary ones copied); no q rows
            int stride = heads * hd + 3, cachePos = 2;
            float[] keys = gauss(r, T * heads * hd, 1), cache = new float[(cachePos + T) * stride], wantCache = new float[cache.length];
            float[] rotated = keys.clone();
            for (int t = 0; t < T; t++) {
                dev.cmf4j.backend.cpu.Rotary.table(pos0 + t, inv, 1.1f, cos, sin);
                dev.cmf4j.backend.cpu.Rotary.apply(rotated, t * heads * hd, heads, hd, rd, cos, sin);
                System.arraycopy(rotated, t * heads * hd, wantCache, (cachePos + t) * stride, heads * hd);
            }
            run(mm, 1, T * heads, new int[] {0, heads, hd, rd, 0, T, 0, T * heads, heads, stride}, cachePos, keys, keys, table, cache);
            out.add(new OpResult("rope into cache", T + " tokens, " + heads + "x" + hd + ", " + rd + " rotary", error(cache, wantCache), 1e-6));
        }
        // attention {tokens, heads, kv heads, head dim, first position, window, context}
        // (one token: also the split decode attention, over one split and over several, with a window past the first,
        // and a head dim that is not a multiple of 4: its one-float loads; several tokens: a group of 16 heads, and a
        // window over several tokens of a group); every other shape with a sink logit per head
        // (gpt-oss: it joins the softmax's denominator only; some above every score, some below)
        int foldedShape = 0, shapeIndex = 0;
        for (int[] sh : new int[][] {{1, 4, 2, 64, 9, 0, 16}, {5, 4, 1, 32, 3, 0, 16}, {6, 2, 2, 128, 10, 4, 20}, {3, 8, 8, 256, 0, 0, 8},
                {70, 2, 1, 16, 0, 0, 80}, {1, 4, 1, 128, 200, 0, 256}, {1, 2, 2, 256, 190, 70, 300}, {1, 3, 3, 40, 127, 0, 128},
                {1, 2, 1, 18, 70, 0, 80}, {9, 16, 1, 32, 5, 0, 20}, {7, 4, 2, 32, 12, 5, 24}}) {
            int T = sh[0], heads = sh[1], kvh = sh[2], hd = sh[3], pos0 = sh[4], window = sh[5], context = sh[6];
            boolean withSinks = shapeIndex++ % 2 == 1;
            float[] sinks = withSinks ? gauss(r, heads, 3) : new float[1];
            int sinkArg = withSinks ? 1 : 0;   // u12: the sinks' offset + 1 in P
            String sinkName = withSinks ? " sinks" : "";
            int qd = heads * hd, kvd = kvh * hd;
            float scale = (float) (1 / Math.sqrt(hd));
            float[] q = gauss(r, T * qd, 1), k = gauss(r, context * kvd, 1), v = gauss(r, context * kvd, 1);
            float[] d = new float[T * qd + heads * T * context];
            double[] want = attention(q, k, v, T, heads, kvh, hd, pos0, window, scale, withSinks ? sinks : null);
            run(mm, new int[] {2}, new int[] {T * heads}, new int[] {T, heads, kvh, hd, 0, window, Float.floatToRawIntBits(scale), kvd, context, qd, T * qd, 0, sinkArg},
                    pos0, q, k, v, d, q, q, q, sinks);
            out.add(new OpResult("attention" + sinkName + (window > 0 ? " window " + window : ""), T + " tokens at " + pos0 + ", " + heads + "/" + kvh
                    + " heads x" + hd, error(java.util.Arrays.copyOf(d, T * qd), want), 1e-5));
            // a decode step's split attention: OP 7 by workgroups of chunks of the context, OP 8 combining them; one
            // workgroup per chunk, and 2 per head taking several chunks each
            int chunks = (context + VulkanResidentForward.ATTENTION_SPLIT - 1) / VulkanResidentForward.ATTENTION_SPLIT;
            for (int per : chunks > 2 ? new int[] {chunks, 2} : new int[] {chunks}) {
                if (T != 1) break;
                float[] ds = new float[qd + heads * per * (hd + 2)];
                int[] u = {1, heads, kvh, hd, 0, window, Float.floatToRawIntBits(scale), kvd, 0, 0, qd, per, sinkArg};
                run(mm, new int[] {7, 8}, new int[] {heads * per, heads}, u, pos0, q, k, v, ds, q, q, q, sinks);
                out.add(new OpResult("split attention" + sinkName + (window > 0 ? " window " + window : ""), "1 token at " + pos0 + ", " + heads + "/" + kvh
                        + " heads x" + hd + ", " + per + " groups a head", error(java.util.Arrays.copyOf(ds, qd), want), 1e-5));
            }
            if (T == 1) out.addAll(foldedAttention(mm, r, heads, kvh, hd, pos0, window, context, foldedShape++, withSinks ? sinks : null));
        }
        // GLU act(gate)·up, residual add, copy
        int n = 1000;
        for (dev.cmf4j.backend.Activation act : dev.cmf4j.backend.Activation.values()) {
            float[] g = gauss(r, n, 3), u = gauss(r, n, 1), want = new float[n];
            for (int i = 0; i < n; i++) want[i] = act.apply(g[i]) * u[i];
            run(mm, 3, (n + 63) / 64, new int[] {n, act.ordinal()}, g, u, g, g);
            out.add(new OpResult("glu " + act.name().toLowerCase(java.util.Locale.ROOT), n + " values", error(g, want), 1e-5));
        }
        float[] rowsIn = gauss(r, 3 * 70, 1), bias = gauss(r, 5 + 70, 1), biased = rowsIn.clone();
        for (int i = 0; i < biased.length; i++) biased[i] += bias[5 + i % 70];
        run(mm, 6, 4, new int[] {3 * 70, 5, 70}, rowsIn, rowsIn, bias, rowsIn);
        out.add(new OpResult("bias", "3x70", error(rowsIn, biased), 0));
        float[] a = gauss(r, n, 1), b = gauss(r, n, 1), sum = new float[n];
        for (int i = 0; i < n; i++) sum[i] = a[i] + b[i];
        run(mm, 5, 3, new int[] {n}, a, b, a, a);
        out.add(new OpResult("add", n + " values", error(a, sum), 0));
        // into the cache at position 3 of rows of 11: offset 50 - 33 + 3·11
        float[] src = gauss(r, n, 1), dst = new float[n + 50], moved = new float[n + 50];
        System.arraycopy(src, 10, moved, 50, n - 10);
        run(mm, 4, 2, new int[] {n - 10, 10, 50 - 33, 11}, 3, src, dst, src, src);
        out.add(new OpResult("copy", (n - 10) + " values", error(dst, moved), 0));
        out.addAll(gemma4Operators(mm, r));
        return out;
    }

    /**
     * Gemma4's operators against the CPU graph's arithmetic (CpuPlan's PerLayerTable, PerLayerInput, ScaleLayer): the
     * per-layer inputs' combine (OP 16: the projection's slices scaled, RMSNorm'd with a plain, offset or no weight, plus
     * the table's rows, times the combine scale) over rows of 16 and of 300 (past a workgroup's 64), the per-layer gate
     * times one layer's slice (OP 17) for each activation, the layer scalar (OP 18), the MoE routing's per-expert scales
     * (OP 19), the sandwich norm's add into the residual with a layer scalar (OP 20).
     */
    static List<OpResult> gemma4Operators(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        float projScale = 0.125f, combine = 0.70710677f, eps = 1e-6f;
        for (int[] sh : new int[][] {{3, 5, 16}, {2, 3, 300}})
            for (int variant = 0; variant < 3; variant++) {
                int T = sh[0], layers = sh[1], dim = sh[2], rows = T * layers, tabAt = 7;
                float[] p = gauss(r, rows * dim, 2), tab = gauss(r, tabAt + rows * dim, 1), w = gauss(r, 3 + dim, 1);
                float[] want = p.clone(), weight = variant == 2 ? null : java.util.Arrays.copyOfRange(w, 3, 3 + dim);
                for (int i = 0; i < want.length; i++) want[i] *= projScale;
                dev.cmf4j.backend.cpu.RmsNorm.rows(want, rows, dim, weight, variant == 1, eps);
                for (int i = 0; i < want.length; i++) want[i] = (want[i] + tab[tabAt + i]) * combine;
                run(mm, 16, rows, new int[] {rows, dim, 3, variant == 2 ? 0 : variant == 1 ? 3 : 1, Float.floatToRawIntBits(eps),
                        Float.floatToRawIntBits(projScale), Float.floatToRawIntBits(combine), tabAt}, p, tab, w, p);
                out.add(new OpResult("per-layer inputs" + (variant == 0 ? "" : variant == 1 ? " offset" : " no weight"),
                        T + " tokens x " + layers + " layers x " + dim, error(p, want), 1e-5));
            }
        int T = 3, layers = 5, dim = 16, layer = 3, width = layers * dim;
        for (dev.cmf4j.backend.Activation act : dev.cmf4j.backend.Activation.values()) {
            float[] g = gauss(r, T * dim, 3), pli = gauss(r, T * width, 1), want = new float[T * dim];
            for (int t = 0; t < T; t++)
                for (int i = 0; i < dim; i++) want[t * dim + i] = act.apply(g[t * dim + i]) * pli[t * width + layer * dim + i];
            run(mm, 17, 1, new int[] {T * dim, act.ordinal(), layer * dim, dim, width}, g, pli, g, g);
            out.add(new OpResult("per-layer gate " + act.name().toLowerCase(java.util.Locale.ROOT), T + " tokens, layer " + layer + " of " + layers
                    + " x " + dim, error(g, want), 1e-5));
        }
        float[] x = gauss(r, 1000, 1), scaled = x.clone();
        float scalar = 0.3712f;
        for (int i = 0; i < scaled.length; i++) scaled[i] *= scalar;
        run(mm, 18, 3, new int[] {x.length, Float.floatToRawIntBits(scalar)}, x, x, x, x);
        out.add(new OpResult("layer scalar", x.length + " values", error(x, scaled), 0));
        // a sandwich norm's output added to the residual, times a layer scalar (OP 20): plain, offset and no weight
        for (int[] sh : new int[][] {{3, 7}, {2, 300}})
            for (int variant = 0; variant < 3; variant++) {
                int rows = sh[0], n = sh[1];
                float[] src = gauss(r, rows * n, 2), res = gauss(r, rows * n, 1), w = gauss(r, n, 1), want = new float[rows * n];
                float scale = variant == 2 ? 1f : 0.8125f;
                for (int i = 0; i < rows; i++)
                    dev.cmf4j.backend.cpu.RmsNorm.apply(src, i * n, want, i * n, n, variant == 2 ? null : w, variant == 1, eps);
                for (int i = 0; i < want.length; i++) want[i] = (res[i] + want[i]) * scale;
                run(mm, 20, rows, new int[] {rows, n, 0, 0, 0, variant == 2 ? 0 : variant == 1 ? 3 : 1, Float.floatToRawIntBits(eps), n, n,
                        Float.floatToRawIntBits(scale)}, src, res, w, src);
                out.add(new OpResult("norm add" + (variant == 0 ? "" : variant == 1 ? " offset" : " no weight"), rows + "x" + n
                        + (scale != 1f ? ", scaled" : ""), error(res, want), 1e-5));
            }
        // per-expert scales on a routing of 7 rows, top 3 of 5 experts: (id, weight bits) pairs, the ids kept
        int slots = 21, experts = 5, scalesAt = 4;
        float[] route = new float[2 * slots], wantRoute = new float[2 * slots], scales = gauss(r, scalesAt + experts, 1);
        for (int i = 0; i < slots; i++) {
            int id = r.nextInt(experts);
            float w = (float) r.nextDouble();
            route[2 * i] = wantRoute[2 * i] = Float.intBitsToFloat(id);
            route[2 * i + 1] = w;
            wantRoute[2 * i + 1] = w * scales[scalesAt + id];
        }
        run(mm, 19, 1, new int[] {slots, scalesAt}, route, route, scales, route);
        boolean same = true;
        for (int i = 0; i < route.length; i++) same &= Float.floatToRawIntBits(route[i]) == Float.floatToRawIntBits(wantRoute[i]);
        out.add(new OpResult("expert scales", slots + " picks of " + experts + " experts, bitwise", same ? 0 : 1, 0));
        return out;
    }

    /**
     * A decode step's folded attention (OP 9) against float64: the raw q row and the step's raw key and value, rotated
     * (all dims, some, or none: {@code variant} mod 3) by the tables at an offset, attending over a cache whose row at
     * the step's position is NaN (OP 9 must take the step's own key and value from their rows, not the cache) and
     * whose other rows are random; with as many workgroups a head as chunks, 2 (several chunks each) and more than
     * chunks (some idle), the second of them on 3 workgroups in all (grid-stride: a workgroup taking several heads'
     * work). Also checked: the cache row written (rotated key, value) and nothing else; the counters zero after;
     * and the output bitwise OP 8's over OP 9's own partial sums (the combine's fixed order by partial, whichever
     * workgroup finished last). {@code sinks}: a sink logit per head joining the combine's denominator, or null.
     */
    static List<OpResult> foldedAttention(VulkanMatMul mm, SplittableRandom r, int heads, int kvh, int hd, int pos, int window, int context,
                                          int variant, float[] sinks) {
        List<OpResult> out = new ArrayList<>();
        int qd = heads * hd, kvd = kvh * hd, rd = variant % 3 == 0 ? hd : variant % 3 == 1 ? hd / 4 * 2 : 0, half = rd / 2, tablesAt = 5;
        float scale = (float) (1 / Math.sqrt(hd));
        float[] inv = new float[half], cos = new float[half], sin = new float[half];
        for (int i = 0; i < half; i++) inv[i] = (float) Math.pow(10000, -2.0 * i / Math.max(1, rd));
        dev.cmf4j.backend.cpu.Rotary.table(pos, inv, 1.1f, cos, sin);
        float[] tables = gauss(r, tablesAt + 2 * half, 1);
        System.arraycopy(cos, 0, tables, tablesAt, half);
        System.arraycopy(sin, 0, tables, tablesAt + half, half);
        float[] q = gauss(r, qd, 1), kNew = gauss(r, kvd, 1), vNew = gauss(r, kvd, 1);
        float[] kCache = gauss(r, context * kvd, 1), vCache = gauss(r, context * kvd, 1);
        java.util.Arrays.fill(kCache, pos * kvd, (pos + 1) * kvd, Float.NaN);
        java.util.Arrays.fill(vCache, pos * kvd, (pos + 1) * kvd, Float.NaN);
        float[] qr = q.clone(), kr = kNew.clone();
        dev.cmf4j.backend.cpu.Rotary.apply(qr, 0, heads, hd, rd, cos, sin);
        dev.cmf4j.backend.cpu.Rotary.apply(kr, 0, kvh, hd, rd, cos, sin);
        float[] wantK = kCache.clone(), wantV = vCache.clone();
        System.arraycopy(kr, 0, wantK, pos * kvd, kvd);
        System.arraycopy(vNew, 0, wantV, pos * kvd, kvd);
        // one row at pos over the cache as OP 9 must leave it (the step's rotated key and value at pos)
        double[] want = attention(qr, wantK, wantV, 1, heads, kvh, hd, pos, window, scale, sinks);
        int lo = window > 0 ? Math.max(0, pos - window + 1) : 0;
        int chunks = (pos - lo) / VulkanResidentForward.ATTENTION_SPLIT + 1;
        int[] pers = chunks > 2 ? new int[] {chunks, 2, chunks + 3} : new int[] {chunks, chunks + 3};
        for (int k = 0; k < pers.length; k++) {
            int per = pers[k], groups = k == 1 ? 3 : heads * per;
            float[] p = sinks == null ? new float[1] : sinks;
            int[] u = {1, heads, kvh, hd, tablesAt, window, Float.floatToRawIntBits(scale), kvd, rd, 0, qd, per, sinks == null ? 0 : 1};
            float[] kc = kCache.clone(), vc = vCache.clone(), att = new float[qd + heads * per * (hd + 2)];
            int[] counts = run(mm, new int[] {9}, new int[] {groups}, u, pos, q, kc, vc, att, kNew, vNew, tables, p);
            String shape = "1 token at " + pos + ", " + heads + "/" + kvh + " heads x" + hd + ", " + rd + " rotary, " + per + " groups a head"
                    + (groups < heads * per ? " on " + groups : "");
            String name = "folded attention" + (sinks != null ? " sinks" : "") + (window > 0 ? " window " + window : "");
            float[] got = java.util.Arrays.copyOf(att, qd);
            out.add(new OpResult(name, shape, error(got, want), 1e-5));
            double cacheErr = Math.max(error(kc, wantK), error(vc, wantV));
            out.add(new OpResult(name + ": cache row", shape, cacheErr, 1e-6));
            out.add(new OpResult(name + ": counters zero after", shape, java.util.Arrays.stream(counts).anyMatch(c -> c != 0) ? 1 : 0, 0));
            run(mm, new int[] {8}, new int[] {heads}, u, pos, att, att, att, att, att, att, att, p);
            double same = 0;
            for (int i = 0; i < qd; i++) if (Float.floatToRawIntBits(att[i]) != Float.floatToRawIntBits(got[i])) same = Math.max(same, Math.abs(att[i] - got[i]) + 1e-30);
            out.add(new OpResult(name + ": combine = OP 8's, bitwise", shape, same, 0));
        }
        // a layer reading an earlier layer's caches (u9 = 1, gemma4): the step's key and value already there (its own
        // rows NaN: not to be read), the same output, nothing written
        float[] kc = wantK.clone(), vc = wantV.clone(), kNaN = new float[kvd], vNaN = new float[kvd], att = new float[qd + heads * chunks * (hd + 2)];
        java.util.Arrays.fill(kNaN, Float.NaN);
        java.util.Arrays.fill(vNaN, Float.NaN);
        int[] u = {1, heads, kvh, hd, tablesAt, window, Float.floatToRawIntBits(scale), kvd, rd, 1, qd, chunks, sinks == null ? 0 : 1};
        run(mm, new int[] {9}, new int[] {heads * chunks}, u, pos, q, kc, vc, att, kNaN, vNaN, tables, sinks == null ? new float[1] : sinks);
        String shape = "1 token at " + pos + ", " + heads + "/" + kvh + " heads x" + hd + ", " + rd + " rotary";
        String name = "folded attention" + (sinks != null ? " sinks" : "") + (window > 0 ? " window " + window : "") + " over an earlier layer's caches";
        out.add(new OpResult(name, shape, error(java.util.Arrays.copyOf(att, qd), want), 1e-5));
        out.add(new OpResult(name + ": caches untouched", shape, java.util.Arrays.equals(kc, wantK) && java.util.Arrays.equals(vc, wantV) ? 0 : 1, 0));
        return out;
    }

    /** One product dispatch of {@code gx} × {@code gy} workgroups of {@code pipeline} over the descriptor set in {@code sets}, push constants {@code push}. */
    private static void dispatch(VulkanMatMul mm, long pipeline, MemorySegment sets, MemorySegment push, int gx, int gy) {
        VulkanContext ctx = mm.context();
        mm.submitRecorded(cb -> {
            ctx.vk.cmdBindPipeline(cb, pipeline);
            ctx.vk.cmdBindDescriptorSet(cb, ctx.pipelineLayout, sets);
            ctx.vk.cmdPushConstants(cb, ctx.pipelineLayout, MatvecPush.BYTES, push);
            ctx.vk.cmdDispatch(cb, gx, gy, 1);
        });
    }

    /**
     * One ops.comp dispatch of {@code groups} workgroups over host-visible buffers holding {@code a..d} (the same array
     * twice: the same buffer), push constants {@code u}; the arrays are overwritten with the buffers' contents after.
     */
    private static void run(VulkanMatMul mm, int op, int groups, int[] u, float[] a, float[] b, float[] c, float[] d) {
        run(mm, op, groups, u, 0, a, b, c, d);
    }

    /** As above with the step buffer's first position {@code pos0} (attention, the cache copy). */
    private static void run(VulkanMatMul mm, int op, int groups, int[] u, int pos0, float[] a, float[] b, float[] c, float[] d) {
        run(mm, new int[] {op}, new int[] {groups}, u, pos0, a, b, c, d);
    }

    /**
     * Dispatches of {@code ops} (each of its {@code groups}) one after the other with the same buffers and push constants:
     * {@code arrays} A..D and optionally E..G and P (those not given: A); the step buffer S holds {@code pos0} and 64 counters
     * (zero before), returned after.
     */
    private static int[] run(VulkanMatMul mm, int[] ops, int[] groups, int[] u, int pos0, float[]... arrays) {
        return run(mm, ops, groups, u, pos0, Double.NEGATIVE_INFINITY, arrays);
    }

    /** As above with the step buffer's head gate (embryo.comp's, 8 bytes in) {@code gate}; binding 8 (P): the eighth array. */
    private static int[] run(VulkanMatMul mm, int[] ops, int[] groups, int[] u, int pos0, double gate, float[]... arrays) {
        return run(mm, ops, false, groups, u, pos0, gate, arrays);
    }

    /** As above; {@code kvHalf}: the OPs. f16 KV cache pipelines where they have one ({@link VulkanContext#opKvHalf}). */
    private static int[] run(VulkanMatMul mm, int[] ops, boolean kvHalf, int[] groups, int[] u, int pos0, double gate, float[]... arrays) {
        VulkanContext ctx = mm.context();
        java.util.IdentityHashMap<float[], VulkanContext.Buffer> made = new java.util.IdentityHashMap<>();
        int counters = 64;
        VulkanContext.Buffer step = ctx.buffer(16 + 4 * counters, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check step");
        step.mapped().fill((byte) 0);
        step.mapped().set(ValueLayout.JAVA_INT, 0, pos0);
        step.mapped().set(ValueLayout.JAVA_DOUBLE, 8, gate);
        try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
            long[] handles = new long[VulkanContext.OPS_BUFFERS - 1];   // (no chained counters: writeSetUnchained binds them)
            handles[4] = step.buffer();
            for (int i = 0; i < handles.length; i++) {
                if (i == 4) continue;
                float[] arr = arrays[i < 4 ? i : i - 1 < arrays.length ? i - 1 : 0];
                VulkanContext.Buffer buf = made.computeIfAbsent(arr, x -> {
                    VulkanContext.Buffer nb = ctx.buffer(4L * Math.max(1, x.length), Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check");
                    MemorySegment.copy(x, 0, nb.mapped(), ValueLayout.JAVA_FLOAT, 0, x.length);
                    return nb;
                });
                handles[i] = buf.buffer();
            }
            long set = mm.allocateSet(ctx.opsSetLayout);
            mm.writeSetUnchained(set, handles);
            MemorySegment push = arena.allocate(VulkanContext.OPS_PUSH_BYTES, 4), sets = arena.allocate(ValueLayout.JAVA_LONG);
            for (int i = 0; i < u.length; i++) push.setAtIndex(ValueLayout.JAVA_INT, i, u[i]);
            sets.set(ValueLayout.JAVA_LONG, 0, set);
            MemorySegment between = Vk.struct(arena, 24, Vk.ST_MEMORY_BARRIER);
            between.set(ValueLayout.JAVA_INT, 16, Vk.ACCESS_SHADER_WRITE);
            between.set(ValueLayout.JAVA_INT, 20, Vk.ACCESS_SHADER_READ | Vk.ACCESS_SHADER_WRITE);
            mm.submitRecorded(cb -> {
                for (int i = 0; i < ops.length; i++) {
                    if (i > 0) ctx.vk.cmdBarrier(cb, Vk.PIPELINE_STAGE_COMPUTE, Vk.PIPELINE_STAGE_COMPUTE, between);
                    ctx.vk.cmdBindPipeline(cb, kvHalf && VulkanContext.readsKvCache(ops[i]) ? ctx.opKvHalf(ops[i]) : ctx.ops[ops[i]]);
                    ctx.vk.cmdBindDescriptorSet(cb, ctx.opsPipelineLayout, sets);
                    ctx.vk.cmdPushConstants(cb, ctx.opsPipelineLayout, VulkanContext.OPS_PUSH_BYTES, push);
                    ctx.vk.cmdDispatch(cb, groups[i], 1, 1);
                }
            });
            made.forEach((arr, buf) -> MemorySegment.copy(buf.mapped(), ValueLayout.JAVA_FLOAT, 0, arr, 0, arr.length));
            int[] after = new int[counters];
            MemorySegment.copy(step.mapped(), ValueLayout.JAVA_INT, 16, after, 0, counters);
            return after;
        } finally {
            made.values().forEach(ctx::free);
            ctx.free(step);
        }
    }

    /**
     * The f16 KV cache's pipelines (--kv f16; KV_HALF): the appends write exactly Java's Float.floatToFloat16 of what they
     * append (the CPU cache's store; round to nearest even, subnormals, overflow to infinity), bitwise; attention (OP 2,
     * OP 7 + OP 8, OP 9) against float64 over the halves widened before the chunk's first position and the chunk's own
     * f32 keys and values (E, F) from it, as the CPU's cache reads its pending chunk; bounds as the f32 cache's.
     * Caches are float arrays of words of two halves (element 2i in the low half).
     */
    static List<OpResult> kvHalf(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        // OP 4: 60 values into a cache at position 3 of rows of 12 halves, and into E in f32 (u4 = 1); among them f16's
        // edge cases: ties to even, the largest half and past it, subnormals, the smallest, half of it and just above
        float[] src = gauss(r, 60, 1);
        float[] edges = {65504f, 65519.99f, 65520f, 1e9f, -70000f, 1f + 0x1p-11f, 1f + 3 * 0x1p-11f, 0x1p-14f, 0x1p-20f + 0x1p-30f,
                0x1p-24f, 0x1p-25f, 0x1p-25f + 0x1p-40f, 3 * 0x1p-26f, -0x1p-26f, 0f, -0f, 1e-5f, 6.1e-5f};
        System.arraycopy(edges, 0, src, 7, edges.length);
        int stride = 12, at = 3, n = src.length;
        float[] cache = new float[(at * stride + n) / 2 + 4], pending = new float[n];
        run(mm, new int[] {4}, true, new int[] {2}, new int[] {n, 0, 0, stride, 1}, at, Double.NEGATIVE_INFINITY, src, cache, src, src, pending);
        int wrong = 0;
        for (int i = 0; i < n; i++) wrong += half(cache, at * stride + i) != Float.floatToFloat16(src[i]) ? 1 : 0;
        for (int i = 0; i < at * stride; i++) wrong += half(cache, i) != 0 ? 1 : 0;
        out.add(new OpResult("f16 cache copy: halves, bitwise", n + " values at " + at + " (" + edges.length + " edge cases)", wrong, 0));
        out.add(new OpResult("f16 cache copy: f32 rows into E", n + " values", java.util.Arrays.equals(pending, src) ? 0 : 1, 0));
        // OP 1: T tokens' keys rotated into E (in f32; E is B itself, in place, or, where some dims are past the rotary
        // ones, a buffer of its own: those dims copied into it) and into the cache as halves; rows of heads·hd + 2
        // halves at position 2 + t
        for (int[] sh : new int[][] {{3, 2, 64, 64}, {2, 2, 40, 16}}) {
            int T = sh[0], heads = sh[1], hd = sh[2], rd = sh[3], half = rd / 2, pos0 = 7, cachePos = 2;
            int rowStride = heads * hd + 2;
            float[] inv = new float[half], cos = new float[half], sin = new float[half], table = new float[2 * T * half];
            for (int i = 0; i < half; i++) inv[i] = (float) Math.pow(10000, -2.0 * i / rd);
            float[] keys = gauss(r, T * heads * hd, 1), rotated = keys.clone();
            for (int t = 0; t < T; t++) {
                dev.cmf4j.backend.cpu.Rotary.table(pos0 + t, inv, 1.1f, cos, sin);
                System.arraycopy(cos, 0, table, t * half, half);
                System.arraycopy(sin, 0, table, T * half + t * half, half);
                dev.cmf4j.backend.cpu.Rotary.apply(rotated, t * heads * hd, heads, hd, rd, cos, sin);
            }
            float[] kc = new float[(cachePos + T) * rowStride / 2], raw = keys.clone(), e = rd < hd ? new float[keys.length] : keys;
            run(mm, new int[] {1}, true, new int[] {T * heads}, new int[] {0, heads, hd, rd, 0, T, 0, T * heads, heads, rowStride}, cachePos,
                    Double.NEGATIVE_INFINITY, keys, keys, table, kc, e);
            String shape = T + " tokens, " + heads + "x" + hd + ", " + rd + " rotary" + (e != keys ? ", E apart" : "");
            out.add(new OpResult("f16 rope into cache: f32 keys in E", shape, error(e, rotated), 1e-6));
            if (e != keys) out.add(new OpResult("f16 rope into cache: B untouched with E apart", shape, java.util.Arrays.equals(keys, raw) ? 0 : 1, 0));
            int bad = 0;
            for (int t = 0; t < T; t++)
                for (int i = 0; i < heads * hd; i++) bad += half(kc, (cachePos + t) * rowStride + i) != Float.floatToFloat16(e[t * heads * hd + i]) ? 1 : 0;
            for (int i = 0; i < cachePos * rowStride; i++) bad += half(kc, i) != 0 ? 1 : 0;
            out.add(new OpResult("f16 rope into cache: halves of E's keys, bitwise", shape, bad, 0));
        }
        // attention {tokens, heads, kv heads, head dim, first position, window, context}: keys before the first position
        // as halves, the chunk's own in E and F (f32); one token: also OP 7 + OP 8 (several chunks; a window; a head dim
        // not a multiple of 4) and OP 9
        int variant = 0;
        for (int[] sh : new int[][] {{5, 4, 1, 32, 3, 0, 16}, {6, 2, 2, 128, 10, 4, 20}, {3, 2, 1, 18, 70, 0, 80}, {1, 4, 1, 128, 200, 0, 256},
                {1, 2, 2, 256, 130, 70, 160}, {1, 3, 3, 40, 127, 0, 128}, {1, 2, 1, 18, 70, 0, 80}}) {
            int T = sh[0], heads = sh[1], kvh = sh[2], hd = sh[3], pos0 = sh[4], window = sh[5], context = sh[6];
            int qd = heads * hd, kvd = kvh * hd;
            float scale = (float) (1 / Math.sqrt(hd));
            float[] q = gauss(r, T * qd, 1), kStore = gauss(r, context * kvd, 1), vStore = gauss(r, context * kvd, 1);
            float[] kOwn = gauss(r, T * kvd, 1), vOwn = gauss(r, T * kvd, 1);
            float[] kw = halves(kStore), vw = halves(vStore);
            // what attention must read: the widened halves before pos0, the chunk's own f32 rows from it
            float[] kRead = new float[context * kvd], vRead = new float[context * kvd];
            for (int i = 0; i < context * kvd; i++) { kRead[i] = Float.float16ToFloat(half(kw, i)); vRead[i] = Float.float16ToFloat(half(vw, i)); }
            System.arraycopy(kOwn, 0, kRead, pos0 * kvd, T * kvd);
            System.arraycopy(vOwn, 0, vRead, pos0 * kvd, T * kvd);
            double[] want = attention(q, kRead, vRead, T, heads, kvh, hd, pos0, window, scale);
            String shape = T + (T == 1 ? " token at " : " tokens at ") + pos0 + ", " + heads + "/" + kvh + " heads x" + hd;
            String win = window > 0 ? " window " + window : "";
            if (T > 1) {
                float[] d = new float[T * qd + heads * T * context];
                run(mm, new int[] {2}, true, new int[] {T * heads}, new int[] {T, heads, kvh, hd, 0, window, Float.floatToRawIntBits(scale), kvd, context,
                        qd, T * qd, 0, 0}, pos0, Double.NEGATIVE_INFINITY, q, kw, vw, d, kOwn, vOwn);
                out.add(new OpResult("f16 cache attention" + win, shape, error(java.util.Arrays.copyOf(d, T * qd), want), 1e-5));
                continue;
            }
            int chunks = (context + VulkanResidentForward.ATTENTION_SPLIT - 1) / VulkanResidentForward.ATTENTION_SPLIT;
            for (int per : chunks > 2 ? new int[] {chunks, 2} : new int[] {chunks}) {
                float[] ds = new float[qd + heads * per * (hd + 2)];
                run(mm, new int[] {7, 8}, true, new int[] {heads * per, heads}, new int[] {1, heads, kvh, hd, 0, window, Float.floatToRawIntBits(scale),
                        kvd, 0, 0, qd, per, 0}, pos0, Double.NEGATIVE_INFINITY, q, kw, vw, ds, kOwn, vOwn);
                out.add(new OpResult("f16 cache split attention" + win, shape + ", " + per + " groups a head", error(java.util.Arrays.copyOf(ds, qd), want), 1e-5));
            }
            // OP 9: the raw q and the step's raw key rotated (all dims, some, none) by tables at an offset; the cache's
            // row at pos0 NaN halves (not to be read), written with the halves of the rotated key and of the value
            int rd = variant % 3 == 0 ? hd : variant % 3 == 1 ? hd / 4 * 2 : 0, half = rd / 2, tablesAt = 5;
            variant++;
            float[] inv = new float[half], cos = new float[half], sin = new float[half];
            for (int i = 0; i < half; i++) inv[i] = (float) Math.pow(10000, -2.0 * i / Math.max(1, rd));
            dev.cmf4j.backend.cpu.Rotary.table(pos0, inv, 1.1f, cos, sin);
            float[] tables = gauss(r, tablesAt + 2 * half, 1);
            System.arraycopy(cos, 0, tables, tablesAt, half);
            System.arraycopy(sin, 0, tables, tablesAt + half, half);
            float[] qr = q.clone(), kr = kOwn.clone();
            dev.cmf4j.backend.cpu.Rotary.apply(qr, 0, heads, hd, rd, cos, sin);
            dev.cmf4j.backend.cpu.Rotary.apply(kr, 0, kvh, hd, rd, cos, sin);
            System.arraycopy(kr, 0, kRead, pos0 * kvd, kvd);
            double[] want9 = attention(qr, kRead, vRead, 1, heads, kvh, hd, pos0, window, scale);
            float[] kc = kw.clone(), vc = vw.clone();
            for (int i = pos0 * kvd / 2; i < (pos0 + 1) * kvd / 2; i++) { kc[i] = Float.intBitsToFloat(0x7e007e00); vc[i] = kc[i]; }
            int per = chunks > 2 ? 2 : chunks;
            float[] att = new float[qd + heads * per * (hd + 2)];
            int[] counts = run(mm, new int[] {9}, true, new int[] {heads * per}, new int[] {1, heads, kvh, hd, tablesAt, window, Float.floatToRawIntBits(scale),
                    kvd, rd, 0, qd, per, 0}, pos0, Double.NEGATIVE_INFINITY, q, kc, vc, att, kOwn, vOwn, tables, new float[1]);
            String shape9 = shape + ", " + rd + " rotary, " + per + " groups a head";
            out.add(new OpResult("f16 cache folded attention" + win, shape9, error(java.util.Arrays.copyOf(att, qd), want9), 1e-5));
            // the row written: the value's halves exactly; the key's those of the key rotated in f32 (the CPU's rotation
            // may differ from the device's by an f32 rounding: either neighbour's half of such a tie is right)
            int bad = 0;
            for (int i = 0; i < kvd; i++) {
                short kh = half(kc, pos0 * kvd + i);
                float x = kr[i];
                bad += kh != Float.floatToFloat16(x) && kh != Float.floatToFloat16(Math.nextUp(x)) && kh != Float.floatToFloat16(Math.nextDown(x)) ? 1 : 0;
                bad += half(vc, pos0 * kvd + i) != Float.floatToFloat16(vOwn[i]) ? 1 : 0;
            }
            for (int i = 0; i < context * kvd / 2; i++)   // every other row untouched
                if (i < pos0 * kvd / 2 || i >= (pos0 + 1) * kvd / 2) bad += kc[i] != kw[i] && !(Float.isNaN(kc[i]) && Float.isNaN(kw[i])) || vc[i] != vw[i] && !(Float.isNaN(vc[i]) && Float.isNaN(vw[i])) ? 1 : 0;
            out.add(new OpResult("f16 cache folded attention" + win + ": cache row halves", shape9, bad, 0));
            out.add(new OpResult("f16 cache folded attention" + win + ": counters zero after", shape9, java.util.Arrays.stream(counts).anyMatch(c -> c != 0) ? 1 : 0, 0));
        }
        return out;
    }

    /** Element {@code i}'s f16 bits in an array of words of two halves (element 2i in the low half). */
    static short half(float[] words, int i) {
        int w = Float.floatToRawIntBits(words[i >> 1]);
        return (short) ((i & 1) == 0 ? w : w >>> 16);
    }

    /** {@code x} (even length) as words of two halves, each Float.floatToFloat16 of its value. */
    static float[] halves(float[] x) {
        float[] w = new float[x.length / 2];
        for (int i = 0; i < w.length; i++)
            w[i] = Float.intBitsToFloat((Float.floatToFloat16(x[2 * i]) & 0xffff) | Float.floatToFloat16(x[2 * i + 1]) << 16);
        return w;
    }

    /** Causal GQA attention in float64 of T rows at pos0 + t over keys k and values v [position, kvh·hd] (a window > 0: the last ones). */
    static double[] attention(float[] q, float[] k, float[] v, int T, int heads, int kvh, int hd, int pos0, int window, float scale) {
        return attention(q, k, v, T, heads, kvh, hd, pos0, window, scale, null);
    }

    /** As above with a sink logit per head (gpt-oss; null: none) in the softmax's max and denominator only. */
    static double[] attention(float[] q, float[] k, float[] v, int T, int heads, int kvh, int hd, int pos0, int window, float scale,
                              float[] sinks) {
        int qd = heads * hd, kvd = kvh * hd;
        double[] want = new double[T * qd];
        for (int t = 0; t < T; t++)
            for (int h = 0; h < heads; h++) {
                int g = h / (heads / kvh), pos = pos0 + t, lo = window > 0 ? Math.max(0, pos - window + 1) : 0;
                double[] sc = new double[pos + 1];
                double m = Double.NEGATIVE_INFINITY, l = 0;
                for (int j = lo; j <= pos; j++) {
                    double sum = 0;
                    for (int i = 0; i < hd; i++) sum += (double) q[t * qd + h * hd + i] * k[j * kvd + g * hd + i];
                    sc[j] = sum * scale;
                    m = Math.max(m, sc[j]);
                }
                if (sinks != null) m = Math.max(m, sinks[h]);
                for (int j = lo; j <= pos; j++) { sc[j] = Math.exp(sc[j] - m); l += sc[j]; }
                if (sinks != null) l += Math.exp(sinks[h] - m);
                for (int i = 0; i < hd; i++) {
                    double acc = 0;
                    for (int j = lo; j <= pos; j++) acc += sc[j] * v[j * kvd + g * hd + i];
                    want[t * qd + h * hd + i] = acc / l;
                }
            }
        return want;
    }

    /**
     * matvec_decode.comp's folded operators against float64, f32 and int8 weights of 19 rows (a last block of 3) by 1,000
     * columns (one tile) and 4,500 (two: blocks taken together): the RMSNorm with its weight (x' staged 4 columns at a
     * time), row and column scales, a bias and the add into y; the GLU act(x)·up with the scales (P unaligned: x' staged
     * one column at a time).
     */
    static List<OpResult> foldedProducts(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        VulkanContext ctx = mm.context();
        int rows = 19, yOff = 3;
        float eps = 1e-5f;
        for (int kind : new int[] {Shaders.KIND_F32, Shaders.KIND_I8})
            for (int cols : new int[] {1000, 4500})
                for (boolean glu : new boolean[] {false, true}) {
                    float[] wv = new float[rows * cols];
                    for (int i = 0; i < wv.length; i++) wv[i] = kind == Shaders.KIND_I8 ? r.nextInt(-127, 128) : (float) r.nextGaussian();
                    int wWords = kind == Shaders.KIND_I8 ? rows * cols / 4 : rows * cols;
                    int rsOff = wWords, cfOff = (rsOff + rows + 3) / 4 * 4, words = cfOff + cols;
                    float[] rs = gauss(r, rows, 0.5), cf = gauss(r, cols, 0.5), x = gauss(r, cols, 1), y0 = gauss(r, yOff + rows, 1);
                    int pOff = glu ? 1 : 4, biasOff = pOff + cols;
                    float[] prm = gauss(r, biasOff + rows, 1);
                    int flags = MatvecPush.ROW_SCALES | MatvecPush.COL_SCALES | MatvecPush.ADD
                            | (glu ? MatvecPush.GLU : MatvecPush.NORM | MatvecPush.NORM_WEIGHT | MatvecPush.BIAS);
                    double[] xs = new double[cols];
                    double ss = 0;
                    for (int c = 0; c < cols; c++) ss += (double) x[c] * x[c];
                    double inv = glu ? 1 : 1 / Math.sqrt(ss / cols + eps);
                    for (int c = 0; c < cols; c++)
                        xs[c] = (glu ? dev.cmf4j.backend.Activation.SILU.apply(x[c]) : x[c]) * (double) prm[pOff + c] * cf[c];
                    double[] want = new double[rows];
                    for (int o = 0; o < rows; o++) {
                        double sum = 0;
                        for (int c = 0; c < cols; c++) sum += wv[o * cols + c] * xs[c];
                        want[o] = y0[yOff + o] + rs[o] * inv * sum + (glu ? 0 : prm[biasOff + o]);
                    }
                    VulkanContext.Buffer wb = ctx.buffer(4L * words, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check weights");
                    VulkanContext.Buffer xb = ctx.buffer(4L * cols, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check x");
                    VulkanContext.Buffer yb = ctx.buffer(4L * y0.length, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check y");
                    VulkanContext.Buffer pb = ctx.buffer(4L * prm.length, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check P");
                    try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
                        MemorySegment wm = wb.mapped();
                        for (int i = 0; i < wv.length; i++) {
                            if (kind == Shaders.KIND_I8) wm.set(ValueLayout.JAVA_BYTE, i, (byte) wv[i]);
                            else wm.setAtIndex(ValueLayout.JAVA_FLOAT, i, wv[i]);
                        }
                        MemorySegment.copy(rs, 0, wm, ValueLayout.JAVA_FLOAT, 4L * rsOff, rows);
                        MemorySegment.copy(cf, 0, wm, ValueLayout.JAVA_FLOAT, 4L * cfOff, cols);
                        MemorySegment.copy(x, 0, xb.mapped(), ValueLayout.JAVA_FLOAT, 0, cols);
                        MemorySegment.copy(y0, 0, yb.mapped(), ValueLayout.JAVA_FLOAT, 0, y0.length);
                        MemorySegment.copy(prm, 0, pb.mapped(), ValueLayout.JAVA_FLOAT, 0, prm.length);
                        long set = mm.allocateSet(ctx.descriptorSetLayout);
                        mm.writeProductSet(set, wb.buffer(), xb.buffer(), yb.buffer(), pb.buffer(), 0, 0, 0);
                        MemorySegment push = arena.allocate(MatvecPush.BYTES, 4), sets = arena.allocate(ValueLayout.JAVA_LONG);
                        MatvecPush.write(push, rows, cols, 1, 0, yOff, 0, rsOff, cfOff, flags, pOff,
                                glu ? dev.cmf4j.backend.Activation.SILU.ordinal() : Float.floatToRawIntBits(eps), biasOff);
                        sets.set(ValueLayout.JAVA_LONG, 0, set);
                        int groups = ctx.matvecGroups(kind, rows, cols, 1, 1)[0];
                        dispatch(mm, ctx.matvecPipeline(kind, cols, 1), sets, push, groups, 1);
                        float[] got = new float[rows];
                        MemorySegment.copy(yb.mapped(), ValueLayout.JAVA_FLOAT, 4L * yOff, got, 0, rows);
                        String name = "matvec_decode " + (kind == Shaders.KIND_I8 ? "int8" : "f32");
                        out.add(new OpResult(name + (glu ? " glu" : " norm bias") + " scales add", rows + "x" + cols + ", 1 token",
                                error(got, want), 2e-6 * Math.sqrt(cols)));
                        if (cols <= VulkanContext.DECODE_TILE) {
                            // one workgroup taking the 3 blocks in turn (each block's loads issued while the one before
                            // is summed): the same sums as one block a workgroup
                            MemorySegment.copy(y0, 0, yb.mapped(), ValueLayout.JAVA_FLOAT, 0, y0.length);
                            dispatch(mm, ctx.matvecPipeline(kind, cols, 1), sets, push, 1, 1);
                            float[] oneGroup = new float[rows];
                            MemorySegment.copy(yb.mapped(), ValueLayout.JAVA_FLOAT, 4L * yOff, oneGroup, 0, rows);
                            out.add(new OpResult(name + (glu ? " glu" : " norm bias") + " by 1 workgroup vs " + groups, rows + "x" + cols + ", 1 token",
                                    error(oneGroup, got), 0));
                        }
                        if (glu && cols > VulkanContext.DECODE_TILE) {
                            // the down product's other route: x' = act(x)·up·cf made by ops.comp's GLU, then read from
                            // memory by the direct pipeline, by 1 workgroup (3 blocks in turn) and by 3; same sums as staged
                            float[] xd = x.clone(), up = java.util.Arrays.copyOfRange(prm, pOff, pOff + cols);
                            run(mm, 3, (cols + 63) / 64, new int[] {cols, dev.cmf4j.backend.Activation.SILU.ordinal(), 0, 1, cols}, xd, up, cf, xd);
                            MemorySegment.copy(xd, 0, xb.mapped(), ValueLayout.JAVA_FLOAT, 0, cols);
                            MatvecPush.write(push, rows, cols, 1, 0, yOff, 0, rsOff, cfOff, MatvecPush.ROW_SCALES | MatvecPush.ADD, 0, 0, 0);
                            for (int direct : new int[] {1, (rows + 7) / 8}) {
                                MemorySegment.copy(y0, 0, yb.mapped(), ValueLayout.JAVA_FLOAT, 0, y0.length);
                                dispatch(mm, ctx.matvecDecodeDirect(kind), sets, push, direct, 1);
                                float[] viaMemory = new float[rows];
                                MemorySegment.copy(yb.mapped(), ValueLayout.JAVA_FLOAT, 4L * yOff, viaMemory, 0, rows);
                                String shape = rows + "x" + cols + ", 1 token, " + direct + " workgroup" + (direct == 1 ? "" : "s");
                                out.add(new OpResult(name + " x' from memory (glu op) scales add", shape, error(viaMemory, want), 2e-6 * Math.sqrt(cols)));
                                out.add(new OpResult(name + " x' from memory vs staged", shape, error(viaMemory, got), 0));
                            }
                        }
                    } finally {
                        for (VulkanContext.Buffer b : List.of(wb, xb, yb, pb)) ctx.free(b);
                    }
                }
        return out;
    }

    /**
     * matvec_decode.comp's gated-MLP pipeline (TILES = 4: gate and up in one dispatch, then act(g)·u times the down
     * product's column scales) against float64 and, bit for bit, against what a decode step made before it: the gate and
     * up products by the one-tile pipeline, then ops.comp's OP 3. f32 and int8 weights, 19 rows (a last block of 3) of
     * 1,000 columns and of the pipeline's whole tile, the RMSNorm with its weight, row and column scales, SiLU and GELU,
     * with and without the down scales, by the usual grid and by one workgroup taking the 3 blocks in turn.
     */
    static List<OpResult> foldedGateUp(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        VulkanContext ctx = mm.context();
        int rows = 19, dOff = 5, pOff = 4;
        float eps = 1e-5f;
        int hostVisible = Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT;
        for (int kind : new int[] {Shaders.KIND_F32, Shaders.KIND_I8})
            for (int cols : new int[] {1000, ctx.gluTile})
                for (dev.cmf4j.backend.Activation act : new dev.cmf4j.backend.Activation[] {dev.cmf4j.backend.Activation.SILU, dev.cmf4j.backend.Activation.GELU})
                    for (boolean downScales : new boolean[] {true, false}) {
                        int wWords = kind == Shaders.KIND_I8 ? rows * cols / 4 : rows * cols;
                        int rsOff = wWords, cfOff = (rsOff + rows + 3) / 4 * 4, words = cfOff + cols;
                        float[][] wv = new float[2][rows * cols], rs = new float[2][], cf = new float[2][];
                        for (int m = 0; m < 2; m++) {
                            for (int i = 0; i < wv[m].length; i++) wv[m][i] = kind == Shaders.KIND_I8 ? r.nextInt(-127, 128) : (float) r.nextGaussian();
                            rs[m] = gauss(r, rows, 0.5);
                            cf[m] = gauss(r, cols, 0.5);
                        }
                        float[] x = gauss(r, cols, 1), prm = gauss(r, pOff + cols, 1), cfd = gauss(r, dOff + rows, 0.5);
                        double ss = 0;
                        for (int c = 0; c < cols; c++) ss += (double) x[c] * x[c];
                        double inv = 1 / Math.sqrt(ss / cols + eps);
                        double[] want = new double[rows];
                        for (int o = 0; o < rows; o++) {
                            double[] sum = new double[2];
                            for (int m = 0; m < 2; m++)
                                for (int c = 0; c < cols; c++) sum[m] += wv[m][o * cols + c] * ((double) x[c] * prm[pOff + c] * cf[m][c]);
                            double g = rs[0][o] * inv * sum[0], u = rs[1][o] * inv * sum[1];
                            want[o] = act.apply((float) g) * u * (downScales ? cfd[dOff + o] : 1);
                        }
                        List<VulkanContext.Buffer> buffers = new ArrayList<>();
                        try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
                            VulkanContext.Buffer[] wb = new VulkanContext.Buffer[2], yb = new VulkanContext.Buffer[3];
                            for (int m = 0; m < 2; m++) {
                                buffers.add(wb[m] = ctx.buffer(4L * words, hostVisible, "op check weights"));
                                MemorySegment wm = wb[m].mapped();
                                for (int i = 0; i < wv[m].length; i++) {
                                    if (kind == Shaders.KIND_I8) wm.set(ValueLayout.JAVA_BYTE, i, (byte) wv[m][i]);
                                    else wm.setAtIndex(ValueLayout.JAVA_FLOAT, i, wv[m][i]);
                                }
                                MemorySegment.copy(rs[m], 0, wm, ValueLayout.JAVA_FLOAT, 4L * rsOff, rows);
                                MemorySegment.copy(cf[m], 0, wm, ValueLayout.JAVA_FLOAT, 4L * cfOff, cols);
                            }
                            for (int i = 0; i < 3; i++) buffers.add(yb[i] = ctx.buffer(4L * rows, hostVisible, "op check y"));
                            VulkanContext.Buffer xb = ctx.buffer(4L * cols, hostVisible, "op check x"), pb = ctx.buffer(4L * prm.length, hostVisible, "op check P"),
                                    db = ctx.buffer(4L * cfd.length, hostVisible, "op check down scales");
                            buffers.addAll(List.of(xb, pb, db));
                            MemorySegment.copy(x, 0, xb.mapped(), ValueLayout.JAVA_FLOAT, 0, cols);
                            MemorySegment.copy(prm, 0, pb.mapped(), ValueLayout.JAVA_FLOAT, 0, prm.length);
                            MemorySegment.copy(cfd, 0, db.mapped(), ValueLayout.JAVA_FLOAT, 0, cfd.length);
                            MemorySegment push = arena.allocate(MatvecPush.BYTES, 4), sets = arena.allocate(ValueLayout.JAVA_LONG);
                            int flags = MatvecPush.ROW_SCALES | MatvecPush.COL_SCALES | MatvecPush.NORM | MatvecPush.NORM_WEIGHT;
                            int groups = ctx.matvecGroups(kind, rows, cols, 1, 1)[0];
                            // before: gate and up by the one-tile pipeline, then OP 3
                            float[][] gu = new float[2][rows];
                            for (int m = 0; m < 2; m++) {
                                long set = mm.allocateSet(ctx.descriptorSetLayout);
                                mm.writeProductSet(set, wb[m].buffer(), xb.buffer(), yb[m].buffer(), pb.buffer(), 0, 0, 0);
                                sets.set(ValueLayout.JAVA_LONG, 0, set);
                                MatvecPush.write(push, rows, cols, 1, 0, 0, 0, rsOff, cfOff, flags, pOff, Float.floatToRawIntBits(eps), 0);
                                dispatch(mm, ctx.matvecPipeline(kind, cols, 1), sets, push, groups, 1);
                                MemorySegment.copy(yb[m].mapped(), ValueLayout.JAVA_FLOAT, 0, gu[m], 0, rows);
                            }
                            float[] before = gu[0].clone();
                            run(mm, 3, 1, new int[] {rows, act.ordinal(), dOff, downScales ? 1 : 0, rows}, before, gu[1], cfd, before);
                            // the gated-MLP pipeline
                            long set = mm.allocateSet(ctx.descriptorSetLayout);
                            mm.writeProductSet(set, wb[0].buffer(), xb.buffer(), yb[2].buffer(), pb.buffer(), 0, wb[1].buffer(), db.buffer());
                            sets.set(ValueLayout.JAVA_LONG, 0, set);
                            MatvecPush.write(push, rows, cols, 1, 0, 0, 0, rsOff, cfOff, flags | (downScales ? MatvecPush.DOWN_SCALES : 0), pOff,
                                    Float.floatToRawIntBits(eps), 0);
                            MatvecPush.gluWords(push, 0, rsOff, cfOff, dOff, act.ordinal());
                            String name = "matvec_decode " + (kind == Shaders.KIND_I8 ? "int8" : "f32") + " gate and up " + act.name().toLowerCase(java.util.Locale.ROOT)
                                    + (downScales ? " down scales" : "");
                            for (int g : new int[] {groups, 1}) {
                                dispatch(mm, ctx.matvecDecodeGlu(kind), sets, push, g, 1);
                                float[] got = new float[rows];
                                MemorySegment.copy(yb[2].mapped(), ValueLayout.JAVA_FLOAT, 0, got, 0, rows);
                                String shape = rows + "x" + cols + ", 1 token, " + g + " workgroup" + (g == 1 ? "" : "s");
                                out.add(new OpResult(name, shape, error(got, want), 2e-6 * Math.sqrt(cols)));
                                out.add(new OpResult(name + " vs two products and the glu op", shape, error(got, before), 0));
                            }
                        } finally {
                            for (VulkanContext.Buffer b : buffers) ctx.free(b);
                        }
                    }
        return out;
    }

    /**
     * matvec_decode.comp's several-token pipeline with the folded operators (a batched decode step's products): 3 tokens
     * of f32 and int8 weights, 19 rows by 1,000 columns (one tile) and 4,500 (several), the RMSNorm with its weight, row
     * and column scales, a bias and the add into y (P aligned: x' 4 columns at a time), and the GLU with each token's
     * up row (P unaligned: one at a time); every token's row bit for bit the one-token product's of that token alone.
     */
    static List<OpResult> foldedTokens(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        VulkanContext ctx = mm.context();
        int rows = 19, yOff = 3, yStride = rows + 2, T = 3;
        float eps = 1e-5f;
        for (int kind : new int[] {Shaders.KIND_F32, Shaders.KIND_I8})
            for (int cols : new int[] {1000, 4500})
                for (boolean glu : new boolean[] {false, true}) {
                    if (!ctx.tokenProducts(kind, cols, T)) continue;
                    int n = rows * cols, wWords = kind == Shaders.KIND_I8 ? n / 4 : n;
                    int rsOff = wWords, cfOff = (rsOff + rows + 3) / 4 * 4, words = cfOff + cols;
                    int pOff = glu ? 1 : 4, biasOff = pOff + T * cols;
                    float[] prm = gauss(r, biasOff + rows, 1), x = gauss(r, T * cols, 1), y0 = gauss(r, yOff + T * yStride, 1);
                    int flags = MatvecPush.ROW_SCALES | MatvecPush.COL_SCALES | MatvecPush.ADD
                            | (glu ? MatvecPush.GLU : MatvecPush.NORM | MatvecPush.NORM_WEIGHT | MatvecPush.BIAS);
                    int word = glu ? dev.cmf4j.backend.Activation.SILU.ordinal() : Float.floatToRawIntBits(eps);
                    List<VulkanContext.Buffer> bufs = new ArrayList<>();
                    try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
                        java.util.function.IntFunction<VulkanContext.Buffer> buffer = floats -> {
                            VulkanContext.Buffer b = ctx.buffer(4L * floats, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check");
                            bufs.add(b);
                            return b;
                        };
                        VulkanContext.Buffer wb = buffer.apply(words), xb = buffer.apply(T * cols), yb = buffer.apply(y0.length),
                                pb = buffer.apply(prm.length);
                        MemorySegment wm = wb.mapped();
                        for (int i = 0; i < n; i++) {
                            if (kind == Shaders.KIND_I8) wm.set(ValueLayout.JAVA_BYTE, i, (byte) r.nextInt(-127, 128));
                            else wm.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) r.nextGaussian());
                        }
                        MemorySegment.copy(gauss(r, rows, 0.5), 0, wm, ValueLayout.JAVA_FLOAT, 4L * rsOff, rows);
                        MemorySegment.copy(gauss(r, cols, 0.5), 0, wm, ValueLayout.JAVA_FLOAT, 4L * cfOff, cols);
                        MemorySegment.copy(prm, 0, pb.mapped(), ValueLayout.JAVA_FLOAT, 0, prm.length);
                        long set = mm.allocateSet(ctx.descriptorSetLayout);
                        mm.writeProductSet(set, wb.buffer(), xb.buffer(), yb.buffer(), pb.buffer(), 0, 0, 0);
                        MemorySegment push = arena.allocate(MatvecPush.BYTES, 4), sets = arena.allocate(ValueLayout.JAVA_LONG);
                        sets.set(ValueLayout.JAVA_LONG, 0, set);
                        // each token alone: its x at 0, its up row (GLU) by the P offset, its y row by the y offset
                        float[] alone = new float[T * rows];
                        for (int t = 0; t < T; t++) {
                            MemorySegment.copy(x, t * cols, xb.mapped(), ValueLayout.JAVA_FLOAT, 0, cols);
                            MemorySegment.copy(y0, 0, yb.mapped(), ValueLayout.JAVA_FLOAT, 0, y0.length);
                            MatvecPush.write(push, rows, cols, 1, 0, yOff + t * yStride, 0, rsOff, cfOff, flags, glu ? pOff + t * cols : pOff, word, biasOff);
                            int groups = ctx.matvecGroups(kind, rows, cols, 1, 1)[0];
                            dispatch(mm, ctx.matvecPipeline(kind, cols, 1), sets, push, groups, 1);
                            MemorySegment.copy(yb.mapped(), ValueLayout.JAVA_FLOAT, 4L * (yOff + t * yStride), alone, t * rows, rows);
                        }
                        MemorySegment.copy(x, 0, xb.mapped(), ValueLayout.JAVA_FLOAT, 0, T * cols);
                        MemorySegment.copy(y0, 0, yb.mapped(), ValueLayout.JAVA_FLOAT, 0, y0.length);
                        MatvecPush.write(push, rows, cols, T, 0, yOff, yStride, rsOff, cfOff, flags, pOff, word, biasOff);
                        int[] g = ctx.matvecGroups(kind, rows, cols, T, 1);
                        dispatch(mm, ctx.matvecPipeline(kind, cols, T), sets, push, g[0], g[1]);
                        double differ = 0;
                        for (int t = 0; t < T; t++)
                            for (int i = 0; i < rows; i++) {
                                float got = yb.mapped().getAtIndex(ValueLayout.JAVA_FLOAT, yOff + (long) t * yStride + i), want = alone[t * rows + i];
                                if (Float.floatToRawIntBits(got) != Float.floatToRawIntBits(want)) differ = Math.max(differ, Math.abs(got - want) + 1e-30);
                            }
                        String name = "matvec_decode " + (kind == Shaders.KIND_I8 ? "int8" : "f32") + (glu ? " glu" : " norm bias") + " scales add";
                        out.add(new OpResult(name + ", " + T + " tokens = each alone, bitwise", rows + "x" + cols, differ, 0));
                    } finally {
                        bufs.forEach(ctx::free);
                    }
                }
        return out;
    }

    /**
     * gdn.comp's operators (Qwen3-Next) against the CPU's, each stage fed the same inputs: the fused projections'
     * unfuse (exact copies), the causal conv + SiLU of a span at position 3 over random carried inputs and at position 0
     * over carried inputs of NaN (which it must not read) with and without a bias, the gates (L2-normed q and k, β, g),
     * the delta rule over a random state (and over a NaN one at position 0) with {@code GatedDeltaRule.recurrent}, the
     * gated norm; the output gate's split and σ product and the shared expert's gated add. {nk, nv, dk, dv, kernel,
     * tokens}: a value head per key head and two, value dims past a workgroup (two columns an invocation).
     */
    static List<OpResult> deltaNet(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        for (int[] sh : new int[][] {{2, 4, 16, 16, 4, 5}, {1, 2, 128, 72, 3, 3}}) {
            int nk = sh[0], nv = sh[1], dk = sh[2], dv = sh[3], kernel = sh[4], T = sh[5], rep = nv / nk;
            int qk = nk * dk, vd = nv * dv, convDim = 2 * qk + vd, group = 2 * dk + 2 * rep * dv, hist = kernel - 1;
            String shape = nk + "/" + nv + " heads, " + dk + "x" + dv + ", " + T + " tokens";
            // unfuse: DeltaNetStep's copies
            float[] proj = gauss(r, T * (2 * qk + 2 * vd), 1), ba = gauss(r, T * 2 * nv, 1);
            float[] mixed = new float[T * convDim], z = new float[T * vd], b = new float[T * nv], a = new float[T * nv];
            float[] wMixed = mixed.clone(), wZ = z.clone(), wB = b.clone(), wA = a.clone();
            for (int t = 0; t < T; t++)
                for (int h = 0; h < nk; h++) {
                    int gb = t * (2 * qk + 2 * vd) + h * group, dst = t * convDim;
                    System.arraycopy(proj, gb, wMixed, dst + h * dk, dk);
                    System.arraycopy(proj, gb + dk, wMixed, dst + qk + h * dk, dk);
                    System.arraycopy(proj, gb + 2 * dk, wMixed, dst + 2 * qk + h * rep * dv, rep * dv);
                    System.arraycopy(proj, gb + 2 * dk + rep * dv, wZ, t * vd + h * rep * dv, rep * dv);
                    System.arraycopy(ba, t * 2 * nv + h * 2 * rep, wB, t * nv + h * rep, rep);
                    System.arraycopy(ba, t * 2 * nv + h * 2 * rep + rep, wA, t * nv + h * rep, rep);
                }
            run(mm, new int[] {VulkanContext.OP_GDN_UNFUSE}, new int[] {T}, new int[] {nk, nv, dk, dv}, 0, proj, ba, mixed, z, b, a);
            double unfuse = Math.max(Math.max(error(mixed, wMixed), error(z, wZ)), Math.max(error(b, wB), error(a, wA)));
            out.add(new OpResult("delta net unfuse", shape, unfuse, 0));
            // conv: weights and bias in one parameter array (as the forward's params), rows of the span from row 1
            float[] conv = gauss(r, convDim * kernel, 0.5), bias = gauss(r, convDim, 0.2);
            float[] params = new float[5 + conv.length + bias.length];
            System.arraycopy(conv, 0, params, 5, conv.length);
            System.arraycopy(bias, 0, params, 5 + conv.length, bias.length);
            for (int pos0 : new int[] {3, 0})
                for (boolean withBias : new boolean[] {true, false}) {
                    int n = T - 1;
                    float[] x = gauss(r, T * convDim, 1), state = gauss(r, convDim * hist, 1), wantX = x.clone();
                    float[] wantState = pos0 == 0 ? new float[state.length] : state.clone();
                    if (pos0 == 0) java.util.Arrays.fill(state, Float.NaN);
                    dev.cmf4j.backend.cpu.CausalConv1d.apply(wantX, convDim, n, convDim, conv, withBias ? bias : null, kernel, wantState,
                            new float[hist + n]);
                    run(mm, VulkanContext.OP_GDN_CONV, (convDim + 63) / 64, new int[] {n, convDim, kernel, 1, 5, 5 + conv.length, withBias ? 1 : 0},
                            pos0, x, params, state, x);
                    out.add(new OpResult("delta net conv" + (withBias ? "" : " no bias") + (pos0 == 0 ? " at 0" : ""), shape,
                            Math.max(error(x, wantX), error(state, wantState)), 1e-6));
                }
            // gates
            float[] negA = gauss(r, nv, 1), dtBias = gauss(r, nv, 1), gp = new float[7 + 2 * nv];
            for (int i = 0; i < nv; i++) { negA[i] = -Math.abs(negA[i]); gp[7 + i] = negA[i]; gp[7 + nv + i] = dtBias[i]; }
            float[] x = gauss(r, T * convDim, 1), gb = gauss(r, T * nv, 2), ga = gauss(r, T * nv, 3);
            ga[0] = 25;   // softplus's linear branch
            float[] q = new float[T * nv * dk], k = new float[T * nv * dk], wq = q.clone(), wk = k.clone(), wBeta = gb.clone(), wG = ga.clone();
            for (int t = 0; t < T; t++)
                for (int h = 0; h < nv; h++) {
                    int kh = h / rep, o = (t * nv + h) * dk;
                    double sq = 0, sk = 0;
                    for (int i = 0; i < dk; i++) {
                        sq += (double) x[t * convDim + kh * dk + i] * x[t * convDim + kh * dk + i];
                        sk += (double) x[t * convDim + qk + kh * dk + i] * x[t * convDim + qk + kh * dk + i];
                    }
                    for (int i = 0; i < dk; i++) {
                        wq[o + i] = (float) (x[t * convDim + kh * dk + i] / Math.sqrt(sq + 1e-6) / Math.sqrt(dk));
                        wk[o + i] = (float) (x[t * convDim + qk + kh * dk + i] / Math.sqrt(sk + 1e-6));
                    }
                    int i = t * nv + h;
                    wBeta[i] = (float) (1 / (1 + Math.exp(-gb[i])));
                    double sp = ga[i] + dtBias[h];
                    wG[i] = (float) (negA[h] * (sp > 20 ? sp : Math.log1p(Math.exp(sp))));
                }
            run(mm, new int[] {VulkanContext.OP_GDN_GATES}, new int[] {T * nv}, new int[] {nk, nv, dk, convDim, 7, 7 + nv}, 0, x, gb, ga, gp, q, k);
            out.add(new OpResult("delta net gates", shape, Math.max(Math.max(error(q, wq), error(k, wk)), Math.max(error(gb, wBeta), error(ga, wG))), 1e-5));
            // the rule over a span of T - 1 rows from row 1 (q, k, g, β, v: the CPU's operands above, fresh ones)
            for (int pos0 : new int[] {5, 0}) {
                int n = T - 1;
                float[] rq = gauss(r, T * nv * dk, 0.3), rk = gauss(r, T * nv * dk, 0.3), v = gauss(r, T * convDim, 1);
                float[] g = gauss(r, T * nv, 0.5), beta = new float[T * nv];
                for (int i = 0; i < beta.length; i++) { g[i] = -Math.abs(g[i]); beta[i] = (float) r.nextDouble(); }
                float[] S = gauss(r, nv * dk * dv, 1), wantS = pos0 == 0 ? new float[S.length] : S.clone(), core = new float[T * vd];
                float[] wantCore = core.clone();
                if (pos0 == 0) java.util.Arrays.fill(S, Float.NaN);
                for (int h = 0; h < nv; h++)
                    dev.cmf4j.backend.cpu.GatedDeltaRule.recurrent(n, dk, dv, rq, nv * dk, nv * dk + h * dk, rk, nv * dk + h * dk,
                            v, convDim, convDim + 2 * qk + h * dv, g, beta, nv, nv + h, wantS, h * dk * dv, wantCore, vd, vd + h * dv, new float[dv]);
                run(mm, new int[] {VulkanContext.OP_GDN_RULE}, new int[] {nv}, new int[] {n, nv, dk, dv, convDim, 2 * qk, 1}, pos0,
                        rq, rk, v, g, beta, S, core);
                out.add(new OpResult("delta net rule" + (pos0 == 0 ? " at 0" : ""), shape, Math.max(error(core, wantCore), error(S, wantS)), 1e-5));
            }
            // the gated norm, weights plain and offset
            for (int flags : new int[] {1, 3, 0}) {
                float[] core = gauss(r, T * vd, 1), zz = gauss(r, T * vd, 1), w = gauss(r, 3 + dv, 1), want = new float[T * vd];
                float[] nw = java.util.Arrays.copyOfRange(w, 3, 3 + dv);
                for (int row = 0; row < T * nv; row++) {
                    dev.cmf4j.backend.cpu.RmsNorm.apply(core, row * dv, want, row * dv, dv, flags == 0 ? null : nw, flags == 3, 1e-6f);
                    for (int c = 0; c < dv; c++) want[row * dv + c] *= zz[row * dv + c] / (1f + (float) Math.exp(-zz[row * dv + c]));
                }
                run(mm, VulkanContext.OP_GDN_NORM, T * nv, new int[] {0, dv, 3, flags, Float.floatToRawIntBits(1e-6f)}, core, zz, w, core);
                out.add(new OpResult("delta net norm" + (flags == 3 ? " offset" : flags == 0 ? " no weight" : ""), shape, error(core, want), 1e-5));
            }
        }
        // the output gate: q and gate per head apart, then att ·= σ(gate); the shared expert's y += σ(logit)·src
        int rows = 6, hd = 24, n = rows * hd;
        float[] qg = gauss(r, 2 * n, 1), q = new float[n], gate = new float[n], wantQ = new float[n], wantGate = new float[n];
        for (int i = 0; i < n; i++) { wantQ[i] = qg[i / hd * 2 * hd + i % hd]; wantGate[i] = qg[i / hd * 2 * hd + hd + i % hd]; }
        run(mm, VulkanContext.OP_SPLIT_GATE, (n + 63) / 64, new int[] {n, hd}, qg, q, gate, qg);
        out.add(new OpResult("output gate split", rows + "x" + hd, Math.max(error(q, wantQ), error(gate, wantGate)), 0));
        float[] att = gauss(r, n, 1), gated = new float[n];
        for (int i = 0; i < n; i++) gated[i] = att[i] * (1f / (1f + (float) Math.exp(-gate[i])));
        run(mm, VulkanContext.OP_SIGMOID_MUL, (n + 63) / 64, new int[] {n}, att, gate, att, att);
        out.add(new OpResult("output gate", n + " values", error(att, gated), 1e-6));
        for (boolean withGate : new boolean[] {true, false}) {
            int hidden = 40, tokens = 3;
            float[] y = gauss(r, tokens * hidden, 1), src = gauss(r, tokens * hidden, 1), logit = gauss(r, tokens, 2), want = y.clone();
            for (int i = 0; i < want.length; i++) want[i] += (withGate ? 1f / (1f + (float) Math.exp(-logit[i / hidden])) : 1f) * src[i];
            run(mm, VulkanContext.OP_GATED_ADD, 2, new int[] {tokens * hidden, hidden, withGate ? 1 : 0}, y, src, logit, y);
            out.add(new OpResult("gated add" + (withGate ? "" : " ungated"), tokens + "x" + hidden, error(y, want), 1e-6));
        }
        return out;
    }

    /**
     * embryo.comp's operators against float64: the bounded anchor's attend (sinks unrotated, the window's keys from the
     * ring or this span's rows, the query rotated by distance) over a span of rows from row 1, at a position whose window
     * is not full yet and at one where it wraps the ring, then the ring commit (a span longer than the window keeps its
     * last W rows); the resonance router against the CPU's ResonanceRouter (rank 2 and 0, an exact tie to the lower
     * expert); the clustered head's cluster log-softmax and finish, ungated and with a gate dropping some clusters.
     */
    static List<OpResult> embryo(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        // anchor {heads, kv heads, head dim, rotary dims, window, sinks, span rows, first position}
        for (int[] sh : new int[][] {{4, 2, 16, 16, 8, 4, 3, 2}, {4, 2, 16, 8, 8, 4, 3, 13}, {6, 2, 8, 8, 16, 3, 20, 5}}) {
            int heads = sh[0], kvh = sh[1], hd = sh[2], rd = sh[3], W = sh[4], S = sh[5], n = sh[6], pos0 = sh[7], half = rd / 2;
            int qd = heads * hd, kvd = kvh * hd, rows = n + 1;
            float scale = (float) (1 / Math.sqrt(hd));
            float[] q = gauss(r, rows * qd, 1), k = gauss(r, rows * kvd, 1), v = gauss(r, rows * kvd, 1);
            float[] ringK = gauss(r, W * kvd, 1), ringV = gauss(r, W * kvd, 1), att = new float[rows * qd];
            // P: sinkK, sinkV [kvh, S, hd], cos, sin [W, half] (real rotations by distance)
            int sk = 3, sv = sk + kvh * S * hd, cs = sv + kvh * S * hd, sn = cs + W * half;
            float[] prm = new float[sn + W * half];
            for (int i = sk; i < cs; i++) prm[i] = (float) r.nextGaussian();
            for (int d = 0; d < W; d++)
                for (int i = 0; i < half; i++) {
                    double th = d * Math.pow(1000, -2.0 * i / rd);
                    prm[cs + d * half + i] = (float) Math.cos(th);
                    prm[sn + d * half + i] = (float) Math.sin(th);
                }
            double[] want = new double[rows * qd];
            for (int t = 0; t < n; t++)
                for (int h = 0; h < heads; h++) {
                    int g = h / (heads / kvh), p = pos0 + t, first = Math.max(0, p - W + 1), cnt = S + p - first + 1;
                    double[] sc = new double[cnt], val = new double[cnt * hd];
                    int qo = (1 + t) * qd + h * hd;
                    for (int s2 = 0; s2 < cnt; s2++) {
                        double acc = 0;
                        if (s2 < S) {
                            for (int i = 0; i < hd; i++) {
                                acc += (double) q[qo + i] * prm[sk + (g * S + s2) * hd + i];
                                val[s2 * hd + i] = prm[sv + (g * S + s2) * hd + i];
                            }
                        } else {
                            int d = s2 - S, j = p - d;
                            boolean own = j >= pos0;
                            float[] kk = own ? k : ringK, vv = own ? v : ringV;
                            int ko = own ? (1 + j - pos0) * kvd + g * hd : (j % W) * kvd + g * hd;
                            double[] rq = new double[hd];
                            for (int i = 0; i < hd; i++) rq[i] = q[qo + i];
                            for (int i = 0; i < half; i++) {
                                double c = prm[cs + d * half + i], si = prm[sn + d * half + i];
                                rq[i] = q[qo + i] * c - q[qo + i + half] * si;
                                rq[i + half] = q[qo + i] * si + q[qo + i + half] * c;
                            }
                            for (int i = 0; i < hd; i++) { acc += rq[i] * kk[ko + i]; val[s2 * hd + i] = vv[ko + i]; }
                        }
                        sc[s2] = acc * scale;
                    }
                    double m = java.util.Arrays.stream(sc).max().orElseThrow(), l = 0;
                    for (int s2 = 0; s2 < cnt; s2++) { sc[s2] = Math.exp(sc[s2] - m); l += sc[s2]; }
                    for (int i = 0; i < hd; i++) {
                        double acc = 0;
                        for (int s2 = 0; s2 < cnt; s2++) acc += sc[s2] * val[s2 * hd + i];
                        want[(1 + t) * qd + h * hd + i] = acc / l;
                    }
                }
            float[] wantRingK = ringK.clone(), wantRingV = ringV.clone();
            for (int t = Math.max(0, n - W); t < n; t++) {
                System.arraycopy(k, (1 + t) * kvd, wantRingK, ((pos0 + t) % W) * kvd, kvd);
                System.arraycopy(v, (1 + t) * kvd, wantRingV, ((pos0 + t) % W) * kvd, kvd);
            }
            int[] u = {heads, kvh, hd, W, S, half, Float.floatToRawIntBits(scale), 1, 0, sk, sv, cs, sn};
            run(mm, new int[] {VulkanContext.OP_ANCHOR_ATTEND}, new int[] {heads * n}, u, pos0, q, k, v, ringK, ringV, q, att, prm);
            String shape = n + " rows at " + pos0 + ", " + heads + "/" + kvh + " heads x" + hd + ", window " + W + ", " + S + " sinks";
            out.add(new OpResult("anchor attend", shape, error(att, want), 1e-5));
            run(mm, new int[] {VulkanContext.OP_ANCHOR_COMMIT}, new int[] {Math.min(n, W)}, new int[] {n, W, kvd, 1}, pos0, k, v, ringK, ringV);
            out.add(new OpResult("anchor commit", shape, Math.max(error(ringK, wantRingK), error(ringV, wantRingV)), 0));
        }
        // resonance router {experts, rank, dim, rows}; row 0 of the second: experts 1 and 3 identical (a tie to 1)
        for (int[] sh : new int[][] {{5, 2, 48, 3}, {4, 0, 20, 2}}) {
            int E = sh[0], rank = sh[1], dim = sh[2], T = sh[3];
            float[] y = gauss(r, T * dim, 1), mu = gauss(r, E * dim, 1), uu = rank == 0 ? new float[0] : gauss(r, E * rank * dim, 0.3f), bias = gauss(r, E, 2);
            if (rank == 0) { System.arraycopy(mu, dim, mu, 3 * dim, dim); bias[3] = bias[1]; System.arraycopy(mu, dim, y, 0, dim); }
            float[] prm = new float[E * dim + uu.length + E], route = new float[2 * T];
            System.arraycopy(mu, 0, prm, 0, mu.length);
            System.arraycopy(uu, 0, prm, mu.length, uu.length);
            System.arraycopy(bias, 0, prm, mu.length + uu.length, E);
            dev.cmf4j.backend.cpu.ResonanceRouter router = new dev.cmf4j.backend.cpu.ResonanceRouter(E, rank, dim, mu, rank == 0 ? null : uu, bias, null);
            run(mm, new int[] {VulkanContext.OP_RESONANCE_ROUTE}, new int[] {T}, new int[] {E, rank, dim, 0, mu.length, mu.length + uu.length}, 0,
                    y, route, y, y, y, y, y, prm);
            int wrong = 0;   // (moe.comp's routing: per row its expert id, then its weight)
            for (int t = 0; t < T; t++)
                if (Float.floatToRawIntBits(route[2 * t]) != router.route(y, t * dim, new double[E], new double[E], new double[dim])
                        || route[2 * t + 1] != 1f) wrong++;
            out.add(new OpResult("resonance router" + (rank == 0 ? " with a tie" : ""), E + " experts, rank " + rank + ", " + T + " rows", wrong, 0));
        }
        // clustered head {rows, clusters, size}: ungated, then a gate between the clusters' log-probabilities
        int rows = 3, count = 6, size = 10, vocab = count * size;
        for (boolean gated : new boolean[] {false, true}) {
            float[] z = gauss(r, rows * vocab, 3), lc = gauss(r, rows * count, 2);
            double[] want = new double[rows * vocab];
            double[] lp = new double[rows * count];
            for (int row = 0; row < rows; row++) {
                double m = Double.NEGATIVE_INFINITY, l = 0;
                for (int c = 0; c < count; c++) m = Math.max(m, lc[row * count + c]);
                for (int c = 0; c < count; c++) l += Math.exp(lc[row * count + c] - m);
                for (int c = 0; c < count; c++) lp[row * count + c] = lc[row * count + c] - m - Math.log(l);
            }
            double gate = gated ? lp[count + 2] - 1e-3 : Double.NEGATIVE_INFINITY;   // row 1's cluster 2 stays, some others drop
            int dropped = 0;
            for (int row = 0; row < rows; row++)
                for (int c = 0; c < count; c++) {
                    double p = lp[row * count + c];
                    int at = row * vocab + c * size;
                    if ((float) p < gate) {
                        dropped++;
                        for (int i = 0; i < size; i++) want[at + i] = p - Math.log(size);
                        continue;
                    }
                    double m = Double.NEGATIVE_INFINITY, l = 0;
                    for (int i = 0; i < size; i++) m = Math.max(m, z[at + i]);
                    for (int i = 0; i < size; i++) l += Math.exp(z[at + i] - m);
                    for (int i = 0; i < size; i++) want[at + i] = z[at + i] - m - Math.log(l) + p;
                }
            run(mm, new int[] {VulkanContext.OP_CLUSTER_LOGSOFTMAX}, new int[] {rows}, new int[] {count}, 0, lc, lc, lc, lc);
            float[] zz = z.clone();
            run(mm, new int[] {VulkanContext.OP_HEAD_FINISH}, new int[] {rows * count}, new int[] {vocab, count, size,
                    Float.floatToRawIntBits((float) Math.log(size)), 0}, 0, gate, zz, lc, zz, zz);
            double[] wantLc = lp.clone();
            out.add(new OpResult("cluster log-softmax", rows + "x" + count, error(lc, wantLc), 1e-6));
            out.add(new OpResult("clustered head" + (gated ? " gated (" + dropped + " clusters dropped)" : ""), rows + " rows, " + count + "x" + size,
                    error(zz, want), 1e-6));
            if (gated && dropped == 0) throw new IllegalStateException("the gated head check dropped no cluster");
        }
        return out;
    }

    /**
     * moe.comp's routing against the CPU's (MoeStep: Softmax.apply, Softmax.topK) on random logits drawn from a few
     * values, so many tie: {experts, k} by the three modes (softmax and the top k, renormalised over the k or not; the
     * top k of the logits and a softmax over them). The expert ids must be the CPU's exactly (ties to the lower index);
     * the weights within 1e-5 of the largest (exp and the sums in f32 in another order: 8e-7 on lavapipe at 1,000 experts).
     */
    static List<OpResult> moeRouting(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        for (int[] sh : new int[][] {{8, 2}, {128, 8}, {1000, 32}, {5, 5}})
            for (int mode : new int[] {1, 0, 2}) {
                int n = sh[0], k = sh[1], tokens = 3;
                float[] logits = new float[tokens * n];
                for (int i = 0; i < logits.length; i++) logits[i] = (float) (r.nextInt(-6, 7) * 0.5);   // 13 values: ties
                float[] route = new float[2 * tokens * k], wantW = new float[tokens * k];
                int[] wantIdx = new int[tokens * k], pick = new int[k];
                for (int t = 0; t < tokens; t++) {
                    float[] p = java.util.Arrays.copyOfRange(logits, t * n, (t + 1) * n);
                    if (mode == 2) {
                        dev.cmf4j.backend.cpu.Softmax.topK(p, n, k, pick);
                        for (int j = 0; j < k; j++) wantW[t * k + j] = p[pick[j]];
                        dev.cmf4j.backend.cpu.Softmax.apply(wantW, t * k, k);
                    } else {
                        dev.cmf4j.backend.cpu.Softmax.apply(p, 0, n);
                        dev.cmf4j.backend.cpu.Softmax.topK(p, n, k, pick);
                        float sum = 0f;
                        for (int j = 0; j < k; j++) sum += p[pick[j]];
                        for (int j = 0; j < k; j++) wantW[t * k + j] = mode == 1 ? p[pick[j]] / sum : p[pick[j]];
                    }
                    System.arraycopy(pick, 0, wantIdx, t * k, k);
                }
                moeRun(mm, VulkanContext.MOE_ROUTE, Shaders.KIND_F32, null, 2, 1, new int[] {n, k, mode, tokens}, logits, route, logits, logits);
                int wrong = 0;
                float[] gotW = new float[tokens * k];
                for (int i = 0; i < tokens * k; i++) {
                    if (Float.floatToRawIntBits(route[2 * i]) != wantIdx[i]) wrong++;
                    gotW[i] = route[2 * i + 1];
                }
                String name = "moe route " + (mode == 2 ? "top-k then softmax" : mode == 1 ? "softmax top-k renormalised" : "softmax top-k");
                String shape = tokens + " tokens, " + n + " experts, top " + k;
                out.add(new OpResult(name + ": ids (ties to the lower index)", shape, wrong, 0));
                out.add(new OpResult(name + ": weights", shape, error(gotW, wantW), 1e-5));
            }
        return out;
    }

    /**
     * moe.comp's expert kernels against the CPU's reference products on random weights of every dtype the stacks take
     * (q4_block and q4tp at widths of whole groups of 32 only), output-major and (not the 4-bit kinds) input-major:
     * {@code tokens} rows each routed to {@code k} distinct experts of {@code experts} with random weights (the routing
     * given, not computed), gate and up separate (stacked gate, up, gate, up, …) or one fused interleaved [2I] product
     * per expert (row windows of a 3-D tensor), with biases, SiLU or gpt-oss's clamped SwiGLU; then the down products
     * weighted and summed in ascending expert order (as MoeStep adds them) into a random residual. Widths of 4s and odd
     * ones (the one-element loads). Error over the reference's largest magnitude, bound 1e-5 (f32 sums in another order).
     */
    static List<OpResult> moeExperts(VulkanMatMul mm, SplittableRandom r) {
        List<OpResult> out = new ArrayList<>();
        MatMul cpu = CpuBackend.reference().matmul();
        int experts = 6, k = 2, tokens = 3;
        for (DType dt : new DType[] {DType.F32, DType.BF16, DType.F16, DType.Q8_ROW, DType.Q8_2F, DType.Q4_BLOCK, DType.Q4TP})
            for (int[] sh : new int[][] {{40, 24}, {37, 13}, {64, 32}})
                for (boolean fused : new boolean[] {false, true})
                for (boolean im : new boolean[] {false, true}) {
                    int hidden = sh[0], inter = sh[1];
                    if ((dt == DType.Q4_BLOCK || dt == DType.Q4TP) && (im || hidden % 32 != 0 || inter % 32 != 0)) continue;   // rows of whole groups
                    dev.cmf4j.backend.Glu glu = fused ? new dev.cmf4j.backend.Glu.ClampedSwiglu(1.702f, 0.7f)
                            : new dev.cmf4j.backend.Glu.Gated(dev.cmf4j.backend.Activation.SILU);
                    List<Matrix> pieces = new ArrayList<>(), down = new ArrayList<>();
                    // input-major: [in, out] pieces (gpt-oss's HF layout), a 3-D [experts·hidden, 2I] tensor when fused
                    Matrix gateUp3d = im ? Matrix.of("gate_up", dt, randomPayload(r, dt, experts * hidden, 2 * inter), (long) experts * hidden, 2 * inter)
                            : Matrix.of("gate_up", dt, randomPayload(r, dt, experts * 2 * inter, hidden), (long) experts * 2 * inter, hidden);
                    for (int e = 0; e < experts; e++) {
                        if (fused) pieces.add(im ? gateUp3d.slice((long) e * hidden, hidden, true) : gateUp3d.slice((long) e * 2 * inter, 2 * inter, false));
                        else for (int h = 0; h < 2; h++)
                            pieces.add(im ? Matrix.of("gate/up " + e, dt, randomPayload(r, dt, hidden, inter), hidden, inter).slice(0, hidden, true)
                                    : Matrix.of("gate/up " + e, dt, randomPayload(r, dt, inter, hidden), inter, hidden));
                        down.add(im ? Matrix.of("down " + e, dt, randomPayload(r, dt, inter, hidden), inter, hidden).slice(0, inter, true)
                                : Matrix.of("down " + e, dt, randomPayload(r, dt, hidden, inter), hidden, inter));
                    }
                    float[] x = gauss(r, tokens * hidden, 1), guBias = gauss(r, experts * 2 * inter, 0.5), dBias = gauss(r, experts * hidden, 0.5);
                    float[] params = new float[guBias.length + dBias.length];
                    System.arraycopy(guBias, 0, params, 0, guBias.length);
                    System.arraycopy(dBias, 0, params, guBias.length, dBias.length);
                    float[] route = new float[2 * tokens * k];
                    int[] idx = new int[tokens * k];
                    float[] wts = new float[tokens * k];
                    for (int t = 0; t < tokens; t++) {
                        int a = r.nextInt(experts), b = (a + 1 + r.nextInt(experts - 1)) % experts;
                        idx[t * k] = t == 1 ? Math.max(a, b) : a;   // one token with its larger expert first (the sum's order)
                        idx[t * k + 1] = t == 1 ? Math.min(a, b) : b;
                        for (int j = 0; j < k; j++) {
                            wts[t * k + j] = (float) r.nextDouble();
                            route[2 * (t * k + j)] = Float.intBitsToFloat(idx[t * k + j]);
                            route[2 * (t * k + j) + 1] = wts[t * k + j];
                        }
                    }
                    // the CPU: each slot's gate and up, the GLU, then each token's experts' down in ascending order
                    float[] wantH = new float[tokens * k * inter], resid = gauss(r, tokens * hidden, 1), wantY = resid.clone();
                    for (int t = 0; t < tokens; t++) {
                        float[] xt = java.util.Arrays.copyOfRange(x, t * hidden, (t + 1) * hidden), sum = new float[hidden];
                        Integer[] order = {0, 1};
                        final int tt = t;
                        java.util.Arrays.sort(order, java.util.Comparator.comparingInt(j -> idx[tt * k + j]));
                        for (int j : order) {
                            int e = idx[t * k + j], slot = t * k + j;
                            float[] g = new float[2 * inter], h = new float[inter], y = new float[hidden];
                            if (fused) cpu.apply(pieces.get(e), xt, 1, g);
                            else {
                                float[] gg = new float[inter], uu = new float[inter];
                                cpu.apply(pieces.get(2 * e), xt, 1, gg);
                                cpu.apply(pieces.get(2 * e + 1), xt, 1, uu);
                                System.arraycopy(gg, 0, g, 0, inter);
                                System.arraycopy(uu, 0, g, inter, inter);
                            }
                            for (int i = 0; i < 2 * inter; i++) g[i] += guBias[e * 2 * inter + i];
                            for (int i = 0; i < inter; i++)
                                h[i] = fused ? glu.apply(g[2 * i], g[2 * i + 1]) : glu.apply(g[i], g[inter + i]);
                            System.arraycopy(h, 0, wantH, slot * inter, inter);
                            cpu.apply(down.get(e), h, 1, y);
                            for (int i = 0; i < hidden; i++) sum[i] += (y[i] + dBias[e * hidden + i]) * wts[slot];
                        }
                        for (int i = 0; i < hidden; i++) wantY[t * hidden + i] += sum[i];
                    }
                    long range = Math.min(VulkanMatMul.PART_CAP, mm.context().info().maxStorageBufferRange());
                    VulkanResidentForward.Stack gu = VulkanResidentForward.stack(mm, pieces, 2 * inter, range);
                    VulkanResidentForward.Stack dn = VulkanResidentForward.stack(mm, down, hidden, range);
                    try {
                        float[] h = new float[tokens * k * inter], y = resid.clone();
                        int act = glu instanceof dev.cmf4j.backend.Glu.Gated gt ? gt.act().ordinal() : 3;
                        moeRun(mm, im ? VulkanContext.MOE_GATE_UP_INPUT_MAJOR : VulkanContext.MOE_GATE_UP, gu.kind(), gu, im ? (inter + 63) / 64 : inter,
                                tokens * k, new int[] {inter, hidden, k, gu.rsOff(), gu.cfOff(), gu.flags(), 1, gu.cfRows(), gu.rowsPerExpert(), fused ? 1 : 0,
                                        act, Float.floatToRawIntBits(1.702f), Float.floatToRawIntBits(0.7f), 0, 2 * inter / (fused ? 1 : 2)}, x, route, h, params);
                        String shape = tokens + " tokens x top " + k + " of " + experts + ", " + inter + "x" + hidden + (fused ? ", fused interleaved" : ", gate and up")
                                + (im ? ", input-major" : "");
                        out.add(new OpResult("moe gate/up " + dt.label, shape, error(h, wantH), 1e-5));
                        moeRun(mm, im ? VulkanContext.MOE_DOWN_INPUT_MAJOR : VulkanContext.MOE_DOWN, dn.kind(), dn, im ? (hidden + 63) / 64 : hidden, tokens,
                                new int[] {hidden, inter, k, dn.rsOff(), dn.cfOff(), dn.flags(), 1 + guBias.length, dn.cfRows(), dn.rowsPerExpert(), 1, 0, 0, 0, 0,
                                        hidden}, wantH, route, y, params);
                        out.add(new OpResult("moe down " + dt.label, shape, error(y, wantY), 1e-5));
                        if (!im) out.addAll(moeByExpert(mm, r, gu, dn, dt, experts, k, hidden, inter, fused, act, params, 1 + guBias.length, shape));
                    } finally {
                        mm.context().free(gu.buffer());
                        mm.context().free(dn.buffer());
                    }
                }
        return out;
    }

    /**
     * A chunk's experts by expert (OPs 4, 5, 6: each expert's picks 8 at a time) against the same by pick (OPs 1, 2, which
     * {@link #moeExperts} holds to the CPU), bit for bit: 40 rows of top {@code k} over random routing (80 picks: two
     * windows of 64, several tiles of 8 an expert and partial ones), into a random residual.
     */
    private static List<OpResult> moeByExpert(VulkanMatMul mm, SplittableRandom r, VulkanResidentForward.Stack gu, VulkanResidentForward.Stack dn,
                                              DType dt, int experts, int k, int hidden, int inter, boolean fused, int act, float[] params,
                                              int downBias, String shape) {
        int tokens = 40, slots = tokens * k;
        float[] x = gauss(r, tokens * hidden, 1), route = new float[2 * slots], resid = gauss(r, tokens * hidden, 1);
        for (int t = 0; t < tokens; t++) {
            int a = r.nextInt(experts), b = (a + 1 + r.nextInt(experts - 1)) % experts;
            for (int j = 0; j < k; j++) {
                route[2 * (t * k + j)] = Float.intBitsToFloat(j == 0 ? a : b);
                route[2 * (t * k + j) + 1] = (float) r.nextDouble();
            }
        }
        int[] guPush = {inter, hidden, k, gu.rsOff(), gu.cfOff(), gu.flags(), 1, gu.cfRows(), gu.rowsPerExpert(), fused ? 1 : 0, act,
                Float.floatToRawIntBits(1.702f), Float.floatToRawIntBits(0.7f), slots};
        int[] dnPush = {hidden, inter, k, dn.rsOff(), dn.cfOff(), dn.flags(), downBias, dn.cfRows(), dn.rowsPerExpert(), 1, 0, 0, 0, slots};
        float[] hPick = new float[slots * inter], hExpert = new float[slots * inter];
        moeRun(mm, VulkanContext.MOE_GATE_UP, gu.kind(), gu, inter, slots, guPush, x, route, hPick, params);
        moeRun(mm, VulkanContext.MOE_GATE_UP_BY_EXPERT, gu.kind(), gu, 7, experts, guPush, x, route, hExpert, params);
        float[] yPick = resid.clone(), yExpert = resid.clone(), perPick = new float[slots * hidden];
        moeRun(mm, VulkanContext.MOE_DOWN, dn.kind(), dn, hidden, tokens, dnPush, hPick, route, yPick, params);
        moeRun(mm, VulkanContext.MOE_DOWN_BY_EXPERT, dn.kind(), dn, 5, experts, dnPush, hPick, route, perPick, params);
        moeRun(mm, VulkanContext.MOE_SUM, dn.kind(), dn, 1, tokens, new int[] {hidden, 0, k, 0, 0, 0, 0, 1, 0, 1}, perPick, route, yExpert, params);
        String chunk = shape.replace("3 tokens", tokens + " tokens");
        return List.of(new OpResult("moe gate/up " + dt.label + " by expert = by pick, bitwise", chunk, bitwise(hExpert, hPick), 0),
                new OpResult("moe down " + dt.label + " by expert = by pick, bitwise", chunk, bitwise(yExpert, yPick), 0));
    }

    /** 0 when {@code a} and {@code b} hold the same bits, else their largest difference (at least 1e-30). */
    private static double bitwise(float[] a, float[] b) {
        double d = 0;
        for (int i = 0; i < a.length; i++)
            if (Float.floatToRawIntBits(a[i]) != Float.floatToRawIntBits(b[i])) d = Math.max(d, Math.abs(a[i] - b[i]) + 1e-30);
        return d;
    }

    /**
     * One moe.comp dispatch of {@code op} over the stack {@code w} (A; null: b stands in), host-visible buffers holding
     * b, c, d and the parameters p (B, C, D, P), {@code gx} × {@code gy} workgroups, push constants {@code u}; the arrays
     * are overwritten with the buffers' contents after.
     */
    private static void moeRun(VulkanMatMul mm, int op, int kind, VulkanResidentForward.Stack w, int gx, int gy, int[] u,
                               float[] b, float[] c, float[] d, float[] p) {
        VulkanContext ctx = mm.context();
        java.util.IdentityHashMap<float[], VulkanContext.Buffer> made = new java.util.IdentityHashMap<>();
        VulkanContext.Buffer step = ctx.buffer(16, Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check step");
        try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofConfined()) {
            float[][] arrays = {b, b, c, d, null, b, b, b, p};
            long[] handles = new long[VulkanContext.OPS_BUFFERS - 1];   // (no chained counters: writeSetUnchained binds them)
            for (int i = 0; i < handles.length; i++) {
                if (i == 4) { handles[i] = step.buffer(); continue; }
                if (i == 0 && w != null) { handles[i] = w.buffer().buffer(); continue; }
                handles[i] = made.computeIfAbsent(arrays[i], x -> {
                    VulkanContext.Buffer nb = ctx.buffer(4L * Math.max(1, x.length), Vk.MEMORY_HOST_VISIBLE | Vk.MEMORY_HOST_COHERENT, "op check");
                    MemorySegment.copy(x, 0, nb.mapped(), ValueLayout.JAVA_FLOAT, 0, x.length);
                    return nb;
                }).buffer();
            }
            long set = mm.allocateSet(ctx.opsSetLayout);
            mm.writeSetUnchained(set, handles);
            MemorySegment push = arena.allocate(VulkanContext.OPS_PUSH_BYTES, 4), sets = arena.allocate(ValueLayout.JAVA_LONG);
            for (int i = 0; i < u.length; i++) push.setAtIndex(ValueLayout.JAVA_INT, i, u[i]);
            sets.set(ValueLayout.JAVA_LONG, 0, set);
            long pipeline = ctx.moePipeline(op, kind);
            mm.submitRecorded(cb -> {
                ctx.vk.cmdBindPipeline(cb, pipeline);
                ctx.vk.cmdBindDescriptorSet(cb, ctx.opsPipelineLayout, sets);
                ctx.vk.cmdPushConstants(cb, ctx.opsPipelineLayout, VulkanContext.OPS_PUSH_BYTES, push);
                ctx.vk.cmdDispatch(cb, gx, gy, 1);
            });
            made.forEach((arr, buf) -> MemorySegment.copy(buf.mapped(), ValueLayout.JAVA_FLOAT, 0, arr, 0, arr.length));
        } finally {
            made.values().forEach(ctx::free);
            ctx.free(step);
        }
    }

    static float[] gauss(SplittableRandom r, int n, double sd) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = (float) (sd * r.nextGaussian());
        return v;
    }

    /** max |got − want| / max |want|, want in float. */
    static double error(float[] got, float[] want) {
        double[] w = new double[want.length];
        for (int i = 0; i < w.length; i++) w[i] = want[i];
        return error(got, w);
    }

    /** One product of {@code dt} [rows, cols] over {@code tokens} rows, against the CPU's products and the float64 sum. */
    static List<OpResult> product(MatMul device, MatMul cpu, SplittableRandom r, DType dt, int rows, int cols, int tokens) {
        Matrix w = Matrix.of("w", dt, randomPayload(r, dt, rows, cols), rows, cols);
        float[] x = new float[tokens * cols];
        for (int i = 0; i < x.length; i++) x[i] = (float) r.nextGaussian();
        float[] got = new float[tokens * rows], cpuY = new float[tokens * rows];
        device.apply(w, x, tokens, got);
        cpu.apply(w, x, tokens, cpuY);
        double[] want = reference(w, x, tokens);
        String shape = rows + "x" + cols + ", " + tokens + " tokens";
        double bound = 2e-6 * Math.sqrt(cols);
        String name = "matvec_";
        if (device instanceof VulkanMatMul v && !v.plainPrompts && v.context().coopProduct(VulkanMatMul.kind(dt), tokens)) {
            name = "matmul_coop_";
            bound = COOP_BOUND + COOP_SUMS * Math.sqrt(cols);
        }
        List<OpResult> out = new ArrayList<>(List.of(new OpResult(name + dt.label + " vs float64", shape, error(got, want), bound),
                new OpResult(name + dt.label + " vs cpu", shape, error(got, cpuY, want), bound)));
        if (device instanceof VulkanMatMul v && v.context().tokenProducts(VulkanMatMul.kind(dt), cols, tokens)) {
            // several tokens by matvec_decode.comp: each token's row the bits of that token's product alone
            float[] alone = new float[rows];
            double differ = 0;
            for (int t = 0; t < tokens; t++) {
                device.apply(w, java.util.Arrays.copyOfRange(x, t * cols, (t + 1) * cols), 1, alone);
                for (int i = 0; i < rows; i++)
                    if (Float.floatToRawIntBits(alone[i]) != Float.floatToRawIntBits(got[t * rows + i]))
                        differ = Math.max(differ, Math.abs(alone[i] - got[t * rows + i]) + 1e-30);
            }
            out.add(new OpResult("matvec_decode " + dt.label + " tokens = each token alone, bitwise", shape, differ, 0));
        }
        return out;
    }

    /**
     * matmul_coop.comp where the device has it: the f16 and int8 kinds at {@link #COOP}'s shapes (and int8
     * with column scales at {@link #COOP_LARGE} unless quick) against float64 and the CPU under {@link #COOP_BOUND}, the
     * same through matmul.comp under the f32 bound; and int8 products whose every term and sum is exact in f32
     * (activations multiples of 1/4 in [-8, 8], no column scales), where the two shaders must give the float64 sum
     * times the row scale rounded once: a check of the tiles' layout that no rounding hides.
     */
    static List<OpResult> coopProducts(VulkanMatMul device, MatMul cpu, SplittableRandom r, boolean quick) {
        List<OpResult> out = new ArrayList<>();
        List<int[]> shapes = new ArrayList<>(List.of(COOP));
        for (DType dt : new DType[] {DType.F16, DType.Q8_ROW, DType.Q8_2F})
            for (int[] s : shapes) {
                out.addAll(product(device, cpu, r, dt, s[0], s[1], s[2]));
                device.plainPrompts = true;
                try {
                    out.addAll(product(device, cpu, r, dt, s[0], s[1], s[2]));
                } finally {
                    device.plainPrompts = false;
                }
            }
        if (!quick) out.addAll(product(device, cpu, r, DType.Q8_2F, COOP_LARGE[0], COOP_LARGE[1], COOP_LARGE[2]));
        for (int[] s : new int[][] {{70, 256, 40}, {130, 4096, 70}}) {
            int rows = s[0], cols = s[1], tokens = s[2];
            Matrix w = Matrix.of("w", DType.Q8_ROW, randomPayload(r, DType.Q8_ROW, rows, cols), rows, cols);
            float[] x = new float[tokens * cols];
            for (int i = 0; i < x.length; i++) x[i] = (r.nextInt(65) - 32) / 4f;
            double[] want = reference(w, x, tokens);
            float[] got = new float[tokens * rows];
            device.apply(w, x, tokens, got);
            String shape = rows + "x" + cols + ", " + tokens + " tokens, exact terms";
            out.add(new OpResult("matmul_coop_q8_row exact", shape, error(got, want), 0x1p-23));
        }
        return out;
    }

    /** y = W·x in float64 over the dtype's row decoder (what the file means, independent of any kernel). */
    static double[] reference(Matrix w, float[] x, int tokens) {
        int rows = w.outDim(), cols = w.inDim();
        double[] y = new double[tokens * rows];
        // rows in parallel: the largest check (4096 × 4096 at 512 tokens) is 8.6e9 products
        java.util.stream.IntStream.range(0, rows).parallel().forEach(o -> {
            float[] row = new float[cols];
            w.decodeRow(o, row, 0);
            for (int t = 0; t < tokens; t++) {
                double s = 0;
                for (int c = 0; c < cols; c++) s += (double) row[c] * x[t * cols + c];
                y[t * rows + o] = s;
            }
        });
        return y;
    }

    /** max |got − want| / max |want|. */
    static double error(float[] got, double[] want) {
        double d = 0, m = 1e-30;
        for (int i = 0; i < want.length; i++) {
            d = Math.max(d, Math.abs(got[i] - want[i]));
            m = Math.max(m, Math.abs(want[i]));
        }
        return Double.isNaN(d) ? Double.POSITIVE_INFINITY : d / m;
    }

    /** max |got − cpu| over the reference's largest magnitude. */
    static double error(float[] got, float[] cpu, double[] want) {
        double d = 0, m = 1e-30;
        for (int i = 0; i < want.length; i++) {
            d = Math.max(d, Math.abs(got[i] - cpu[i]));
            m = Math.max(m, Math.abs(want[i]));
        }
        return Double.isNaN(d) ? Double.POSITIVE_INFINITY : d / m;
    }

    /** A random [rows, cols] tensor in {@code dt}'s CMF layout (q8: int8 plane, f16 row scales, q8_2f then f16 column scales). */
    static MemorySegment randomPayload(SplittableRandom r, DType dt, int rows, int cols) {
        long n = (long) rows * cols;
        return switch (dt) {
            case F32 -> {
                MemorySegment s = MemorySegment.ofArray(new byte[(int) (4 * n)]);
                for (long i = 0; i < n; i++) s.set(F32, 4 * i, (float) (0.5 * r.nextGaussian()));
                yield s;
            }
            case BF16, F16 -> {
                MemorySegment s = MemorySegment.ofArray(new byte[(int) (2 * n)]);
                for (long i = 0; i < n; i++) {
                    float v = (float) (0.5 * r.nextGaussian());
                    s.set(U16, 2 * i, dt == DType.F16 ? Float.floatToFloat16(v) : (short) (Float.floatToRawIntBits(v) >>> 16));
                }
                yield s;
            }
            case Q8_ROW, Q8_2F -> {
                boolean cf = dt == DType.Q8_2F;
                MemorySegment s = MemorySegment.ofArray(new byte[(int) (n + 2L * rows + (cf ? 2L * cols : 0))]);
                for (long i = 0; i < n; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) (r.nextInt(255) - 127));
                for (int i = 0; i < rows; i++) s.set(U16, n + 2L * i, Float.floatToFloat16((float) (0.001 + 0.01 * r.nextDouble())));
                if (cf) for (int c = 0; c < cols; c++) s.set(U16, n + 2L * rows + 2L * c, Float.floatToFloat16((float) (0.5 + r.nextDouble())));
                yield s;
            }
            case Q4_BLOCK -> {
                long groups = (n + 31) / 32;
                MemorySegment s = MemorySegment.ofArray(new byte[(int) (groups * 18)]);
                for (long i = 0; i < groups * 16; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) r.nextInt(256));
                for (long g = 0; g < groups; g++) s.set(U16, groups * 16 + 2 * g, Float.floatToFloat16((float) (0.01 + 0.1 * r.nextDouble())));
                yield s;
            }
            case Q4TP -> {
                long gpr = (cols + 31) / 32, stride = dev.cmf4j.format.quant.TpLadder.codeStride(gpr), plane = rows * gpr * 16;
                MemorySegment s = MemorySegment.ofArray(new byte[(int) (plane + 4L * rows + rows * stride)]);
                for (long i = 0; i < plane; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) r.nextInt(256));
                for (int i = 0; i < rows; i++) {
                    s.set(U16, plane + 4L * i, Float.floatToFloat16((float) (-9 + 2 * r.nextDouble())));
                    s.set(U16, plane + 4L * i + 2, Float.floatToFloat16((float) (0.05 + 0.15 * r.nextDouble())));
                }
                for (long i = 0; i < rows * stride; i++) s.set(ValueLayout.JAVA_BYTE, plane + 4L * rows + i, (byte) r.nextInt(256));
                yield s;
            }
            default -> throw new IllegalArgumentException(dt.label + ": no Vulkan product");
        };
    }
}
