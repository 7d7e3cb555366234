package dev.cmf4j.model.graph;

/** Executes one kind of {@link dev.cmf4j.model.Ffn} for a chunk of tokens. */
interface FfnStep {
    Object newScratch(int maxChunk);

    /**
     * @param normed   [tokens, hidden] the pre-FFN normed input
     * @param residual [tokens, hidden] the layer's residual stream before the FFN (some routers read it)
     * @param out      [tokens, hidden] the FFN output
     * @param ro       each row's skill and adapter (null: the backbone for every row)
     */
    void forward(float[] normed, float[] residual, float[] out, int tokens, Object scratch, RowOverlay ro);
}
