package dev.cmf4j.backend.cpu;

import dev.cmf4j.backend.KvType;
import org.junit.jupiter.api.Test;

import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The vector attention (tiles, online softmax, chunk partials) against its scalar twin and a double-precision
 * reference computed from the values the cache stores, for every cache type.
 *
 * <p>Bound, per output element, from a first-order error analysis in units of u = 2⁻²⁴ (float32 rounding): a score is a
 * dot of hd products, so each engine's score is off by at most δs = (2·hd + 4)·u·S, S = scale·Σ|qᵢ·kᵢ| (the dot's
 * rounding, q8's code × scale and the scale product; tanh is 1-Lipschitz, its own error ≤ 4u·cap); a softmax weight's
 * relative error is then ≤ 2·δs (numerator and denominator) plus the exp errors (≤ 4 ulp for the vector exp), the
 * rescales of the running sums (one per tile and chunk, each ≤ 4u) and the float sum of n weights (≤ n·u); the output,
 * a weighted mean of values, inherits that relative error times max|v| plus the n-term value sum's own n·u·max|v|.
 * Together: |out − ref| ≤ max|v|·(2·δs + (3n + 8·(n/32 + n/256) + 32)·u). A wrong tile, rescale or merge is off by a
 * fraction of max|v| (orders of magnitude over the bound); the float twins land well inside it.
 */
class AttentionKernelTest {
    private static final double U = 0x1p-24;

    /** A cache of {@code committed} positions and a pending chunk of {@code pending}, keys growing along the positions. */
    private static KvCache cache(Random r, KvType type, int kvHeads, int hd, int window, int committed, int pending) {
        int kvDim = kvHeads * hd;
        KvCache c = new KvCache(kvDim, hd, window, 1 << 16, type);
        int p = 0;
        while (p < committed) {
            int n = Math.min(committed - p, 1 + r.nextInt(97));
            c.beginChunk(p, n);
            fill(r, c, p, n, kvDim);
            c.commit();
            p += n;
        }
        c.beginChunk(p, pending);
        fill(r, c, p, pending, kvDim);
        return c;
    }

    private static void fill(Random r, KvCache c, int p0, int n, int kvDim) {
        for (int i = 0; i < n * kvDim; i++) {
            // keys grow with the position (the max moves forward through tiles and chunks); a few large values
            float grow = 0.5f + 2f * (p0 + i / kvDim) / 1000f;
            c.pendingKeys()[i] = (float) r.nextGaussian() * grow;
            c.pendingValues()[i] = (float) (r.nextGaussian() * (r.nextInt(50) == 0 ? 8 : 1));
        }
    }

    /** Softmax attention in double over the stored (dequantized) keys and values. */
    private static double[] reference(float[] q, int qo, int hd, KvCache c, int kvOff, int from, int to, float scale,
                                      float softcap, float sink, double[] boundOut) {
        int n = to - from + 1;
        double[] s = new double[n];
        float[] key = new float[hd], val = new float[hd];
        double max = Float.isNaN(sink) ? Double.NEGATIVE_INFINITY : sink, sMag = 0, vMax = 0;
        for (int j = 0; j < n; j++) {
            c.read(from + j, kvOff, hd, key, 0, val, 0);
            double d = 0, a = 0;
            for (int i = 0; i < hd; i++) { d += (double) q[qo + i] * key[i]; a += Math.abs((double) q[qo + i] * key[i]); }
            for (int i = 0; i < hd; i++) vMax = Math.max(vMax, Math.abs(val[i]));
            d *= scale;
            sMag = Math.max(sMag, a * scale);
            if (softcap > 0) d = Math.tanh(d / softcap) * softcap;
            s[j] = d;
            max = Math.max(max, d);
        }
        double sum = Float.isNaN(sink) ? 0 : Math.exp(sink - max);
        for (int j = 0; j < n; j++) sum += Math.exp(s[j] - max);
        double[] out = new double[hd];
        for (int j = 0; j < n; j++) {
            c.read(from + j, kvOff, hd, key, 0, val, 0);
            double w = Math.exp(s[j] - max) / sum;
            for (int i = 0; i < hd; i++) out[i] += w * val[i];
        }
        double ds = (2.0 * hd + 4) * U * sMag + (softcap > 0 ? 4 * U * softcap : 0);
        boundOut[0] = vMax * (2 * ds + (3.0 * n + 8.0 * (n / 32 + n / 256) + 32) * U);
        return out;
    }

