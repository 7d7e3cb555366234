package dev.cmf4j.model.graph;

/**
 * Everything one session keeps between forward steps (KV caches, recurrent states) plus its scratch
 * buffers. Created by {@link Graph#newState(int, int)}; not thread-safe (one session, one thread).
 */
public final class State {
    final Graph graph;
    final int maxChunk, maxContext;
    final Object[] mixerState, mixerScratch, ffnScratch;
    final float[] x, h, m, residual, pli, pliTmp, pliTmp2;
    int position;
    /** A step failed after a state that cannot roll back (recurrent) was modified: only reset helps. */
    boolean broken;

    State(Graph graph, int maxChunk, int maxContext) {
        this.graph = graph;
        this.maxChunk = maxChunk;
        this.maxContext = maxContext;
        int n = graph.numLayers(), hidden = graph.hidden();
        mixerState = new Object[n];
        mixerScratch = new Object[n];
        ffnScratch = new Object[n];
        for (int l = 0; l < n; l++) {
            mixerState[l] = graph.mixer(l).newState(maxContext);
            mixerScratch[l] = graph.mixer(l).newScratch(maxChunk, maxContext);
            ffnScratch[l] = graph.ffn(l).newScratch(maxChunk);
        }
        x = new float[maxChunk * hidden];
        h = new float[maxChunk * hidden];
        m = new float[maxChunk * hidden];
        residual = new float[maxChunk * hidden];
        int pliWidth = graph.perLayerWidth();
        pli = pliWidth == 0 ? null : new float[maxChunk * pliWidth];
        pliTmp = pliWidth == 0 ? null : new float[maxChunk * pliWidth];
        int pliDim = graph.perLayerDim();
        pliTmp2 = pliDim == 0 ? null : new float[maxChunk * Math.max(pliDim, hidden)];
    }

    Object mixerState(int layer) { return mixerState[layer]; }

    Object mixerScratch(int layer) { return mixerScratch[layer]; }

    /** Positions consumed so far (the next token's position). */
    public int position() { return position; }

    public int maxChunk() { return maxChunk; }

    public int maxContext() { return maxContext; }

    /** The KV cache of attention layer {@code layer}, or null (other mixers, KV-shared layers); for tests. */
    public dev.cmf4j.backend.cpu.KvCache kvCache(int layer) {
        return mixerState[layer] instanceof dev.cmf4j.backend.cpu.KvCache c ? c : null;
    }

    /** Forgets the conversation: the next token is at position 0. */
    public void reset() {
        for (int l = 0; l < mixerState.length; l++) graph.mixer(l).reset(mixerState[l]);
        position = 0;
        broken = false;
    }
}
