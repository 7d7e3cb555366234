package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.runtime.Scheduler;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

/**
 * The official {@code openai} npm package ({@code src/test/node}, installed by {@code npm ci} there; {@code .ci/run}
 * does it) against a running server: models, chat, streaming with usage, logprobs, n, text completions,
 * {@code response_format} json_schema, a forced tool call (whole and streamed), a 400.
 * Without node or the installed package the test skips locally, and fails under CI ({@code CMF_CI=1}).
 */
class OpenAiNodeClientTest {
    static final Path PROJECT = Path.of("src/test/node").toAbsolutePath();

    static void missing(String what) {
        String msg = what + "; run 'npm ci' in " + PROJECT + " (Node 18+) to run the openai npm client test";
        if ("1".equals(System.getenv("CMF_CI"))) fail(msg + " (CMF_CI=1: CI must run it)");
        Assumptions.abort(msg);
    }

    @Test void theOfficialClientGetsWhatTheEngineComputes() throws Exception {
        if (!Files.isRegularFile(PROJECT.resolve("node_modules/openai/package.json"))) missing("the openai package is not installed");
        try (ServerFixture s = new ServerFixture(ServerConfig.local(0).withApiKey("node-key"), new Scheduler.Config(4, 512, 16, 64, 64, 4))) {
            ProcessBuilder pb = new ProcessBuilder("node", "openai-client.mjs").directory(PROJECT.toFile()).redirectErrorStream(true);
            pb.environment().put("CMF_BASE_URL", s.base() + "/v1");
            pb.environment().put("CMF_API_KEY", "node-key");
            Process p;
            try {
                p = pb.start();
            } catch (java.io.IOException e) {
                missing("node is not on the PATH (" + e.getMessage() + ")");
                return;
            }
            String output;
            try (var in = p.getInputStream()) {
                output = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            }
            assertThat(p.waitFor(120, TimeUnit.SECONDS)).isTrue();
            assertThat(p.exitValue()).as(output).isZero();
            JsonNode o = ServerFixture.JSON.readTree(output.strip().lines().reduce((a, b) -> b).orElseThrow());

            List<Map<String, Object>> messages = List.of(Map.of("role", "user", "content", "What does grep do?"));
            String want = s.greedyChat(messages, 12);
            assertThat(o.get("models").get(0).asText()).isEqualTo("default");
            assertThat(o.at("/chat/content").asText()).isEqualTo(want);
            assertThat(o.at("/chat/usage/prompt_tokens").asInt()).isEqualTo(s.model.codec().encodeChat(messages, Map.of()).length);
            assertThat(o.at("/stream/content").asText()).isEqualTo(want);
            assertThat(o.at("/stream/chunks").asInt()).isGreaterThan(2);
            assertThat(o.at("/stream/usage/completion_tokens").asInt()).isEqualTo(o.at("/chat/usage/completion_tokens").asInt());
            JsonNode lp = o.get("logprobs");
            assertThat(lp.size()).isBetween(1, 4);
            for (JsonNode t : lp) {
                assertThat(t.get("logprob").asDouble()).isLessThanOrEqualTo(0);
                assertThat(t.get("top").asInt()).isEqualTo(3);
            }
            assertThat(o.get("n").toString()).isEqualTo("[0,1,2]");
            assertThat(o.get("completion").asText()).isEqualTo(s.greedy(s.model.codec().encode("The ls command"), 6));
            assertThat(o.at("/jsonSchema/command").isTextual()).as(o.toString()).isTrue();
            assertThat(o.at("/jsonSchema/safe").isBoolean()).as(o.toString()).isTrue();
            for (String call : new String[] {"/toolCall", "/streamedToolCall"}) {
                assertThat(o.at(call + "/finish").asText()).as(o.toString()).isEqualTo("tool_calls");
                assertThat(o.at(call + "/name").asText()).isEqualTo("get_manual");
                assertThat(o.at(call + "/arguments/command").isTextual()).as(o.toString()).isTrue();
            }
            assertThat(o.at("/badRequest/status").asInt()).isEqualTo(400);
            assertThat(o.at("/badRequest/param").asText()).isEqualTo("n");
            assertThat(o.at("/badRequest/isBadRequest").asBoolean()).isTrue();
        }
    }
}
