package dev.cmf4j.backend.cpu;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShuffle;
import jdk.incubator.vector.VectorSpecies;

import java.util.Arrays;

/**
 * Query heads attending over a KV cache, like transformers' eager attention: scores = q·k·scale, optional
 * soft-capping tanh(s/c)·c, softmax in float32 (with an optional sink logit in the denominator), then the
 * probability-weighted sum of values.
 *
 * <p>The vector path ({@link #attendGroup}) takes the query heads that share one KV head together, so each tile of
 * {@link #TILE} keys and values is read from memory once for all of them; per tile it computes the key dots on the
 * Vector API, soft-caps, and folds the tile into a running (max, sum, weighted value sum) per head — an online
 * softmax, so no score row as long as the context is kept. Tiles start at multiples of {@code TILE} and are folded
 * into {@link #CHUNK}-position partials that start at multiples of {@code CHUNK}; the partials are merged in position
 * order. Those boundaries depend only on the positions, so a row gets the same bits whether its chunks ran on one
 * thread ({@link #attendGroup}) or were spread over a pool ({@link #chunkPartial} then {@link #finishFromPartials}),
 * and whichever rows share its batch. {@link #attendScalar} is the plain twin the tests hold the vector path to.
 */
public final class AttentionKernel {
    private AttentionKernel() {}

    static final VectorSpecies<Float> F = FloatVector.SPECIES_PREFERRED;
    private static final int L = F.length();
    /** Keys per tile (a multiple of every float species' lane count up to 512 bits). */
    public static final int TILE = 32;
    /** Positions per partial: the unit a long context is split into across threads. */
    public static final int CHUNK = 256;
    /**
     * The vector path needs 8 or 16 float lanes (AVX2, AVX-512); elsewhere, or with -Dcmf.kernel.scalar=true (as for the
     * weight kernels), the scalar twin runs.
     */
    private static final boolean VECTOR = (L == 8 || L == 16) && !Boolean.getBoolean("cmf.kernel.scalar");

    /** Whether {@link #attendGroup} takes the vector path (else the scalar twin; {@link #chunkPartial} needs it). */
    public static boolean vectorized() { return VECTOR; }

    /** Floats one chunk partial of {@code heads} heads of width {@code headDim} takes: a max, a sum and a vector each. */
    public static int partialFloats(int heads, int headDim) { return heads * (headDim + 2); }

    /** The chunks of {@code [from, to]}: they start at multiples of {@link #CHUNK}. */
    public static int chunks(int from, int to) { return to < from ? 0 : to / CHUNK - from / CHUNK + 1; }

    /**
     * One query head (the scalar-twin signature, kept for callers with a single head); {@code scores} is unused by the
     * vector path.
     */
    public static void attend(float[] q, int qo, int headDim, KvCache cache, int kvOff, int from, int to,
                              float scale, float softcap, float sink, float[] scores, float[] out, int oo) {
        if (!VECTOR) { attendScalar(q, qo, headDim, cache, kvOff, from, to, scale, softcap, sink, scores, out, oo); return; }
        float[] sinks = Float.isNaN(sink) ? null : new float[] {sink};
        attendGroup(q, qo, 1, headDim, cache, kvOff, from, to, scale, softcap, sinks, 0, new Work(1, headDim), out, oo);
    }

    /**
     * The scalar twin: every score in a row of {@code scores}, their max, exp and sum, then the value sum, one position
     * at a time through {@link KvCache#keyDot} and {@link KvCache#addValue}.
     */
    public static void attendScalar(float[] q, int qo, int headDim, KvCache cache, int kvOff, int from, int to,
                                    float scale, float softcap, float sink, float[] scores, float[] out, int oo) {
        int n = to - from + 1;
        float max = Float.NEGATIVE_INFINITY;
        for (int j = 0; j < n; j++) {
            int pos = from + j;
            float s = cache.keyDot(q, qo, pos, kvOff, headDim) * scale;
            if (softcap > 0f) s = (float) Math.tanh(s / softcap) * softcap;
            scores[j] = s;
            if (s > max) max = s;
        }
        boolean hasSink = !Float.isNaN(sink);
        if (hasSink && sink > max) max = sink;
        float sum = 0f;
        for (int j = 0; j < n; j++) { float e = (float) Math.exp(scores[j] - max); scores[j] = e; sum += e; }
        if (hasSink) sum += (float) Math.exp(sink - max);
        Arrays.fill(out, oo, oo + headDim, 0f);
        for (int j = 0; j < n; j++) {
            cache.addValue(scores[j] / sum, from + j, kvOff, out, oo, headDim);
        }
    }

