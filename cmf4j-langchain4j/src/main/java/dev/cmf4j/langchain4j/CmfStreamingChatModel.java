package dev.cmf4j.langchain4j;

import dev.cmf4j.api.Reply;
import dev.langchain4j.model.ModelProvider;
import dev.langchain4j.model.chat.Capability;
import dev.langchain4j.model.chat.StreamingChatModel;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.response.CompleteToolCall;
import dev.langchain4j.model.chat.response.StreamingChatResponseHandler;

import java.util.Set;

/**
 * A LangChain4j {@link StreamingChatModel} running a CMF model in this JVM: each request runs on its own virtual
 * thread, text goes to {@code onPartialResponse} as it is generated (tool-call blocks never shown as text), each tool
 * call to {@code onCompleteToolCall} once whole, then {@code onCompleteResponse}; any failure to {@code onError}.
 * Tools and JSON output as {@link CmfChatModel}.
 *
 * <pre>{@code
 * CmfStreamingChatModel model = CmfStreamingChatModel.builder().modelPath(Path.of("model.cmf")).build();
 * model.chat("What does tar do?", new StreamingChatResponseHandler() {
 *     public void onPartialResponse(String text) { System.out.print(text); }
 *     public void onCompleteResponse(ChatResponse response) { System.out.println(); }
 *     public void onError(Throwable error) { error.printStackTrace(); }
 * });
 * }</pre>
 */
public final class CmfStreamingChatModel implements StreamingChatModel, AutoCloseable {
    private final CmfModelHolder holder;

    private CmfStreamingChatModel(CmfModelHolder holder) { this.holder = holder; }

    public static Builder builder() { return new Builder(); }

    public static final class Builder extends CmfBuilder<Builder> {
        /** Opens the model (when given a path). */
        public CmfStreamingChatModel build() { return new CmfStreamingChatModel(holder()); }
    }

    @Override public void doChat(ChatRequest request, StreamingChatResponseHandler handler) {
        RequestMapping m;
        try {
            m = RequestMapping.of(request, holder.model, holder.sampling);
        } catch (RuntimeException e) {
            handler.onError(e);
            return;
        }
        Thread.ofVirtual().name("cmf-langchain4j-stream").start(() -> {
            Reply r;
            try {
                r = m.chat().stream(m.messages(), m.sampling(), handler::onPartialResponse);
            } catch (RuntimeException e) {
                handler.onError(e);
                return;
            }
            for (int i = 0; i < r.toolCalls().size(); i++) {
                var c = r.toolCalls().get(i);
                handler.onCompleteToolCall(new CompleteToolCall(i, dev.langchain4j.agent.tool.ToolExecutionRequest.builder()
                        .id(c.id()).name(c.name()).arguments(c.argumentsJson()).build()));
            }
            handler.onCompleteResponse(RequestMapping.response(r, holder.model.name()));
        });
    }

    @Override public ChatRequestParameters defaultRequestParameters() { return holder.defaults(); }

    @Override public Set<Capability> supportedCapabilities() { return Set.of(Capability.RESPONSE_FORMAT_JSON_SCHEMA); }

    @Override public ModelProvider provider() { return ModelProvider.OTHER; }

    /** Closes the model if this chat model opened it; a stream still running ends in {@code onError}. */
    @Override public void close() { holder.close(); }
}
