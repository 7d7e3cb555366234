package dev.cmf4j.api;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.TextCodec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Flow;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The public API on the bundled model: what it returns equals the engine run directly (what {@code cmf generate} runs). */
class CmfApiTest {
    static Path file;
    static CmfModel model;
    static final ObjectMapper JSON = new ObjectMapper();

    @BeforeAll static void open() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve("models/default.cmf"))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above the working directory").isNotNull();
        file = dir.resolve("models/default.cmf");
        model = Cmf.open(file, ModelOptions.defaults().withContextLength(512));
    }

    @AfterAll static void close() { if (model != null) model.close(); }

    /** {@code cmf generate FILE --ids ... --greedy -n N}: a session and a generator, no end-of-sequence stop. */
    static int[] engineGreedy(int[] prompt, int n, boolean stopAtEos) {
        try (Model m = Model.open(file)) {
            Set<Integer> eos = stopAtEos ? TextCodec.of(m.file()).eosIds() : Set.of();
            Session s = new Session(m.graph(), prompt.length + n + 1);
            return new Generator(s, new Sampler(SamplingParams.GREEDY), eos, List.of()).generate(prompt, n, null, null).tokens();
        }
    }

    static List<Message> ask(String q) { return List.of(Message.system("Be brief."), Message.user(q)); }

    @Test void greedyIdsEqualWhatCmfGenerateRuns() {
        int[] prompt = model.tokenize("The ls command");
        List<Integer> streamed = new ArrayList<>();
        Reply r = model.generate(prompt, Sampling.greedy().withMaxTokens(24).withIgnoreEos(true), streamed::add);
        assertThat(r.tokens()).hasSize(24).containsExactly(engineGreedy(prompt, 24, false));
        assertThat(streamed).containsExactly(java.util.Arrays.stream(r.tokens()).boxed().toArray(Integer[]::new));
        assertThat(r.text()).isEqualTo(model.detokenize(r.tokens())).isNotBlank();
        assertThat(r.finish()).isEqualTo(Reply.Finish.LENGTH);
        assertThat(r.promptTokens()).isEqualTo(prompt.length);
    }

    @Test void streamedChatIsTheEnginesGreedyReplyToTheRenderedTemplate() {
        Chat chat = model.newChat();
        String prompt = chat.render(ask("What does tar do?"));
        assertThat(prompt).isEqualTo("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat does tar do?<|im_end|>\n<|im_start|>assistant\n");
        StringBuilder pieces = new StringBuilder();
        List<String> each = new ArrayList<>();
        Reply r = chat.stream(ask("What does tar do?"), Sampling.greedy().withMaxTokens(40), p -> { pieces.append(p); each.add(p); });
        int[] ids = model.codec().tokenizer().encodeIds(prompt, false);
        int[] alone = engineGreedy(ids, 40, true);
        assertThat(r.tokens()).containsExactly(alone);
        assertThat(pieces.toString()).isEqualTo(r.text());
        assertThat(each.size()).as("streamed in pieces").isGreaterThan(1);
        assertThat(r.finish()).isEqualTo(alone.length < 40 ? Reply.Finish.STOP : Reply.Finish.LENGTH);
    }

    @Test void twoThreadsChattingAtOnceEachGetTheirOwnReplyAsIfAlone() throws Exception {
        Chat chat = model.newChat();
        Sampling s = Sampling.greedy().withMaxTokens(32).withIgnoreEos(true);
        Reply a = chat.complete(ask("What does grep do?"), s), b = chat.complete(ask("How do I list files?"), s);
        assertThat(a.text()).isNotEqualTo(b.text());
        CountDownLatch go = new CountDownLatch(1);
        CompletableFuture<Reply> ta = new CompletableFuture<>(), tb = new CompletableFuture<>();
        Thread.ofPlatform().start(() -> { try { go.await(); ta.complete(chat.complete(ask("What does grep do?"), s)); } catch (Throwable e) { ta.completeExceptionally(e); } });
        Thread.ofPlatform().start(() -> { try { go.await(); tb.complete(chat.complete(ask("How do I list files?"), s)); } catch (Throwable e) { tb.completeExceptionally(e); } });
        go.countDown();
        assertThat(ta.get(60, TimeUnit.SECONDS).tokens()).containsExactly(a.tokens());
        assertThat(tb.get(60, TimeUnit.SECONDS).tokens()).containsExactly(b.tokens());
    }

    @Test void closingTheModelWhileAStreamRunsEndsItWithAClearError() throws Exception {
        CmfModel own = Cmf.open(file, ModelOptions.defaults().withContextLength(1024).withThreads(1));
        CountDownLatch streaming = new CountDownLatch(1);
        CompletableFuture<Reply> run = new CompletableFuture<>();
        Thread.ofPlatform().start(() -> {
            try {
                run.complete(own.newChat().stream(ask("Tell me everything about tar."), Sampling.greedy().withMaxTokens(900).withIgnoreEos(true),
                        p -> streaming.countDown()));
            } catch (Throwable e) {
                run.completeExceptionally(e);
            }
        });
        assertThat(streaming.await(60, TimeUnit.SECONDS)).isTrue();
        own.close();
        assertThatThrownBy(() -> run.get(30, TimeUnit.SECONDS)).cause()
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.CLOSED))
                .hasMessageContaining("closed while this generation ran");
        assertThatThrownBy(() -> own.newChat().complete(ask("again"), Sampling.greedy()))
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.CLOSED));
    }

    @Test void aPublisherEmitsTheSameReplyOnDemandThenDone() throws Exception {
        Chat chat = model.newChat();
        Sampling s = Sampling.greedy().withMaxTokens(24);
        Reply direct = chat.complete(ask("What does ls do?"), s);
        List<ChatEvent> events = new ArrayList<>();
        CompletableFuture<Void> done = new CompletableFuture<>();
        chat.publisher(ask("What does ls do?"), s).subscribe(new Flow.Subscriber<>() {
            Flow.Subscription sub;

            @Override public void onSubscribe(Flow.Subscription x) { sub = x; x.request(1); }

            @Override public void onNext(ChatEvent e) { events.add(e); sub.request(1); }

            @Override public void onError(Throwable t) { done.completeExceptionally(t); }

            @Override public void onComplete() { done.complete(null); }
        });
        done.get(60, TimeUnit.SECONDS);
        assertThat(events.getLast()).isInstanceOfSatisfying(ChatEvent.Done.class, d -> assertThat(d.reply().tokens()).containsExactly(direct.tokens()));
        StringBuilder text = new StringBuilder();
        for (ChatEvent e : events.subList(0, events.size() - 1)) text.append(((ChatEvent.Text) e).text());
        assertThat(text.toString()).isEqualTo(direct.text());
    }

    @Test void aCancelledSubscriptionStopsAndTheModelGoesOn() throws Exception {
        Chat chat = model.newChat();
        List<ChatEvent> events = new java.util.concurrent.CopyOnWriteArrayList<>();
        CountDownLatch first = new CountDownLatch(1);
        chat.publisher(ask("Tell me about tar."), Sampling.greedy().withMaxTokens(200).withIgnoreEos(true)).subscribe(new Flow.Subscriber<>() {
            Flow.Subscription sub;

            @Override public void onSubscribe(Flow.Subscription x) { sub = x; x.request(1); }

            @Override public void onNext(ChatEvent e) { events.add(e); sub.cancel(); first.countDown(); }

            @Override public void onError(Throwable t) { events.add(new ChatEvent.Text("error " + t)); }

            @Override public void onComplete() { events.add(new ChatEvent.Text("complete")); }
        });
        assertThat(first.await(60, TimeUnit.SECONDS)).isTrue();
        Reply after = chat.complete(ask("What does ls do?"), Sampling.greedy().withMaxTokens(8));
        assertThat(after.tokens()).isNotEmpty();
        assertThat(events).hasSize(1).first().isInstanceOf(ChatEvent.Text.class);
    }

    @Test void jsonSchemaOutputParsesAndFollowsTheSchema() throws Exception {
        Chat chat = model.newChat().withJsonSchema("""
                {"type": "object", "properties": {"command": {"type": "string"}, "safe": {"type": "boolean"}},
                 "required": ["command", "safe"]}""");
        Reply r = chat.complete(ask("Describe rm as JSON."), Sampling.greedy().withMaxTokens(60));
        JsonNode doc = JSON.readTree(r.text());
        assertThat(doc.get("command").isTextual()).isTrue();
        assertThat(doc.get("safe").isBoolean()).isTrue();
        assertThat(r.finish()).isIn(Reply.Finish.STOP, Reply.Finish.LENGTH);   // a budget-closed document ends at the limit
    }

    @Test void aRequiredToolCallRoundTrip() throws Exception {
        Tool manual = new Tool("get_manual", "Reads a command's manual page",
                "{\"type\": \"object\", \"properties\": {\"command\": {\"type\": \"string\"}}, \"required\": [\"command\"]}");
        Chat chat = model.newChat().withTools(List.of(manual)).withToolChoice(Chat.ToolChoice.REQUIRED);
        List<Message> messages = new ArrayList<>(ask("What does tar do?"));
        StringBuilder shown = new StringBuilder();
        Reply call = chat.stream(messages, Sampling.greedy().withMaxTokens(120), shown::append);
        assertThat(call.finish()).isEqualTo(Reply.Finish.TOOL_CALLS);
        assertThat(call.toolCalls()).singleElement().satisfies(c -> {
            assertThat(c.name()).isEqualTo("get_manual");
            assertThat(JSON.readTree(c.argumentsJson()).get("command").isTextual()).isTrue();
        });
        assertThat(shown.toString()).as("no tool-call markup shown as text").doesNotContain("<tool_call>").isEqualTo(call.text());
        messages.add(call.asMessage());
        messages.add(Message.toolResult(call.toolCalls().getFirst(), "tar - an archiving utility"));
        Chat answer = chat.withToolChoice(Chat.ToolChoice.AUTO);
        assertThat(answer.render(messages)).contains("tar - an archiving utility");
        Reply r = answer.complete(messages, Sampling.greedy().withMaxTokens(24));
        assertThat(r.tokens()).isNotEmpty();
        assertThat(r.finish()).isIn(Reply.Finish.STOP, Reply.Finish.LENGTH);
    }

    @Test void ownThreadsGiveTheSameGreedyReply() {
        int[] prompt = model.tokenize("usage: tar [options]");
        Sampling s = Sampling.greedy().withMaxTokens(12).withIgnoreEos(true);
        try (CmfModel one = Cmf.open(file.toString(), ModelOptions.defaults().withThreads(1).withContextLength(256))) {
            assertThat(one.generate(prompt, s, null).tokens()).containsExactly(model.generate(prompt, s, null).tokens());
            assertThat(one.contextLength()).isEqualTo(256);
        }
    }

    @Test void badInputIsAClearError() {
        assertThatThrownBy(() -> Cmf.open(file, ModelOptions.defaults().withSkill("code")))
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.BAD_INPUT))
                .hasMessageContaining("unknown skill 'code'");
        assertThatThrownBy(() -> Cmf.open(file, ModelOptions.defaults().withTask("coding")))
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.BAD_INPUT))
                .hasMessageContaining("unknown task 'coding'");
        assertThatThrownBy(() -> Cmf.open("hf://org/bad--name", ModelOptions.defaults()))
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.BAD_INPUT))
                .hasMessageContaining("not a valid Hub name");
        assertThatThrownBy(() -> Cmf.open(file.resolveSibling("missing.cmf")))
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.BAD_INPUT))
                .hasMessageContaining("no such model file");
        assertThatThrownBy(() -> model.generate(new int[] {1, 999_999}, Sampling.greedy(), null))
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.BAD_INPUT))
                .hasMessageContaining("999999");
        assertThatThrownBy(() -> model.generate(new int[600], Sampling.greedy(), null))
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.CONTEXT_LIMIT));
        assertThatThrownBy(() -> model.newChat().withJsonSchema("{\"anyOf\": []}"))
                .isInstanceOfSatisfying(InferenceException.class, e -> assertThat(e.kind()).isEqualTo(InferenceException.Kind.BAD_INPUT))
                .hasMessageContaining("anyOf");
        assertThatThrownBy(() -> model.newChat().complete(List.of(), Sampling.greedy()))
                .isInstanceOf(InferenceException.class).hasMessageContaining("at least one message");
        assertThatThrownBy(() -> Sampling.greedy().withTopP(0f)).isInstanceOf(IllegalArgumentException.class).hasMessageContaining("topP");
        assertThatThrownBy(() -> ModelOptions.defaults().withDevice("tpu")).isInstanceOf(IllegalArgumentException.class).hasMessageContaining("tpu");
    }
}
