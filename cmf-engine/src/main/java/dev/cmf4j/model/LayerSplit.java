package dev.cmf4j.model;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * A model split into a pipeline by layers (issue 26, {@code --split layers}): stage s holds a contiguous range of layers
 * ({@code layers / stages} each, the first stages one more when it does not divide), the first stage the embedding, the
 * last the final norm and head; a step runs the stages in turn, each handing its last layer's rows (the residual
 * stream, [rows, hidden]) to the next. Every stage keeps the state (KV cache, recurrent state) of its own layers only.
 * Unlike {@link TensorParallel} nothing inside a layer is cut, so any layer kind splits (gated delta nets, bounded
 * anchors, a dense MLP beside an MoE) and nothing is summed between the devices. Device-blind, as the plan is.
 *
 * <p>Refused, naming the layer: a layer that reads the keys and values of a layer in an earlier stage (Gemma4's KV
 * sharing across the cut), per-layer inputs (Gemma4's table is made from the embedding, which only the first stage
 * has), more stages than layers. Skills and task masks are not carried to the stages.
 */
public final class LayerSplit {
    private LayerSplit() {}

    /**
     * One stage: layers [{@code from}, {@code to}) of the model, renumbered from 0 in {@code spec}, whose plan is
     * {@link Plan#ofStage}.
     */
    public record Stage(int index, int stages, int from, int to, ModelSpec spec, Weights weights) {
        public boolean first() { return index == 0; }

        public boolean last() { return index == stages - 1; }

        public Plan plan() { return Plan.ofStage(spec, first(), last()); }
    }

    /** {@code spec} over {@code weights} in {@code stages} stages; a {@link ModelException} saying why it cannot be. */
    public static List<Stage> split(ModelSpec spec, Weights weights, int stages) {
        int layers = spec.numLayers();
        if (stages < 2) throw new IllegalArgumentException("a split by layers has 2 or more stages, got " + stages);
        if (stages > layers)
            throw new ModelException("--split layers: " + stages + " stages for a model of " + layers + " layer" + (layers == 1 ? "" : "s"));
        if (spec.perLayerEmbedding() != null)
            throw new ModelException("--split layers: per-layer inputs (made from the embedding, which only the first stage holds)"
                    + " are not split by layers");
        Weights plain = new Plain(weights);
        List<Stage> out = new ArrayList<>(stages);
        int from = 0;
        for (int s = 0; s < stages; s++) {
            int n = layers / stages + (s < layers % stages ? 1 : 0);
            int to = from + n;
            List<LayerSpec> part = new ArrayList<>(n);
            for (int l = from; l < to; l++) part.add(renumbered(spec.layer(l), from, to));
            // named by its layers, so a device's notes say which stage they are about
            ModelSpec stage = new ModelSpec(spec.archName() + " layers " + from + "-" + (to - 1), spec.hidden(), spec.vocab(), spec.maxPositions(), spec.embedding(),
                    spec.embedScale(), null, part, spec.finalNorm(), spec.head(), spec.finalSoftcap(), spec.headClusters());
            out.add(new Stage(s, stages, from, to, stage, plain));
            from = to;
        }
        return List.copyOf(out);
    }

    /** Layer {@code l.index()} as layer {@code index - from} of its stage [from, to); one sharing KV across the cut is refused. */
    private static LayerSpec renumbered(LayerSpec l, int from, int to) {
        Mixer m = l.mixer();
        if (m instanceof Mixer.Attention a && a.sharesKv()) {
            if (a.kvSource() < from)
                throw new ModelException("--split layers: layer " + l.index() + " reads the keys and values of layer " + a.kvSource()
                        + ", which falls in an earlier stage (layers " + from + "-" + (to - 1) + " here)");
            m = new Mixer.Attention(a.heads(), a.kvHeads(), a.headDim(), a.qProj(), a.kProj(), a.vProj(), a.oProj(), a.qBias(), a.kBias(),
                    a.vBias(), a.oBias(), a.qNorm(), a.kNorm(), a.vNorm(), a.outputGate(), a.scale(), a.softcap(), a.window(), a.sinks(),
                    a.rope(), a.kvSource() - from);
        }
        return new LayerSpec(l.index() - from, m, l.ffn(), l.preMixer(), l.postMixer(), l.preFfn(), l.postFfn(), l.perLayerInput(),
                l.layerScalar());
    }

    /** The model's tensors without its skills and task masks (not carried to the stages). */
    private record Plain(Weights source) implements Weights {
        @Override public Tensor find(String name) { return source.find(name); }

        @Override public Set<String> names() { return source.names(); }

        @Override public void checkIntact() { source.checkIntact(); }
    }
}
