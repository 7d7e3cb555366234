package dev.cmf4j.server;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.runtime.GenerationException;
import dev.cmf4j.runtime.Scheduler;
import io.helidon.http.HeaderName;
import io.helidon.http.HeaderNames;
import io.helidon.http.HeaderValues;
import io.helidon.webserver.ConnectionContext;
import io.helidon.webserver.WebServer;
import io.helidon.webserver.http.Handler;
import io.helidon.webserver.http.HttpRouting;
import io.helidon.webserver.http.ServerRequest;
import io.helidon.webserver.http.ServerResponse;
import io.helidon.webserver.http1.Http1Config;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.Map;
import java.util.OptionalLong;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Consumer;

/**
 * The OpenAI-compatible HTTP API over one {@link ServedModel}, on Helidon SE's WebServer (a virtual thread per
 * request). It listens before the model is loaded ({@code /health} answers 503 until {@link #ready}); every endpoint
 * but {@code /health} needs the bearer key when one is set; each request gets one log line.
 */
public final class OpenAiServer implements AutoCloseable {
    private static final HeaderName REQUEST_ID = HeaderNames.create("X-Request-Id");
    /** How long a connection may stay idle after a watched answer (Helidon's own idle timeout is five minutes). */
    private static final Duration IDLE = Duration.ofMinutes(5);

    private final ServerConfig cfg;
    private final ApiKey key;
    private final Consumer<String> log;
    private final ObjectMapper json = new ObjectMapper();
    private final Map<Integer, LongAdder> responses = new ConcurrentHashMap<>();
    private final StateSlots slots;
    private volatile ServedModel model;
    private WebServer server;

    /** @param log receives one line per request */
    public OpenAiServer(ServerConfig cfg, Consumer<String> log) {
        this.cfg = cfg;
        this.key = cfg.apiKey() == null ? null : new ApiKey(cfg.apiKey());
        this.log = log;
        this.slots = new StateSlots(cfg.stateDir(), json);
    }

    /** Starts listening; returns the port (the one chosen when the config asked for 0). */
    public int start() {
        server = WebServer.builder()
                .host(cfg.host())
                .port(cfg.port())
                .shutdownHook(false)
                .addProtocol(Http1Config.builder().addReceiveListener(new ClientConnection()).build())
                .routing(this::routes)
                .build()
                .start();
        return server.port();
    }

    /** The model is loaded: completions are served from now on and /health says 200. */
    public void ready(ServedModel m) { this.model = m; }

    /** Stops listening, then stops the model's scheduler and closes it. */
    @Override public void close() {
        if (server != null) server.stop();
        if (model != null) model.close();
    }

    private void routes(HttpRouting.Builder r) {
        r.get("/health", endpoint(false, false, this::health))
                .get("/v1/models", endpoint(true, true, this::models))
                .post("/v1/chat/completions", endpoint(true, true, c -> completion(c, true)))
                .post("/v1/completions", endpoint(true, true, c -> completion(c, false)))
                .post("/tokenize", endpoint(true, true, this::tokenize))
                .post("/detokenize", endpoint(true, true, this::detokenize))
                .get("/metrics", endpoint(true, true, this::metrics))
                .get("/status", endpoint(true, true, this::status))
                .post("/slots/{id}", endpoint(true, true, this::slot));
    }

    /** One request in a handler: what it reads and writes, its id, what its log line adds, when it came, whether it was logged. */
    private record Call(ServerRequest req, ServerResponse res, String id, StringBuilder detail, long t0, AtomicBoolean logged) {}

    @FunctionalInterface
    private interface Endpoint {
        void handle(Call c) throws Exception;
    }

    /** The checks every endpoint shares (key, loaded model), errors in OpenAI's shape, the request id and log line. */
    private Handler endpoint(boolean needsKey, boolean needsModel, Endpoint e) {
        return (req, res) -> {
            long t0 = System.nanoTime();
            String id = req.headers().first(REQUEST_ID).filter(s -> s.matches("[A-Za-z0-9._:-]{1,128}"))
                    .orElseGet(() -> "req-" + UUID.randomUUID().toString().substring(0, 18));
            res.header(REQUEST_ID, id);
            Call c = new Call(req, res, id, new StringBuilder(), t0, new AtomicBoolean());
            try {
                if (needsKey && key != null && !key.accepts(req.headers().first(HeaderNames.AUTHORIZATION).orElse(null)))
                    throw ApiError.unauthorized(req.headers().contains(HeaderNames.AUTHORIZATION)
                            ? "Incorrect API key provided." : "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'.");
                if (needsModel && model == null) throw new ApiError(503, "server_error", null, "model_loading", "the model is still loading");
                e.handle(c);
            } catch (Exception x) {
                fail(c, x);
            }
            logged(c);
        };
    }

