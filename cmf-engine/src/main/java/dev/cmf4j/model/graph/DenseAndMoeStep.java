package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.model.Ffn;

/**
 * Gemma4 26B-style FFN: post_mlp(mlp(normed)) + post_moe(moe(router ← residual, experts ← pre_moe(residual))).
 */
final class DenseAndMoeStep implements FfnStep {
    final MlpStep mlp;
    final MoeStep moe;
    private final NormOp postMlp, preMoe, postMoe;
    private final int hidden;

    DenseAndMoeStep(Ffn.DenseAndMoe d, int hidden, Loader l, MatMul mm, int layer) {
        this.hidden = hidden;
        this.mlp = new MlpStep(d.mlp(), hidden, l, mm, layer);
        this.moe = new MoeStep(d.moe(), hidden, l, mm, layer);
        this.postMlp = l.normOp(d.postMlp());
        this.preMoe = l.normOp(d.preMoe());
        this.postMoe = l.normOp(d.postMoe());
    }

    record Scratch(Object mlp, MoeStep.Scratch moe, float[] moeIn, float[] moeOut) {}

    @Override public Object newScratch(int maxChunk) {
        return new Scratch(mlp.newScratch(maxChunk), (MoeStep.Scratch) moe.newScratch(maxChunk),
                new float[maxChunk * hidden], new float[maxChunk * hidden]);
    }

    @Override public void forward(float[] normed, float[] residual, float[] out, int tokens, Object scratch, RowOverlay ro) {
        Scratch s = (Scratch) scratch;
        mlp.forward(normed, residual, out, tokens, s.mlp(), ro);
        if (postMlp != null) postMlp.rows(out, tokens);
        if (preMoe != null) preMoe.rows(residual, s.moeIn(), tokens);
        else System.arraycopy(residual, 0, s.moeIn(), 0, tokens * hidden);
        moe.run(residual, s.moeIn(), s.moeOut(), tokens, s.moe(), ro);
        if (postMoe != null) postMoe.rows(s.moeOut(), tokens);
        for (int i = 0; i < tokens * hidden; i++) out[i] += s.moeOut()[i];
    }
}