    /**
     * {@code g} query heads that read the same KV head (consecutive, {@code headDim} apart from {@code qo}) attending
     * over positions {@code [from, to]}; outputs likewise from {@code oo}. {@code sinks[sinkOff + i]} is head i's sink
     * logit ({@code sinks} null: none).
     */
    public static void attendGroup(float[] q, int qo, int g, int headDim, KvCache cache, int kvOff, int from, int to,
                                   float scale, float softcap, float[] sinks, int sinkOff, Work w, float[] out, int oo) {
        attend(q, qo, g, 1, headDim, cache, kvOff, from, to, scale, softcap, sinks, sinkOff, w, out, oo);
    }

    /**
     * A row's {@code kvHeads·g} query heads (head h reads KV head h / g, at {@code kvOff + (h / g)·headDim}) over
     * {@code [from, to]}: per tile, every KV head's slice of the positions in turn, so a row of the cache is read
     * whole and in order (each head's bits are those of {@link #attendGroup}).
     */
    public static void attend(float[] q, int qo, int g, int kvHeads, int headDim, KvCache cache, int kvOff, int from, int to,
                              float scale, float softcap, float[] sinks, int sinkOff, Work w, float[] out, int oo) {
        int heads = g * kvHeads;
        if (!VECTOR) {
            float[] sc = w.scalarScores(to - from + 1);
            for (int i = 0; i < heads; i++)
                attendScalar(q, qo + i * headDim, headDim, cache, kvOff + (i / g) * headDim, from, to, scale, softcap,
                        sinks == null ? Float.NaN : sinks[sinkOff + i], sc, out, oo + i * headDim);
            return;
        }
        w.ensure(heads, headDim);
        if (to < from) { Arrays.fill(out, oo, oo + heads * headDim, 0f); return; }
        float[] run = w.run;
        boolean first = true;
        for (int c0 = from; c0 <= to; ) {
            int c1 = Math.min(to, (c0 / CHUNK + 1) * CHUNK - 1);
            chunk(q, qo, g, kvHeads, headDim, cache, kvOff, c0, c1, scale, softcap, w);
            if (first) System.arraycopy(w.part, 0, run, 0, partialFloats(heads, headDim));
            else merge(run, 0, w.part, 0, heads, headDim);
            first = false;
            c0 = c1 + 1;
        }
        finish(run, 0, heads, headDim, sinks, sinkOff, out, oo);
    }

    /**
     * The partial of chunk {@code c} (counted from {@code from}'s chunk) of {@code [from, to]} for the row's
     * {@code kvHeads·g} heads (as {@link #attend}), written at {@code part[po ..)} ({@link #partialFloats} floats);
     * {@link #finishFromPartials} merges a row's.
     */
    public static void chunkPartial(float[] q, int qo, int g, int kvHeads, int headDim, KvCache cache, int kvOff, int from,
                                    int to, int c, float scale, float softcap, Work w, float[] part, int po) {
        if (!VECTOR) throw new IllegalStateException("chunk partials need the vector path (8 or 16 float lanes)");
        int heads = g * kvHeads;
        w.ensure(heads, headDim);
        int c0 = Math.max(from, (from / CHUNK + c) * CHUNK), c1 = Math.min(to, (from / CHUNK + c + 1) * CHUNK - 1);
        chunk(q, qo, g, kvHeads, headDim, cache, kvOff, c0, c1, scale, softcap, w);
        System.arraycopy(w.part, 0, part, po, partialFloats(heads, headDim));
    }

