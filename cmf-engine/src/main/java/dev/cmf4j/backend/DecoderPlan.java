package dev.cmf4j.backend;

import java.util.ArrayList;
import java.util.List;

/**
 * The decoder family a {@link DeviceForward} runs (llama, mistral, qwen2, qwen3 dense and MoE, gemma3, gpt-oss; Embryo's
 * bounded anchors, resonance router and clustered head as their own parts below), resolved
 * every layer is pre-norm causal GQA attention (optional q/k/v/o biases, optional per-head q/k RMSNorm, any rope
 * with precomputed inverse frequencies — per layer, so local/global bases differ —, an optional sliding window,
 * a per-layer query scale) and either a gated MLP (SiLU, GeLU-tanh or GeLU) or a softmax-top-k mixture of
 * experts; optional sandwich norms on the attention and FFN outputs before their residual adds (gemma); a final
 * RMSNorm and the head. Matrices are views of the file; small vectors are decoded. Built by the model from its spec
 * ({@code model.graph.DecoderPlans}); a backend reads it without knowing which model it came from.
 *
 * @param label      the model's name in notes (its architecture)
 * @param embedding  token table [vocab, hidden]
 * @param embedScale multiplies the embedding row (1 = none)
 * @param head       [vocab, hidden] (the embedding table when tied)
 * @param headDim    the widest layer's head dimension (layers may differ: gemma4's global layers)
 * @param finalSoftcap logits = c·tanh(logits / c) (gemma); 0 = none
 * @param perLayerEmbedding gemma4's per-layer inputs, or null
 * @param headClusters Embryo's hierarchical head over {@code head} (the output is log-probabilities), or null
 * @param mtpProjection an MTP head's fc [hidden, 2·hidden], or null: the head's steps start from input rows
 *                      [t, 2·hidden] the host made (the normed embedding of the token, then the normed hidden state of
 *                      the model) through this product, instead of from the embedding
 * @param inputRows  a pipeline stage after the first ({@code model.LayerSplit}): its steps start from rows [t, hidden]
 *                   the host hands in ({@link DeviceForward#forwardRows}), not from the embedding
 * @param runsHead   false for a pipeline stage before the last: its steps hand their last layer's rows on and never
 *                   run the final norm and head (its decode step is captured without them)
 */