    /** Answers with the error (OpenAI's shape) unless an answer has been sent. */
    private void fail(Call c, Exception x) {
        if (c.res().isSent()) return;
        if (x instanceof ApiError err) send(c.res(), err.status, err.body(json), err.status == 429);
        else send(c.res(), 500, new ApiError(500, "server_error", null, null, "internal error: " + x).body(json), false);
    }

    /** The request's log line and response count, once. */
    private void logged(Call c) {
        if (c.logged().getAndSet(true)) return;
        int status = c.res().status().code();
        responses.computeIfAbsent(status, k -> new LongAdder()).increment();
        log.accept(String.format(Locale.ROOT, "%s %s %s %d %.0fms%s", c.id(), c.req().prologue().method().text(),
                c.req().path().rawPath(), status, (System.nanoTime() - c.t0()) / 1e6, c.detail().isEmpty() ? "" : " " + c.detail()));
    }

    private void health(Call c) {
        boolean up = model != null;
        send(c.res(), up ? 200 : 503, json.createObjectNode().put("status", up ? "ok" : "loading"), false);
    }

    private void models(Call c) {
        ObjectNode o = json.createObjectNode().put("object", "list");
        ObjectNode m = o.putArray("data").addObject();
        m.put("id", model.name());
        m.put("object", "model");
        m.put("created", 0);
        m.put("owned_by", "cmf4j");
        m.put("max_model_len", model.maxContext());
        replicas(m.putArray("replicas"));
        var g = model.model().graph();
        if (!g.adapters().isEmpty()) {
            var lora = m.putArray("lora");
            for (int i = 0; i < g.adapters().size(); i++) lora.addObject().put("id", i).put("name", g.adapters().get(i));
        }
        // each runnable skill as a model of its own: NAME:skill
        for (String s : g.skills()) {
            if (g.skillProblem(s) != null) continue;
            ObjectNode e = o.withArray("data").addObject();
            e.put("id", model.name() + ":" + s);
            e.put("object", "model");
            e.put("created", 0);
            e.put("owned_by", "cmf4j");
            e.put("parent", model.name());
            e.put("skill", s);
            e.put("max_model_len", model.maxContext());
        }
        send(c.res(), 200, o, false);
    }

    /** Each replica's index, device and sequences now (one entry without serve --replicas). */
    private void replicas(ArrayNode a) {
        for (ServedModel.Replica r : model.replicas()) {
            Scheduler.Stats s = r.scheduler().stats();
            a.addObject().put("replica", r.index()).put("device", r.device()).put("running", s.running()).put("waiting", s.waiting())
                    .put("requests", s.requests()).put("failures", r.health().failures()).put("failing", r.health().failing());
        }
    }

    private void completion(Call c, boolean chat) throws Exception {
        ServedModel m = model;
        CompletionRequest req = CompletionRequest.parse(body(c), chat, m, cfg.maxChoices(), json);
        CompletionRun run = new CompletionRun(req, m, json);
        try {
            run.submit(cfg.timeout());
        } catch (Scheduler.QueueFull full) {
            throw new ApiError(429, "rate_limit_error", null, "rate_limit_exceeded", "the server is busy (" + full.getMessage() + "); retry later");
        } catch (GenerationException bad) {
            throw ApiError.badRequest(chat ? "messages" : "prompt", bad.getMessage());
        }
        slots.remember(run.id(), run.sequences());
        try {
            if (req.stream()) {
                c.res().status(200);
                c.res().header(HeaderNames.CONTENT_TYPE, "text/event-stream");
                c.res().header(HeaderNames.CACHE_CONTROL, "no-cache");
                boolean complete;
                try (OutputStream out = c.res().outputStream()) {
                    complete = run.stream(out);
                } catch (IOException | RuntimeException gone) {
                    complete = false;
                }
                if (!complete) c.detail().append("client-gone ");
            } else {
                ConnectionContext conn = ClientConnection.idle(c.req());
                if (conn != null) {
                    answerWatching(c, run, conn);   // answers, logs and cancels by itself
                    return;
                }
                send(c.res(), 200, run.collect(), false);
            }
            c.detail().append(run.summary());
        } catch (InterruptedException e) {
            run.cancel();
            c.detail().append(run.summary());
            throw e;
        }
    }