    /**
     * Merges {@code chunks} consecutive partials of {@code heads} heads from {@code part[po ..)} in position order (the
     * same operations as {@link #attend}) and writes the heads' outputs. Overwrites the first partial.
     */
    public static void finishFromPartials(float[] part, int po, int chunks, int heads, int headDim, float[] sinks, int sinkOff,
                                          float[] out, int oo) {
        if (chunks == 0) { Arrays.fill(out, oo, oo + heads * headDim, 0f); return; }
        int pf = partialFloats(heads, headDim);
        for (int c = 1; c < chunks; c++) merge(part, po, part, po + c * pf, heads, headDim);
        finish(part, po, heads, headDim, sinks, sinkOff, out, oo);
    }

    /** The online softmax over the tiles of positions [c0, c1] (one chunk) into {@code w.part}. */
    private static void chunk(float[] q, int qo, int g, int kvHeads, int hd, KvCache cache, int kvOff, int c0, int c1,
                              float scale, float softcap, Work w) {
        float[] part = w.part;
        int heads = g * kvHeads;
        Arrays.fill(part, 0, heads, Float.NEGATIVE_INFINITY);           // maxes
        Arrays.fill(part, heads, 2 * heads + heads * hd, 0f);           // sums, value sums
        for (int t0 = c0; t0 <= c1; ) {
            int t1 = Math.min(c1, (t0 / TILE + 1) * TILE - 1), n = t1 - t0 + 1;
            for (int kh = 0; kh < kvHeads; kh++) {
                cache.tile(t0, n, kvOff + kh * hd, hd, w);
                for (int i = kh * g; i < (kh + 1) * g; i++) tileWeights(q, qo + i * hd, hd, n, scale, softcap, w, i, heads);
                tileValues(hd, n, w, kh * g, g, heads);
            }
            t0 = t1 + 1;
        }
    }

    /**
     * One head's scores over the current tile (soft-capped), the rescale of its running sums on a new max, and its
     * weights exp(s − max) (× the q8 value scales) into row {@code head} of {@code w.p}, their sum into its partial.
     * Its parts are methods of their own that pass arrays, never vectors: as one method C2 ran out of inlining
     * budget and called {@link #exp} and the lane sum out of line, boxing every vector it passed (half a KB of
     * garbage per call, 9 MB per decode token at depth 4k on the 155M model; docs/CPU_KERNELS.md, "C2's node budget").
     */
    private static void tileWeights(float[] q, int qo, int hd, int n, float scale, float softcap, Work w, int head, int heads) {
        float[] s = w.s, part = w.part;
        keyDots(q, qo, hd, n, w);
        float tmax = scaledMax(s, n, w.scaled ? w.ks : null, scale, softcap, w.scratch);
        int mo = head, lo = heads + head, ao = 2 * heads + head * hd;
        float m = part[mo];
        if (tmax > m) {
            if (m != Float.NEGATIVE_INFINITY) {
                float f = (float) Math.exp(m - tmax);
                part[lo] *= f;
                scaleVector(part, ao, hd, f);
            }
            m = tmax;
            part[mo] = m;
        }
        part[lo] += weights(s, m, w.scaled ? w.vs : null, w.p, head * TILE);
    }

