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

/** LangChain4j's OpenAI module, blocking and streaming, against a running server with an API key. */
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

    @Test void aWrongKeyIsTheClientsAuthenticationError() {
        var model = OpenAiChatModel.builder().baseUrl(s.base() + "/v1").apiKey("not-the-key").modelName("default").maxTokens(4).maxRetries(0).build();
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> model.chat("hi"))
                .hasMessageContaining("Incorrect API key");
    }
}
