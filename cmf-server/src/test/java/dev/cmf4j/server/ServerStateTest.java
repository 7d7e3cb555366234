package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.stream.IntStream;

import static dev.cmf4j.server.ServerFixture.json;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code POST /slots/{id}?action=save|restore|erase} through Java's HttpClient against a running server: a conversation
 * saved by one server and restored by another continues from the restored state (its next turn prefills only its new
 * tokens) with the reply the engine alone gives; names outside the state directory, unknown ids and damaged files are
 * 4xx; without {@code --state-dir} the endpoint is off. And an Embryo conversation's state stays the same size turn
 * after turn while its context grows.
 */
class ServerStateTest {
    static final Map<String, Object> USER1 = Map.of("role", "user", "content", "What does ls do?");

    static Map<String, Object> chat(List<Map<String, Object>> messages) {
        return Map.of("messages", messages, "max_tokens", 8, "temperature", 0);
    }

    @Test void aConversationSavedByOneServerContinuesInAnother(@TempDir Path dir) throws Exception {
        ServerConfig cfg = ServerConfig.local(0).withStateDir(dir);
        String reply1;
        long saved;
        try (ServerFixture s = new ServerFixture(cfg, Scheduler.Config.of(2, 512, 8))) {
            HttpResponse<String> r = s.post("/v1/chat/completions", chat(List.of(USER1)));
            assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
            JsonNode o = json(r);
            reply1 = o.at("/choices/0/message/content").asText();
            HttpResponse<String> save = s.post("/slots/" + o.get("id").asText() + "?action=save", Map.of("filename", "conv1.state"));
            assertThat(save.statusCode()).as(save.body()).isEqualTo(200);
            JsonNode sv = json(save);
            saved = sv.get("n_saved").asLong();
            // the prompt and the reply but its last token (sampled, never fed)
            assertThat(saved).isEqualTo(o.at("/usage/prompt_tokens").asLong() + o.at("/usage/completion_tokens").asLong() - 1);
            assertThat(sv.get("n_written").asLong()).isEqualTo(Files.size(dir.resolve("conv1.state")));
            s.awaitLog(l -> l.contains("/slots/") && l.contains(" 200 ") && l.contains("save seq="));
            // the same sequence by its number, as /status lists it among the cached ones
            long seq = sv.get("id_slot").asLong();
            JsonNode status = json(s.get("/status"));
            assertThat(status.get("cached").findValuesAsText("id")).contains(Long.toString(seq));
            HttpResponse<String> again = s.post("/slots/" + seq + "?action=save", Map.of("filename", "conv1-copy.state"));
            assertThat(again.statusCode()).as(again.body()).isEqualTo(200);
            assertThat(Files.readAllBytes(dir.resolve("conv1-copy.state"))).isEqualTo(Files.readAllBytes(dir.resolve("conv1.state")));
        }
        List<Map<String, Object>> turn2 = List.of(USER1, Map.of("role", "assistant", "content", reply1),
                Map.of("role", "user", "content", "And grep?"));
        try (ServerFixture s = new ServerFixture(cfg, Scheduler.Config.of(2, 512, 8))) {
            HttpResponse<String> restore = s.post("/slots/0?action=restore", Map.of("filename", "conv1.state"));
            assertThat(restore.statusCode()).as(restore.body()).isEqualTo(200);
            JsonNode rs = json(restore);
            assertThat(rs.get("n_restored").asLong()).isEqualTo(saved);
            assertThat(rs.get("n_read").asLong()).isEqualTo(Files.size(dir.resolve("conv1.state")));
            HttpResponse<String> r = s.post("/v1/chat/completions", chat(turn2));
            assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
            JsonNode o = json(r);
            assertThat(o.at("/usage/prompt_tokens_details/cached_tokens").asLong()).as("the restored state was reused").isEqualTo(saved);
            assertThat(o.at("/choices/0/message/content").asText()).isEqualTo(s.greedyChat(turn2, 8));
            // erase: the cached sequence goes; a second erase finds nothing
            long seq = json(s.post("/slots/" + o.get("id").asText() + "?action=erase", "")).get("id_slot").asLong();
            assertThat(json(s.get("/status")).get("cached").findValuesAsText("id")).doesNotContain(Long.toString(seq));
            assertThat(s.post("/slots/" + seq + "?action=erase", "").statusCode()).isEqualTo(404);
        }
    }

