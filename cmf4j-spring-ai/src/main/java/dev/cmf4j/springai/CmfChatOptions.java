package dev.cmf4j.springai;

import dev.cmf4j.api.Chat;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.model.tool.DefaultToolCallingChatOptions;
import org.springframework.ai.model.tool.StructuredOutputChatOptions;
import org.springframework.ai.tool.ToolCallback;

import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Spring AI chat options for a cmf4j model: the portable ones (temperature, top-p, top-k, max tokens, stops,
 * penalties, tool callbacks), an output JSON schema, and what only cmf4j has: min-p, the repetition penalty, a seed
 * and the tool choice ({@link Chat.ToolChoice#REQUIRED} makes the output one tool call, enforced while sampling).
 * Unset values fall back to the chat model's defaults.
 *
 * <pre>{@code
 * CmfChatOptions o = CmfChatOptions.builder().temperature(0.7).maxTokens(200).toolChoice(Chat.ToolChoice.REQUIRED).build();
 * }</pre>
 */
public class CmfChatOptions extends DefaultToolCallingChatOptions implements StructuredOutputChatOptions {
    private final Double minP, repetitionPenalty;
    private final Long seed;
    private final Chat.ToolChoice toolChoice;
    private final String outputSchema;

    protected CmfChatOptions(ChatOptions base, List<ToolCallback> toolCallbacks, Map<String, Object> toolContext, Builder b) {
        super(toolCallbacks, toolContext, base.getModel(), base.getFrequencyPenalty(), base.getMaxTokens(), base.getPresencePenalty(),
                base.getStopSequences(), base.getTemperature(), base.getTopK(), base.getTopP());
        this.minP = b.minP;
        this.repetitionPenalty = b.repetitionPenalty;
        this.seed = b.seed;
        this.toolChoice = b.toolChoice;
        this.outputSchema = b.outputSchema;
    }

    public static Builder builder() { return new Builder(); }

    public Double getMinP() { return minP; }

    public Double getRepetitionPenalty() { return repetitionPenalty; }

    public Long getSeed() { return seed; }

    public Chat.ToolChoice getToolChoice() { return toolChoice; }

    /** A JSON Schema the reply must follow (enforced while sampling), or null. */
    @Override public String getOutputSchema() { return outputSchema; }

    @Override public Builder mutate() {
        Builder b = new Builder().model(getModel()).frequencyPenalty(getFrequencyPenalty()).maxTokens(getMaxTokens())
                .presencePenalty(getPresencePenalty()).stopSequences(getStopSequences()).temperature(getTemperature())
                .topK(getTopK()).topP(getTopP()).toolCallbacks(getToolCallbacks()).toolContext(getToolContext());
        return b.minP(minP).repetitionPenalty(repetitionPenalty).seed(seed).toolChoice(toolChoice).outputSchema(outputSchema);
    }

    @Override public boolean equals(Object o) {
        return o instanceof CmfChatOptions c && super.equals(o) && Objects.equals(minP, c.minP)
                && Objects.equals(repetitionPenalty, c.repetitionPenalty) && Objects.equals(seed, c.seed)
                && toolChoice == c.toolChoice && Objects.equals(outputSchema, c.outputSchema);
    }

    @Override public int hashCode() { return Objects.hash(super.hashCode(), minP, repetitionPenalty, seed, toolChoice, outputSchema); }

    /** Builds {@link CmfChatOptions}; {@link #combineWith} takes the other builder's set values over these. */
    public static class Builder extends DefaultToolCallingChatOptions.Builder<Builder> implements StructuredOutputChatOptions.Builder<Builder> {
        protected Double minP, repetitionPenalty;
        protected Long seed;
        protected Chat.ToolChoice toolChoice;
        protected String outputSchema;

        public Builder minP(Double p) { this.minP = p; return this; }

        public Builder repetitionPenalty(Double r) { this.repetitionPenalty = r; return this; }

        public Builder seed(Long s) { this.seed = s; return this; }

        public Builder toolChoice(Chat.ToolChoice c) { this.toolChoice = c; return this; }

        @Override public Builder outputSchema(String schema) { this.outputSchema = schema; return this; }

        @Override public Builder clone() {
            Builder b = super.clone();
            b.minP = minP;
            b.repetitionPenalty = repetitionPenalty;
            b.seed = seed;
            b.toolChoice = toolChoice;
            b.outputSchema = outputSchema;
            return b;
        }

        @Override public Builder combineWith(ChatOptions.Builder<?> other) {
            super.combineWith(other);
            if (other instanceof Builder o) {
                if (o.minP != null) minP = o.minP;
                if (o.repetitionPenalty != null) repetitionPenalty = o.repetitionPenalty;
                if (o.seed != null) seed = o.seed;
                if (o.toolChoice != null) toolChoice = o.toolChoice;
                if (o.outputSchema != null) outputSchema = o.outputSchema;
            }
            return this;
        }

        @Override public CmfChatOptions build() {
            ChatOptions base = ChatOptions.builder().model(model).frequencyPenalty(frequencyPenalty).maxTokens(maxTokens)
                    .presencePenalty(presencePenalty).stopSequences(stopSequences).temperature(temperature).topK(topK).topP(topP).build();
            return new CmfChatOptions(base, toolCallbacks, toolContext, this);
        }
    }
}
