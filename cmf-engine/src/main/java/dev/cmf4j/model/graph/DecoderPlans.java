package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Activation;
import dev.cmf4j.backend.DecoderPlan.Layer;
import dev.cmf4j.backend.DecoderPlan.Moe;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.Glu;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.RopeTable;
import dev.cmf4j.model.Ffn;
import dev.cmf4j.model.LayerSpec;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.Norm;
import dev.cmf4j.model.Plan;
import dev.cmf4j.model.Rope;

import java.util.ArrayList;
import java.util.List;

import static dev.cmf4j.backend.DecoderPlan.MAX_EXPERTS;
import static dev.cmf4j.backend.DecoderPlan.MAX_HEAD_DIM;
import static dev.cmf4j.backend.DecoderPlan.MAX_TOP_K;

/**
 * Which {@link Plan}s a {@link DecoderPlan} describes, and the lowering of one: the plan's ops walked in order, each
 * layer's ops gathered into the device's one layer form, weights resolved through the graph's loader.
 */
final class DecoderPlans {
    private DecoderPlans() {}

    /**
     * A layer's ops gathered by place: the norm before the mixer, after it, before the FFN and after it (absent ones
     * null), the mixer and FFN, the per-layer input and the layer scalar.
     */
    record LayerOps(int index, Mixer mixer, Ffn ffn, Norm preMixer, Norm postMixer, Norm preFfn, Norm postFfn,
                    LayerSpec.PerLayerInput perLayerInput, String layerScalar) {}

    /** The plan's layers, each from its {@link Plan.BeginLayer} to its {@link Plan.EndLayer}. */
    static List<LayerOps> layers(Plan plan) {
        List<LayerOps> out = new ArrayList<>();
        int index = -1;
        Mixer mixer = null;
        Ffn ffn = null;
        Norm preMixer = null, postMixer = null, preFfn = null, postFfn = null;
        LayerSpec.PerLayerInput pli = null;
        String scalar = null;
        for (Plan.Op op : plan.ops()) {
            switch (op) {
                case Plan.BeginLayer b -> {
                    index = b.layer();
                    mixer = null; ffn = null; preMixer = null; postMixer = null; preFfn = null; postFfn = null; pli = null; scalar = null;
                }
                case Plan.Normalize n when n.from() == Plan.Slot.X && n.to() == Plan.Slot.H -> {
                    if (mixer == null) preMixer = n.norm(); else preFfn = n.norm();
                }
                case Plan.Normalize n when n.from() == Plan.Slot.M && n.to() == Plan.Slot.M -> {
                    if (ffn == null) postMixer = n.norm(); else postFfn = n.norm();
                }
                case Plan.Mix m -> mixer = m.mixer();
                case Plan.FeedForward f -> ffn = f.ffn();
                case Plan.AllReduce a -> { }
                case Plan.AddResidual a -> {
                    if (a.from() != Plan.Slot.M) throw new IllegalStateException("the device layer adds only a stage's output: " + Plan.line(op));
                }
                case Plan.PerLayerInput p -> pli = p.input();
                case Plan.ScaleLayer sc -> scalar = sc.scalar();
                case Plan.EndLayer e -> out.add(new LayerOps(index, mixer, ffn, preMixer, postMixer, preFfn, postFfn, pli, scalar));
                case Plan.Normalize n -> throw new IllegalStateException("the device layer has no norm " + Plan.line(op));
                case Plan.Embed e -> { }
                case Plan.MtpInput m -> { }
                case Plan.InputRows r -> { }
                case Plan.PerLayerTable p -> { }
                case Plan.FinalNorm f -> { }
                case Plan.Head h -> { }
            }
        }
        return out;
    }

    /** The plan's op of type {@code type} outside the layers (its embedding, per-layer table, final norm, head), or null. */
    static <T extends Plan.Op> T op(Plan plan, Class<T> type) {
        for (Plan.Op op : plan.ops()) if (type.isInstance(op)) return type.cast(op);
        return null;
    }

