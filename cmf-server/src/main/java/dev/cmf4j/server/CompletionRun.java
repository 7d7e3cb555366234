package dev.cmf4j.server;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.chat.ToolCall;
import dev.cmf4j.chat.ToolCallParser;
import dev.cmf4j.chat.ToolCallStream;
import dev.cmf4j.runtime.Completion;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.TokenLogprobs;
import dev.cmf4j.runtime.TokenSink;

import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.UUID;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * One completion request on its way through the scheduler: its {@code n} choices' sinks hand what the loop thread
 * produces to a queue, and the request's own (virtual) thread turns it into SSE chunks or one JSON response. A
 * client that goes away mid-stream is noticed at the next write and its sequences are cancelled.
 */
final class CompletionRun {
    /** What a choice's sink hands over: a piece of text, or the end; each with the log-probabilities since the last. */
    private sealed interface Event permits Piece, End {}

    private record Piece(int choice, String text, List<TokenLogprobs> logprobs) implements Event {}

    private record End(int choice, Completion completion, List<TokenLogprobs> logprobs) implements Event {}

    private final CompletionRequest req;
    private final ServedModel model;
    private final ObjectMapper json;
    private final String id;
    private final long created = System.currentTimeMillis() / 1000;
    private final LinkedBlockingQueue<Event> events = new LinkedBlockingQueue<>();
    private final Completion[] ends;
    private List<Scheduler.Ticket> tickets = List.of();
    /** The replica the choices run on (all of them on one: they share the prompt), set by {@link #submit}. */
    private ServedModel.Replica replica;

    CompletionRun(CompletionRequest req, ServedModel model, ObjectMapper json) {
        this.req = req;
        this.model = model;
        this.json = json;
        this.id = (req.chat() ? "chatcmpl-" : "cmpl-") + UUID.randomUUID().toString().replace("-", "");
        this.ends = new Completion[req.n()];
    }

    /** A choice's sink (called on the scheduler's thread: it only queues). */
    private final class Choice implements TokenSink {
        private final int index;
        private final ServedModel.Health health;
        private List<TokenLogprobs> pending = new ArrayList<>();

        Choice(int index, ServedModel.Health health) {
            this.index = index;
            this.health = health;
        }

        @Override public void token(int id, TokenLogprobs lp) { if (lp != null) pending.add(lp); }

        @Override public void text(String piece) { events.add(new Piece(index, piece, take())); }

        @Override public void finished(Completion c) {
            health.ended(c.finish());
            events.add(new End(index, c, take()));
        }

        private List<TokenLogprobs> take() {
            List<TokenLogprobs> t = pending;
            pending = new ArrayList<>();
            return t;
        }
    }

    /**
     * Queues the choices.
     *
     * @throws Scheduler.QueueFull past the server's queue limit
     */
    void submit(Duration timeout) {
        ServedModel.Replica r = model.route();
        List<Choice> sinks = new ArrayList<>();
        for (int i = 0; i < req.n(); i++) sinks.add(new Choice(i, r.health()));
        tickets = r.scheduler().submitAll(req.generations(model, timeout, sinks));
        replica = r;
    }

    /** The response's id ({@code chatcmpl-...} or {@code cmpl-...}). */
    String id() { return id; }

    /** The scheduler's ids of the choices' sequences, in choice order (after {@link #submit}). */
    long[] sequences() { return tickets.stream().mapToLong(Scheduler.Ticket::id).toArray(); }

