package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.cuda.KernelSignature.Kernel;
import dev.cmf4j.backend.cuda.Step.Launch;

import java.lang.foreign.Arena;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.function.ToLongFunction;

/**
 * The Embryo family's launches in a resident forward ({@code resident_embryo.cu}): the bounded anchor's ring attend and
 * commit, the resonance router, and the hierarchical head's cluster log-softmax, gated head rows and per-cluster
 * log-softmax; with the device copies of their small vectors (sinks, rotation tables, descriptors). The products around
 * them (q, k, v, o, the experts, the cluster matrix) are the resident forward's own. Owner thread only.
 */
final class EmbryoSteps {
    private static final long NULL = 0L;
    private final Kernel attend, commit, route, clusterLogSoftmax, finish;
    private final Kernel[] headRows = new Kernel[4];
    private final DecoderPlan model;
    /** Per layer its anchor's device vectors {sinkK, sinkV, cos, sin}; null on other layers. */
    private final long[][] anchors;
    /** Per resonance MoE its descriptors on the device {mu, u, bias}. */
    private final Map<DecoderPlan.Moe, long[]> descriptors = new IdentityHashMap<>();

    /** Whether {@code model} has any Embryo operator (else no instance is made and its module never loads). */
    static boolean needed(DecoderPlan model) {
        if (model.headClusters() != null) return true;
        for (DecoderPlan.Layer l : model.layers())
            if (l.anchor() != null || l.moe() != null && l.moe().resonance() != null) return true;
        return false;
    }

    /** Loads the kernels and uploads the vectors through {@code vector} (the forward's own, freed with it). */
    EmbryoSteps(CudaContext ctx, DecoderPlan model, ToLongFunction<float[]> vector) {
        this.model = model;
        attend = Kernels.ANCHOR_ATTEND.load(ctx);
        commit = Kernels.ANCHOR_COMMIT.load(ctx);
        route = Kernels.RESONANCE_ROUTE.load(ctx);
        clusterLogSoftmax = Kernels.CLUSTER_LOGSOFTMAX.load(ctx);
        finish = Kernels.HEAD_FINISH.load(ctx);
        for (int i = 0; i < 4; i++) headRows[i] = Kernels.headRows(Kernels.KINDS[i]).load(ctx);
        anchors = new long[model.layers().size()][];
        for (int i = 0; i < anchors.length; i++) {
            DecoderPlan.Layer l = model.layers().get(i);
            DecoderPlan.Anchor an = l.anchor();
            if (an != null)
                anchors[i] = new long[] {vector.applyAsLong(an.sinkK()), vector.applyAsLong(an.sinkV()), vector.applyAsLong(an.cos()),
                        vector.applyAsLong(an.sin())};
            var r = l.moe() == null ? null : l.moe().resonance();
            if (r != null)
                descriptors.put(l.moe(), new long[] {vector.applyAsLong(r.mu()), r.rank() == 0 ? NULL : vector.applyAsLong(r.u()),
                        vector.applyAsLong(r.bias())});
        }
    }

    /**
     * Layer {@code li}'s anchor over one sequence's {@code tokens} rows (q, k, v, out at that sequence's first row; its
     * first position at device address {@code pos}): every query head's one softmax over sinks and window, then the rows'
     * keys and values into the sequence's ring (ringK, ringV [W, kvDim]).
     */
    void anchor(Steps L, Arena a, int li, long q, long k, long v, long ringK, long ringV, long out, int tokens, long pos) {
        DecoderPlan.Layer l = model.layers().get(li);
        DecoderPlan.Anchor an = l.anchor();
        long[] d = anchors[li];
        int heads = model.heads(), kvHeads = l.kvHeads(), hd = l.headDim();
        L.add(Launch.of("anchor_attend", attend, heads, tokens, 1, 128, a, q, k, v, ringK, ringV, d[0], d[1], d[2], d[3],
                out, heads, kvHeads, hd, an.window(), an.sinks(), an.rotaryDim() / 2, l.scale(), pos));
        L.add(Launch.of("anchor_commit", commit, Math.min(tokens, an.window()), 1, 1, 256, a, k, v, ringK, ringV, tokens,
                an.window(), kvHeads * hd, pos));
    }

    /** The resonance router of {@code moe} over {@code t} rows of its input y: the winner into idx, weight 1 into wts. */
    void route(Steps L, Arena a, DecoderPlan.Moe moe, long y, long idx, long wts, int t) {
        long[] d = descriptors.get(moe);
        L.add(Launch.of("resonance_route", route, t, 1, 1, 256, a, y, d[0], d[1], d[2], idx, wts, moe.experts(),
                moe.resonance().rank(), model.hidden()));
    }

    /** lc [rows, clusters] (the cluster matrix's product) into cluster log-probabilities, in place. */
    void clusterLogSoftmax(Steps L, Arena a, long lc, int rows) {
        L.add(Launch.of("head_cluster_logsoftmax", clusterLogSoftmax, rows, 1, 1, 256, a, lc, model.headClusters().count()));
    }

    /**
     * The head's rows of the clusters kept for each of {@code rows} rows of x (gate[r], or gate[0] for every row when not
     * {@code perRow}); the head's weights (of resident kernel {@code kind}), row scales and column field given.
     */
    void headRows(Steps L, Arena a, int kind, long w, long rs, long cf, long x, long lc, long gates, boolean perRow, long out, int rows) {
        int vocab = model.vocab(), c = model.headClusters().count();
        L.add(Launch.of("head_rows", headRows[kind], (vocab + 7) / 8, rows, 1, 256, a, w, rs, cf, x, lc, gates, perRow ? 1 : 0,
                out, vocab, model.hidden(), c, vocab / c));
    }

    /** log p of every token from the kept clusters' head rows in {@code out}; dropped clusters get their spread mass. */
    void headFinish(Steps L, Arena a, long out, long lc, long gates, boolean perRow, int rows) {
        int vocab = model.vocab(), c = model.headClusters().count(), size = vocab / c;
        L.add(Launch.of("head_finish", finish, c, rows, 1, 256, a, out, lc, gates, perRow ? 1 : 0, vocab, c, size,
                (float) Math.log(size)));
    }
}
