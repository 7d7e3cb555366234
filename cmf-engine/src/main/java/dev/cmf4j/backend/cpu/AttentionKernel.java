package dev.cmf4j.backend.cpu;

/**
 * One query head attending over a KV cache, like transformers' eager attention: scores = q·k·scale,
 * optional soft-capping tanh(s/c)·c, softmax in float32 (with an optional sink logit in the denominator),
 * then the probability-weighted sum of values.
 */
public final class AttentionKernel {
    private AttentionKernel() {}

    /**
     * @param q       query array; head starts at {@code qo}
     * @param cache   keys/values
     * @param kvOff   offset of the kv head inside a position's kvDim floats (kvHead·headDim)
     * @param from    first key position (inclusive)
     * @param to      last key position (inclusive)
     * @param softcap 0 = none
     * @param sink    sink logit, or NaN for none
     * @param scores  scratch of at least to−from+1 floats
     * @param out     headDim outputs at {@code oo}
     */
    public static void attend(float[] q, int qo, int headDim, KvCache cache, int kvOff, int from, int to,
                              float scale, float softcap, float sink, float[] scores, float[] out, int oo) {
        int n = to - from + 1;
        float max = Float.NEGATIVE_INFINITY;
        for (int j = 0; j < n; j++) {
            int pos = from + j;
            float s = cache.keyDot(q, qo, pos, kvOff, headDim) * scale;
            if (softcap > 0f) s = (float) Math.tanh(s / softcap) * softcap;
            scores[j] = s;
            if (s > max) max = s;
        }
        boolean hasSink = !Float.isNaN(sink);
        if (hasSink && sink > max) max = sink;
        float sum = 0f;
        for (int j = 0; j < n; j++) { float e = (float) Math.exp(scores[j] - max); scores[j] = e; sum += e; }
        if (hasSink) sum += (float) Math.exp(sink - max);
        java.util.Arrays.fill(out, oo, oo + headDim, 0f);
        for (int j = 0; j < n; j++) {
            cache.addValue(scores[j] / sum, from + j, kvOff, out, oo, headDim);
        }
    }
}