    @Test void vectorAndScalarTwinMatchTheReferenceForEveryCacheTypeHeadDimWindowAndSink() {
        Random r = new Random(28);
        int cases = 0;
        double worst = 0;
        for (KvType type : KvType.values())
            for (int hd : new int[] {1, 7, 16, 33, 64, 80})
                for (int window : new int[] {0, 45, 300})
                    for (boolean sinkOn : new boolean[] {false, true}) {
                        // groups of 1, 4 and 6 query heads per KV head: alone, one block of four, a block and two alone
                        int kvHeads = 2, group = new int[] {1, 4, 6}[r.nextInt(3)], committed = 1 + r.nextInt(700), pending = 1 + r.nextInt(6);
                        KvCache c = cache(r, type, kvHeads, hd, window, committed, pending);
                        float scale = (float) (1 / Math.sqrt(hd)), softcap = r.nextBoolean() ? 0f : 5f;
                        float[] sinks = new float[group];
                        for (int i = 0; i < group; i++) sinks[i] = (float) r.nextGaussian() * 3;
                        float[] q = new float[group * hd];
                        for (int i = 0; i < q.length; i++) q[i] = (float) r.nextGaussian();
                        AttentionKernel.Work w = new AttentionKernel.Work();
                        for (int row = 0; row < pending; row++) {
                            int p = committed + row, from = window > 0 ? Math.max(0, p - window + 1) : 0;
                            for (int kh = 0; kh < kvHeads; kh++) {
                                float[] vec = new float[group * hd], twin = new float[group * hd];
                                AttentionKernel.attendGroup(q, 0, group, hd, c, kh * hd, from, p, scale, softcap,
                                        sinkOn ? sinks : null, 0, w, vec, 0);
                                for (int i = 0; i < group; i++) {
                                    AttentionKernel.attendScalar(q, i * hd, hd, c, kh * hd, from, p, scale, softcap,
                                            sinkOn ? sinks[i] : Float.NaN, new float[p - from + 1], twin, i * hd);
                                    double[] bound = new double[1];
                                    double[] ref = reference(q, i * hd, hd, c, kh * hd, from, p, scale, softcap,
                                            sinkOn ? sinks[i] : Float.NaN, bound);
                                    String what = type + " hd " + hd + " window " + window + " sink " + sinkOn + " cap "
                                            + softcap + " p " + p + " kv head " + kh + " q head " + i;
                                    for (int e = 0; e < hd; e++) {
                                        double dv = Math.abs(vec[i * hd + e] - ref[e]), dt = Math.abs(twin[i * hd + e] - ref[e]);
                                        assertThat(dv).as("vector, " + what).isLessThanOrEqualTo(bound[0]);
                                        assertThat(dt).as("scalar twin, " + what).isLessThanOrEqualTo(bound[0]);
                                        worst = Math.max(worst, dv / bound[0]);
                                    }
                                }
                                cases++;
                            }
                        }
                    }
        assertThat(cases).isGreaterThan(3 * 6 * 3 * 2 * 2);
        assertThat(worst).as("the vector path's worst error as a fraction of the bound").isGreaterThan(0);
    }