public record DecoderPlan(String label, int hidden, int vocab, int heads, int kvHeads, int headDim, int intermediate,
                          Matrix embedding, float embedScale, List<Layer> layers, NormOp finalNorm, Matrix head,
                          float finalSoftcap, PerLayerEmbedding perLayerEmbedding, HeadClusters headClusters,
                          Matrix mtpProjection, boolean inputRows, boolean runsHead) {

    /**
     * One layer; the biases, q/k norms and post norms are null when absent. A dense layer has gate/up/down and
     * {@code moe} null; an MoE layer has {@code moe} and gate/up/down null, or both (a dense MLP beside the MoE).
     *
     * @param rope         the layer's rotary frequencies
     * @param window       sliding window (query p sees keys p − window < j ≤ p); 0 = full causal
     * @param sinks        per-head sink logits joining the softmax denominator (gpt-oss), or null
     * @param postAttnNorm norm of the attention output before its residual add (gemma sandwich), or null
     * @param act          the gated MLP's (or the experts') activation: act(gate)·up
     * @param postFfnNorm  norm of the FFN output before its residual add, or null
     * @param headDim      this layer's head dimension
     * @param vNorm        per-head norm of v before the cache (gemma4), or null
     * @param kvSource     the earlier layer whose keys and values this one reads (k, v, kBias, vBias, kNorm null;
     *                     same window and rope), or −1
     * @param layerScalar  multiplies the residual stream after the layer (gemma4); 1 = none
     * @param perLayerInput x += postNorm(proj(act(gate(x)) · pli[layer])) after the FFN (gemma4), or null
     * @param kvHeads      this layer's key/value heads
     * @param postMlpNorm  with both a dense MLP (gate/up/down) and {@code moe} (gemma4's 26B block): the FFN output is
     *                     postMlp(mlp(ffnNorm(x))) + postMoe(moe(preMoe(x))), and then postFfnNorm; null otherwise
     * @param outputGate   q's projection holds per head q then a gate; the attention output is multiplied by σ(gate)
     *                     (Qwen3-Next); q has 2·heads·headDim rows
     * @param deltaNet     the layer's mixer is a gated delta net instead of attention (q, k, v, o, their biases and norms,
     *                     rope null; o is {@link DeltaNet#outProj}), or null
     * @param anchor       the layer's mixer is Embryo's bounded anchor over q, k, v, o (no biases, norms or rope: its
     *                     own relative rotation), or null
     */
    public record Layer(NormOp attnNorm, Matrix q, Matrix k, Matrix v, Matrix o,
                        float[] qBias, float[] kBias, float[] vBias, float[] oBias,
                        NormOp qNorm, NormOp kNorm, RopeTable rope, float scale, int window, float[] sinks, NormOp postAttnNorm,
                        NormOp ffnNorm, Matrix gate, Matrix up, Matrix down, Activation act, Moe moe,
                        NormOp postFfnNorm, int headDim, int kvHeads, NormOp vNorm, int kvSource, float layerScalar,
                        PerLayerInput perLayerInput, NormOp postMlpNorm, NormOp preMoeNorm, NormOp postMoeNorm,
                        boolean outputGate, DeltaNet deltaNet, Anchor anchor) {
        public int qDim(int heads) { return heads * headDim; }

        public boolean sharesKv() { return kvSource >= 0; }
    }

    /**
     * Gated DeltaNet (Qwen3-Next linear attention): the input projections (fused qkvz and ba, or split qkv, z, b, a),
     * a causal depthwise conv of {@code convKernel} taps over [q; k; v] with SiLU, L2-normed q (· keyDim^-½) and k,
     * β = σ(b), g = negA·softplus(a + dtBias), the gated delta rule with state [valueHeads, keyDim, valueDim] per
     * sequence, a gated RMSNorm with z per value head, the output projection.
     */
    public record DeltaNet(int keyHeads, int valueHeads, int keyDim, int valueDim, int convKernel,
                           Matrix qkvz, Matrix ba, Matrix qkv, Matrix z, Matrix b, Matrix a,
                           float[] conv, float[] convBias, float[] negA, float[] dtBias, NormOp norm, Matrix outProj) {
        public int qkDim() { return keyHeads * keyDim; }

        public int vDim() { return valueHeads * valueDim; }

        public int convDim() { return 2 * qkDim() + vDim(); }

        /** Its input projections, those present. */
        public List<Matrix> inputs() {
            List<Matrix> all = new ArrayList<>();
            for (Matrix m : new Matrix[] {qkvz, ba, qkv, z, b, a}) if (m != null) all.add(m);
            return all;
        }
    }

    /**
     * Embryo's bounded anchor {@code swa_sink_v1}: a ring of the last {@code window} keys and values per sequence (slot
     * p mod window, unrotated), {@code sinks} trained sink keys and values per KV group [kvHeads, sinks, headDim] scored
     * unrotated, and the query rotated by its distance d to each window key (rotate-half over {@code rotaryDim}):
     * cos/sin [window, rotaryDim/2].
     */
    public record Anchor(int window, int sinks, int rotaryDim, float[] sinkK, float[] sinkV, float[] cos, float[] sin) {}

    /**
     * Embryo's resonance router: expert e wins with weight 1 when b_e − (‖y − μ_e‖² − Σ_i ((y − μ_e)·u_ei)²) is the
     * first maximum; mu [experts, hidden], u [experts, rank, hidden] (empty at rank 0), bias [experts].
     */
    public record Resonance(int rank, float[] mu, float[] u, float[] bias) {}

    /** Embryo's hierarchical head: {@code count} contiguous clusters of the vocabulary, their matrix [count, hidden]. */
    public record HeadClusters(Matrix clusters, int count) {}

    /** A shared expert beside the routed ones: a gated MLP, scaled by σ(gateProj·x) when gateProj is not null. */
    public record SharedExpert(Matrix gate, Matrix up, Matrix down, Activation act, Matrix gateProj) {}

    /** A layer's per-layer input block: gate [dim, hidden], act, the projection [hidden, dim], its post norm. */
    public record PerLayerInput(Matrix gate, Activation act, Matrix projection, NormOp postNorm) {}

    /**
     * Gemma4's per-layer inputs, computed once per step from the embedded rows x and the token ids: for each layer l a
     * slice pli[l] = (norm(projection·x · projectionScale) + table[id] · tableScale) · combineScale, of {@code dim}
     * per layer (the norm per slice).
     */
    public record PerLayerEmbedding(Matrix table, float tableScale, int dim, Matrix projection, float projectionScale,
                                    NormOp projectionNorm, float combineScale) {}

    /**
     * A mixture of experts: router logits (+ bias), then either softmax over all experts, the top k (ties to the
     * lower index) and the weights renormalised over the k when {@code normTopK} (Qwen-MoE), or
     * ({@code topKThenSoftmax}, gpt-oss) the top k logits and a softmax over those k; the weighted sum of the chosen
     * experts' gated MLPs. Expert matrices may be row windows of one fused [experts, ·, ·] tensor, output- or
     * input-major; gate and up are separate ({@code up} non-null) or one fused [2·I] product ({@code up} null;
     * {@code routerNorm}, when not null, is the router's own norm of the residual stream (gemma4: its weight the
     * router scale · hidden^-½), and {@code expertScale} multiplies each chosen expert's weight (gemma4); else the
     * router reads the experts' input;
     * {@code interleaved}: even outputs gate, odd up; else the first half gate). Biases are [experts, n] row-major,
     * or null. With {@code resonance} (Embryo, top 1) the router is that and {@code router} is null.
     */
    public record Moe(Matrix router, float[] routerBias, int experts, int topK, boolean normTopK, boolean topKThenSoftmax,
                      int intermediate, Glu glu, List<Matrix> gate, List<Matrix> up, boolean interleaved, List<Matrix> down,
                      float[] gateBias, float[] upBias, float[] downBias, NormOp routerNorm, float[] expertScale,
                      SharedExpert shared, Resonance resonance) {}

    /** The widest head dimension the device kernels take. */
    public static final int MAX_HEAD_DIM = 256;

    /** The most experts and the widest top-k the routing kernel takes. */
    public static final int MAX_EXPERTS = 1024, MAX_TOP_K = 32;

    public int qDim() { return heads * headDim; }

    public int kvDim() { return kvHeads * headDim; }

    /** Every whole weight matrix (not the experts), for dtype checks and upload. */
    public List<Matrix> matrices() {
        List<Matrix> all = new ArrayList<>();
        all.add(embedding);
        all.add(head);
        if (mtpProjection != null) all.add(mtpProjection);
        if (headClusters != null) all.add(headClusters.clusters());
        if (perLayerEmbedding != null) {
            all.add(perLayerEmbedding.table());
            all.add(perLayerEmbedding.projection());
        }
        for (Layer l : layers) {
            if (l.deltaNet() != null) {
                all.addAll(l.deltaNet().inputs());
                all.add(l.deltaNet().outProj());
            } else {
                all.add(l.q());
                if (!l.sharesKv()) all.addAll(List.of(l.k(), l.v()));
                all.add(l.o());
            }
            if (l.perLayerInput() != null) all.addAll(List.of(l.perLayerInput().gate(), l.perLayerInput().projection()));
            if (l.gate() != null) all.addAll(List.of(l.gate(), l.up(), l.down()));
            if (l.moe() != null && l.moe().router() != null) all.add(l.moe().router());
            if (l.moe() != null && l.moe().shared() != null) {
                SharedExpert se = l.moe().shared();
                all.addAll(List.of(se.gate(), se.up(), se.down()));
                if (se.gateProj() != null) all.add(se.gateProj());
            }
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
