package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.Overlay;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * One generation for the {@link Scheduler}: a prompt of ids, how to sample, when to stop, where the tokens go.
 *
 * @param maxTokens        the most tokens to generate (also bounded by the scheduler's context)
 * @param eos              ids that end the generation (not part of the output)
 * @param stops            strings that end it (the text is cut before them)
 * @param presencePenalty  OpenAI's, over generated tokens
 * @param frequencyPenalty OpenAI's, over generated tokens
 * @param logitBias        added to a token's logit before sampling
 * @param topLogprobs      -1 for no log-probabilities, else the sampled token's and this many alternatives'
 * @param timeout          from submission to the end; null for none
 * @param json             when not null, the output is a JSON document of this constraint (needs eos ids)
 * @param overlay          the skill and LoRA adapter the request runs with ({@link Graph#overlay}; null: the backbone)
 */
public record GenerationRequest(int[] prompt, int maxTokens, SamplingParams sampling, Set<Integer> eos,
                                List<String> stops, float presencePenalty, float frequencyPenalty,
                                Map<Integer, Float> logitBias, int topLogprobs, Duration timeout, TokenSink sink,
                                JsonConstraint json, Overlay overlay) {

    public GenerationRequest {
        if (prompt == null || prompt.length == 0) throw new GenerationException.BadInput("empty prompt: at least one token id is needed");
        if (maxTokens < 0) throw new GenerationException.BadInput("max tokens must be >= 0, got " + maxTokens);
        if (topLogprobs < -1) throw new GenerationException.BadInput("top logprobs must be >= -1, got " + topLogprobs);
        if (Float.isNaN(presencePenalty) || Float.isNaN(frequencyPenalty)) throw new GenerationException.BadInput("a penalty is NaN");
        prompt = prompt.clone();
        eos = Set.copyOf(eos);
        stops = List.copyOf(stops);
        logitBias = Map.copyOf(logitBias);
        if (sink == null) throw new IllegalArgumentException("a request needs a sink");
        if (json != null && eos.isEmpty()) throw new GenerationException.BadInput("JSON output needs end-of-sequence ids to end the document");
        if (overlay == null) overlay = Overlay.NONE;
    }

    /** A request on the backbone (no skill, no adapter). */
    public GenerationRequest(int[] prompt, int maxTokens, SamplingParams sampling, Set<Integer> eos, List<String> stops,
                             float presencePenalty, float frequencyPenalty, Map<Integer, Float> logitBias, int topLogprobs,
                             Duration timeout, TokenSink sink, JsonConstraint json) {
        this(prompt, maxTokens, sampling, eos, stops, presencePenalty, frequencyPenalty, logitBias, topLogprobs, timeout, sink,
                json, Overlay.NONE);
    }

    /** A request with no stops, penalties, bias, log-probabilities or timeout. */
    public static GenerationRequest of(int[] prompt, int maxTokens, SamplingParams sampling, Set<Integer> eos, TokenSink sink) {
        return new GenerationRequest(prompt, maxTokens, sampling, eos, List.of(), 0f, 0f, Map.of(), -1, null, sink, null);
    }

    public GenerationRequest withStops(List<String> s) {
        return new GenerationRequest(prompt, maxTokens, sampling, eos, s, presencePenalty, frequencyPenalty, logitBias, topLogprobs, timeout, sink, json, overlay);
    }

    public GenerationRequest withTimeout(Duration t) {
        return new GenerationRequest(prompt, maxTokens, sampling, eos, stops, presencePenalty, frequencyPenalty, logitBias, topLogprobs, t, sink, json, overlay);
    }

    public GenerationRequest withJson(JsonConstraint j) {
        return new GenerationRequest(prompt, maxTokens, sampling, eos, stops, presencePenalty, frequencyPenalty, logitBias, topLogprobs, timeout, sink, j, overlay);
    }

    public GenerationRequest withOverlay(Overlay o) {
        return new GenerationRequest(prompt, maxTokens, sampling, eos, stops, presencePenalty, frequencyPenalty, logitBias, topLogprobs, timeout, sink, json, o);
    }

    public GenerationRequest withSink(TokenSink s) {
        return new GenerationRequest(prompt, maxTokens, sampling, eos, stops, presencePenalty, frequencyPenalty, logitBias, topLogprobs, timeout, s, json, overlay);
    }
}