    /** Why {@code plan} is not a decoder this form describes, or null when it is. */
    static String unsupported(Plan plan) {
        List<LayerOps> layers = layers(plan);
        if (plan.ranks() > 1)   // a device rank's lowering sums after o, a dense MLP and an MoE (not both beside each other)
            for (LayerOps l : layers)
                if (l.ffn() instanceof Ffn.DenseAndMoe) return "layer " + l.index() + ": a rank's dense MLP beside an MoE runs on the host";
        boolean perLayerTable = op(plan, Plan.PerLayerTable.class) != null;
        Integer firstHeads = null;
        for (LayerOps l : layers) {
            String where = "layer " + l.index() + ": ";
            String ffn = unsupportedFfn(l.ffn());
            if (ffn != null) return where + ffn;
            if (l.mixer() instanceof Mixer.GatedDeltaNet g) {
                if (g.convKernel() < 1 || g.convKernel() > MAX_CONV_KERNEL) return where + "gated delta net conv of " + g.convKernel() + " taps";
                if (g.valueDim() > 256) return where + "gated delta net value dim " + g.valueDim() + " > 256";
                if (g.valueHeads() % g.keyHeads() != 0) return where + "gated delta net value heads not a multiple of key heads";
                if (l.perLayerInput() != null) return where + "per-layer input beside a gated delta net";
                continue;
            }
            if (l.mixer() instanceof Mixer.BoundedAttention b) {
                if (b.headDim() > MAX_HEAD_DIM) return where + "head dim " + b.headDim() + " > " + MAX_HEAD_DIM;
                if (b.sinks() + b.window() > MAX_ANCHOR_SCORES) return where + "anchor of " + b.sinks() + " sinks and a window of "
                        + b.window() + " (at most " + MAX_ANCHOR_SCORES + " together)";
                if (b.heads() % b.kvHeads() != 0) return where + "heads not a multiple of kv heads";
                if (b.rotaryDim() % 2 != 0 || b.rotaryDim() > b.headDim()) return where + "rotary span " + b.rotaryDim();
                if (l.perLayerInput() != null || l.postMixer() != null || l.postFfn() != null || l.layerScalar() != null
                        || l.ffn() instanceof Ffn.DenseAndMoe)
                    return where + "bounded anchor with per-layer inputs, sandwich norms, a layer scalar or a dense MLP beside an MoE";
                if (firstHeads == null) firstHeads = b.heads();
                else if (b.heads() != firstHeads) return where + "query heads differ between layers";
                continue;
            }
            Mixer.Attention a = (Mixer.Attention) l.mixer();
            if (ffn != null) return where + ffn;
            if (l.ffn() instanceof Ffn.DenseAndMoe && l.postFfn() == null) return where + "dense MLP beside the MoE without a post norm";
            if (l.perLayerInput() != null && !perLayerTable) return where + "per-layer input without a per-layer embedding";
            if (l.perLayerInput() != null && l.perLayerInput().postNorm() == null) return where + "per-layer input without its post norm";
            if (a.sharesKv()) {
                // the source's raw k and v rows are kept for the step and appended again (the same bytes) by this layer
                if (!(layers.get(a.kvSource()).mixer() instanceof Mixer.Attention src) || src.sharesKv() || a.kvSource() >= l.index())
                    return where + "shares the KV of a layer that computes none";
                if (src.headDim() != a.headDim() || src.window() != a.window() || !sameRope(src.rope(), a.rope()))
                    return where + "shares the KV of a layer of another shape, window or rope";
                if (a.qNorm() != null && src.kNorm() != null
                        && (a.qNorm().style() != src.kNorm().style() || a.qNorm().eps() != src.kNorm().eps()))
                    return where + "q norm and the shared k norm of different styles";
            }
            if (a.softcap() > 0f) return where + "attention soft-capping";
            if (a.headDim() > MAX_HEAD_DIM) return where + "head dim " + a.headDim() + " > " + MAX_HEAD_DIM;
            if (a.heads() % a.kvHeads() != 0) return where + "heads not a multiple of kv heads";
            if (a.qNorm() != null && a.kNorm() != null && (a.qNorm().style() != a.kNorm().style() || a.qNorm().eps() != a.kNorm().eps()))
                return where + "q and k norms of different styles";
            if (firstHeads == null) firstHeads = a.heads();
            else if (a.heads() != firstHeads) return where + "query heads differ between layers";
        }
        if (firstHeads == null) return "no attention layers";
        return null;
    }

