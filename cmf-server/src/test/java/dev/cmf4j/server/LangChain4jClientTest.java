package dev.cmf4j.server;

import dev.cmf4j.runtime.Scheduler;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.chat.response.StreamingChatResponseHandler;
import dev.langchain4j.model.openai.OpenAiChatModel;
import dev.langchain4j.model.openai.OpenAiStreamingChatModel;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** LangChain4j's OpenAI module, blocking and streaming (text and a tool call), against a running server with an API key. */
class LangChain4jClientTest {
    static ServerFixture s;
    static final String QUESTION = "What does grep do?";

    @BeforeAll static void start() {
        s = new ServerFixture(ServerConfig.local(0).withApiKey("lc4j-key"), new Scheduler.Config(2, 512, 8, 64, 64, 2));
    }

    @AfterAll static void stop() { if (s != null) s.close(); }

    @Test void chatModelGetsTheGreedyReply() {
        var model = OpenAiChatModel.builder().baseUrl(s.base() + "/v1").apiKey("lc4j-key").modelName("default")
                .temperature(0.0).maxTokens(12).build();
        ChatResponse r = model.chat(dev.langchain4j.data.message.UserMessage.from(QUESTION));
        assertThat(r.aiMessage().text()).isEqualTo(s.greedyChat(List.of(Map.of("role", "user", "content", QUESTION)), 12));
        assertThat(r.tokenUsage().inputTokenCount()).isEqualTo(s.model.codec().encodeChat(List.of(Map.of("role", "user", "content", QUESTION)), Map.of()).length);
        assertThat(r.tokenUsage().outputTokenCount()).isBetween(1, 12);
    }

    @Test void streamingChatModelStreamsTheSameReply() throws Exception {
        var model = OpenAiStreamingChatModel.builder().baseUrl(s.base() + "/v1").apiKey("lc4j-key").modelName("default")
                .temperature(0.0).maxTokens(12).build();
        StringBuilder partial = new StringBuilder();
        CompletableFuture<ChatResponse> done = new CompletableFuture<>();
        model.chat(QUESTION, new StreamingChatResponseHandler() {
            @Override public void onPartialResponse(String piece) { partial.append(piece); }

            @Override public void onCompleteResponse(ChatResponse r) { done.complete(r); }

            @Override public void onError(Throwable t) { done.completeExceptionally(t); }
        });
        ChatResponse r = done.get(60, TimeUnit.SECONDS);
        String want = s.greedyChat(List.of(Map.of("role", "user", "content", QUESTION)), 12);
        assertThat(partial.toString()).isEqualTo(want);
        assertThat(r.aiMessage().text()).isEqualTo(want);
    }

    /**
     * A required tool: the call comes back as LangChain4j's tool execution request, blocking and streamed (100 tokens:
     * the shortest call, tags included, is 73 characters, so it always completes).
     */
    @Test void aRequiredToolComesBackAsAToolExecutionRequest() throws Exception {
        var tool = dev.langchain4j.agent.tool.ToolSpecification.builder().name("get_manual").description("Shows a command's manual page")
                .parameters(dev.langchain4j.model.chat.request.json.JsonObjectSchema.builder().addStringProperty("command").required("command").build())
                .build();
        var request = dev.langchain4j.model.chat.request.ChatRequest.builder()
                .messages(dev.langchain4j.data.message.UserMessage.from(QUESTION)).toolSpecifications(tool)
                .toolChoice(dev.langchain4j.model.chat.request.ToolChoice.REQUIRED).build();
        var model = OpenAiChatModel.builder().baseUrl(s.base() + "/v1").apiKey("lc4j-key").modelName("default")
                .temperature(0.7).maxTokens(100).build();
        var streaming = OpenAiStreamingChatModel.builder().baseUrl(s.base() + "/v1").apiKey("lc4j-key").modelName("default")
                .temperature(0.7).maxTokens(100).build();
        CompletableFuture<ChatResponse> streamed = new CompletableFuture<>();
        streaming.chat(request, new StreamingChatResponseHandler() {
            @Override public void onPartialResponse(String piece) {}

            @Override public void onCompleteResponse(ChatResponse r) { streamed.complete(r); }

            @Override public void onError(Throwable t) { streamed.completeExceptionally(t); }
        });
        for (ChatResponse r : new ChatResponse[] {model.chat(request), streamed.get(60, TimeUnit.SECONDS)}) {
            assertThat(r.aiMessage().hasToolExecutionRequests()).as(r.toString()).isTrue();
            var call = r.aiMessage().toolExecutionRequests().getFirst();
            assertThat(call.name()).isEqualTo("get_manual");
            assertThat(ServerFixture.JSON.readTree(call.arguments()).get("command").isTextual()).as(call.arguments()).isTrue();
        }
    }

    @Test void aWrongKeyIsTheClientsAuthenticationError() {
        var model = OpenAiChatModel.builder().baseUrl(s.base() + "/v1").apiKey("not-the-key").modelName("default").maxTokens(4).maxRetries(0).build();
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> model.chat("hi"))
                .hasMessageContaining("Incorrect API key");
    }
}
