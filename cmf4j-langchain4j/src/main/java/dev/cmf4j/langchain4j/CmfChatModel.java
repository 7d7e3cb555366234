package dev.cmf4j.langchain4j;

import dev.cmf4j.api.Reply;
import dev.langchain4j.model.ModelProvider;
import dev.langchain4j.model.chat.Capability;
import dev.langchain4j.model.chat.ChatModel;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.response.ChatResponse;

import java.util.Set;

/**
 * A LangChain4j {@link ChatModel} running a CMF model in this JVM. Messages go through the model's own chat template;
 * tools ({@code ToolSpecification}s) are rendered by it and calls parsed back into {@code ToolExecutionRequest}s
 * ({@code ToolChoice.REQUIRED} is enforced while sampling); a JSON response format (with or without a schema) is
 * enforced while sampling. Thread-safe: concurrent calls are batched by the model's scheduler.
 *
 * <pre>{@code
 * try (CmfChatModel model = CmfChatModel.builder().modelPath(Path.of("model.cmf")).temperature(0.7).maxTokens(200).build()) {
 *     String answer = model.chat("What does tar do?");
 * }
 * }</pre>
 */
public final class CmfChatModel implements ChatModel, AutoCloseable {
    private final CmfModelHolder holder;

    private CmfChatModel(CmfModelHolder holder) { this.holder = holder; }

    public static Builder builder() { return new Builder(); }

    public static final class Builder extends CmfBuilder<Builder> {
        /** Opens the model (when given a path). */
        public CmfChatModel build() { return new CmfChatModel(holder()); }
    }

    @Override public ChatResponse doChat(ChatRequest request) {
        RequestMapping m = RequestMapping.of(request, holder.model, holder.sampling);
        Reply r = m.chat().complete(m.messages(), m.sampling());
        return RequestMapping.response(r, holder.model.name());
    }

    @Override public ChatRequestParameters defaultRequestParameters() { return holder.defaults(); }

    @Override public Set<Capability> supportedCapabilities() { return Set.of(Capability.RESPONSE_FORMAT_JSON_SCHEMA); }

    @Override public ModelProvider provider() { return ModelProvider.OTHER; }

    /** Closes the model if this chat model opened it. */
    @Override public void close() { holder.close(); }
}
