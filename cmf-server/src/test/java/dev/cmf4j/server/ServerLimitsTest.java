package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.runtime.Scheduler;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * One place and a queue of one, and a one-second timeout (Java's HttpClient): past the queue a 429 with Retry-After,
 * past the timeout a 408 (whole) or an error event before {@code [DONE]} (streamed); and a chat's next turn reuses
 * the cached prefix of the last.
 */
class ServerLimitsTest {
    static ServerFixture s;

    @BeforeAll static void start() {
        s = new ServerFixture(ServerConfig.local(0), new Scheduler.Config(1, 1024, 1, 64, 64, 2));
    }

    @AfterAll static void stop() { if (s != null) s.close(); }

    /** A long generation: every end-of-sequence id banned, so only the budget, a cancel or the timeout ends it. */
    static Map<String, Object> endless(ServerFixture f, boolean stream) {
        Map<String, Integer> noEos = new java.util.HashMap<>();
        for (int id : f.model.codec().eosIds()) noEos.put(String.valueOf(id), -100);
        return Map.of("prompt", "The", "max_tokens", 1000, "stream", stream, "logit_bias", noEos);
    }

    static int status(String field) throws Exception { return ServerFixture.json(s.get("/status")).get(field).asInt(); }

    static void await(java.util.concurrent.Callable<Boolean> what) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (!what.call()) {
            assertThat(System.nanoTime()).as("waited 20 s").isLessThan(deadline);
            Thread.sleep(5);
        }
    }

    @Test void pastTheQueueA429WithRetryAfter() throws Exception {
        var running = s.http.send(s.request("/v1/completions").POST(HttpRequest.BodyPublishers.ofString(
                ServerFixture.JSON.writeValueAsString(endless(s, true)))).build(), HttpResponse.BodyHandlers.ofInputStream());
        BufferedReader stream = new BufferedReader(new InputStreamReader(running.body(), StandardCharsets.UTF_8));
        assertThat(stream.readLine()).startsWith("data: ");
        await(() -> status("running") == 1);
        CompletableFuture<HttpResponse<String>> waiting = s.http.sendAsync(s.request("/v1/completions").POST(
                HttpRequest.BodyPublishers.ofString("{\"prompt\": \"The\", \"max_tokens\": 3}")).build(), HttpResponse.BodyHandlers.ofString());
        await(() -> status("waiting") == 1);
        var refused = s.post("/v1/completions", Map.of("prompt", "The", "max_tokens", 2));
        assertThat(refused.statusCode()).isEqualTo(429);
        assertThat(refused.headers().firstValue("Retry-After")).hasValue("1");
        JsonNode e = ServerFixture.json(refused).get("error");
        assertThat(e.get("code").asText()).isEqualTo("rate_limit_exceeded");
        await(() -> s.get("/metrics").body().contains("cmf_http_responses_total{code=\"429\"} 1"));   // counted after sending
        stream.close();   // the running client leaves: the waiting request gets the place
        var served = waiting.get();
        assertThat(served.statusCode()).as(served.body()).isEqualTo(200);
        assertThat(ServerFixture.json(served).at("/usage/completion_tokens").asInt()).isEqualTo(3);
        await(() -> status("running") == 0 && status("waiting") == 0);
    }

    @Test void pastTheTimeoutA408OrAnErrorEventBeforeDone() throws Exception {
        try (ServerFixture t = new ServerFixture(ServerConfig.local(0).withTimeout(Duration.ofSeconds(1)), new Scheduler.Config(2, 1024, 4, 64, 64, 2))) {
            CompletableFuture<HttpResponse<String>> whole = t.http.sendAsync(t.request("/v1/completions").POST(
                    HttpRequest.BodyPublishers.ofString(ServerFixture.JSON.writeValueAsString(endless(t, false)))).build(), HttpResponse.BodyHandlers.ofString());
            var streamed = t.post("/v1/completions", endless(t, true));
            List<String> events = new ArrayList<>();
            for (String line : streamed.body().split("\n")) if (line.startsWith("data: ")) events.add(line.substring(6));
            assertThat(events.getLast()).isEqualTo("[DONE]");
            JsonNode err = ServerFixture.JSON.readTree(events.get(events.size() - 2));
            assertThat(err.at("/error/code").asText()).isEqualTo("timeout");
            assertThat(events.size()).as("stopped well before 1000 tokens").isLessThan(1000);
            var late = whole.get();
            assertThat(late.statusCode()).as(late.body()).isEqualTo(408);
            assertThat(ServerFixture.json(late).at("/error/type").asText()).isEqualTo("timeout");
            assertThat(t.post("/v1/completions", Map.of("prompt", "The", "max_tokens", 2)).statusCode()).as("the server goes on").isEqualTo(200);
        }
    }

    @Test void aChatsNextTurnPrefillsOnlyItsNewTokens() throws Exception {
        List<Map<String, Object>> turn = new ArrayList<>(List.of(Map.of("role", "user", "content", "What does tar do?")));
        var r = s.post("/v1/chat/completions", Map.of("messages", turn, "max_tokens", 12, "temperature", 0));
        assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
        var first = ServerFixture.json(r);
        String reply = first.at("/choices/0/message/content").asText();
        turn.add(Map.of("role", "assistant", "content", reply));
        turn.add(Map.of("role", "user", "content", "And gzip?"));
        var second = ServerFixture.json(s.post("/v1/chat/completions", Map.of("messages", turn, "max_tokens", 8, "temperature", 0)));
        int cached = second.at("/usage/prompt_tokens_details/cached_tokens").asInt();
        assertThat(cached).as("the first turn's prompt and reply stay cached")
                .isGreaterThanOrEqualTo(first.at("/usage/prompt_tokens").asInt());
        assertThat(cached).isLessThan(second.at("/usage/prompt_tokens").asInt());
        assertThat(second.at("/choices/0/message/content").asText()).isEqualTo(s.greedyChat(turn, 8));
    }
}
