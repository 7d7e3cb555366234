package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Matrix;
import dev.cmf4j.model.Activation;
import dev.cmf4j.model.Ffn;
import dev.cmf4j.model.Glu;
import dev.cmf4j.model.LayerSpec;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.Rope;

import java.util.ArrayList;
import java.util.List;

/**
 * The decoder family a {@link DeviceForward} runs (llama, mistral, qwen2, qwen3 dense and MoE, gemma3, gpt-oss), resolved
 * every layer is pre-norm causal GQA attention (optional q/k/v/o biases, optional per-head q/k RMSNorm, any rope
 * with precomputed inverse frequencies — per layer, so local/global bases differ —, an optional sliding window,
 * a per-layer query scale) and either a gated MLP (SiLU, GeLU-tanh or GeLU) or a softmax-top-k mixture of
 * experts; optional sandwich norms on the attention and FFN outputs before their residual adds (gemma); a final
 * RMSNorm and the head. Matrices are the graph's own views of the file; small vectors are decoded.
 *
 * @param embedding  token table [vocab, hidden]
 * @param embedScale multiplies the embedding row (1 = none)
 * @param head       [vocab, hidden] (the embedding table when tied)
 */
public record DecoderPlan(ModelSpec spec, int hidden, int vocab, int heads, int kvHeads, int headDim, int intermediate,
                          Matrix embedding, float embedScale, List<Layer> layers, NormOp finalNorm, Matrix head) {

    /**
     * One layer; the biases, q/k norms and post norms are null when absent. A dense layer has gate/up/down and
     * {@code moe} null; an MoE layer has {@code moe} and gate/up/down null.
     *
     * @param window       sliding window (query p sees keys p − window < j ≤ p); 0 = full causal
     * @param sinks        per-head sink logits joining the softmax denominator (gpt-oss), or null
     * @param postAttnNorm norm of the attention output before its residual add (gemma sandwich), or null
     * @param act          the gated MLP's (or the experts') activation: act(gate)·up
     * @param postFfnNorm  norm of the FFN output before its residual add, or null
     */
    public record Layer(NormOp attnNorm, Matrix q, Matrix k, Matrix v, Matrix o,
                        float[] qBias, float[] kBias, float[] vBias, float[] oBias,
                        NormOp qNorm, NormOp kNorm, Rope rope, float scale, int window, float[] sinks, NormOp postAttnNorm,
                        NormOp ffnNorm, Matrix gate, Matrix up, Matrix down, Activation act, Moe moe,
                        NormOp postFfnNorm) {}

    /**
     * A mixture of experts: router logits (+ bias), then either softmax over all experts, the top k (ties to the
     * lower index) and the weights renormalised over the k when {@code normTopK} (Qwen-MoE), or
     * ({@code topKThenSoftmax}, gpt-oss) the top k logits and a softmax over those k; the weighted sum of the chosen
     * experts' gated MLPs. Expert matrices may be row windows of one fused [experts, ·, ·] tensor, output- or
     * input-major; gate and up are separate ({@code up} non-null) or one fused [2·I] product ({@code up} null;
     * {@code interleaved}: even outputs gate, odd up; else the first half gate). Biases are [experts, n] row-major,
     * or null.
     */
    public record Moe(Matrix router, float[] routerBias, int experts, int topK, boolean normTopK, boolean topKThenSoftmax,
                      int intermediate, Glu glu, List<Matrix> gate, List<Matrix> up, boolean interleaved, List<Matrix> down,
                      float[] gateBias, float[] upBias, float[] downBias) {}

    /** The widest head dimension the device kernels take. */
    public static final int MAX_HEAD_DIM = 256;

    /** Why {@code spec} is not a dense decoder this form describes, or null when it is. */
    public static String unsupported(ModelSpec spec) {
        if (spec.perLayerEmbedding() != null) return "per-layer embeddings";
        if (spec.finalSoftcap() > 0f) return "final logit soft-capping";
        if (spec.finalNorm() == null) return "no final norm";
        if (spec.headClusters() != null) return "hierarchical head";
        Mixer.Attention first = null;
        for (LayerSpec l : spec.layers()) {
            String where = "layer " + l.index() + ": ";
            if (!(l.mixer() instanceof Mixer.Attention a)) return where + "linear attention (gated delta net)";
            String ffn = unsupportedFfn(l.ffn());
            if (ffn != null) return where + ffn;
            if (l.perLayerInput() != null || l.layerScalar() != null) return where + "per-layer inputs";
            if (l.preMixer() == null || l.preFfn() == null) return where + "no pre-norm";
            if (a.sharesKv()) return where + "shared KV";
            if (a.softcap() > 0f) return where + "attention soft-capping";
            if (a.outputGate()) return where + "attention output gate";
            if (a.vNorm() != null) return where + "v norm";
            if (a.vProj() == null) return where + "V shares the K projection";
            if (a.headDim() > MAX_HEAD_DIM) return where + "head dim " + a.headDim() + " > " + MAX_HEAD_DIM;
            if (a.heads() % a.kvHeads() != 0) return where + "heads not a multiple of kv heads";
            if (a.qNorm() != null && a.kNorm() != null && (a.qNorm().style() != a.kNorm().style() || a.qNorm().eps() != a.kNorm().eps()))
                return where + "q and k norms of different styles";
            if (first == null) first = a;
            else if (a.heads() != first.heads() || a.kvHeads() != first.kvHeads() || a.headDim() != first.headDim())
                return where + "attention shape differs between layers";
        }
        if (first == null) return "no layers";
        return null;
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
                if (m.router() instanceof Ffn.Router.ScaledSoftmaxTopK) return "MoE router with its own norm and scales";
                if (m.router() instanceof Ffn.Router.Resonance) return "resonance router";
                if (m.shared() != null || m.sharedGate() != null) return "MoE shared expert";
                Ffn.Experts ex = m.experts();
                if (m.topK() > MAX_TOP_K || ex.count() > MAX_EXPERTS)
                    return "MoE of " + ex.count() + " experts, top " + m.topK() + " (at most " + MAX_EXPERTS + ", top " + MAX_TOP_K + ")";
                return null;
            }
            case Ffn.DenseAndMoe d -> { return "dense MLP beside the MoE"; }
        }
    }

    /** The most experts and the widest top-k the routing kernel takes. */
    public static final int MAX_EXPERTS = 1024, MAX_TOP_K = 32;

    /** Resolves {@code spec} (which {@link #unsupported} accepted) through the graph's loader. */
    static DecoderPlan of(ModelSpec spec, Loader l, Matrix embedding, Matrix head, NormOp finalNorm) {
        List<Layer> layers = new ArrayList<>();
        int hidden = spec.hidden(), inter = 0;
        Mixer.Attention a0 = (Mixer.Attention) spec.layer(0).mixer();
        for (LayerSpec ls : spec.layers()) {
            Mixer.Attention a = (Mixer.Attention) ls.mixer();
            Matrix gate = null, up = null, down = null;
            Moe moe = null;
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
                case Ffn.DenseAndMoe d -> throw new IllegalArgumentException("unsupported: " + unsupported(spec));
            }
            layers.add(new Layer(NormOp.of(ls.preMixer(), l),
                    l.matrix(a.qProj(), a.qDim(), hidden), l.matrix(a.kProj(), a.kvDim(), hidden),
                    l.matrix(a.vProj(), a.kvDim(), hidden), l.matrix(a.oProj(), hidden, a.qDim()),
                    l.optionalVector(a.qBias(), a.qDim()), l.optionalVector(a.kBias(), a.kvDim()),
                    l.optionalVector(a.vBias(), a.kvDim()), l.optionalVector(a.oBias(), hidden),
                    NormOp.of(a.qNorm(), l), NormOp.of(a.kNorm(), l), a.rope(), a.scale(), a.window(),
                    l.optionalVector(a.sinks(), a.heads()),
                    NormOp.of(ls.postMixer(), l), NormOp.of(ls.preFfn(), l), gate, up, down, act, moe,
                    NormOp.of(ls.postFfn(), l)));
        }
        return new DecoderPlan(spec, hidden, spec.vocab(), a0.heads(), a0.kvHeads(), a0.headDim(), inter,
                embedding, spec.embedScale(), layers, finalNorm, head);
    }

    private static Moe moe(Ffn.Moe m, int hidden, Loader l) {
        Ffn.Experts ex = m.experts();
        int n = ex.count(), in = ex.intermediate();
        if (m.topK() < 1 || m.topK() > n) throw new ModelException("MoE top-k " + m.topK() + " outside 1.." + n);
        String routerWeight, routerBias;
        boolean normTopK, topKFirst;
        switch (m.router()) {
            case Ffn.Router.SoftmaxTopK r -> { routerWeight = r.weight(); routerBias = r.bias(); normTopK = r.normTopK(); topKFirst = false; }
            case Ffn.Router.TopKSoftmax r -> { routerWeight = r.weight(); routerBias = r.bias(); normTopK = false; topKFirst = true; }
            case Ffn.Router.ScaledSoftmaxTopK r -> throw new IllegalArgumentException("unsupported MoE router");
            case Ffn.Router.Resonance r -> throw new IllegalArgumentException("unsupported MoE router");
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
        return new Moe(l.matrix(routerWeight, n, hidden), l.optionalVector(routerBias, n), n, m.topK(), normTopK, topKFirst,
                in, m.glu(), List.copyOf(gate), fused ? null : List.copyOf(up), ex.interleaved(), List.copyOf(down),
                biases(l, fused ? ex.gateUpBias() : ex.gateBias(), n, fused ? 2 * in : in),
                fused ? null : biases(l, ex.upBias(), n, in), biases(l, ex.downBias(), n, hidden));
    }

    /** Every expert's bias of width w, concatenated [experts, w]; null when absent. */
    private static float[] biases(Loader l, Ffn.ExpertMatrix b, int experts, int w) {
        if (b == null) return null;
        float[] all = new float[experts * w];
        for (int e = 0; e < experts; e++)
            System.arraycopy(b.fused() ? l.row(b.name(), e, experts, w) : l.vector(b.nameOf(e), w), 0, all, e * w, w);
        return all;
    }

    public int qDim() { return heads * headDim; }

    public int kvDim() { return kvHeads * headDim; }

    /** Every whole weight matrix (not the experts), for dtype checks and upload. */
    public List<Matrix> matrices() {
        List<Matrix> all = new ArrayList<>();
        all.add(embedding);
        all.add(head);
        for (Layer l : layers) {
            all.addAll(List.of(l.q(), l.k(), l.v(), l.o()));
            if (l.moe() == null) all.addAll(List.of(l.gate(), l.up(), l.down()));
            else all.add(l.moe().router());
        }
        return all;
    }

    /** Every expert matrix (each may be a row window of a fused tensor). */
    public List<Matrix> expertMatrices() {
        List<Matrix> all = new ArrayList<>();
        for (Layer l : layers)
            if (l.moe() != null) {
                all.addAll(l.moe().gate());
                if (l.moe().up() != null) all.addAll(l.moe().up());
                all.addAll(l.moe().down());
            }
        return all;
    }

}
