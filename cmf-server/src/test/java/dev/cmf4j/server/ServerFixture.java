package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.Session;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;

/** A running {@link OpenAiServer} on the bundled model ({@code models/default.cmf}) for the tests, and what they compare with. */
final class ServerFixture implements AutoCloseable {
    static final ObjectMapper JSON = new ObjectMapper();

    final OpenAiServer server;
    final ServedModel model;
    final int port;
    final String key;
    final List<String> log = new CopyOnWriteArrayList<>();
    final HttpClient http = HttpClient.newHttpClient();

    /** Starts a server; {@code beforeReady} gets the port while it listens but has no model yet. */
    ServerFixture(ServerConfig cfg, Scheduler.Config sched, java.util.function.IntConsumer beforeReady) {
        this(cfg, sched, beforeReady, bundled());
    }

    /** As above, serving {@code file}. */
    ServerFixture(ServerConfig cfg, Scheduler.Config sched, java.util.function.IntConsumer beforeReady, Path file) {
        this.key = cfg.apiKey();
        this.server = new OpenAiServer(cfg, log::add);
        this.port = server.start();
        if (beforeReady != null) beforeReady.accept(port);
        this.model = ServedModel.start("default", Model.open(file), sched);
        server.ready(model);
    }

    ServerFixture(ServerConfig cfg, Scheduler.Config sched) { this(cfg, sched, null); }

    /** Serving {@code served} (its replicas opened by the test), which the fixture then owns. */
    ServerFixture(ServerConfig cfg, ServedModel served) {
        this.key = cfg.apiKey();
        this.server = new OpenAiServer(cfg, log::add);
        this.port = server.start();
        this.model = served;
        server.ready(model);
    }

    /** Serving the bundled model with {@code draft} drafting up to {@code draftMax} tokens per step. */
    ServerFixture(ServerConfig cfg, Scheduler.Config sched, Model draft, int draftMax) {
        this.key = cfg.apiKey();
        this.server = new OpenAiServer(cfg, log::add);
        this.port = server.start();
        this.model = ServedModel.start("default", Model.open(bundled()), sched, null, draft, draftMax);
        server.ready(model);
    }

    /**
     * The first access-log line matching {@code line}, waiting up to 10 s for it: the server writes a request's line
     * after the response has gone out, so a client can see the response first.
     */
    String awaitLog(java.util.function.Predicate<String> line) throws InterruptedException {
        long end = System.nanoTime() + 10_000_000_000L;
        while (true) {
            for (String l : log) if (line.test(l)) return l;
            if (System.nanoTime() > end) throw new AssertionError("no log line matched in 10 s; the log: " + log);
            Thread.sleep(10);
        }
    }

    static Path bundled() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve("models/default.cmf"))) dir = dir.getParent();
        if (dir == null) throw new IllegalStateException("models/default.cmf not found above " + Path.of("").toAbsolutePath());
        return dir.resolve("models/default.cmf");
    }

    String base() { return "http://127.0.0.1:" + port; }

    HttpRequest.Builder request(String path) {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base() + path));
        if (key != null) b.header("Authorization", "Bearer " + key);
        return b;
    }

    HttpResponse<String> post(String path, String body) throws Exception {
        return http.send(request(path).header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    HttpResponse<String> post(String path, Map<String, ?> body) throws Exception { return post(path, JSON.writeValueAsString(body)); }

    HttpResponse<String> get(String path) throws Exception {
        return http.send(request(path).GET().build(), HttpResponse.BodyHandlers.ofString());
    }

    static JsonNode json(HttpResponse<String> r) throws Exception { return JSON.readTree(r.body()); }

    /** What {@code cmf generate --greedy --stop-at-eos} gives for a chat: the rendered prompt, greedy, alone. */
    String greedyChat(List<Map<String, Object>> messages, int maxTokens) {
        return greedy(model.codec().encodeChat(messages, Map.of()), maxTokens);
    }

    String greedy(int[] prompt, int maxTokens) {
        Session s = new Session(model.model().graph(), prompt.length + maxTokens + 1);
        return new Generator(s, new Sampler(SamplingParams.GREEDY), model.codec().eosIds(), List.of())
                .generate(prompt, maxTokens, model.codec().stream(true), null).text();
    }

    @Override public void close() { server.close(); }
}