    /**
     * A non-streamed answer whose client may leave: a virtual thread waits for the generation, sends the answer and
     * logs it, while this thread, the connection's, waits on the socket for what it would wait for after the answer
     * anyway: the client's next request or its close. A close before the answer cancels the generation, so its
     * sequence leaves the batch before the next step. A connection left idle for {@link #IDLE} after the answer is
     * closed, as Helidon closes idle connections.
     */
    private void answerWatching(Call c, CompletionRun run, ConnectionContext conn) {
        AtomicBoolean gone = new AtomicBoolean(), waiting = new AtomicBoolean(true);
        CountDownLatch answered = new CountDownLatch(1);
        // a client that asked to close waits for it, which Helidon would do once this handler returns
        boolean closeAfter = c.req().headers().contains(HeaderValues.CONNECTION_CLOSE) || c.req().prologue().protocolVersion().equals("1.0");
        Thread.ofVirtual().name("answer-" + c.id()).start(() -> {
            try {
                send(c.res(), 200, run.collect(), false);
                if (closeAfter) ClientConnection.close(conn);
            } catch (Exception x) {
                try {
                    fail(c, x);
                } catch (RuntimeException unsent) {   // the client has gone
                }
            } finally {
                if (gone.get()) c.detail().append("client-gone ");
                c.detail().append(run.summary());
                logged(c);
                answered.countDown();
                CompletableFuture.delayedExecutor(IDLE.toMillis(), TimeUnit.MILLISECONDS).execute(() -> {
                    if (waiting.get()) ClientConnection.close(conn);
                });
            }
        });
        boolean more = ClientConnection.awaitMore(conn);
        waiting.set(false);
        if (!more && answered.getCount() > 0) {
            gone.set(true);
            run.cancelNow();
        }
        try {
            answered.await();
        } catch (InterruptedException e) {   // the server stops: the answer thread ends the run and logs it
            run.cancelNow();
            Thread.currentThread().interrupt();
        }
    }

    private void tokenize(Call c) throws IOException {
        JsonNode b = body(c);
        if (b == null || !b.isObject()) throw ApiError.badRequest(null, "the request body must be a JSON object");
        CompletionRequest.Fields f = new CompletionRequest.Fields(b);
        String text = f.text("content");
        if (text == null) text = f.text("prompt");
        Boolean special = f.bool("add_special");
        if (special == null) special = f.bool("add_special_tokens");
        int[] ids;
        if (text != null) ids = model.codec().tokenizer().encodeIds(text, special == null || special);
        else if (f.node("messages") != null)
            ids = CompletionRequest.parse(b, true, model, cfg.maxChoices(), json).prompt();
        else throw ApiError.badRequest("content", "give the text as content (or prompt), or messages");
        ObjectNode o = json.createObjectNode();
        ArrayNode t = o.putArray("tokens");
        for (int id : ids) t.add(id);
        o.put("count", ids.length);
        o.put("max_model_len", model.maxContext());
        send(c.res(), 200, o, false);
    }

    private void detokenize(Call c) throws IOException {
        JsonNode b = body(c);
        JsonNode t = b == null ? null : b.get("tokens");
        if (t == null || !t.isArray()) throw ApiError.badRequest("tokens", "tokens must be an array of token ids");
        int v = model.model().graph().vocab();
        int[] ids = new int[t.size()];
        for (int i = 0; i < ids.length; i++) {
            if (!t.get(i).isIntegralNumber() || t.get(i).asLong() < 0 || t.get(i).asLong() >= v)
                throw ApiError.badRequest("tokens", "tokens[" + i + "] must be a token id in [0, " + v + ")");
            ids[i] = t.get(i).asInt();
        }
        String text = model.codec().tokenizer().decode(ids, false);
        send(c.res(), 200, json.createObjectNode().put("content", text).put("prompt", text), false);
    }