    @Test void chunkPartialsMergedGiveTheSameBitsAsOneThread() {
        Random r = new Random(5);
        for (KvType type : KvType.values())
            for (int hd : new int[] {5, 64}) {
                int group = 4, committed = 1500 + r.nextInt(300);
                KvCache c = cache(r, type, 1, hd, 0, committed, 3);
                float[] q = new float[group * hd];
                for (int i = 0; i < q.length; i++) q[i] = (float) r.nextGaussian();
                float[] sinks = {0.5f, -1f, 2f, 0f};
                for (int row = 0; row < 3; row++) {
                    int p = committed + row, from = row == 2 ? 300 : 0, nc = AttentionKernel.chunks(from, p);
                    float[] one = new float[group * hd], split = new float[group * hd];
                    int pf = AttentionKernel.partialFloats(group, hd);
                    float[] part = new float[nc * pf];
                    // the first call of each (interpreted or compiled, whichever the JIT has reached): the kernel uses
                    // no operation that rounds differently between tiers, so the bits agree from the start
                    AttentionKernel.attendGroup(q, 0, group, hd, c, 0, from, p, 0.2f, 0f, sinks, 0, new AttentionKernel.Work(), one, 0);
                    // chunks in reverse order, on fresh buffers each: nothing may carry from one to the next
                    for (int k = nc - 1; k >= 0; k--)
                        AttentionKernel.chunkPartial(q, 0, group, 1, hd, c, 0, from, p, k, 0.2f, 0f, new AttentionKernel.Work(), part, k * pf);
                    AttentionKernel.finishFromPartials(part, 0, nc, group, hd, sinks, 0, split, 0);
                    assertThat(split).as(type + " hd " + hd + " row " + row).containsExactly(one);
                }
            }
    }

    @Test void aWholeRowGivesEachKvHeadGroupsBits() {
        Random r = new Random(17);
        for (KvType type : KvType.values())
            for (int group : new int[] {1, 4, 6}) {
                int kvHeads = 3, hd = 64, heads = group * kvHeads, committed = 700;
                KvCache c = cache(r, type, kvHeads, hd, 0, committed, 2);
                float[] q = new float[heads * hd], sinks = new float[heads];
                for (int i = 0; i < q.length; i++) q[i] = (float) r.nextGaussian();
                for (int i = 0; i < heads; i++) sinks[i] = (float) r.nextGaussian();
                int p = committed + 1, from = 5, nc = AttentionKernel.chunks(from, p), pf = AttentionKernel.partialFloats(heads, hd);
                float[] row = new float[heads * hd], groups = new float[heads * hd], split = new float[heads * hd];
                AttentionKernel.attend(q, 0, group, kvHeads, hd, c, 0, from, p, 0.125f, 3f, sinks, 0, new AttentionKernel.Work(), row, 0);
                for (int kh = 0; kh < kvHeads; kh++)
                    AttentionKernel.attendGroup(q, kh * group * hd, group, hd, c, kh * hd, from, p, 0.125f, 3f, sinks, kh * group,
                            new AttentionKernel.Work(), groups, kh * group * hd);
                float[] part = new float[nc * pf];
                for (int k = 0; k < nc; k++)
                    AttentionKernel.chunkPartial(q, 0, group, kvHeads, hd, c, 0, from, p, k, 0.125f, 3f, new AttentionKernel.Work(), part, k * pf);
                AttentionKernel.finishFromPartials(part, 0, nc, heads, hd, sinks, 0, split, 0);
                assertThat(row).as(type + " group " + group + ": row against groups").containsExactly(groups);
                assertThat(split).as(type + " group " + group + ": chunks against row").containsExactly(row);
            }
    }

    @Test void aRowGetsTheSameBitsFromThePendingChunkAsFromTheStore() {
        // prefill then decode must not depend on where a key sits: f32 keys read in place or from the pending chunk
        Random r = new Random(9);
        int hd = 64, n = 600;
        KvCache whole = new KvCache(hd, hd, 0, 4096, KvType.F32), split = new KvCache(hd, hd, 0, 4096, KvType.F32);
        float[] keys = new float[n * hd], vals = new float[n * hd];
        for (int i = 0; i < keys.length; i++) { keys[i] = (float) r.nextGaussian(); vals[i] = (float) r.nextGaussian(); }
        whole.beginChunk(0, n);
        System.arraycopy(keys, 0, whole.pendingKeys(), 0, n * hd);
        System.arraycopy(vals, 0, whole.pendingValues(), 0, n * hd);
        split.beginChunk(0, n - 70);
        System.arraycopy(keys, 0, split.pendingKeys(), 0, (n - 70) * hd);
        System.arraycopy(vals, 0, split.pendingValues(), 0, (n - 70) * hd);
        split.commit();
        split.beginChunk(n - 70, 70);
        System.arraycopy(keys, (n - 70) * hd, split.pendingKeys(), 0, 70 * hd);
        System.arraycopy(vals, (n - 70) * hd, split.pendingValues(), 0, 70 * hd);
        float[] q = new float[hd];
        for (int i = 0; i < hd; i++) q[i] = (float) r.nextGaussian();
        float[] a = new float[hd], b = new float[hd];
        AttentionKernel.attendGroup(q, 0, 1, hd, whole, 0, 0, n - 1, 0.125f, 0f, null, 0, new AttentionKernel.Work(), a, 0);
        AttentionKernel.attendGroup(q, 0, 1, hd, split, 0, 0, n - 1, 0.125f, 0f, null, 0, new AttentionKernel.Work(), b, 0);
        assertThat(b).containsExactly(a);
    }