    /** Sinks + window of a bounded anchor that re_anchor_attend holds in one block (the format's own bound). */
    static final int MAX_ANCHOR_SCORES = 160;

    private static boolean sameRope(Rope a, Rope b) {
        return a.rotaryDim() == b.rotaryDim() && a.attentionScaling() == b.attentionScaling()
                && java.util.Arrays.equals(a.invFreq(), b.invFreq());
    }

    /** Why the resident kernels cannot run {@code f}, or null. */
    private static String unsupportedFfn(Ffn f) {
        switch (f) {
            case Ffn.GatedMlp m -> {
                if (!(m.glu() instanceof Glu.Gated)) return "clamped SwiGLU";
                if (m.gateBias() != null || m.upBias() != null || m.downBias() != null) return "MLP biases";
                return null;
            }
            case Ffn.Moe m -> {
                if (m.router() instanceof Ffn.Router.Resonance && m.topK() != 1) return "resonance router with top-k " + m.topK();
                if (m.shared() == null && m.sharedGate() != null) return "MoE shared-expert gate without a shared expert";
                if (m.shared() != null && unsupportedFfn(m.shared()) != null) return "MoE shared expert: " + unsupportedFfn(m.shared());
                Ffn.Experts ex = m.experts();
                if (m.topK() > MAX_TOP_K || ex.count() > MAX_EXPERTS)
                    return "MoE of " + ex.count() + " experts, top " + m.topK() + " (at most " + MAX_EXPERTS + ", top " + MAX_TOP_K + ")";
                return null;
            }
            case Ffn.DenseAndMoe d -> {
                if (d.postMlp() == null || d.preMoe() == null || d.postMoe() == null) return "dense MLP beside the MoE without its norms";
                String dense = unsupportedFfn(d.mlp()), moe = unsupportedFfn(d.moe());
                return dense != null ? dense : moe;
            }
        }
    }

