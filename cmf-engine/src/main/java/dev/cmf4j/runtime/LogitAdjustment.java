package dev.cmf4j.runtime;

import java.util.HashMap;
import java.util.Map;

/**
 * OpenAI's adjustments of a request's logits before sampling: {@code logit_bias} added per id, and presence and
 * frequency penalties over the tokens generated so far (not the prompt: that is the repetition penalty's job, as in
 * vLLM). {@code logit_j -= presence·[c_j > 0] + frequency·c_j}. Not thread-safe: one per sequence.
 */
final class LogitAdjustment {
    private final Map<Integer, Float> bias;
    private final float presence, frequency;
    private final Map<Integer, Integer> counts = new HashMap<>();

    LogitAdjustment(Map<Integer, Float> bias, float presence, float frequency) {
        this.bias = Map.copyOf(bias);
        this.presence = presence;
        this.frequency = frequency;
    }

    /** Whether it changes anything (else the raw row goes to the sampler as is). */
    boolean active() { return !bias.isEmpty() || presence != 0f || frequency != 0f; }

    /** {@code dst[0, v)} = the row {@code src[off, off + v)} adjusted. */
    void apply(float[] src, int off, int v, float[] dst) {
        System.arraycopy(src, off, dst, 0, v);
        for (var e : bias.entrySet()) if (e.getKey() >= 0 && e.getKey() < v) dst[e.getKey()] += e.getValue();
        for (var e : counts.entrySet()) dst[e.getKey()] -= presence + frequency * e.getValue();
    }

    /** Records a generated token. */
    void generated(int id) { if (presence != 0f || frequency != 0f) counts.merge(id, 1, Integer::sum); }
}
