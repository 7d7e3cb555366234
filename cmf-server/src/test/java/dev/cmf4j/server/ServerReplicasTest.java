package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.backend.cuda.CudaBackend;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.TextCodec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code serve --replicas 2} on two mock GPUs (the engine's mock driver, {@code mockcuda.c}, opened as the process's
 * CUDA driver through {@code -Dcmf.cuda.driver}): the bundled model copied onto each GPU, each copy GPU-resident with
 * its own scheduler; real HTTP clients at once get the greedy replies the model gives alone on the CPU, both replicas
 * serve (the request log names the replica of each request, the metrics count each one's), and a replica whose GPU
 * fails fails only the requests it runs.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ServerReplicasTest {
    static final List<String> QUESTIONS = List.of("What does grep do?", "What does ls do?", "How do I copy a file?",
            "What is tar?", "Explain chmod.", "What does sed do?");
    static final int MAX_TOKENS = 6;

    @TempDir static Path tmp;
    static Path lib;
    static ServerFixture s;
    static final List<CudaBackend> gpus = new ArrayList<>();
    static final Map<String, String> alone = new HashMap<>();

    @BeforeAll static void start() throws Exception {
        lib = buildMock(tmp);
        System.setProperty("cmf.cuda.driver", lib.toString());
        mock("mock_devices", 2);
        gpus.addAll(CudaBackend.replicas(2));
        Path file = ServerFixture.bundled();
        // what each question gives alone, greedy, on the CPU
        try (Model cpu = Model.open(file)) {
            TextCodec codec = TextCodec.of(cpu.file());
            for (String q : QUESTIONS) {
                int[] prompt = codec.encodeChat(List.of(Map.of("role", "user", "content", q)), Map.of());
                Session session = new Session(cpu.graph(), prompt.length + MAX_TOKENS + 1);
                alone.put(q, new Generator(session, new Sampler(SamplingParams.GREEDY), codec.eosIds(), List.of())
                        .generate(prompt, MAX_TOKENS, codec.stream(true), null).text());
            }
        }
        List<ServedModel.Replica> replicas = new ArrayList<>();
        TextCodec codec = null;
        for (int r = 0; r < 2; r++) {
            Model m = Model.open(file, null, gpus.get(r));
            assertThat(m.graph().device()).as("replica " + r + " runs GPU-resident").isNotNull();
            if (codec == null) codec = TextCodec.of(m.file());
            int chunk = Math.min(m.graph().device().preferredChunk(), 256);
            replicas.add(ServedModel.Replica.start(r, "cuda:" + r, m, codec, new Scheduler.Config(2, 256, 16, 2 + chunk, chunk, 2), null, 0, false));
        }
        s = new ServerFixture(ServerConfig.local(0), new ServedModel("default", codec, replicas, null));
    }

    @AfterAll static void stop() {
        if (s != null) s.close();
        for (CudaBackend b : gpus) b.close();
        if (lib != null) mock("mock_fail_device", -1);
    }

    @Test @Order(1) void parallelClientsGetTheirGreedyRepliesFromBothReplicas() throws Exception {
        JsonNode models = ServerFixture.json(s.get("/v1/models"));
        assertThat(models.at("/data/0/replicas/0/device").asText()).isEqualTo("cuda:0");
        assertThat(models.at("/data/0/replicas/1/device").asText()).isEqualTo("cuda:1");

        int clients = 2 * QUESTIONS.size();
        List<CompletableFuture<HttpResponse<String>>> answers = new ArrayList<>();
        List<String> ids = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            boolean stream = i % 2 == 1;
            Map<String, Object> body = Map.of("messages", List.of(Map.of("role", "user", "content", QUESTIONS.get(i % QUESTIONS.size()))),
                    "max_tokens", MAX_TOKENS, "temperature", 0, "stream", stream);
            String id = "replicas-" + i;
            ids.add(id);
            answers.add(s.http.sendAsync(s.request("/v1/chat/completions").header("Content-Type", "application/json").header("X-Request-Id", id)
                    .POST(HttpRequest.BodyPublishers.ofString(ServerFixture.JSON.writeValueAsString(body))).build(), HttpResponse.BodyHandlers.ofString()));
        }
        int[] served = new int[2];
        for (int i = 0; i < clients; i++) {
            HttpResponse<String> r = answers.get(i).get(120, TimeUnit.SECONDS);
            assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
            String text;
            if (i % 2 == 1) {
                StringBuilder b = new StringBuilder();
                List<String> events = OpenAiServerTest.events(r.body());
                assertThat(events.getLast()).isEqualTo("[DONE]");
                for (String e : events.subList(0, events.size() - 1))
                    for (JsonNode ch : ServerFixture.JSON.readTree(e).get("choices")) b.append(ch.at("/delta/content").asText(""));
                text = b.toString();
            } else {
                text = ServerFixture.json(r).at("/choices/0/message/content").asText();
            }
            assertThat(text).as("client " + i).isEqualTo(alone.get(QUESTIONS.get(i % QUESTIONS.size())));
            served[replicaOf(ids.get(i))]++;
        }
        System.out.printf("%d clients on 2 mock GPUs: %d requests on replica 0, %d on replica 1%n", clients, served[0], served[1]);
        assertThat(served[0]).as("requests replica 0 ran").isPositive();
        assertThat(served[1]).as("requests replica 1 ran").isPositive();
        // the metrics count each replica's requests as the log named them
        String metrics = s.get("/metrics").body();
        for (int r = 0; r < 2; r++)
            assertThat(metrics).contains("cmf_replica_requests_total{replica=\"" + r + "\",device=\"cuda:" + r + "\"} " + served[r]);
        assertThat(metrics).contains("cmf_requests_total " + clients).contains("cmf_requests_running 0");
        JsonNode status = ServerFixture.json(s.get("/status"));
        assertThat(status.get("replicas")).hasSize(2);
        assertThat(status.get("parallel").asInt()).isEqualTo(4);
    }

    /**
     * GPU 1 fails every launch: the request routed to replica 1 fails alone, replica 0's are answered, and replica 1 is
     * passed by after its failure (a broken GPU answers fastest, so it would look least loaded); once its GPU works
     * again and the wait is over it serves again.
     */
    @Test @Order(2) void aFailingGpuFailsOnlyTheRequestsItRunsAndIsPassedBy() throws Exception {
        int[] ok = new int[2], failed = new int[2];
        mock("mock_fail_device", 1);
        try {
            for (int i = 0; i < 4; i++) ask("failing-" + i, QUESTIONS.get(i), ok, failed);
        } finally {
            mock("mock_fail_device", -1);
        }
        System.out.printf("GPU 1 failing: replica 0 answered %d (failed %d), replica 1 answered %d (failed %d)%n", ok[0], failed[0], ok[1], failed[1]);
        assertThat(failed[0]).as("replica 0's failures").isZero();
        assertThat(failed[1]).as("replica 1's failures: one, then it is passed by").isEqualTo(1);
        assertThat(ok[0]).as("replica 0's answers").isEqualTo(3);
        assertThat(s.get("/metrics").body()).contains("cmf_replica_failures_total{replica=\"1\",device=\"cuda:1\"} 1")
                .contains("cmf_replica_failures_total{replica=\"0\",device=\"cuda:0\"} 0");
        assertThat(ServerFixture.json(s.get("/status")).at("/replicas/1/failing").asBoolean()).isTrue();
        // GPU 1 works again; with no wait left, the next requests spread over both and replica 1 answers
        s.model.retryAfter(java.time.Duration.ZERO);
        int[] ok2 = new int[2], failed2 = new int[2];
        for (int i = 0; i < 2; i++) ask("recovered-" + i, QUESTIONS.get(i), ok2, failed2);
        assertThat(failed2).containsExactly(0, 0);
        assertThat(ok2[1]).as("replica 1's answers after its GPU recovered").isPositive();
        assertThat(ServerFixture.json(s.get("/status")).at("/replicas/1/failing").asBoolean()).isFalse();
    }

    /** One chat request, counted as answered (its greedy reply checked) or failed (a 500) on the replica that ran it. */
    private static void ask(String id, String q, int[] ok, int[] failed) throws Exception {
        HttpResponse<String> r = s.http.send(s.request("/v1/chat/completions").header("Content-Type", "application/json").header("X-Request-Id", id)
                .POST(HttpRequest.BodyPublishers.ofString(ServerFixture.JSON.writeValueAsString(Map.of("messages",
                        List.of(Map.of("role", "user", "content", q)), "max_tokens", MAX_TOKENS, "temperature", 0)))).build(),
                HttpResponse.BodyHandlers.ofString());
        int replica = replicaOf(id);
        if (r.statusCode() == 200) {
            ok[replica]++;
            assertThat(ServerFixture.json(r).at("/choices/0/message/content").asText()).isEqualTo(alone.get(q));
        } else {
            failed[replica]++;
            assertThat(r.statusCode()).as(r.body()).isEqualTo(500);
            assertThat(r.body()).contains("generation failed");
        }
    }

    private static final Pattern REPLICA = Pattern.compile(" replica=(\\d)/cuda:(\\d)");

    /** The replica the request log says ran request {@code id}. */
    private static int replicaOf(String id) throws InterruptedException {
        String line = s.awaitLog(l -> l.startsWith(id + " "));
        Matcher m = REPLICA.matcher(line);
        assertThat(m.find()).as(line).isTrue();
        assertThat(m.group(1)).isEqualTo(m.group(2));
        return Integer.parseInt(m.group(1));
    }

    /** Builds the engine's mock driver ({@code cmf-engine}'s test resource {@code mockcuda.c}) with the system C compiler. */
    static Path buildMock(Path dir) throws Exception { return dev.cmf4j.testkit.MockCudaLibrary.build(dir); }

    /** Calls the mock's test knob {@code void fn(int)}. */
    static void mock(String fn, int arg) {
        try {
            Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find(fn).orElseThrow(),
                    FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT)).invokeWithArguments(arg);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }
}
