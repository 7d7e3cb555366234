package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Matrix;
import dev.cmf4j.model.Activation;
import dev.cmf4j.model.Ffn;
import dev.cmf4j.model.Glu;
import dev.cmf4j.model.LayerSpec;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.Rope;

import java.util.ArrayList;
import java.util.List;

/**
 * The dense decoder family (llama, mistral without windows, qwen2, qwen3 dense) resolved for a
 * {@link DeviceForward}: every layer is pre-norm full causal GQA attention (optional q/k/v/o biases, optional
 * per-head q/k RMSNorm, any rope with precomputed inverse frequencies) and a SwiGLU MLP, residual adds, a final
 * RMSNorm and the head. Matrices are the graph's own views of the file; small vectors are decoded.
 *
 * @param embedding  token table [vocab, hidden]
 * @param embedScale multiplies the embedding row (1 = none)
 * @param head       [vocab, hidden] (the embedding table when tied)
 */
public record DenseDecoder(ModelSpec spec, int hidden, int vocab, int heads, int kvHeads, int headDim, int intermediate,
                           Matrix embedding, float embedScale, List<Layer> layers, NormOp finalNorm, Matrix head) {

    /** One layer; the biases and q/k norms are null when absent. */
    public record Layer(NormOp attnNorm, Matrix q, Matrix k, Matrix v, Matrix o,
                        float[] qBias, float[] kBias, float[] vBias, float[] oBias,
                        NormOp qNorm, NormOp kNorm, Rope rope, float scale,
                        NormOp ffnNorm, Matrix gate, Matrix up, Matrix down) {}

    /** The widest head dimension the device kernels take. */
    public static final int MAX_HEAD_DIM = 256;

    /** Why {@code spec} is not a dense decoder this form describes, or null when it is. */
    public static String unsupported(ModelSpec spec) {
        if (spec.perLayerEmbedding() != null) return "per-layer embeddings";
        if (spec.finalSoftcap() > 0f) return "final logit soft-capping";
        if (spec.finalNorm() == null) return "no final norm";
        Mixer.Attention first = null;
        for (LayerSpec l : spec.layers()) {
            String where = "layer " + l.index() + ": ";
            if (!(l.mixer() instanceof Mixer.Attention a)) return where + "linear attention (gated delta net)";
            if (!(l.ffn() instanceof Ffn.GatedMlp m)) return where + "mixture of experts";
            if (l.postMixer() != null || l.postFfn() != null) return where + "sandwich norms";
            if (l.perLayerInput() != null || l.layerScalar() != null) return where + "per-layer inputs";
            if (l.preMixer() == null || l.preFfn() == null) return where + "no pre-norm";
            if (a.sharesKv()) return where + "shared KV";
            if (a.window() > 0) return where + "sliding window";
            if (a.sinks() != null) return where + "attention sinks";
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
            if (!(m.glu() instanceof Glu.Gated g) || g.act() != Activation.SILU) return where + "MLP activation is not SwiGLU";
            if (m.gateBias() != null || m.upBias() != null || m.downBias() != null) return where + "MLP biases";
        }
        if (first == null) return "no layers";
        return null;
    }

    /** Resolves {@code spec} (which {@link #unsupported} accepted) through the graph's loader. */
    static DenseDecoder of(ModelSpec spec, Loader l, Matrix embedding, Matrix head, NormOp finalNorm) {
        List<Layer> layers = new ArrayList<>();
        int hidden = spec.hidden(), inter = 0;
        Mixer.Attention a0 = (Mixer.Attention) spec.layer(0).mixer();
        for (LayerSpec ls : spec.layers()) {
            Mixer.Attention a = (Mixer.Attention) ls.mixer();
            Ffn.GatedMlp m = (Ffn.GatedMlp) ls.ffn();
            Matrix gate = l.matrixRows(m.gate(), hidden);
            int in = gate.outDim();
            inter = Math.max(inter, in);
            layers.add(new Layer(NormOp.of(ls.preMixer(), l),
                    l.matrix(a.qProj(), a.qDim(), hidden), l.matrix(a.kProj(), a.kvDim(), hidden),
                    l.matrix(a.vProj(), a.kvDim(), hidden), l.matrix(a.oProj(), hidden, a.qDim()),
                    l.optionalVector(a.qBias(), a.qDim()), l.optionalVector(a.kBias(), a.kvDim()),
                    l.optionalVector(a.vBias(), a.kvDim()), l.optionalVector(a.oBias(), hidden),
                    NormOp.of(a.qNorm(), l), NormOp.of(a.kNorm(), l), a.rope(), a.scale(),
                    NormOp.of(ls.preFfn(), l), gate, l.matrix(m.up(), in, hidden), l.matrix(m.down(), hidden, in)));
        }
        return new DenseDecoder(spec, hidden, spec.vocab(), a0.heads(), a0.kvHeads(), a0.headDim(), inter,
                embedding, spec.embedScale(), layers, finalNorm, head);
    }

    public int qDim() { return heads * headDim; }

    public int kvDim() { return kvHeads * headDim; }

    /** Every weight matrix, for dtype checks and upload. */
    public List<Matrix> matrices() {
        List<Matrix> all = new ArrayList<>();
        all.add(embedding);
        all.add(head);
        for (Layer l : layers) all.addAll(List.of(l.q(), l.k(), l.v(), l.o(), l.gate(), l.up(), l.down()));
        return all;
    }

}