    /**
     * Lowers {@code plan} (which {@link #unsupported} accepted), resolving its weights through the graph's loader; the
     * embedding table and the head come resolved.
     */
    static DecoderPlan of(Plan plan, Loader l, Matrix embedding, Matrix head) {
        ModelSpec spec = plan.spec();
        List<LayerOps> planLayers = layers(plan);
        List<Layer> layers = new ArrayList<>();
        int hidden = spec.hidden(), inter = 0, headDim = 0, kvHeads = 0, heads = 0;
        for (LayerOps ls : planLayers) {
            if (heads == 0 && ls.mixer() instanceof Mixer.Attention at) heads = at.heads();
            if (heads == 0 && ls.mixer() instanceof Mixer.BoundedAttention b) heads = b.heads();
        }
        for (LayerOps ls : planLayers) {
            Matrix gate = null, up = null, down = null;
            Moe moe = null;
            NormOp postMlp = null, preMoe = null, postMoe = null;
            Activation act;
            switch (ls.ffn()) {
                case Ffn.GatedMlp m -> {
                    gate = l.matrixRows(m.gate(), hidden);
                    int in = gate.outDim();
                    inter = Math.max(inter, in);
                    up = l.matrix(m.up(), in, hidden);
                    down = l.matrix(m.down(), hidden, in);
                    act = ((Glu.Gated) m.glu()).act();
                }
                case Ffn.Moe m -> {
                    moe = moe(m, hidden, l);
                    inter = Math.max(inter, moe.intermediate());
                    act = m.glu() instanceof Glu.Gated g ? g.act() : Activation.SILU;   // the experts' own glu is in moe
                }
                case Ffn.DenseAndMoe d -> {   // gemma4's 26B block: the dense MLP as above, the MoE beside it
                    gate = l.matrixRows(d.mlp().gate(), hidden);
                    int in = gate.outDim();
                    up = l.matrix(d.mlp().up(), in, hidden);
                    down = l.matrix(d.mlp().down(), hidden, in);
                    act = ((Glu.Gated) d.mlp().glu()).act();
                    moe = moe(d.moe(), hidden, l);
                    inter = Math.max(inter, Math.max(in, moe.intermediate()));
                    postMlp = l.normOp(d.postMlp());
                    preMoe = l.normOp(d.preMoe());
                    postMoe = l.normOp(d.postMoe());
                }
            }
            if (moe != null && moe.shared() != null) inter = Math.max(inter, moe.shared().gate().outDim());
            if (ls.mixer() instanceof Mixer.GatedDeltaNet g) {
                layers.add(new Layer(l.normOp(ls.preMixer()), null, null, null, null, null, null, null, null, null, null, null,
                        1f, 0, null, l.normOp(ls.postMixer()), l.normOp(ls.preFfn()), gate, up, down, act, moe,
                        l.normOp(ls.postFfn()), 0, 0, null, -1,
                        ls.layerScalar() == null ? 1f : l.vector(ls.layerScalar(), 1)[0], null, postMlp, preMoe, postMoe,
                        false, deltaNet(g, hidden, l), null));
                continue;
            }
            if (ls.mixer() instanceof Mixer.BoundedAttention b) {   // Embryo's anchor: q, k, v, o and its own rotation
                float[][] cs = BoundedAnchorStep.rotations(b);
                int sinkLen = b.kvHeads() * b.sinks() * b.headDim();
                var anchor = new DecoderPlan.Anchor(b.window(), b.sinks(), b.rotaryDim(), l.vector(b.sinkK(), sinkLen),
                        l.vector(b.sinkV(), sinkLen), cs[0], cs[1]);
                layers.add(new Layer(l.normOp(ls.preMixer()), l.matrix(b.qProj(), b.qDim(), hidden), l.matrix(b.kProj(), b.kvDim(), hidden),
                        l.matrix(b.vProj(), b.kvDim(), hidden), l.matrix(b.oProj(), hidden, b.qDim()), null, null, null, null, null, null,
                        null, b.scale(), b.window(), null, null, l.normOp(ls.preFfn()), gate, up, down, act, moe, null, b.headDim(),
                        b.kvHeads(), null, -1, 1f, null, postMlp, preMoe, postMoe, false, null, anchor));
                headDim = Math.max(headDim, b.headDim());
                kvHeads = Math.max(kvHeads, b.kvHeads());
                continue;
            }
            Mixer.Attention a = (Mixer.Attention) ls.mixer();
            boolean shared = a.sharesKv();
            LayerSpec.PerLayerInput pi = ls.perLayerInput();
            Plan.PerLayerTable table = op(plan, Plan.PerLayerTable.class);
            int pleDim = table == null ? 0 : table.embedding().dim();
            // V as the raw K projection (attention_k_eq_v): the k product a second time
            String vProj = a.vProj() != null ? a.vProj() : a.kProj(), vBias = a.vProj() != null ? a.vBias() : a.kBias();
            layers.add(new Layer(l.normOp(ls.preMixer()),
                    l.matrix(a.qProj(), a.qDim() * (a.outputGate() ? 2 : 1), hidden), shared ? null : l.matrix(a.kProj(), a.kvDim(), hidden),
                    shared ? null : l.matrix(vProj, a.kvDim(), hidden), l.matrix(a.oProj(), hidden, a.qDim()),
                    l.optionalVector(a.qBias(), a.qDim()), l.optionalVector(a.kBias(), a.kvDim()),
                    l.optionalVector(vBias, a.kvDim()), l.optionalVector(a.oBias(), hidden),
                    l.normOp(a.qNorm()), l.normOp(a.kNorm()), rope(a.rope()), a.scale(), a.window(),
                    l.optionalVector(a.sinks(), a.heads()),
                    l.normOp(ls.postMixer()), l.normOp(ls.preFfn()), gate, up, down, act, moe,
                    l.normOp(ls.postFfn()), a.headDim(), a.kvHeads(), l.normOp(a.vNorm()), a.kvSource(),
                    ls.layerScalar() == null ? 1f : l.vector(ls.layerScalar(), 1)[0],
                    pi == null ? null : new DecoderPlan.PerLayerInput(l.matrix(pi.gate(), pleDim, hidden), pi.act(),
                            l.matrix(pi.projection(), hidden, pleDim), l.normOp(pi.postNorm())),
                    postMlp, preMoe, postMoe, a.outputGate(), null, null));
            headDim = Math.max(headDim, a.headDim());
            kvHeads = Math.max(kvHeads, a.kvHeads());
        }
        Plan.PerLayerTable plt = op(plan, Plan.PerLayerTable.class);
        DecoderPlan.PerLayerEmbedding pe = null;
        if (plt != null) {
            var ple = plt.embedding();
            int width = plt.layers() * ple.dim();
            Matrix table = l.perLayerTable(ple, plt.layers());
            pe = new DecoderPlan.PerLayerEmbedding(table, ple.tableScale(), ple.dim(), l.matrix(ple.modelProjection(), width, hidden),
                    ple.projectionScale(), l.normOp(ple.projectionNorm()), ple.combineScale());
        }
        Plan.Head out = op(plan, Plan.Head.class);
        var hc = out.clusters();
        Plan.MtpInput mtp = op(plan, Plan.MtpInput.class);   // an MTP head: its fc makes x from the host's input rows
        Plan.Embed embed = op(plan, Plan.Embed.class);   // none in a later pipeline stage: x is the rows handed in
        return new DecoderPlan(mtp != null ? spec.archName() + " MTP head" : spec.archName(), hidden, out.vocab(), heads, kvHeads, headDim, inter,
                embedding, mtp != null ? mtp.scale() : embed != null ? embed.scale() : 1f, layers,
                l.normOp(op(plan, Plan.FinalNorm.class).norm()), head, out.softcap(), pe,
                hc == null ? null : new DecoderPlan.HeadClusters(l.matrix(hc.weight(), hc.count(), hidden), hc.count()),
                mtp == null ? null : l.matrix(mtp.projection(), hidden, 2 * hidden), plan.takesInputRows(), plan.runsHead());
    }