    @Test void vectorExpAndTanhStayWithinTwoUlpsOfTheJdksAndKeepTheEdges() {
        int lanes = AttentionKernel.F.length();
        float[] x = new float[lanes], e = new float[lanes], t = new float[lanes], scratch = new float[lanes];
        int worstExp = 0;
        double worstTanh = 0;
        Random r = new Random(3);
        for (int k = 0; k < 20000; k++) {
            for (int i = 0; i < lanes; i++) x[i] = k < 10000 ? -87.3f * r.nextFloat() : (float) (r.nextGaussian() * 10);
            System.arraycopy(x, 0, e, 0, lanes);
            AttentionKernel.exp(e, 0, lanes, 0f);
            System.arraycopy(x, 0, t, 0, lanes);
            AttentionKernel.tanh(t, 0, lanes, scratch);
            for (int i = 0; i < lanes; i++) {
                if (x[i] <= 88f) {
                    float want = (float) Math.exp(x[i]);
                    int ulps = Math.abs(Float.floatToIntBits(e[i]) - Float.floatToIntBits(want));
                    assertThat(ulps).as("exp(" + x[i] + ")").isLessThanOrEqualTo(2);
                    worstExp = Math.max(worstExp, ulps);
                }
                double dt = Math.abs(t[i] - Math.tanh(x[i]));
                assertThat(dt).as("tanh(" + x[i] + ")").isLessThanOrEqualTo(4 * U);
                worstTanh = Math.max(worstTanh, dt);
            }
        }
        java.util.Arrays.fill(x, Float.NEGATIVE_INFINITY);
        x[0] = Float.NaN;
        if (lanes > 2) { x[1] = -88f; x[2] = 0f; }
        System.arraycopy(x, 0, e, 0, lanes);
        AttentionKernel.exp(e, 0, lanes, 0f);
        assertThat(e[0]).isNaN();
        for (int i = 3; i < lanes; i++) assertThat(e[i]).as("exp(-inf), the padding").isEqualTo(0f);
        if (lanes > 2) { assertThat(e[1]).as("under the smallest normal: 0").isEqualTo(0f); assertThat(e[2]).isEqualTo(1f); }
        float[] big = new float[lanes];
        for (int i = 0; i < lanes; i++) big[i] = i % 2 == 0 ? 1e6f : -1e6f;
        System.arraycopy(big, 0, t, 0, lanes);
        AttentionKernel.tanh(t, 0, lanes, scratch);
        for (int i = 0; i < lanes; i++) assertThat(t[i]).isEqualTo(i % 2 == 0 ? 1f : -1f);
    }

    @Test void positionsOutsideTheCacheAreRefused() {
        KvCache c = cache(new Random(1), KvType.F16, 1, 8, 16, 40, 2);
        float[] out = new float[8];
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> AttentionKernel.attendGroup(new float[8], 0, 1, 8, c, 0, 10, 41,
                1f, 0f, null, 0, new AttentionKernel.Work(), out, 0)).isInstanceOf(IllegalStateException.class).hasMessageContaining("not in the cache");
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> AttentionKernel.attendGroup(new float[8], 0, 1, 8, c, 0, 30, 42,
                1f, 0f, null, 0, new AttentionKernel.Work(), out, 0)).isInstanceOf(IllegalStateException.class).hasMessageContaining("not in the cache");
    }
}
