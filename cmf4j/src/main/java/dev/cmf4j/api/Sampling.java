package dev.cmf4j.api;

import java.util.List;

/**
 * How a reply's tokens are chosen and when it ends. Sampling runs penalties, then temperature, min-p, top-k, top-p,
 * then the draw, like {@code cmf run}; temperature 0 is greedy.
 *
 * <pre>{@code
 * Sampling s = Sampling.defaults().withTemperature(0.2f).withMaxTokens(100).withSeed(42L);
 * }</pre>
 *
 * @param temperature       divides the logits; 0 = greedy (the most probable token)
 * @param topK              keep the k most probable tokens; 0 = off
 * @param topP              keep the smallest set whose probability reaches p; 1 = off
 * @param minP              drop tokens below minP times the most probable one's probability; 0 = off
 * @param repetitionPenalty Hugging Face's, over prompt and output; 1 = off
 * @param presencePenalty   OpenAI's, over the generated tokens; 0 = off
 * @param frequencyPenalty  OpenAI's, over the generated tokens; 0 = off
 * @param seed              the random seed, or null for a fresh one each time
 * @param maxTokens         the most tokens to generate; 0 = what the context leaves
 * @param stops             strings that end the reply (cut before them)
 * @param ignoreEos         keep generating past the model's end-of-sequence ids (as {@code cmf generate} does)
 */
public record Sampling(float temperature, int topK, float topP, float minP, float repetitionPenalty,
                       float presencePenalty, float frequencyPenalty, Long seed, int maxTokens, List<String> stops,
                       boolean ignoreEos) {

    public Sampling {
        if (!(temperature >= 0) || Float.isInfinite(temperature)) throw new IllegalArgumentException("temperature must be >= 0, got " + temperature);
        if (topK < 0) throw new IllegalArgumentException("topK must be >= 0, got " + topK);
        if (!(topP > 0 && topP <= 1)) throw new IllegalArgumentException("topP must be in (0, 1], got " + topP);
        if (!(minP >= 0 && minP < 1)) throw new IllegalArgumentException("minP must be in [0, 1), got " + minP);
        if (!(repetitionPenalty > 0)) throw new IllegalArgumentException("repetitionPenalty must be > 0, got " + repetitionPenalty);
        if (!(Math.abs(presencePenalty) <= 2)) throw new IllegalArgumentException("presencePenalty must be in [-2, 2], got " + presencePenalty);
        if (!(Math.abs(frequencyPenalty) <= 2)) throw new IllegalArgumentException("frequencyPenalty must be in [-2, 2], got " + frequencyPenalty);
        if (maxTokens < 0) throw new IllegalArgumentException("maxTokens must be >= 0, got " + maxTokens);
        stops = stops == null ? List.of() : List.copyOf(stops);
        if (stops.stream().anyMatch(String::isEmpty)) throw new IllegalArgumentException("a stop string must not be empty");
    }

    /** Greedy: always the most probable token, no penalties; the same prompt gives the same reply. */
    public static Sampling greedy() { return new Sampling(0f, 0, 1f, 0f, 1f, 0f, 0f, null, 0, List.of(), false); }

    /** {@code cmf run}'s defaults: temperature 0.7, top-k 40, top-p 0.9, min-p 0.05, repetition penalty 1.1. */
    public static Sampling defaults() { return new Sampling(0.7f, 40, 0.9f, 0.05f, 1.1f, 0f, 0f, null, 0, List.of(), false); }

    public Sampling withTemperature(float t) { return new Sampling(t, topK, topP, minP, repetitionPenalty, presencePenalty, frequencyPenalty, seed, maxTokens, stops, ignoreEos); }

    public Sampling withTopK(int k) { return new Sampling(temperature, k, topP, minP, repetitionPenalty, presencePenalty, frequencyPenalty, seed, maxTokens, stops, ignoreEos); }

    public Sampling withTopP(float p) { return new Sampling(temperature, topK, p, minP, repetitionPenalty, presencePenalty, frequencyPenalty, seed, maxTokens, stops, ignoreEos); }

    public Sampling withMinP(float p) { return new Sampling(temperature, topK, topP, p, repetitionPenalty, presencePenalty, frequencyPenalty, seed, maxTokens, stops, ignoreEos); }

    public Sampling withRepetitionPenalty(float r) { return new Sampling(temperature, topK, topP, minP, r, presencePenalty, frequencyPenalty, seed, maxTokens, stops, ignoreEos); }

    public Sampling withPresencePenalty(float p) { return new Sampling(temperature, topK, topP, minP, repetitionPenalty, p, frequencyPenalty, seed, maxTokens, stops, ignoreEos); }

    public Sampling withFrequencyPenalty(float f) { return new Sampling(temperature, topK, topP, minP, repetitionPenalty, presencePenalty, f, seed, maxTokens, stops, ignoreEos); }

    public Sampling withSeed(Long s) { return new Sampling(temperature, topK, topP, minP, repetitionPenalty, presencePenalty, frequencyPenalty, s, maxTokens, stops, ignoreEos); }

    public Sampling withMaxTokens(int n) { return new Sampling(temperature, topK, topP, minP, repetitionPenalty, presencePenalty, frequencyPenalty, seed, n, stops, ignoreEos); }

    public Sampling withStops(List<String> s) { return new Sampling(temperature, topK, topP, minP, repetitionPenalty, presencePenalty, frequencyPenalty, seed, maxTokens, s, ignoreEos); }

    public Sampling withIgnoreEos(boolean i) { return new Sampling(temperature, topK, topP, minP, repetitionPenalty, presencePenalty, frequencyPenalty, seed, maxTokens, stops, i); }
}