    /**
     * The tile's key dots with q into {@code w.s[0..n)}: eight keys per pass over q, their lane sums folded pairwise (a
     * fixed order: no reduceLanes, whose order differs between the JIT's tiers); keys past n repeat the last one and are
     * dropped.
     */
    private static void keyDots(float[] q, int qo, int hd, int n, Work w) {
        float[] s = w.s, kArr = w.kArr;
        int kb = w.kBase, st = w.stride;
        int bound = F.loopBound(hd);
        for (int j = 0; j < n; j += 8) {
            int last = kb + (n - 1) * st;
            int b0 = kb + j * st, b1 = Math.min(b0 + st, last), b2 = Math.min(b0 + 2 * st, last), b3 = Math.min(b0 + 3 * st, last);
            int b4 = Math.min(b0 + 4 * st, last), b5 = Math.min(b0 + 5 * st, last), b6 = Math.min(b0 + 6 * st, last), b7 = Math.min(b0 + 7 * st, last);
            FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
            for (int i = 0; i < bound; i += L) {
                FloatVector qv = FloatVector.fromArray(F, q, qo + i);
                a0 = FloatVector.fromArray(F, kArr, b0 + i).fma(qv, a0);
                a1 = FloatVector.fromArray(F, kArr, b1 + i).fma(qv, a1);
                a2 = FloatVector.fromArray(F, kArr, b2 + i).fma(qv, a2);
                a3 = FloatVector.fromArray(F, kArr, b3 + i).fma(qv, a3);
                a4 = FloatVector.fromArray(F, kArr, b4 + i).fma(qv, a4);
                a5 = FloatVector.fromArray(F, kArr, b5 + i).fma(qv, a5);
                a6 = FloatVector.fromArray(F, kArr, b6 + i).fma(qv, a6);
                a7 = FloatVector.fromArray(F, kArr, b7 + i).fma(qv, a7);
            }
            // pairwise: lanes without bit d get a[i] + a[i^d], lanes with it b[i^d] + b[i]
            FloatVector p01 = a0.blend(a1.rearrange(SW1), M1).add(a0.rearrange(SW1).blend(a1, M1));
            FloatVector p23 = a2.blend(a3.rearrange(SW1), M1).add(a2.rearrange(SW1).blend(a3, M1));
            FloatVector p45 = a4.blend(a5.rearrange(SW1), M1).add(a4.rearrange(SW1).blend(a5, M1));
            FloatVector p67 = a6.blend(a7.rearrange(SW1), M1).add(a6.rearrange(SW1).blend(a7, M1));
            FloatVector p03 = p01.blend(p23.rearrange(SW2), M2).add(p01.rearrange(SW2).blend(p23, M2));
            FloatVector p47 = p45.blend(p67.rearrange(SW2), M2).add(p45.rearrange(SW2).blend(p67, M2));
            FloatVector f = p03.blend(p47.rearrange(SW4), M4).add(p03.rearrange(SW4).blend(p47, M4));
            if (L == 16) f = f.add(f.rearrange(SW8));              // lane k (< 8): key j + k
            f.intoArray(s, j);
            if (bound < hd)
                for (int k = 0, end = Math.min(8, n - j); k < end; k++) {
                    int b = b0 + k * st;
                    float d = s[j + k];
                    for (int i = bound; i < hd; i++) d += q[qo + i] * kArr[b + i];
                    s[j + k] = d;
                }
        }
    }

    /**
     * Scores × q8 key scales ({@code ks}, null: none) × scale, soft-capped, in place; −∞ past n; returns their max.
     * {@code scratch}: TILE floats for the soft cap's tanh.
     */
    private static float scaledMax(float[] s, int n, float[] ks, float scale, float softcap, float[] scratch) {
        for (int t = 0; t < TILE; t += L) {
            FloatVector sv = FloatVector.fromArray(F, s, t);
            if (ks != null) sv = sv.mul(FloatVector.fromArray(F, ks, t));
            sv = sv.mul(scale);
            if (softcap > 0f) sv = sv.div(softcap);
            sv.intoArray(s, t);
        }
        if (softcap > 0f) {
            tanh(s, 0, TILE, scratch);
            for (int t = 0; t < TILE; t += L) FloatVector.fromArray(F, s, t).mul(softcap).intoArray(s, t);
        }
        Arrays.fill(s, n, TILE, Float.NEGATIVE_INFINITY);        // padding: exp gives 0
        FloatVector mx = FloatVector.fromArray(F, s, 0);
        for (int t = L; t < TILE; t += L) mx = mx.max(FloatVector.fromArray(F, s, t));
        return mx.reduceLanes(VectorOperators.MAX);               // a max is exact in any order
    }

    /**
     * Weights exp(s − m) (× the q8 value scales {@code vs}, null: none) into {@code p[po..po+TILE)}; returns their sum.
     * The sum's lanes go through s (spent by then) to {@link #laneSum}: C2 did not always inline a lane sum taking a
     * vector here, and then boxed it.
     */
    private static float weights(float[] s, float m, float[] vs, float[] p, int po) {
        exp(s, 0, TILE, m);
        FloatVector sum = FloatVector.zero(F);
        for (int t = 0; t < TILE; t += L) {
            FloatVector e = FloatVector.fromArray(F, s, t);
            sum = sum.add(e);
            if (vs != null) e = e.mul(FloatVector.fromArray(F, vs, t));
            e.intoArray(p, po + t);
        }
        sum.intoArray(s, 0);
        return laneSum(s);
    }

