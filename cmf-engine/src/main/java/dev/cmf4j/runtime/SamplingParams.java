package dev.cmf4j.runtime;

/**
 * How the next token is chosen from logits (REFERENCE_RUNTIME.md §4.3). {@code temperature == 0} is
 * greedy (argmax after penalties).
 *
 * @param temperature       divides the logits; 0 = greedy
 * @param topK              keep the k most probable tokens; 0 = off
 * @param topP              keep the smallest set whose probability reaches p; 1 = off
 * @param minP              drop tokens below minP·p_max; 0 = off
 * @param repetitionPenalty HF style: a seen token's logit is divided (if > 0) or multiplied (if < 0) by it; 1 = off
 * @param presencePenalty   OpenAI style: subtracted once from every seen token's logit; 0 = off
 * @param seed              RNG seed; null = a fresh random seed
 */
public record SamplingParams(float temperature, int topK, float topP, float minP, float repetitionPenalty,
                             float presencePenalty, Long seed) {

    public SamplingParams {
        if (!(temperature >= 0) || Float.isInfinite(temperature)) throw new IllegalArgumentException("temperature must be >= 0, got " + temperature);
        if (topK < 0) throw new IllegalArgumentException("top-k must be >= 0, got " + topK);
        if (!(topP > 0 && topP <= 1)) throw new IllegalArgumentException("top-p must be in (0, 1], got " + topP);
        if (!(minP >= 0 && minP < 1)) throw new IllegalArgumentException("min-p must be in [0, 1), got " + minP);
        if (!(repetitionPenalty > 0)) throw new IllegalArgumentException("repetition penalty must be > 0, got " + repetitionPenalty);
        if (Float.isNaN(presencePenalty)) throw new IllegalArgumentException("presence penalty is NaN");
    }

    /** Argmax, no penalties. */
    public static final SamplingParams GREEDY = new SamplingParams(0f, 0, 1f, 0f, 1f, 0f, null);

    /** The reference runtime's defaults: T 0.7, top-k 40, top-p 0.9, min-p 0.05, repetition 1.1. */
    public static SamplingParams defaults() { return new SamplingParams(0.7f, 40, 0.9f, 0.05f, 1.1f, 0f, null); }

    public boolean greedy() { return temperature == 0f; }

    /** Greedy with no penalty: the pick is the logits' own argmax (which a device can take without copying them back). */
    public boolean plainGreedy() { return greedy() && repetitionPenalty == 1f && presencePenalty == 0f; }

    /**
     * Whether top-p at temperature 1 is the only filter (no top-k, min-p or penalty): then a hierarchical head may skip
     * the clusters no nucleus can reach ({@link dev.cmf4j.model.graph.State#gateHeadForTopP}) and the draw is unchanged.
     */
    public boolean nucleusOnly() {
        return temperature == 1f && topK == 0 && minP == 0f && repetitionPenalty == 1f && presencePenalty == 0f && topP < 1f;
    }

    public SamplingParams withSeed(Long s) {
        return new SamplingParams(temperature, topK, topP, minP, repetitionPenalty, presencePenalty, s);
    }
}
