package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.runtime.Scheduler;
import org.junit.jupiter.api.Test;

import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * 64 streaming clients at once on the CPU against the bundled model, all in the batch together (64 places): every
 * stream completes, and each greedy reply equals what its prompt gives alone.
 */
class ManyClientsTest {
    static final List<String> QUESTIONS = List.of("What does grep do?", "What does ls do?", "How do I copy a file?",
            "What is tar?", "Explain chmod.", "What does sed do?", "How do I list processes?", "What is a pipe?");

    @Test void sixtyFourStreamingClientsEachGetTheirGreedyReply() throws Exception {
        try (ServerFixture s = new ServerFixture(ServerConfig.local(0), new Scheduler.Config(64, 256, 64, 128, 16, 64))) {
            List<String> alone = new ArrayList<>();
            for (String q : QUESTIONS) alone.add(s.greedyChat(List.of(Map.of("role", "user", "content", q)), 8));

            List<CompletableFuture<HttpResponse<String>>> streams = new ArrayList<>();
            for (int i = 0; i < 64; i++) {
                Map<String, Object> body = Map.of("messages", List.of(Map.of("role", "user", "content", QUESTIONS.get(i % QUESTIONS.size()))),
                        "max_tokens", 8, "temperature", 0, "stream", true);
                streams.add(s.http.sendAsync(s.request("/v1/chat/completions").header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofString(ServerFixture.JSON.writeValueAsString(body))).build(), HttpResponse.BodyHandlers.ofString()));
            }
            for (int i = 0; i < 64; i++) {
                HttpResponse<String> r = streams.get(i).get();
                assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
                List<String> events = OpenAiServerTest.events(r.body());
                assertThat(events.getLast()).isEqualTo("[DONE]");
                StringBuilder text = new StringBuilder();
                String finish = null;
                for (String e : events.subList(0, events.size() - 1)) {
                    for (JsonNode ch : ServerFixture.JSON.readTree(e).get("choices")) {
                        text.append(ch.at("/delta/content").asText(""));
                        if (!ch.get("finish_reason").isNull()) finish = ch.get("finish_reason").asText();
                    }
                }
                assertThat(text.toString()).as("client " + i).isEqualTo(alone.get(i % QUESTIONS.size()));
                assertThat(finish).isIn("stop", "length");
            }
            assertThat(s.get("/metrics").body()).contains("cmf_requests_running 0");
            assertThat(ServerFixture.json(s.get("/status")).get("sequences")).isEmpty();
        }
    }
}