    /**
     * What each of the file's skills replaces in {@code plan}, for a device that switches skills per row: every whole
     * weight product (the embedding, a flat head; not the per-layer table, a clustered head's matrices or the experts)
     * and the attention and router biases. The loader marks what it found, so its {@link Loader#checkOverlaysUsed} then
     * names what a skill replaces that no entry took up.
     */
    static dev.cmf4j.backend.DeviceSkills skills(Plan source, Loader l, DecoderPlan plan) {
        int n = l.skills.size();
        if (n == 0) return dev.cmf4j.backend.DeviceSkills.NONE;
        List<java.util.Map<Matrix, Matrix>> ms = new ArrayList<>();
        List<java.util.Map<float[], float[]>> bs = new ArrayList<>();
        for (int i = 0; i < n; i++) { ms.add(new java.util.IdentityHashMap<>()); bs.add(new java.util.IdentityHashMap<>()); }
        for (Matrix m : switchable(plan)) {
            Matrix[] sw = l.skillMatrices(m.name());
            if (sw != null) for (int i = 1; i <= n; i++) if (sw[i] != null) ms.get(i - 1).put(m, sw[i]);
        }
        List<LayerOps> sourceLayers = layers(source);
        for (int li = 0; li < plan.layers().size(); li++) {
            Layer pl = plan.layers().get(li);
            LayerOps ls = sourceLayers.get(li);
            if (ls.mixer() instanceof Mixer.Attention a) {
                String vBias = a.vProj() != null ? a.vBias() : a.kBias();
                String[] names = {a.qBias(), a.kBias(), vBias, a.oBias()};
                float[][] vs = {pl.qBias(), pl.kBias(), pl.vBias(), pl.oBias()};
                for (int j = 0; j < 4; j++) skillBiases(l, names[j], vs[j], bs);
            }
            if (pl.moe() != null && ls.ffn() instanceof Ffn.Moe m) {
                String rb = switch (m.router()) {
                    case Ffn.Router.SoftmaxTopK r -> r.bias();
                    case Ffn.Router.TopKSoftmax r -> r.bias();
                    default -> null;
                };
                skillBiases(l, rb, pl.moe().routerBias(), bs);
            }
        }
        return new dev.cmf4j.backend.DeviceSkills(l.skills, ms, bs);
    }