    /** Σ of the lanes of the vector at {@code a[0..L)} in a fixed (butterfly) order. */
    private static float laneSum(float[] a) {
        FloatVector v = FloatVector.fromArray(F, a, 0);
        if (L == 16) v = v.add(v.rearrange(SW8));
        v = v.add(v.rearrange(SW4));
        v = v.add(v.rearrange(SW2));
        return v.add(v.rearrange(SW1)).lane(0);
    }

    /**
     * The value sums of the group's heads over the current tile: heads four at a time, each value row loaded once for
     * them, four lane blocks of each head's vector in registers; every (head, lane block) is one chain of fmas over the
     * keys in order, so a head gets the same bits in a block of four as alone.
     */
    private static void tileValues(int hd, int n, Work w, int h0, int g, int heads) {
        float[] vArr = w.vArr, part = w.part, p = w.p;
        int vb = w.vBase, st = w.stride, bound = F.loopBound(hd), end = h0 + g;
        int h = h0;
        if (bound >= 4 * L)
            for (; h + 4 <= end; h += 4) {
                int p0 = h * TILE, p1 = p0 + TILE, p2 = p1 + TILE, p3 = p2 + TILE;
                int o0 = 2 * heads + h * hd, o1 = o0 + hd, o2 = o1 + hd, o3 = o2 + hd;
                int c = 0;
                for (; c + 4 * L <= bound; c += 4 * L) {
                    FloatVector a00 = FloatVector.fromArray(F, part, o0 + c), a01 = FloatVector.fromArray(F, part, o0 + c + L);
                    FloatVector a02 = FloatVector.fromArray(F, part, o0 + c + 2 * L), a03 = FloatVector.fromArray(F, part, o0 + c + 3 * L);
                    FloatVector a10 = FloatVector.fromArray(F, part, o1 + c), a11 = FloatVector.fromArray(F, part, o1 + c + L);
                    FloatVector a12 = FloatVector.fromArray(F, part, o1 + c + 2 * L), a13 = FloatVector.fromArray(F, part, o1 + c + 3 * L);
                    FloatVector a20 = FloatVector.fromArray(F, part, o2 + c), a21 = FloatVector.fromArray(F, part, o2 + c + L);
                    FloatVector a22 = FloatVector.fromArray(F, part, o2 + c + 2 * L), a23 = FloatVector.fromArray(F, part, o2 + c + 3 * L);
                    FloatVector a30 = FloatVector.fromArray(F, part, o3 + c), a31 = FloatVector.fromArray(F, part, o3 + c + L);
                    FloatVector a32 = FloatVector.fromArray(F, part, o3 + c + 2 * L), a33 = FloatVector.fromArray(F, part, o3 + c + 3 * L);
                    for (int t = 0, vo = vb + c; t < n; t++, vo += st) {
                        FloatVector v0 = FloatVector.fromArray(F, vArr, vo), v1 = FloatVector.fromArray(F, vArr, vo + L);
                        FloatVector v2 = FloatVector.fromArray(F, vArr, vo + 2 * L), v3 = FloatVector.fromArray(F, vArr, vo + 3 * L);
                        FloatVector b = FloatVector.broadcast(F, p[p0 + t]);
                        a00 = v0.fma(b, a00); a01 = v1.fma(b, a01); a02 = v2.fma(b, a02); a03 = v3.fma(b, a03);
                        b = FloatVector.broadcast(F, p[p1 + t]);
                        a10 = v0.fma(b, a10); a11 = v1.fma(b, a11); a12 = v2.fma(b, a12); a13 = v3.fma(b, a13);
                        b = FloatVector.broadcast(F, p[p2 + t]);
                        a20 = v0.fma(b, a20); a21 = v1.fma(b, a21); a22 = v2.fma(b, a22); a23 = v3.fma(b, a23);
                        b = FloatVector.broadcast(F, p[p3 + t]);
                        a30 = v0.fma(b, a30); a31 = v1.fma(b, a31); a32 = v2.fma(b, a32); a33 = v3.fma(b, a33);
                    }
                    a00.intoArray(part, o0 + c); a01.intoArray(part, o0 + c + L); a02.intoArray(part, o0 + c + 2 * L); a03.intoArray(part, o0 + c + 3 * L);
                    a10.intoArray(part, o1 + c); a11.intoArray(part, o1 + c + L); a12.intoArray(part, o1 + c + 2 * L); a13.intoArray(part, o1 + c + 3 * L);
                    a20.intoArray(part, o2 + c); a21.intoArray(part, o2 + c + L); a22.intoArray(part, o2 + c + 2 * L); a23.intoArray(part, o2 + c + 3 * L);
                    a30.intoArray(part, o3 + c); a31.intoArray(part, o3 + c + L); a32.intoArray(part, o3 + c + 2 * L); a33.intoArray(part, o3 + c + 3 * L);
                }
                for (int k = 0; k < 4; k++) valuesFrom(c, hd, n, vArr, vb, st, p, (h + k) * TILE, part, 2 * heads + (h + k) * hd);
            }
        for (; h < end; h++) valuesFrom(0, hd, n, vArr, vb, st, p, h * TILE, part, 2 * heads + h * hd);
    }

