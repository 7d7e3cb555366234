package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.runtime.Scheduler;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/** The HTTP API through Java's HttpClient against a running server on the bundled model. */
class OpenAiServerTest {
    static ServerFixture s;
    static final AtomicInteger healthWhileLoading = new AtomicInteger();
    static final List<Map<String, Object>> GREP = List.of(Map.of("role", "user", "content", "What does grep do?"));

    @BeforeAll static void start() {
        ServerConfig cfg = ServerConfig.local(0).withApiKey("test-key").withMaxBodyBytes(64 << 10);
        s = new ServerFixture(cfg, new Scheduler.Config(4, 512, 8, 64, 16, 4), port -> {
            try (var http = java.net.http.HttpClient.newHttpClient()) {
                var r = http.send(HttpRequest.newBuilder(java.net.URI.create("http://127.0.0.1:" + port + "/health")).build(),
                        HttpResponse.BodyHandlers.ofString());
                healthWhileLoading.set(r.statusCode());
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
    }

    @AfterAll static void stop() { if (s != null) s.close(); }

    static Map<String, Object> chat(Object... kv) {
        Map<String, Object> m = new HashMap<>();
        m.put("model", "default");
        m.put("messages", GREP);
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    /** The {@code data:} payloads of an SSE body, in order. */
    static List<String> events(String body) {
        List<String> out = new ArrayList<>();
        for (String line : body.split("\n")) if (line.startsWith("data: ")) out.add(line.substring(6));
        return out;
    }

    @Test void healthIs503WhileLoadingThen200WithoutAKey() throws Exception {
        assertThat(healthWhileLoading.get()).isEqualTo(503);
        var r = s.http.send(HttpRequest.newBuilder(java.net.URI.create(s.base() + "/health")).build(), HttpResponse.BodyHandlers.ofString());
        assertThat(r.statusCode()).isEqualTo(200);
        assertThat(ServerFixture.json(r).get("status").asText()).isEqualTo("ok");
    }

    @Test void greedyChatEqualsGenerateAndTheStreamSaysTheSame() throws Exception {
        String want = s.greedyChat(GREP, 16);
        var r = s.http.send(s.request("/v1/chat/completions").header("X-Request-Id", "my-req-1")
                .POST(HttpRequest.BodyPublishers.ofString(ServerFixture.JSON.writeValueAsString(chat("temperature", 0, "max_tokens", 16)))).build(),
                HttpResponse.BodyHandlers.ofString());
        assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
        assertThat(r.headers().firstValue("X-Request-Id")).hasValue("my-req-1");
        JsonNode o = ServerFixture.json(r);
        assertThat(o.get("object").asText()).isEqualTo("chat.completion");
        assertThat(o.at("/choices/0/message/role").asText()).isEqualTo("assistant");
        assertThat(o.at("/choices/0/message/content").asText()).isEqualTo(want);
        int prompt = s.model.codec().encodeChat(GREP, Map.of()).length;
        assertThat(o.at("/usage/prompt_tokens").asInt()).isEqualTo(prompt);
        assertThat(o.at("/usage/total_tokens").asInt()).isEqualTo(prompt + o.at("/usage/completion_tokens").asInt());
        assertThat(o.at("/usage/prompt_tokens_details/cached_tokens").isInt()).isTrue();
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();   // the line is written after the response
        while (s.log.stream().noneMatch(l -> l.startsWith("my-req-1 ")) && System.nanoTime() < deadline) Thread.sleep(10);
        s.awaitLog(l -> l.startsWith("my-req-1 POST /v1/chat/completions 200") && l.contains("prompt=" + prompt) && l.contains("ttft_ms="));

        var st = s.post("/v1/chat/completions", chat("temperature", 0, "max_tokens", 16, "stream", true,
                "stream_options", Map.of("include_usage", true)));
        assertThat(st.statusCode()).isEqualTo(200);
        assertThat(st.headers().firstValue("Content-Type").orElse("")).startsWith("text/event-stream");
        List<String> ev = events(st.body());
        assertThat(ev.getLast()).isEqualTo("[DONE]");
        StringBuilder text = new StringBuilder();
        String finish = null;
        JsonNode usage = null;
        for (String e : ev.subList(0, ev.size() - 1)) {
            JsonNode c = ServerFixture.JSON.readTree(e);
            assertThat(c.get("object").asText()).isEqualTo("chat.completion.chunk");
            if (c.has("usage") && !c.get("usage").isNull()) usage = c.get("usage");
            for (JsonNode ch : c.get("choices")) {
                text.append(ch.at("/delta/content").asText(""));
                if (!ch.get("finish_reason").isNull()) finish = ch.get("finish_reason").asText();
            }
        }
        assertThat(text.toString()).isEqualTo(want);
        assertThat(finish).isIn("stop", "length");
        assertThat(usage).isNotNull();
        assertThat(usage.get("completion_tokens").asInt()).isEqualTo(o.at("/usage/completion_tokens").asInt());
    }

    @Test void textCompletionsWithLogprobsAndNChoices() throws Exception {
        int[] ids = s.model.codec().encode("The ls command");
        var r = s.post("/v1/completions", Map.of("prompt", "The ls command", "max_tokens", 6, "temperature", 0, "logprobs", 2));
        assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
        JsonNode o = ServerFixture.json(r);
        assertThat(o.get("object").asText()).isEqualTo("text_completion");
        assertThat(o.at("/choices/0/text").asText()).isEqualTo(s.greedy(ids, 6));
        JsonNode lp = o.at("/choices/0/logprobs");
        assertThat(lp.get("tokens")).hasSize(o.at("/usage/completion_tokens").asInt());
        for (int i = 0; i < lp.get("token_logprobs").size(); i++) {
            assertThat(lp.get("token_logprobs").get(i).asDouble()).isLessThanOrEqualTo(0);
            assertThat(lp.get("top_logprobs").get(i).size()).isBetween(1, 2);
        }

        var n = s.post("/v1/chat/completions", chat("n", 3, "max_tokens", 5, "temperature", 1.0, "seed", 11, "logprobs", true, "top_logprobs", 2));
        assertThat(n.statusCode()).as(n.body()).isEqualTo(200);
        JsonNode choices = ServerFixture.json(n).get("choices");
        assertThat(choices).hasSize(3);
        for (int i = 0; i < 3; i++) {
            assertThat(choices.get(i).get("index").asInt()).isEqualTo(i);
            JsonNode content = choices.get(i).at("/logprobs/content");
            assertThat(content.size()).isGreaterThan(0);
            assertThat(content.get(0).get("top_logprobs")).hasSize(2);
            assertThat(content.get(0).get("bytes").isArray()).isTrue();
        }
        // the same seed gives the same choices
        var again = s.post("/v1/chat/completions", chat("n", 3, "max_tokens", 5, "temperature", 1.0, "seed", 11, "logprobs", true, "top_logprobs", 2));
        assertThat(ServerFixture.json(again).at("/choices/2/message/content")).isEqualTo(choices.get(2).at("/message/content"));
    }

    @Test void responseFormatJsonSchemaAlwaysParsesAndValidates() throws Exception {
        Map<String, Object> schema = Map.of("type", "object", "properties", Map.of("tool", Map.of("type", "string"),
                "level", Map.of("enum", List.of("low", "high")), "count", Map.of("type", "integer")), "required", List.of("tool", "level"));
        for (boolean stream : new boolean[] {false, true}) {
            var r = s.post("/v1/chat/completions", chat("max_tokens", 40, "temperature", 0.9, "seed", 3, "stream", stream,
                    "response_format", Map.of("type", "json_schema", "json_schema", Map.of("name", "t", "schema", schema))));
            assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
            String content;
            if (stream) {
                StringBuilder b = new StringBuilder();
                for (String e : events(r.body())) if (!e.equals("[DONE]")) for (JsonNode ch : ServerFixture.JSON.readTree(e).get("choices")) b.append(ch.at("/delta/content").asText(""));
                content = b.toString();
            } else {
                content = ServerFixture.json(r).at("/choices/0/message/content").asText();
            }
            JsonNode doc = ServerFixture.JSON.readTree(content);
            assertThat(doc.get("tool").isTextual()).as(content).isTrue();
            assertThat(doc.get("level").asText()).as(content).isIn("low", "high");
            if (doc.has("count")) assertThat(doc.get("count").isIntegralNumber()).as(content).isTrue();
        }
        var obj = s.post("/v1/completions", Map.of("prompt", "JSON:", "max_tokens", 12, "response_format", Map.of("type", "json_object")));
        assertThat(ServerFixture.JSON.readTree(ServerFixture.json(obj).at("/choices/0/text").asText()).isObject()).isTrue();
        var bad = s.post("/v1/chat/completions", chat("response_format", Map.of("type", "json_schema", "json_schema", Map.of("schema", Map.of("anyOf", List.of())))));
        assertThat(bad.statusCode()).isEqualTo(400);
        assertThat(ServerFixture.json(bad).at("/error/param").asText()).isEqualTo("response_format.json_schema.schema");
    }

    static final Map<String, Object> MANUAL_TOOL = Map.of("type", "function", "function", Map.of("name", "get_manual",
            "description", "Shows a command's manual page", "parameters", Map.of("type", "object", "properties",
                    Map.of("command", Map.of("type", "string"), "section", Map.of("type", "integer")), "required", List.of("command"))));

    @Test void aForcedToolChoiceComesBackAsParsedToolCallsStreamedOrNot() throws Exception {
        Map<String, Object> named = Map.of("type", "function", "function", Map.of("name", "get_manual"));
        for (Object choice : new Object[] {named, "required"}) {
            var r = s.post("/v1/chat/completions", chat("tools", List.of(MANUAL_TOOL), "tool_choice", choice, "max_tokens", 80,
                    "temperature", 0.7, "seed", 4));
            assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
            JsonNode c = ServerFixture.json(r).at("/choices/0");
            assertThat(c.get("finish_reason").asText()).as(r.body()).isEqualTo("tool_calls");
            assertThat(c.at("/message/content").isNull()).as(r.body()).isTrue();
            JsonNode call = c.at("/message/tool_calls/0");
            assertThat(call.get("type").asText()).isEqualTo("function");
            assertThat(call.get("id").asText()).startsWith("call_");
            assertThat(call.at("/function/name").asText()).isEqualTo("get_manual");
            JsonNode args = ServerFixture.JSON.readTree(call.at("/function/arguments").asText());
            assertThat(args.get("command").isTextual()).as(args.toString()).isTrue();
        }
        var st = s.post("/v1/chat/completions", chat("tools", List.of(MANUAL_TOOL), "tool_choice", named, "max_tokens", 80,
                "temperature", 0.7, "seed", 5, "stream", true));
        StringBuilder content = new StringBuilder();
        List<JsonNode> calls = new ArrayList<>();
        String finish = null;
        for (String e : events(st.body())) {
            if (e.equals("[DONE]")) continue;
            for (JsonNode ch : ServerFixture.JSON.readTree(e).get("choices")) {
                content.append(ch.at("/delta/content").asText(""));
                for (JsonNode tc : ch.at("/delta/tool_calls")) calls.add(tc);
                if (!ch.get("finish_reason").isNull()) finish = ch.get("finish_reason").asText();
            }
        }
        assertThat(content.toString()).as("the call is never shown as text").doesNotContain("tool_call").isBlank();
        assertThat(calls).hasSize(1);
        assertThat(calls.getFirst().get("index").asInt()).isZero();
        assertThat(calls.getFirst().at("/function/name").asText()).isEqualTo("get_manual");
        assertThat(ServerFixture.JSON.readTree(calls.getFirst().at("/function/arguments").asText()).get("command").isTextual()).isTrue();
        assertThat(finish).isEqualTo("tool_calls");

        var unknown = s.post("/v1/chat/completions", chat("tools", List.of(MANUAL_TOOL), "tool_choice",
                Map.of("type", "function", "function", Map.of("name", "nope"))));
        assertThat(unknown.statusCode()).isEqualTo(400);
        assertThat(ServerFixture.json(unknown).at("/error/param").asText()).isEqualTo("tool_choice");
        assertThat(s.post("/v1/chat/completions", chat("tool_choice", "required")).statusCode()).isEqualTo(400);
    }

    @Test void parallelToolCallsFalseEndsTheGenerationAtTheFirstCallsClosingTag() throws Exception {
        // the bundled model never writes a call by itself, so this checks the parts: the request gets the closing tag as
        // a stop string (the scheduler's stops are tested in SchedulerTest), and what that stop leaves parses as one call
        java.util.function.Function<Map<String, Object>, List<String>> stops = body -> CompletionRequest.parse(
                ServerFixture.JSON.valueToTree(body), true, s.model, 16, ServerFixture.JSON)
                .generations(s.model, null, List.of(c -> {})).getFirst().stops();
        assertThat(stops.apply(chat("tools", List.of(MANUAL_TOOL), "parallel_tool_calls", false, "stop", "END")))
                .containsExactly("END", dev.cmf4j.chat.ToolCallParser.CLOSE);
        assertThat(stops.apply(chat("tools", List.of(MANUAL_TOOL)))).isEmpty();
        assertThat(stops.apply(chat("tools", List.of(MANUAL_TOOL), "parallel_tool_calls", true))).isEmpty();
        assertThat(stops.apply(chat("tools", List.of(MANUAL_TOOL), "parallel_tool_calls", false, "tool_choice", "required")))
                .as("a forced choice is one call by its constraint").isEmpty();
        assertThat(stops.apply(chat("parallel_tool_calls", false))).as("no tools, nothing to cut").isEmpty();

        String two = "Let me look.\n<tool_call>\n{\"name\": \"get_manual\", \"arguments\": {\"command\": \"grep\"}}\n</tool_call>\n"
                + "<tool_call>\n{\"name\": \"get_manual\", \"arguments\": {\"command\": \"egrep\"}}\n</tool_call>";
        String cut = two.substring(0, two.indexOf(dev.cmf4j.chat.ToolCallParser.CLOSE));   // a stop string's text ends before it
        var parsed = dev.cmf4j.chat.ToolCallParser.parse(cut);
        assertThat(parsed.calls()).extracting(dev.cmf4j.chat.ToolCall::argumentsJson).containsExactly("{\"command\": \"grep\"}");
        assertThat(parsed.content()).isEqualTo("Let me look.");
        dev.cmf4j.chat.ToolCallStream stream = new dev.cmf4j.chat.ToolCallStream();
        List<dev.cmf4j.chat.ToolCall> streamed = new ArrayList<>(stream.push(cut).calls());
        streamed.addAll(stream.finish().calls());
        assertThat(streamed).hasSize(1);

        // the model's own answer is untouched when it writes no call, and a wrong type is a 400
        var r = s.post("/v1/chat/completions", chat("tools", List.of(MANUAL_TOOL), "parallel_tool_calls", false, "temperature", 0, "max_tokens", 16));
        assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
        assertThat(ServerFixture.json(r).at("/choices/0/message/content").asText()).isEqualTo(s.greedyChat(GREP, 16));
        var bad = s.post("/v1/chat/completions", chat("tools", List.of(MANUAL_TOOL), "parallel_tool_calls", "no"));
        assertThat(bad.statusCode()).isEqualTo(400);
        assertThat(ServerFixture.json(bad).at("/error/param").asText()).isEqualTo("parallel_tool_calls");
    }

    @Test void badRequestsAre400InOpenAisShapeAndTheServerGoesOn() throws Exception {
        record Case(String body, String param, String says) {}
        String longPrompt = "[" + "1,".repeat(600) + "1]";
        List<Case> cases = List.of(
                new Case("{\"messages\": [", null, "could not parse the JSON"),
                new Case("[1, 2]", null, "must be a JSON object"),
                new Case("{\"messages\": \"hi\"}", "messages", "non-empty array"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content", "string or an array"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": \"hot\"}", "temperature", "must be a number"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 0}", "n", "must be in [1, 16]"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 99}", "n", "must be in [1, 16]"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 0}", "max_tokens", "must be in [1, 512]"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 100000}", "max_tokens", "must be in [1, 512]"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stream\": \"yes\"}", "stream", "must be a boolean"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"logit_bias\": {\"99999\": 5}}", "logit_bias", "outside the vocabulary"),
                new Case("{\"prompt\": " + longPrompt + "}", "prompt", "maximum context length is 512"),
                new Case("{\"messages\": [{\"role\": \"user\", \"content\": \"" + "x".repeat(70_000) + "\"}]}", null, "exceeds the server's limit"));
        for (Case c : cases) {
            String path = c.body().startsWith("{\"prompt\"") ? "/v1/completions" : "/v1/chat/completions";
            var r = s.post(path, c.body());
            assertThat(r.statusCode()).as(c.body().substring(0, Math.min(80, c.body().length())) + " -> " + r.body()).isEqualTo(400);
            JsonNode e = ServerFixture.json(r).get("error");
            assertThat(e.get("type").asText()).isEqualTo("invalid_request_error");
            assertThat(e.get("message").asText()).contains(c.says());
            if (c.param() != null) assertThat(e.get("param").asText()).isEqualTo(c.param());
            assertThat(e.has("code")).isTrue();
        }
        assertThat(s.post("/v1/chat/completions", chat("max_tokens", 2)).statusCode()).isEqualTo(200);
    }

    @Test void aMissingOrWrongKeyIs401() throws Exception {
        for (String auth : new String[] {null, "Bearer wrong-key", "Bearer test-key-and-more", "Basic dGVzdC1rZXk="}) {
            var b = HttpRequest.newBuilder(java.net.URI.create(s.base() + "/v1/models"));
            if (auth != null) b.header("Authorization", auth);
            var r = s.http.send(b.build(), HttpResponse.BodyHandlers.ofString());
            assertThat(r.statusCode()).as(String.valueOf(auth)).isEqualTo(401);
            JsonNode e = ServerFixture.json(r).get("error");
            assertThat(e.get("code").asText()).isEqualTo("invalid_api_key");
            assertThat(e.get("type").asText()).isEqualTo("invalid_request_error");
        }
        var ok = s.get("/v1/models");
        assertThat(ok.statusCode()).isEqualTo(200);
        assertThat(ServerFixture.json(ok).at("/data/0/id").asText()).isEqualTo("default");
        assertThat(ServerFixture.json(ok).at("/data/0/max_model_len").asInt()).isEqualTo(512);
    }

    @Test void tokenizeDetokenizeMetricsAndStatus() throws Exception {
        var t = s.post("/tokenize", Map.of("content", "Hello, world"));
        assertThat(t.statusCode()).isEqualTo(200);
        JsonNode tokens = ServerFixture.json(t).get("tokens");
        int[] want = s.model.codec().tokenizer().encodeIds("Hello, world", true);
        assertThat(tokens).hasSize(want.length);
        for (int i = 0; i < want.length; i++) assertThat(tokens.get(i).asInt()).isEqualTo(want[i]);
        var d = s.post("/detokenize", Map.of("tokens", tokens));
        assertThat(ServerFixture.json(d).get("content").asText()).isEqualTo("Hello, world");
        var chatTokens = s.post("/tokenize", Map.of("messages", GREP));
        assertThat(ServerFixture.json(chatTokens).get("count").asInt()).isEqualTo(s.model.codec().encodeChat(GREP, Map.of()).length);

        s.post("/v1/chat/completions", chat("max_tokens", 3));
        var m = s.get("/metrics");
        assertThat(m.statusCode()).isEqualTo(200);
        assertThat(m.headers().firstValue("Content-Type").orElse("")).startsWith("text/plain");
        assertThat(m.body()).contains("# TYPE vllm:num_requests_waiting gauge", "vllm:num_requests_waiting{model_name=\"default\"} 0",
                "vllm:gpu_cache_usage_perc{model_name=\"default\"}", "cmf_generation_tokens_total ", "cmf_prompt_tokens_total ",
                "cmf_requests_running ", "cmf_http_responses_total{code=\"200\"}");
        long generated = Long.parseLong(m.body().lines().filter(l -> l.startsWith("cmf_generation_tokens_total ")).findFirst().orElseThrow().split(" ")[1]);
        assertThat(generated).isGreaterThan(0);

        var st = s.get("/status");
        JsonNode o = ServerFixture.json(st);
        assertThat(o.get("parallel").asInt()).isEqualTo(4);
        assertThat(o.get("sequences").isArray()).isTrue();
    }

    @Test void aClientThatLeavesMidStreamFreesItsSequenceAndOthersGoOn() throws Exception {
        // every end-of-sequence id banned: sampled (its draws depend on which rows share a step, so on timing), the
        // leaver must not reach one and finish by itself before the server sees it leave
        Map<String, Integer> noEos = new java.util.HashMap<>();
        for (int id : s.model.codec().eosIds()) noEos.put(String.valueOf(id), -100);
        String body = ServerFixture.JSON.writeValueAsString(chat("max_tokens", 400, "temperature", 0.8, "seed", 1, "stream", true,
                "min_p", 0.0, "logit_bias", noEos));
        var leaving = s.http.send(s.request("/v1/chat/completions").header("X-Request-Id", "leaver")
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofInputStream());
        CompletableFuture<HttpResponse<String>> other = s.http.sendAsync(s.request("/v1/chat/completions")
                .POST(HttpRequest.BodyPublishers.ofString(ServerFixture.JSON.writeValueAsString(chat("temperature", 0, "max_tokens", 16)))).build(),
                HttpResponse.BodyHandlers.ofString());
        try (InputStream in = leaving.body()) {
            BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
            int data = 0;
            for (String line; data < 4 && (line = r.readLine()) != null; ) if (line.startsWith("data: ")) data++;
            assertThat(data).isEqualTo(4);
            JsonNode live = ServerFixture.json(s.get("/status")).get("sequences");
            assertThat(live.size()).isGreaterThanOrEqualTo(1);
        }   // closes the connection mid-stream
        assertThat(ServerFixture.json(other.get()).at("/choices/0/message/content").asText()).isEqualTo(s.greedyChat(GREP, 16));
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (s.log.stream().noneMatch(l -> l.startsWith("leaver ")) && System.nanoTime() < deadline) Thread.sleep(20);
        String line = s.log.stream().filter(l -> l.startsWith("leaver ")).findFirst().orElseThrow();
        assertThat(line).contains("client-gone").contains("finish=cancelled");
        int generated = Integer.parseInt(line.replaceAll(".*generated=(\\d+).*", "$1"));
        assertThat(generated).as(line).isLessThan(400);
        assertThat(ServerFixture.json(s.get("/status")).get("sequences")).isEmpty();
    }

    @Test void aClientThatLeavesANonStreamedRequestFreesItsSequence() throws Exception {
        // a raw socket, so the test decides when the connection closes: after the request runs, before its answer
        Map<String, Integer> noEos = new java.util.HashMap<>();
        for (int id : s.model.codec().eosIds()) noEos.put(String.valueOf(id), -100);
        byte[] body = ServerFixture.JSON.writeValueAsBytes(chat("max_tokens", 400, "temperature", 0.8, "seed", 2, "min_p", 0.0,
                "logit_bias", noEos));
        try (java.net.Socket socket = new java.net.Socket("127.0.0.1", s.port)) {
            var out = socket.getOutputStream();
            out.write(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + s.key
                    + "\r\nX-Request-Id: quitter\r\nContent-Type: application/json\r\nContent-Length: " + body.length + "\r\n\r\n")
                    .getBytes(StandardCharsets.US_ASCII));
            out.write(body);
            out.flush();
            long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            while (!running()) {
                assertThat(System.nanoTime()).as("the request runs").isLessThan(deadline);
                Thread.sleep(5);
            }
        }   // closes the connection with nothing answered yet
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (s.log.stream().noneMatch(l -> l.startsWith("quitter ")) && System.nanoTime() < deadline) Thread.sleep(10);
        String line = s.log.stream().filter(l -> l.startsWith("quitter ")).findFirst().orElseThrow();
        assertThat(line).contains("client-gone").contains("finish=cancelled");
        assertThat(Integer.parseInt(line.replaceAll(".*generated=(\\d+).*", "$1"))).as(line).isLessThan(400);
        assertThat(ServerFixture.json(s.get("/status")).get("sequences")).isEmpty();
        assertThat(s.get("/metrics").body()).contains("cmf_requests_running 0");

        // a client that stays gets its answer, and its connection serves the next request
        try (java.net.Socket socket = new java.net.Socket("127.0.0.1", s.port)) {
            byte[] small = ServerFixture.JSON.writeValueAsBytes(chat("temperature", 0, "max_tokens", 16));
            String head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + s.key
                    + "\r\nContent-Type: application/json\r\nContent-Length: " + small.length + "\r\n\r\n";
            InputStream in = socket.getInputStream();
            for (int turn = 0; turn < 2; turn++) {
                socket.getOutputStream().write(head.getBytes(StandardCharsets.US_ASCII));
                socket.getOutputStream().write(small);
                socket.getOutputStream().flush();
                StringBuilder headers = new StringBuilder();
                while (!headers.toString().endsWith("\r\n\r\n")) {
                    int b = in.read();
                    assertThat(b).as("the answer's headers: " + headers).isNotNegative();
                    headers.append((char) b);
                }
                assertThat(headers.toString()).startsWith("HTTP/1.1 200 OK");
                int length = Integer.parseInt(headers.toString().replaceAll("(?si).*content-length: *(\\d+).*", "$1"));
                String answer = new String(in.readNBytes(length), StandardCharsets.UTF_8);
                assertThat(ServerFixture.JSON.readTree(answer).at("/choices/0/message/content").asText()).isEqualTo(s.greedyChat(GREP, 16));
            }
            // one that asks to close gets its answer and then the end of the stream
            socket.getOutputStream().write(head.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            socket.getOutputStream().write(small);
            socket.getOutputStream().flush();
            socket.setSoTimeout(30_000);
            String rest = new String(in.readAllBytes(), StandardCharsets.UTF_8);   // returns at the end of the stream
            assertThat(rest).startsWith("HTTP/1.1 200 OK").contains(ServerFixture.JSON.writeValueAsString(s.greedyChat(GREP, 16)));
        }
    }

    /** Whether /status shows a sequence that has generated. */
    static boolean running() throws Exception {
        for (JsonNode q : ServerFixture.json(s.get("/status")).get("sequences")) if (q.get("generated_tokens").asInt() > 0) return true;
        return false;
    }
}
