package dev.cmf4j.model;

import java.util.List;

/**
 * A declarative, architecture-neutral description of a decoder-only language model: everything the
 * generic {@code Graph} needs to run it, and nothing about where it came from. Built from a CMF file's
 * {@code arch} block and tensor directory by {@link SpecBuilder}.
 *
 * @param archName      family label from the file, for messages only (the graph never branches on it)
 * @param hidden        residual stream width
 * @param vocab         rows of the output head
 * @param maxPositions  context limit (max_position_embeddings)
 * @param embedding     token embedding table [vocab, hidden]
 * @param embedScale    multiplies the embedding row (Gemma: sqrt(hidden)); 1 = none
 * @param perLayerEmbedding Gemma4 per-layer inputs (PLE); null = none
 * @param layers        decoder layers, in order
 * @param finalNorm     norm before the head
 * @param head          output projection [vocab, hidden] (the embedding table when tied)
 * @param finalSoftcap  final logit soft-capping (tanh(x/c)·c); 0 = none
 * @param headClusters  hierarchical head (Embryo): the output is log p from cluster and in-cluster softmaxes; null =
 *                      a flat head of logits
 */
public record ModelSpec(String archName, int hidden, int vocab, int maxPositions, String embedding,
                        float embedScale, PerLayerEmbedding perLayerEmbedding, List<LayerSpec> layers,
                        Norm finalNorm, String head, float finalSoftcap, HeadClusters headClusters) {
    public ModelSpec {
        layers = List.copyOf(layers);
    }

    public int numLayers() { return layers.size(); }

    public LayerSpec layer(int i) { return layers.get(i); }

    /**
     * Bytes one sequence's state takes whatever its length (recurrent and bounded layers only), or -1 when some
     * layer's cache grows with the context.
     */
    public long fixedStateBytes() {
        long sum = 0;
        for (LayerSpec l : layers) {
            switch (l.mixer()) {
                case Mixer.GatedDeltaNet g -> sum += g.stateBytes();
                case Mixer.BoundedAttention b -> sum += b.stateBytes();
                case Mixer.Attention a -> { return -1; }
            }
        }
        return sum;
    }

    /**
     * The hierarchical clustered head: {@code count} contiguous clusters of vocab/count tokens, cluster logits from
     * {@code weight} [count, hidden]; log p(v) = log softmax(clusters·h)[c(v)] + log softmax over c(v) of head·h.
     */
    public record HeadClusters(String weight, int count) {}

    /**
     * Gemma4 per-layer inputs: pli[l] = (norm(proj(x_emb)·projScale)[l] + table[id][l]·tableScale)·combineScale.
     *
     * @param table           [vocab_per_layer, layers·dim] token-identity table
     * @param tableScale      sqrt(dim)
     * @param dim             per-layer input width
     * @param modelProjection [layers·dim, hidden] context projection of the scaled embedding
     * @param projectionScale hidden^-½
     * @param projectionNorm  RMSNorm over each layer's slice
     * @param combineScale    2^-½
     */
    public record PerLayerEmbedding(String table, float tableScale, int dim, String modelProjection,
                                    float projectionScale, Norm projectionNorm, float combineScale) {}
}