    /** One head's value sum over the tile from lane {@code c0} of its vector on (the blocks, then the scalar rest). */
    private static void valuesFrom(int c0, int hd, int n, float[] vArr, int vb, int st, float[] p, int po, float[] part, int ao) {
        int bound = F.loopBound(hd), c = c0;
        for (; c + 4 * L <= bound; c += 4 * L) {
            int o = ao + c;
            FloatVector a0 = FloatVector.fromArray(F, part, o), a1 = FloatVector.fromArray(F, part, o + L);
            FloatVector a2 = FloatVector.fromArray(F, part, o + 2 * L), a3 = FloatVector.fromArray(F, part, o + 3 * L);
            for (int t = 0, vo = vb + c; t < n; t++, vo += st) {
                FloatVector pt = FloatVector.broadcast(F, p[po + t]);
                a0 = FloatVector.fromArray(F, vArr, vo).fma(pt, a0);
                a1 = FloatVector.fromArray(F, vArr, vo + L).fma(pt, a1);
                a2 = FloatVector.fromArray(F, vArr, vo + 2 * L).fma(pt, a2);
                a3 = FloatVector.fromArray(F, vArr, vo + 3 * L).fma(pt, a3);
            }
            a0.intoArray(part, o); a1.intoArray(part, o + L); a2.intoArray(part, o + 2 * L); a3.intoArray(part, o + 3 * L);
        }
        for (; c < bound; c += L) {
            FloatVector a = FloatVector.fromArray(F, part, ao + c);
            for (int t = 0, vo = vb + c; t < n; t++, vo += st)
                a = FloatVector.fromArray(F, vArr, vo).fma(FloatVector.broadcast(F, p[po + t]), a);
            a.intoArray(part, ao + c);
        }
        for (; c < hd; c++) {
            float a = part[ao + c];
            for (int t = 0, vo = vb + c; t < n; t++, vo += st) a += p[po + t] * vArr[vo];
            part[ao + c] = a;
        }
    }

    // lane i ↔ lane i ^ d, and the lanes with bit d set
    private static final VectorShuffle<Float> SW1 = VectorShuffle.fromOp(F, i -> i ^ 1), SW2 = VectorShuffle.fromOp(F, i -> i ^ 2),
            SW4 = VectorShuffle.fromOp(F, i -> i ^ 4), SW8 = VectorShuffle.fromOp(F, i -> (i ^ 8) % L);
    private static final VectorMask<Float> M1 = VectorMask.fromArray(F, lanesWithBit(1), 0),
            M2 = VectorMask.fromArray(F, lanesWithBit(2), 0), M4 = VectorMask.fromArray(F, lanesWithBit(4), 0);

    private static boolean[] lanesWithBit(int d) {
        boolean[] b = new boolean[L];
        for (int i = 0; i < L; i++) b[i] = (i & d) != 0;
        return b;
    }

    private static final float LOG2E = 1.44269504088896341f, LN2_HI = 0.693359375f, LN2_LO = -2.12194440e-4f;
    private static final float ROUNDER = 12582912f;              // 1.5·2²³: adding it rounds to an integer
    /** Below it exp is under the smallest normal float: taken as 0 (exact for −∞, the tile's padding). */
    private static final float EXP_LO = -87.33654f, EXP_HI = 88.37626f;