    /**
     * Each un-merged adapter's deltas for the matrices of {@code plan} (the same products as {@link #skills}); the loader
     * marks what it found, so its {@link Loader#checkOverlaysUsed} then fails on a target no product took up.
     */
    static dev.cmf4j.backend.DeviceAdapters adapters(Loader l, DecoderPlan plan) {
        int n = l.adapters.size();
        List<java.util.Map<Matrix, dev.cmf4j.backend.DeviceAdapters.LowRank>> ds = new ArrayList<>();
        for (int i = 0; i < n; i++) ds.add(new java.util.IdentityHashMap<>());
        for (Matrix m : switchable(plan)) {
            var d = l.deltas(m.name(), m.outDim(), m.inDim());
            if (d != null)
                for (int i = 1; i <= n; i++)
                    if (d[i] != null) ds.get(i - 1).put(m, new dev.cmf4j.backend.DeviceAdapters.LowRank(d[i].rank(), d[i].in(), d[i].out(),
                            d[i].a(), d[i].b(), d[i].scale()));
        }
        return new dev.cmf4j.backend.DeviceAdapters(l.adapters.stream().map(dev.cmf4j.model.LowRankAdapter::name).toList(), ds);
    }

    /** The plan's matrices a device switches per row: every whole product, the embedding and a flat head. */
    private static List<Matrix> switchable(DecoderPlan plan) {
        java.util.Set<Matrix> skip = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        if (plan.perLayerEmbedding() != null) skip.add(plan.perLayerEmbedding().table());
        if (plan.headClusters() != null) { skip.add(plan.headClusters().clusters()); skip.add(plan.head()); }
        return plan.matrices().stream().filter(m -> !skip.contains(m)).toList();
    }

    private static void skillBiases(Loader l, String name, float[] b, List<java.util.Map<float[], float[]>> out) {
        if (name == null || b == null) return;
        float[][] sb = l.skillVectors(name, b.length);
        if (sb != null) for (int i = 1; i < sb.length; i++) if (sb[i] != null) out.get(i - 1).put(b, sb[i]);
    }

    /** The widest causal conv of a gated delta net the device kernel takes (ra_gdn_conv's window in registers). */
    static final int MAX_CONV_KERNEL = 8;

    private static DecoderPlan.DeltaNet deltaNet(Mixer.GatedDeltaNet g, int hidden, Loader l) {
        int nv = g.valueHeads();
        Matrix qkvz = null, ba = null, qkv = null, z = null, b = null, a = null;
        switch (g.input()) {
            case Mixer.GdnInput.Fused f -> {
                qkvz = l.matrix(f.qkvz(), 2 * g.qkDim() + 2 * g.vDim(), hidden);
                ba = l.matrix(f.ba(), 2 * nv, hidden);
            }
            case Mixer.GdnInput.Split sp -> {
                qkv = l.matrix(sp.qkv(), g.convDim(), hidden);
                z = l.matrix(sp.z(), g.vDim(), hidden);
                b = l.matrix(sp.b(), nv, hidden);
                a = l.matrix(sp.a(), nv, hidden);
            }
        }
        return new DecoderPlan.DeltaNet(g.keyHeads(), nv, g.keyDim(), g.valueDim(), g.convKernel(), qkvz, ba, qkv, z, b, a,
                DeltaNetStep.convWeights(g, l), l.optionalVector(g.convBias(), g.convDim()), DeltaNetStep.negA(g, l), l.vector(g.dtBias(), nv),
                l.normOp(g.norm()), l.matrix(g.outProj(), hidden, g.vDim()));
    }