    /** Waits for every choice and returns the response body (a 408 or 500 ApiError when a choice timed out or failed). */
    ObjectNode collect() throws InterruptedException {
        List<List<TokenLogprobs>> lps = new ArrayList<>();
        for (int i = 0; i < req.n(); i++) lps.add(new ArrayList<>());
        for (int left = req.n(); left > 0; ) {
            switch (events.take()) {
                case Piece p -> lps.get(p.choice()).addAll(p.logprobs());   // the text is the completion's
                case End e -> { ends[e.choice()] = e.completion(); lps.get(e.choice()).addAll(e.logprobs()); left--; }
            }
        }
        for (Completion c : ends) failIfBroken(c);
        ObjectNode o = head(req.chat() ? "chat.completion" : "text_completion");
        ArrayNode choices = o.putArray("choices");
        for (int i = 0; i < req.n(); i++) {
            ObjectNode c = choices.addObject();
            c.put("index", i);
            String finish = finishReason(ends[i]);
            if (req.chat()) {
                ObjectNode m = c.putObject("message");
                m.put("role", "assistant");
                String reply = ends[i].text();
                if (req.reasoning()) {
                    ReasoningSplitter split = new ReasoningSplitter(req.reasoningInside());
                    ReasoningSplitter.Out a = split.push(reply), b = split.finish();
                    String reasoning = a.reasoning() + b.reasoning();
                    reply = a.content() + b.content();
                    if (!reasoning.isEmpty()) m.put("reasoning_content", reasoning);
                }
                m.put("content", reply);
                ToolCallParser.Result calls = req.toolCalls() ? ToolCallParser.parse(reply) : null;
                if (calls != null && calls.hasCalls()) {
                    m.put("content", calls.content().isEmpty() ? null : calls.content());
                    ArrayNode tc = m.putArray("tool_calls");
                    for (ToolCall call : calls.calls()) toolCall(tc.addObject(), call);
                    finish = "tool_calls";
                }
            } else {
                c.put("text", ends[i].text());
            }
            logprobs(c, lps.get(i));
            c.put("finish_reason", finish);
        }
        o.set("usage", usage());
        return o;
    }

    /**
     * Streams the choices as SSE chunks ending in {@code data: [DONE]}. Returns false when the client went away (its
     * sequences are then cancelled).
     */
    boolean stream(OutputStream out) throws InterruptedException {
        ToolCallStream[] tools = new ToolCallStream[req.n()];
        ReasoningSplitter[] thinking = new ReasoningSplitter[req.n()];
        for (int i = 0; i < req.n(); i++) {
            if (req.chat() && req.toolCalls()) tools[i] = new ToolCallStream();
            if (req.chat() && req.reasoning()) thinking[i] = new ReasoningSplitter(req.reasoningInside());
        }
        try {
            if (req.chat()) for (int i = 0; i < req.n(); i++) {
                ObjectNode c = chunk();
                ObjectNode ch = c.withArray("choices").addObject();
                ch.put("index", i);
                ch.putObject("delta").put("role", "assistant").put("content", "");
                ch.putNull("logprobs");
                ch.putNull("finish_reason");
                send(out, c);
            }
            for (int left = req.n(); left > 0; ) {
                Event ev = events.take();
                ObjectNode c = chunk();
                ObjectNode ch = c.withArray("choices").addObject();
                switch (ev) {
                    case Piece p -> {
                        if (req.chat()) {
                            chatDelta(out, p.choice(), p.text(), p.logprobs(), false, thinking[p.choice()], tools[p.choice()]);
                            continue;
                        }
                        ch.put("index", p.choice());
                        ch.put("text", p.text());
                        logprobs(ch, p.logprobs());
                        ch.putNull("finish_reason");
                    }
                    case End e -> {
                        left--;
                        ends[e.choice()] = e.completion();
                        if (e.completion().finish() == Completion.Finish.TIMEOUT || e.completion().finish() == Completion.Finish.ERROR) {
                            try {
                                failIfBroken(e.completion());
                            } catch (ApiError err) {
                                send(out, err.body(json));
                                continue;
                            }
                        }
                        String finish = finishReason(e.completion());
                        List<TokenLogprobs> lps = e.logprobs();
                        if (req.chat()) {
                            chatDelta(out, e.choice(), "", lps, true, thinking[e.choice()], tools[e.choice()]);
                            lps = List.of();
                            if (tools[e.choice()] != null && tools[e.choice()].calls() > 0) finish = "tool_calls";
                        }
                        ch.put("index", e.choice());
                        if (req.chat()) ch.putObject("delta");
                        else ch.put("text", "");
                        logprobs(ch, lps);
                        ch.put("finish_reason", finish);
                    }
                }
                send(out, c);
            }
            if (req.includeUsage()) {
                ObjectNode c = chunk();
                c.putArray("choices");
                c.set("usage", usage());
                send(out, c);
            }
            out.write("data: [DONE]\n\n".getBytes(StandardCharsets.UTF_8));
            out.flush();
            return true;
        } catch (IOException | RuntimeException e) {   // the client went away (Helidon reports a closed socket unchecked)
            cancel();
            return false;
        }
    }