    /**
     * a[i] = e^x with x = a[i] − shift, for i in [from, to) (whole vectors): x = n·ln2 + r, |r| ≤ ln2/2, e^r by
     * Cephes' expf polynomial (≤ 2 ulp against Math.exp here; the tests hold it to that), times 2ⁿ built in the
     * exponent bits. Only adds, multiplies and bit moves, so every JIT
     * tier rounds it alike (VectorOperators.EXP is an SVML call when compiled and Math.exp when not). NaN stays NaN;
     * below {@code EXP_LO} gives 0, above {@code EXP_HI} gives e^EXP_HI (callers pass x ≤ 0, or tanh's bounded input).
     */
    static void exp(float[] a, int from, int to, float shift) {
        // constants broadcast once: fewer nodes per step than the scalar overloads (C2's node budget)
        FloatVector sh = FloatVector.broadcast(F, shift), lo = FloatVector.broadcast(F, EXP_LO), hi = FloatVector.broadcast(F, EXP_HI);
        FloatVector log2e = FloatVector.broadcast(F, LOG2E), rounder = FloatVector.broadcast(F, ROUNDER);
        FloatVector ln2hi = FloatVector.broadcast(F, -LN2_HI), ln2lo = FloatVector.broadcast(F, -LN2_LO);
        FloatVector c5 = FloatVector.broadcast(F, 1.9875691500e-4f), c4 = FloatVector.broadcast(F, 1.3981999507e-3f);
        FloatVector c3 = FloatVector.broadcast(F, 8.3334519073e-3f), c2 = FloatVector.broadcast(F, 4.1665795894e-2f);
        FloatVector c1 = FloatVector.broadcast(F, 1.6666665459e-1f), c0 = FloatVector.broadcast(F, 5.0000001201e-1f);
        FloatVector one = FloatVector.broadcast(F, 1f), zero = FloatVector.zero(F);
        for (int i = from; i < to; i += L) {
            FloatVector x = FloatVector.fromArray(F, a, i).sub(sh);
            FloatVector xc = x.max(lo).min(hi);
            FloatVector t = xc.mul(log2e).add(rounder);
            FloatVector nf = t.sub(rounder);
            FloatVector r = nf.fma(ln2hi, xc);
            r = nf.fma(ln2lo, r);
            FloatVector pp = r.mul(c5).add(c4);
            pp = pp.fma(r, c3);
            pp = pp.fma(r, c2);
            pp = pp.fma(r, c1);
            pp = pp.fma(r, c0);
            FloatVector y = pp.mul(r.mul(r)).add(r).add(one);
            IntVector n = t.reinterpretAsInts().sub(Float.floatToRawIntBits(ROUNDER));
            FloatVector pow2 = n.add(127).lanewise(VectorOperators.LSHL, 23).reinterpretAsFloats();
            FloatVector e = y.mul(pow2);
            e = e.blend(zero, x.lt(lo));
            e.blend(x, x.test(VectorOperators.IS_NAN)).intoArray(a, i);
        }
    }

    /**
     * a[i] = tanh(a[i]) for i in [from, to) (whole vectors), as 1 − 2/(e^{2|x|} + 1) with x's sign (absolute error a few
     * ulp of 1; exact ±1 far out); {@code scratch[from..to)} holds e^{2|x|} on the way.
     */
    static void tanh(float[] a, int from, int to, float[] scratch) {
        for (int i = from; i < to; i += L) FloatVector.fromArray(F, a, i).abs().mul(2f).intoArray(scratch, i);
        exp(scratch, from, to, 0f);
        FloatVector one = FloatVector.broadcast(F, 1f), two = FloatVector.broadcast(F, 2f), zero = FloatVector.zero(F);
        for (int i = from; i < to; i += L) {
            FloatVector x = FloatVector.fromArray(F, a, i);
            FloatVector th = one.sub(two.div(FloatVector.fromArray(F, scratch, i).add(one)));
            th.blend(th.neg(), x.lt(zero)).blend(x, x.test(VectorOperators.IS_NAN)).intoArray(a, i);
        }
    }

