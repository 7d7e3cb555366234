package dev.cmf4j.springai;

import dev.cmf4j.api.ChatEvent;
import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.ModelOptions;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import reactor.adapter.JdkFlowAdapter;
import reactor.core.publisher.Flux;

/**
 * A Spring AI {@link ChatModel} running a CMF model in this JVM, blocking ({@link #call}) and streamed
 * ({@link #stream}: a piece of text per response as it is generated, tool-call blocks never shown as text, then a
 * last response with no text and the finish reason, usage and any tool calls, so the pieces' texts join to the reply). Greedy unless the options say otherwise; a
 * prompt's {@link ChatOptions} override the defaults ({@link CmfChatOptions} for what only cmf4j has). Tool calls
 * come back as {@code AssistantMessage.ToolCall}s for the caller (Spring AI's ChatClient) to run.
 *
 * <pre>{@code
 * try (CmfChatModel chat = CmfChatModel.open("model.cmf", ModelOptions.defaults(), CmfChatOptions.builder().maxTokens(200).build())) {
 *     String answer = chat.call("What does tar do?");
 * }
 * }</pre>
 */
public final class CmfChatModel implements ChatModel, AutoCloseable {
    private final CmfModel model;
    private final boolean owned;
    private final CmfChatOptions defaults;

    /** Over a model its owner keeps open (and closes). */
    public CmfChatModel(CmfModel model, CmfChatOptions defaults) {
        this(model, false, defaults);
    }

    private CmfChatModel(CmfModel model, boolean owned, CmfChatOptions defaults) {
        this.model = model;
        this.owned = owned;
        this.defaults = defaults == null ? CmfChatOptions.builder().build() : defaults;
    }

    /** Opens {@code model} (a path or {@code hf://ORG/REPO}); the chat model closes it. */
    public static CmfChatModel open(String model, ModelOptions options, CmfChatOptions defaults) {
        return new CmfChatModel(Cmf.open(model, options == null ? ModelOptions.defaults() : options), true, defaults);
    }

    /** The open model (to share with other adapters or use through the cmf4j API). */
    public CmfModel model() { return model; }

    @Override public ChatResponse call(Prompt prompt) {
        PromptMapping m = PromptMapping.of(prompt, model, defaults);
        return PromptMapping.response(m.chat().complete(m.messages(), m.sampling()), model.name());
    }

    /** Generates when subscribed; cancelling the subscription ends the generation before the model's next step. */
    @Override public Flux<ChatResponse> stream(Prompt prompt) {
        PromptMapping m = PromptMapping.of(prompt, model, defaults);
        return JdkFlowAdapter.flowPublisherToFlux(m.chat().publisher(m.messages(), m.sampling()))
                .map(e -> switch (e) {
                    case ChatEvent.Text t -> PromptMapping.piece(t.text(), model.name());
                    case ChatEvent.Done d -> PromptMapping.end(d.reply(), model.name());
                });
    }

    @Override public ChatOptions getDefaultOptions() { return defaults.mutate().build(); }

    /** Closes the model if this chat model opened it. */
    @Override public void close() { if (owned) model.close(); }
}