    @Test void badNamesUnknownIdsAndDamagedFilesAreClientErrors(@TempDir Path tmp) throws Exception {
        Path dir = Files.createDirectories(tmp.resolve("states"));
        Files.writeString(tmp.resolve("outside.state"), "secret");
        Files.createSymbolicLink(dir.resolve("link.state"), tmp.resolve("outside.state"));
        Files.write(dir.resolve("junk.state"), new byte[] {1, 2, 3, 4, 5, 6, 7, 8, 9});
        try (ServerFixture s = new ServerFixture(ServerConfig.local(0).withStateDir(dir), Scheduler.Config.of(1, 256, 4))) {
            String rid = json(s.post("/v1/chat/completions", Map.of("messages", List.of(USER1), "max_tokens", 1))).get("id").asText();
            for (String bad : new String[] {"../outside.state", "a/b.state", ".hidden", "x..y", "/etc/passwd", "", "a b", "é.state", "x".repeat(256)}) {
                HttpResponse<String> r = s.post("/slots/" + rid + "?action=save", Map.of("filename", bad));
                assertThat(r.statusCode()).as(bad + ": " + r.body()).isEqualTo(400);
                assertThat(json(r).at("/error/param").asText()).isEqualTo("filename");
                assertThat(s.post("/slots/0?action=restore", Map.of("filename", bad)).statusCode()).as(bad).isEqualTo(400);
            }
            assertThat(Files.readString(tmp.resolve("outside.state"))).isEqualTo("secret");
            try (var files = Files.list(dir)) {
                assertThat(files.map(p -> p.getFileName().toString())).containsExactlyInAnyOrder("link.state", "junk.state");
            }
            expect(s.post("/slots/" + rid + "?action=save", Map.of()), 400, "filename is required");
            expect(s.post("/slots/" + rid + "?action=save", Map.of("filename", 3)), 400, "filename");
            expect(s.post("/slots/" + rid, Map.of("filename", "a.state")), 400, "action=save, restore or erase");
            expect(s.post("/slots/" + rid + "?action=copy", Map.of("filename", "a.state")), 400, "save, restore or erase, got 'copy'");
            expect(s.post("/slots/chatcmpl-nope?action=save", Map.of("filename", "a.state")), 404, "no sequence 'chatcmpl-nope'");
            expect(s.post("/slots/123456?action=save", Map.of("filename", "a.state")), 404, "no running or cached sequence 123456");
            expect(s.post("/slots/" + rid + "?action=save", Map.of("filename", "a.state", "choice", 1)), 400, "choice");
            expect(s.post("/slots/0?action=restore", Map.of("filename", "missing.state")), 404, "no state file 'missing.state'");
            expect(s.post("/slots/0?action=restore", Map.of("filename", "link.state")), 404, "no state file 'link.state'");
            expect(s.post("/slots/0?action=restore", Map.of("filename", "junk.state")), 400, "not a cmf state snapshot");
            expect(s.post("/slots/0?action=restore", Map.of("filename", "junk.state", "skill", "auto")), 400, "skill auto");
            // a good save still works after all that, and a restore of it under the same settings too
            assertThat(s.post("/slots/" + rid + "?action=save", Map.of("filename", "good.state")).statusCode()).isEqualTo(200);
            byte[] good = Files.readAllBytes(dir.resolve("good.state"));
            Files.write(dir.resolve("cut.state"), java.util.Arrays.copyOf(good, good.length - 5));
            expect(s.post("/slots/0?action=restore", Map.of("filename", "cut.state")), 400, "truncated");
            assertThat(s.post("/slots/0?action=restore", Map.of("filename", "good.state")).statusCode()).isEqualTo(200);
        }
        try (ServerFixture s = new ServerFixture(ServerConfig.local(0), Scheduler.Config.of(1, 256, 4))) {
            expect(s.post("/slots/0?action=save", Map.of("filename", "a.state")), 501, "start the server with --state-dir");
        }
    }