    /** Folds partial {@code b} into partial {@code a} (a holds the earlier positions). */
    private static void merge(float[] a, int ao, float[] b, int bo, int g, int hd) {
        for (int i = 0; i < g; i++) {
            float ma = a[ao + i], mb = b[bo + i];
            float m = Math.max(ma, mb);
            if (m == Float.NEGATIVE_INFINITY) continue;           // both empty
            float fa = (float) Math.exp(ma - m), fb = (float) Math.exp(mb - m);
            a[ao + i] = m;
            a[ao + g + i] = a[ao + g + i] * fa + b[bo + g + i] * fb;
            int va = ao + 2 * g + i * hd, vb = bo + 2 * g + i * hd;
            int c = 0;
            for (int bound = F.loopBound(hd); c < bound; c += L)
                FloatVector.fromArray(F, a, va + c).mul(fa).add(FloatVector.fromArray(F, b, vb + c).mul(fb)).intoArray(a, va + c);
            for (; c < hd; c++) a[va + c] = a[va + c] * fa + b[vb + c] * fb;
        }
    }

    /** out = value sum / (sum + exp(sink)), each term relative to the larger of the max and the sink. */
    private static void finish(float[] a, int ao, int g, int hd, float[] sinks, int sinkOff, float[] out, int oo) {
        for (int i = 0; i < g; i++) {
            float m = a[ao + i], l = a[ao + g + i], f = 1f;
            if (sinks != null) {
                float sink = sinks[sinkOff + i], mm = Math.max(m, sink);
                f = (float) Math.exp(m - mm);
                l = l * f + (float) Math.exp(sink - mm);
            }
            float coef = f / l;
            int va = ao + 2 * g + i * hd, o = oo + i * hd;
            int c = 0;
            for (int bound = F.loopBound(hd); c < bound; c += L)
                FloatVector.fromArray(F, a, va + c).mul(coef).intoArray(out, o + c);
            for (; c < hd; c++) out[o + c] = a[va + c] * coef;
        }
    }

    private static void scaleVector(float[] x, int o, int n, float f) {
        int c = 0;
        for (int bound = F.loopBound(n); c < bound; c += L) FloatVector.fromArray(F, x, o + c).mul(f).intoArray(x, o + c);
        for (; c < n; c++) x[o + c] *= f;
    }

    /**
     * One thread's buffers for the vector path: a tile of keys and values (gathered as float32 when the cache does not
     * hold them so), the tile's q8 scales, scores, and the running partials. Not shared between threads.
     */
    public static final class Work {
        float[] kt = new float[0], vt = new float[0], ks = new float[TILE], vs = new float[TILE];
        /** Scores (a full vector of slack past the tile: the dot pass stores whole vectors). */
        final float[] s = new float[TILE + 16];
        /** The soft cap's e^{2|x|} per score. */
        final float[] scratch = new float[TILE];
        /** Per head of the group: the tile's weights (× q8 value scales). */
        float[] p = new float[0];
        float[] part = new float[0], run = new float[0];
        private float[] scalarScores = new float[0];
        /** The current tile: key and value rows at kBase/vBase + j·stride in kArr/vArr; scaled: q8 scales in ks/vs. */
        float[] kArr, vArr;
        int kBase, vBase, stride;
        boolean scaled;

        public Work() {}

        public Work(int g, int headDim) { ensure(g, headDim); }

        void ensure(int g, int hd) {
            if (kt.length < TILE * hd) { kt = new float[TILE * hd]; vt = new float[TILE * hd]; }
            int pf = partialFloats(g, hd);
            if (part.length < pf) { part = new float[pf]; run = new float[pf]; }
            if (p.length < g * TILE) p = new float[g * TILE];
        }

        float[] scalarScores(int n) {
            if (scalarScores.length < n) scalarScores = new float[Math.max(n, 2 * scalarScores.length)];
            return scalarScores;
        }

        /** Points the tile at rows already in float32 (a cache's store or pending chunk). */
        void view(float[] k, float[] v, int base, int stride) {
            kArr = k; vArr = v; kBase = base; vBase = base; this.stride = stride; scaled = false;
        }

        /** Points the tile at the gathered copies (rows headDim apart). */
        void gathered(int hd, boolean scaled) {
            kArr = kt; vArr = vt; kBase = 0; vBase = 0; stride = hd; this.scaled = scaled;
        }
    }
}