    /**
     * A chat choice's piece of text (or its end) through its reasoning splitter and tool-call splitter, when it has
     * them: a {@code reasoning_content} delta, then {@code content} and {@code tool_calls} deltas; the log-probabilities
     * go with the first chunk sent.
     */
    private void chatDelta(OutputStream out, int choice, String text, List<TokenLogprobs> lps, boolean end,
                           ReasoningSplitter thinking, ToolCallStream tools) throws IOException {
        String reasoning = "", content = text;
        if (thinking != null) {
            ReasoningSplitter.Out o = thinking.push(text);
            reasoning = o.reasoning();
            content = o.content();
            if (end) {
                ReasoningSplitter.Out rest = thinking.finish();
                reasoning += rest.reasoning();
                content += rest.content();
            }
        }
        if (!reasoning.isEmpty()) {
            ObjectNode c = chunk();
            ObjectNode ch = c.withArray("choices").addObject();
            ch.put("index", choice);
            ch.putObject("delta").put("reasoning_content", reasoning);
            logprobs(ch, lps);
            ch.putNull("finish_reason");
            send(out, c);
            lps = List.of();
        }
        if (tools != null) {
            ToolCallStream.Out o = tools.push(content);
            if (end) {
                ToolCallStream.Out rest = tools.finish();
                List<dev.cmf4j.chat.ToolCall> all = new java.util.ArrayList<>(o.calls());
                all.addAll(rest.calls());
                o = new ToolCallStream.Out(o.content() + rest.content(), all);
            }
            delta(out, choice, o, end ? List.of() : lps, tools);
        } else if (!content.isEmpty() || !end && !lps.isEmpty()) {
            ObjectNode c = chunk();
            ObjectNode ch = c.withArray("choices").addObject();
            ch.put("index", choice);
            ch.putObject("delta").put("content", content);
            logprobs(ch, lps);
            ch.putNull("finish_reason");
            send(out, c);
        }
    }

    /** A chat delta of what a choice's tool-call splitter released: its content, then each call (nothing if empty). */
    private void delta(OutputStream out, int choice, ToolCallStream.Out released, List<TokenLogprobs> lps, ToolCallStream calls) throws IOException {
        if (!released.content().isEmpty() || !lps.isEmpty() && released.calls().isEmpty()) {
            ObjectNode c = chunk();
            ObjectNode ch = c.withArray("choices").addObject();
            ch.put("index", choice);
            ch.putObject("delta").put("content", released.content());
            logprobs(ch, lps);
            ch.putNull("finish_reason");
            send(out, c);
            lps = List.of();
        }
        int first = calls.calls() - released.calls().size();
        for (int k = 0; k < released.calls().size(); k++) {
            ObjectNode c = chunk();
            ObjectNode ch = c.withArray("choices").addObject();
            ch.put("index", choice);
            ObjectNode call = ch.putObject("delta").putArray("tool_calls").addObject();
            call.put("index", first + k);
            toolCall(call, released.calls().get(k));
            logprobs(ch, k == 0 ? lps : List.of());
            ch.putNull("finish_reason");
            send(out, c);
        }
    }

    /** OpenAI's {@code {"id", "type": "function", "function": {"name", "arguments"}}} (arguments as a JSON string). */
    private static void toolCall(ObjectNode o, ToolCall call) {
        o.put("id", "call_" + UUID.randomUUID().toString().replace("-", "").substring(0, 24));
        o.put("type", "function");
        o.putObject("function").put("name", call.name()).put("arguments", call.argumentsJson());
    }

    /** Cancels every choice; their ends still arrive (to {@link #collect}, which then fails). */
    void cancelNow() {
        for (Scheduler.Ticket t : tickets) t.cancel();
    }

    /** Cancels every choice and waits (briefly: within a step) until the scheduler has ended them. */
    void cancel() throws InterruptedException {
        cancelNow();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (java.util.Arrays.asList(ends).contains(null) && System.nanoTime() < deadline)
            if (events.poll(100, TimeUnit.MILLISECONDS) instanceof End e) ends[e.choice()] = e.completion();
    }