    private void metrics(Call c) {
        c.res().status(200);
        c.res().header(HeaderNames.CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
        c.res().send(Metrics.render(model, responses).getBytes(StandardCharsets.UTF_8));
    }

    private void status(Call c) {
        Scheduler.Stats s = model.stats();
        ObjectNode o = json.createObjectNode();
        o.put("model", model.name());
        o.put("parallel", model.parallel() * model.replicas().size());
        o.put("context", model.maxContext());
        o.put("running", s.running());
        o.put("waiting", s.waiting());
        o.put("kv_usage", s.kvUsage());
        replicas(o.putArray("replicas"));
        boolean several = model.replicas().size() > 1;
        ArrayNode seqs = o.putArray("sequences");
        ArrayNode cached = o.putArray("cached");
        for (ServedModel.Replica r : model.replicas()) {
            for (Scheduler.SequenceInfo q : r.scheduler().live()) {
                ObjectNode e = seqs.addObject();
                e.put("id", q.id());
                if (several) e.put("replica", r.index());   // each replica numbers its own sequences
                e.put("state", q.state());
                e.put("prompt_tokens", q.promptTokens());
                e.put("cached_tokens", q.cachedTokens());
                e.put("generated_tokens", q.generatedTokens());
                e.put("position", q.position());
                e.put("age_ms", q.ageMillis());
                e.put("state_bytes", q.stateBytes());
            }
            for (Scheduler.CachedInfo q : r.scheduler().cached()) {
                ObjectNode e = cached.addObject().put("id", q.id()).put("tokens", q.tokens()).put("state_bytes", q.stateBytes());
                if (several) e.put("replica", r.index());
            }
        }
        send(c.res(), 200, o, false);
    }

    /** {@code POST /slots/{id}?action=save|restore|erase}: a sequence's state to and from the state directory. */
    private void slot(Call c) throws Exception {
        OptionalLong length = c.req().headers().contentLength();
        JsonNode b = !c.req().content().hasEntity() || length.isPresent() && length.getAsLong() == 0 ? null : body(c);
        String action = c.req().query().first("action").orElse(null);
        send(c.res(), 200, slots.handle(model, c.req().path().pathParameters().get("id"), action, b, c.detail()), false);
    }

    /** The request body as JSON, at most {@link ServerConfig#maxBodyBytes}; a 400 when larger or not JSON. */
    private JsonNode body(Call c) throws IOException {
        int max = cfg.maxBodyBytes();
        OptionalLong declared = c.req().headers().contentLength();
        if (declared.isPresent() && declared.getAsLong() < 0)   // Helidon passes it on; its reader then fails inside
            throw ApiError.badRequest(null, "Content-Length " + declared.getAsLong() + " is negative");
        byte[] b;
        boolean tooLarge;
        try (InputStream in = c.req().content().inputStream()) {
            b = declared.isPresent() && declared.getAsLong() > max ? null : in.readNBytes(max + 1);
            tooLarge = b == null || b.length > max;
            if (tooLarge) in.skip(16L * max);   // read a moderate excess, so the client sees the answer rather than a reset
        } catch (RuntimeException badFraming) {   // e.g. a chunk size that is not hex: Helidon's reader throws as it reads
            throw ApiError.badRequest(null, "the request body could not be read: " + badFraming.getMessage());
        }
        if (tooLarge) throw ApiError.badRequest(null, "the request body exceeds the server's limit of " + max + " bytes");
        return parseBody(json, b);
    }

    /** A request body's bytes as JSON; a 400 when empty or not JSON. */
    static JsonNode parseBody(ObjectMapper json, byte[] b) {
        if (b.length == 0) throw ApiError.badRequest(null, "the request body is empty (expected a JSON object)");
        try {
            return json.readTree(b);
        } catch (JsonProcessingException e) {
            throw ApiError.badRequest(null, "We could not parse the JSON body of your request: "
                    + e.getOriginalMessage().lines().findFirst().orElse(""));
        } catch (IOException e) {
            throw ApiError.badRequest(null, "We could not read the JSON body of your request: " + e.getMessage());
        }
    }

    private void send(ServerResponse res, int status, ObjectNode body, boolean retryAfter) {
        res.status(status);
        if (retryAfter) res.header(HeaderNames.RETRY_AFTER, "1");
        res.header(HeaderNames.CONTENT_TYPE, "application/json");
        try {
            res.send(json.writeValueAsBytes(body));
        } catch (JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }
}
