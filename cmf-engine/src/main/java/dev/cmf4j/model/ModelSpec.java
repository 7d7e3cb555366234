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
 */
public record ModelSpec(String archName, int hidden, int vocab, int maxPositions, String embedding,
                        float embedScale, PerLayerEmbedding perLayerEmbedding, List<LayerSpec> layers,
                        Norm finalNorm, String head, float finalSoftcap) {
    public ModelSpec {
        layers = List.copyOf(layers);
    }

    public int numLayers() { return layers.size(); }

    public LayerSpec layer(int i) { return layers.get(i); }

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