    /**
     * The per-request log's tail: prompt, cached and generated tokens, time to first token, decode speed, and with
     * several replicas the one that ran it ({@code replica=1/cuda:1}).
     */
    String summary() {
        int gen = 0;
        long ttft = -1;
        double tps = 0;
        String finish = "?";
        for (Completion c : ends) {
            if (c == null) continue;
            gen += c.tokens().length;
            if (c.firstTokenNanos() >= 0 && (ttft < 0 || c.firstTokenNanos() < ttft)) ttft = c.firstTokenNanos();
            tps += c.decodeTokensPerSecond();
            finish = c.finish().name().toLowerCase(Locale.ROOT);
        }
        return String.format(Locale.ROOT, "prompt=%d cached=%d generated=%d ttft_ms=%s tok_s=%.1f finish=%s",
                req.prompt().length, ends[0] == null ? 0 : ends[0].cachedTokens(), gen,
                ttft < 0 ? "-" : String.format(Locale.ROOT, "%.1f", ttft / 1e6), tps, finish)
                + (replica == null || model.replicas().size() == 1 ? "" : " replica=" + replica.index() + "/" + replica.device());
    }

    private static void failIfBroken(Completion c) {
        if (c.finish() == Completion.Finish.TIMEOUT)
            throw new ApiError(408, "timeout", null, "timeout", "the request ran past the server's timeout after " + c.tokens().length + " tokens");
        if (c.finish() == Completion.Finish.ERROR || c.finish() == Completion.Finish.CANCELLED)
            throw new ApiError(500, "server_error", null, null, "generation failed: " + c.error());
    }

    private static String finishReason(Completion c) {
        return c.finish() == Completion.Finish.STOP ? "stop" : "length";
    }

    private ObjectNode head(String object) {
        ObjectNode o = json.createObjectNode();
        o.put("id", id);
        o.put("object", object);
        o.put("created", created);
        o.put("model", model.name());
        return o;
    }

    private ObjectNode chunk() {
        ObjectNode o = head(req.chat() ? "chat.completion.chunk" : "text_completion");
        o.putArray("choices");
        return o;
    }

    private ObjectNode usage() {
        ObjectNode u = json.createObjectNode();
        int gen = 0;
        for (Completion c : ends) gen += c == null ? 0 : c.tokens().length;
        u.put("prompt_tokens", req.prompt().length);
        u.put("completion_tokens", gen);
        u.put("total_tokens", req.prompt().length + gen);
        u.putObject("prompt_tokens_details").put("cached_tokens", ends[0] == null ? 0 : ends[0].cachedTokens());
        return u;
    }

    /** OpenAI's chat {@code logprobs.content} or the legacy completions' {@code logprobs} object; null when not asked. */
    private void logprobs(ObjectNode choice, List<TokenLogprobs> lps) {
        if (req.topLogprobs() < 0) { choice.putNull("logprobs"); return; }
        if (req.chat()) {
            ArrayNode content = choice.putObject("logprobs").putArray("content");
            for (TokenLogprobs lp : lps) {
                ObjectNode t = token(content.addObject(), lp.id(), lp.logprob());
                ArrayNode top = t.putArray("top_logprobs");
                for (int k = 0; k < lp.topIds().length; k++) token(top.addObject(), lp.topIds()[k], lp.topLogprobs()[k]);
            }
        } else {
            ObjectNode o = choice.putObject("logprobs");
            ArrayNode tokens = o.putArray("tokens"), values = o.putArray("token_logprobs"), top = o.putArray("top_logprobs");
            for (TokenLogprobs lp : lps) {
                tokens.add(piece(lp.id()));
                values.add(lp.logprob());
                ObjectNode alt = top.addObject();
                for (int k = 0; k < lp.topIds().length; k++) alt.put(piece(lp.topIds()[k]), lp.topLogprobs()[k]);
            }
        }
    }

    private ObjectNode token(ObjectNode t, int id, float logprob) {
        String s = piece(id);
        t.put("token", s);
        t.put("logprob", logprob);
        ArrayNode bytes = t.putArray("bytes");
        for (byte b : s.getBytes(StandardCharsets.UTF_8)) bytes.add(b & 0xff);
        return t;
    }

    private String piece(int id) { return model.codec().tokenizer().decode(new int[] {id}, false); }

    private void send(OutputStream out, ObjectNode chunk) throws IOException {
        try {
            out.write(("data: " + json.writeValueAsString(chunk) + "\n\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (UncheckedIOException e) {
            throw e.getCause();
        }
    }
}
