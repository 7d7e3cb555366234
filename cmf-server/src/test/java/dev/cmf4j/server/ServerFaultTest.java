package dev.cmf4j.server;

import dev.cmf4j.runtime.Scheduler;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Clients that misbehave on real sockets: garbage instead of HTTP, a request that stalls mid-body, one that leaves
 * mid-body, and a flood past the queue. Each gets an error or nothing; the server goes on answering everyone else
 * exactly as it would have.
 */
class ServerFaultTest {
    static ServerFixture s;
    static final Map<String, Object> GOOD = Map.of("prompt", "The ls command", "max_tokens", 4, "temperature", 0);
    static String want;

    @BeforeAll static void start() {
        s = new ServerFixture(ServerConfig.local(0).withMaxBodyBytes(16 << 10), new Scheduler.Config(2, 512, 2, 64, 16, 0));
        want = s.greedy(s.model.codec().encode("The ls command"), 4);
    }

    @AfterAll static void stop() { if (s != null) s.close(); }

    /** A well-behaved request answers exactly what the model generates alone. */
    static void goodRequestStillServed() throws Exception {
        HttpResponse<String> r = s.post("/v1/completions", GOOD);
        assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
        assertThat(ServerFixture.json(r).at("/choices/0/text").asText()).isEqualTo(want);
    }

    /** Sends bytes on a fresh connection and reads what comes back until the server closes it (10 s at most). */
    static String exchange(byte[] bytes) throws IOException {
        try (Socket c = new Socket("127.0.0.1", s.port)) {
            c.setSoTimeout(10_000);
            OutputStream out = c.getOutputStream();
            out.write(bytes);
            out.flush();
            c.shutdownOutput();
            ByteArrayOutputStream got = new ByteArrayOutputStream();
            InputStream in = c.getInputStream();
            byte[] buf = new byte[4096];
            try {
                for (int n; (n = in.read(buf)) > 0; ) got.write(buf, 0, n);
            } catch (SocketTimeoutException e) {
                throw new AssertionError("the server neither answered nor closed within 10 s; got: " + got, e);
            } catch (IOException reset) {
                // a reset is an answer too: the server dropped a connection it could not make sense of
            }
            return got.toString(StandardCharsets.ISO_8859_1);
        }
    }

    static byte[] http(String requestLineAndHeaders, String body) {
        return (requestLineAndHeaders + "\r\n\r\n" + body).getBytes(StandardCharsets.UTF_8);
    }

    @Test void garbageGetsAnErrorOrAClosedConnection() throws Exception {
        SplittableRandom r = new SplittableRandom(23);
        List<byte[]> garbage = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            byte[] b = new byte[1 + r.nextInt(3000)];
            r.nextBytes(b);
            garbage.add(b);
        }
        garbage.add("\r\n\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
        garbage.add(http("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5", "{}"));
        garbage.add(http("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: banana", "{}"));
        garbage.add(http("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", "zz\r\nnot a chunk\r\n"));
        garbage.add(http("GET /" + "a".repeat(100_000) + " HTTP/1.1\r\nHost: x", ""));
        garbage.add(http("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + "b".repeat(100_000), ""));
        garbage.add(http("POST /v1/completions HTTP/9.9\r\nHost: x\r\nContent-Length: 2", "{}"));
        for (byte[] g : garbage) {
            String answer = exchange(g);
            if (!answer.isEmpty()) assertThat(answer).as("answer to garbage").startsWith("HTTP/1.1 4");
        }
        // bytes that are not JSON, in a well-formed request: a 400 in OpenAI's shape
        String bad = exchange(http("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 6\r\nConnection: close",
                "\u00ff\u00fe{]\u0000"));
        assertThat(bad).startsWith("HTTP/1.1 400").contains("invalid_request_error");
        goodRequestStillServed();
    }

    @Test void clientsThatStallOrLeaveMidBodyHoldNothingOthersNeed() throws Exception {
        List<Socket> stalled = new ArrayList<>();
        try {
            for (int i = 0; i < 16; i++) {   // more stalled clients than the scheduler has places and queue together
                Socket c = new Socket("127.0.0.1", s.port);
                c.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        + "Content-Length: 400\r\n\r\n{\"prompt\": \"The").getBytes(StandardCharsets.UTF_8));
                c.getOutputStream().flush();
                stalled.add(c);
            }
            goodRequestStillServed();
            assertThat(ServerFixture.json(s.get("/status")).get("waiting").asInt()).as("stalled bodies hold no queue place").isZero();
            for (int i = 0; i < stalled.size(); i += 2) stalled.get(i).close();   // half of them leave mid-body
            goodRequestStillServed();
        } finally {
            for (Socket c : stalled) c.close();
        }
        goodRequestStillServed();
        var status = ServerFixture.json(s.get("/status"));
        assertThat(status.get("running").asInt() + status.get("waiting").asInt()).isZero();
    }

    @Test void aFloodPastTheQueueIsRefusedWith429AndTheAdmittedAnswerExactly() throws Exception {
        List<CompletableFuture<HttpResponse<String>>> flood = new ArrayList<>();
        String body = ServerFixture.JSON.writeValueAsString(Map.of("prompt", "The ls command", "max_tokens", 4, "temperature", 0));
        for (int i = 0; i < 24; i++) {
            flood.add(s.http.sendAsync(s.request("/v1/completions").header("Content-Type", "application/json")
                    .POST(java.net.http.HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString()));
        }
        int ok = 0, refused = 0;
        for (var f : flood) {
            HttpResponse<String> r = f.get();
            if (r.statusCode() == 429) {
                refused++;
                assertThat(r.headers().firstValue("Retry-After")).isPresent();
                assertThat(ServerFixture.json(r).at("/error/code").asText()).isEqualTo("rate_limit_exceeded");
            } else {
                assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
                assertThat(ServerFixture.json(r).at("/choices/0/text").asText()).isEqualTo(want);
                ok++;
            }
        }
        assertThat(ok).as("at least the places and the queue were served").isGreaterThanOrEqualTo(2);
        assertThat(ok + refused).isEqualTo(24);
        goodRequestStillServed();
    }
}