    private static void expect(HttpResponse<String> r, int status, String message) throws Exception {
        assertThat(r.statusCode()).as(r.body()).isEqualTo(status);
        assertThat(json(r).at("/error/message").asText()).contains(message);
    }

    /**
     * Seven turns of one conversation with embryo_a (token ids, greedy, 8 tokens a turn): each turn extends the cached
     * sequence (its tokens reused), the context grows past 200 positions, and the state the server holds for it stays
     * the model's fixed size, in /status, /metrics and the saved snapshot (which grows by the ids only).
     */
    @Test void anEmbryoConversationsStateDoesNotGrowOverTurns(@TempDir Path dir) throws Exception {
        Path file = Fixtures.require("embryo/embryo_a").resolve("model.cmf");
        try (ServerFixture s = new ServerFixture(ServerConfig.local(0).withStateDir(dir), Scheduler.Config.of(1, 1024, 4), null, file)) {
            var graph = s.model.model().graph();
            long fixed = s.model.model().spec().fixedStateBytes();
            assertThat(fixed).isPositive();
            Random rnd = new Random(11);
            List<Integer> prompt = new ArrayList<>();
            long snapshotStatePart = -1;
            for (int turn = 0; turn < 7; turn++) {
                int held = Math.max(0, prompt.size() - 1);
                rnd.ints(24, 0, 256).forEach(prompt::add);   // the user's new bytes
                int[] ids = prompt.stream().mapToInt(Integer::intValue).toArray();
                int[] want = greedy(graph, ids, 8);
                HttpResponse<String> r = s.post("/v1/completions", Map.of("prompt", prompt, "max_tokens", 8, "temperature", 0, "ignore_eos", true));
                assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
                JsonNode o = json(r);
                assertThat(o.at("/usage/prompt_tokens_details/cached_tokens").asInt()).as("turn " + turn + " reuses the conversation").isEqualTo(held);
                IntStream.of(want).forEach(prompt::add);   // the reply becomes part of the next prompt
                JsonNode cached = json(s.get("/status")).get("cached");
                assertThat(cached).hasSize(1);
                assertThat(cached.get(0).get("tokens").asInt()).isEqualTo(prompt.size() - 1);
                assertThat(cached.get(0).get("state_bytes").asLong()).as("turn " + turn).isEqualTo(fixed);
                assertThat(s.get("/metrics").body()).contains("\ncmf_state_bytes " + fixed + "\n");
                JsonNode sv = json(s.post("/slots/" + o.get("id").asText() + "?action=save", Map.of("filename", "embryo.state")));
                long statePart = sv.get("n_written").asLong() - 4L * sv.get("n_saved").asLong();
                if (snapshotStatePart >= 0) assertThat(statePart).as("turn " + turn).isEqualTo(snapshotStatePart);
                snapshotStatePart = statePart;
            }
            assertThat(prompt.size()).isGreaterThan(200);
        }
    }

    /** What the server must generate: greedy, alone, exactly {@code n} tokens. */
    private static int[] greedy(dev.cmf4j.model.graph.Graph g, int[] prompt, int n) {
        Session s = new Session(g, prompt.length + n + 1);
        return new Generator(s, new Sampler(SamplingParams.GREEDY), Set.of(), List.of()).generate(prompt, n, null, null).tokens();
    }
}
