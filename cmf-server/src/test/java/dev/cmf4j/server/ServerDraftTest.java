package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Scheduler;
import org.junit.jupiter.api.Test;

import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static dev.cmf4j.server.ServerFixture.json;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A server drafting with the bundled model through an int8 KV cache (speculative decoding in the scheduler): six
 * concurrent greedy chat completions, streamed and not, each give the reply the engine alone gives, and /metrics
 * counts the drafted and accepted tokens.
 */
class ServerDraftTest {
    static final String[] QUESTIONS = {"What does ls do?", "How do I list files?", "Explain grep.", "What is tar?",
            "Name a text editor.", "What is a shell?"};

    @Test void draftedRepliesEqualTheEnginesAlone() throws Exception {
        Model draft = Model.open(ServerFixture.bundled(), null, new CpuBackend(), List.of(), h -> new AttentionMemory(null, KvType.Q8));
        try (ServerFixture s = new ServerFixture(ServerConfig.local(0), Scheduler.Config.of(6, 512, 8), draft, 4)) {
            List<CompletableFuture<HttpResponse<String>>> replies = new ArrayList<>();
            for (int i = 0; i < QUESTIONS.length; i++) {
                var body = Map.of("messages", List.of(Map.of("role", "user", "content", QUESTIONS[i])), "max_tokens", 24,
                        "temperature", 0, "stream", i % 2 == 1);
                replies.add(s.http.sendAsync(s.request("/v1/chat/completions").header("Content-Type", "application/json")
                        .POST(java.net.http.HttpRequest.BodyPublishers.ofString(ServerFixture.JSON.writeValueAsString(body))).build(),
                        HttpResponse.BodyHandlers.ofString()));
            }
            for (int i = 0; i < QUESTIONS.length; i++) {
                HttpResponse<String> r = replies.get(i).get();
                assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
                String text;
                if (i % 2 == 1) {
                    StringBuilder sb = new StringBuilder();
                    for (String line : r.body().split("\n"))
                        if (line.startsWith("data: {")) {
                            JsonNode d = ServerFixture.JSON.readTree(line.substring(6)).at("/choices/0/delta/content");
                            if (!d.isMissingNode() && !d.isNull()) sb.append(d.asText());
                        }
                    text = sb.toString();
                } else {
                    text = json(r).at("/choices/0/message/content").asText();
                }
                assertThat(text).as(QUESTIONS[i]).isEqualTo(s.greedyChat(List.of(Map.of("role", "user", "content", QUESTIONS[i])), 24));
            }
            String metrics = s.get("/metrics").body();
            long drafted = metric(metrics, "cmf_draft_tokens_total"), accepted = metric(metrics, "cmf_draft_tokens_accepted_total");
            System.out.printf("server with a draft: %d drafted, %d accepted%n", drafted, accepted);
            assertThat(drafted).isPositive();
            assertThat(accepted).isPositive().isLessThanOrEqualTo(drafted);
        }
    }

    static long metric(String text, String name) {
        for (String line : text.split("\n"))
            if (line.startsWith(name + " ") || line.startsWith(name + "{")) return (long) Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
        throw new AssertionError(name + " not in /metrics:\n" + text);
    }
}