    private static Moe moe(Ffn.Moe m, int hidden, Loader l) {
        Ffn.Experts ex = m.experts();
        int n = ex.count(), in = ex.intermediate();
        if (m.topK() < 1 || m.topK() > n) throw new ModelException("MoE top-k " + m.topK() + " outside 1.." + n);
        String routerWeight, routerBias;
        boolean normTopK, topKFirst;
        NormOp routerNorm = null;
        float[] expertScale = null;
        DecoderPlan.Resonance resonance = null;
        switch (m.router()) {
            case Ffn.Router.SoftmaxTopK r -> { routerWeight = r.weight(); routerBias = r.bias(); normTopK = r.normTopK(); topKFirst = false; }
            case Ffn.Router.TopKSoftmax r -> { routerWeight = r.weight(); routerBias = r.bias(); normTopK = false; topKFirst = true; }
            case Ffn.Router.ScaledSoftmaxTopK r -> {   // gemma4: rmsnorm(x) · scale · hidden^-½, softmax top-k renormalised, · per-expert scale
                routerWeight = r.proj();
                routerBias = null;
                normTopK = true;
                topKFirst = false;
                float[] sc = l.vector(r.scale(), hidden);
                float k = (float) Math.pow(hidden, -0.5);
                for (int i = 0; i < hidden; i++) sc[i] *= k;
                routerNorm = new NormOp(sc, false, r.eps(), hidden);
                expertScale = l.vector(r.perExpertScale(), n);
            }
            case Ffn.Router.Resonance r -> {   // Embryo: the expert that reconstructs x best, weight 1 (re_resonance_route)
                routerWeight = null;
                routerBias = null;
                normTopK = false;
                topKFirst = false;
                float[][] d = MoeStep.descriptors(r, l, n, hidden);
                resonance = new DecoderPlan.Resonance(r.rank(), d[0], d[1], d[2]);
            }
        }
        boolean fused = ex.gateUp() != null;
        List<Matrix> gate = new ArrayList<>(), up = new ArrayList<>(), down = new ArrayList<>();
        for (int e = 0; e < n; e++) {
            if (fused) {
                Ffn.ExpertMatrix gu = ex.gateUp();
                gate.add(l.expert(gu.nameOf(e), gu.fused(), e, n, 2 * in, hidden, gu.inputMajor()));
            } else {
                gate.add(l.expert(ex.gate().nameOf(e), ex.gate().fused(), e, n, in, hidden, ex.gate().inputMajor()));
                up.add(l.expert(ex.up().nameOf(e), ex.up().fused(), e, n, in, hidden, ex.up().inputMajor()));
            }
            down.add(l.expert(ex.down().nameOf(e), ex.down().fused(), e, n, hidden, in, ex.down().inputMajor()));
        }
        return new Moe(routerWeight == null ? null : l.matrix(routerWeight, n, hidden), l.optionalVector(routerBias, n), n, m.topK(), normTopK, topKFirst,
                in, m.glu(), List.copyOf(gate), fused ? null : List.copyOf(up), ex.interleaved(), List.copyOf(down),
                biases(l, fused ? ex.gateUpBias() : ex.gateBias(), n, fused ? 2 * in : in),
                fused ? null : biases(l, ex.upBias(), n, in), biases(l, ex.downBias(), n, hidden), routerNorm, expertScale,
                m.shared() == null ? null : sharedExpert(m, hidden, l), resonance);
    }

    private static DecoderPlan.SharedExpert sharedExpert(Ffn.Moe m, int hidden, Loader l) {
        Matrix gate = l.matrixRows(m.shared().gate(), hidden);
        int in = gate.outDim();
        return new DecoderPlan.SharedExpert(gate, l.matrix(m.shared().up(), in, hidden), l.matrix(m.shared().down(), hidden, in),
                ((Glu.Gated) m.shared().glu()).act(), m.sharedGate() == null ? null : l.matrix(m.sharedGate(), 1, hidden));
    }

    /** Every expert's bias of width w, concatenated [experts, w]; null when absent. */
    private static float[] biases(Loader l, Ffn.ExpertMatrix b, int experts, int w) {
        if (b == null) return null;
        float[] all = new float[experts * w];
        for (int e = 0; e < experts; e++)
            System.arraycopy(b.fused() ? l.row(b.name(), e, experts, w) : l.vector(b.nameOf(e), w), 0, all, e * w, w);
        return all;
    }

    private static RopeTable rope(Rope r) { return new RopeTable(r.rotaryDim(), r.invFreq(), r.attentionScaling()); }
}
