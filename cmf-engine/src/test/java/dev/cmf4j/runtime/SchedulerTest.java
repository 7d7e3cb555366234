package dev.cmf4j.runtime;

import dev.cmf4j.model.Model;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.IntConsumer;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The scheduler on the bundled model ({@code models/default.cmf}): batched output equals each request alone. */
class SchedulerTest {
    static Model model;
    static TextCodec codec;
    static final String[] TEXTS = {"The ls command", "What does grep do?", "To configure the network,",
            "Copyright (C) 2004 Free Software Foundation", "usage: tar [options]", "The file system",
            "Python's json module", "A"};

    @BeforeAll static void open() {
        model = Model.open(bundled());
        codec = TextCodec.of(model.file());
    }

    /** models/default.cmf above the working directory. */
    static Path bundled() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve("models/default.cmf"))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above the working directory").isNotNull();
        return dir.resolve("models/default.cmf");
    }

    @AfterAll static void close() { if (model != null) model.close(); }

    /** Records what a sink hears; {@code onToken} runs on the loop thread after each token. */
    static final class Collect implements TokenSink {
        final List<Integer> tokens = new ArrayList<>();
        final List<TokenLogprobs> logprobs = new ArrayList<>();
        final StringBuilder text = new StringBuilder();
        final CompletableFuture<Completion> done = new CompletableFuture<>();
        final CountDownLatch started = new CountDownLatch(1);
        IntConsumer onToken = id -> {};

        @Override public void started(int promptTokens, int cachedTokens) { started.countDown(); }

        @Override public void token(int id, TokenLogprobs lp) {
            tokens.add(id);
            if (lp != null) logprobs.add(lp);
            onToken.accept(id);
        }

        @Override public void text(String piece) { text.append(piece); }

        @Override public void finished(Completion c) { done.complete(c); }

        Completion await() throws Exception { return done.get(60, TimeUnit.SECONDS); }
    }

    /** What {@code cmf generate --greedy} computes: one session alone, exactly n tokens. */
    static int[] alone(int[] prompt, int n) {
        Session s = new Session(model.graph(), prompt.length + n + 1);
        return new Generator(s, new Sampler(SamplingParams.GREEDY), Set.of(), List.of()).generate(prompt, n, null, null).tokens();
    }

    static Scheduler scheduler(int parallel, int maxQueue) {
        return new Scheduler(model.graph(), codec, new Scheduler.Config(parallel, 512, maxQueue, 64, 16, parallel));
    }

    @Test void greedyOutputEqualsGenerateAloneAndAmongSevenOthers() throws Exception {
        int n = 20;
        int[][] prompts = Arrays.stream(TEXTS).map(codec::encode).toArray(int[][]::new);
        int[][] want = new int[prompts.length][];
        for (int i = 0; i < prompts.length; i++) want[i] = alone(prompts[i], n);
        try (Scheduler s = scheduler(8, 16)) {
            Collect solo = new Collect();
            s.submit(GenerationRequest.of(prompts[0], n, SamplingParams.GREEDY, Set.of(), solo));
            Completion c = solo.await();
            assertThat(c.tokens()).containsExactly(want[0]);
            assertThat(c.finish()).isEqualTo(Completion.Finish.LENGTH);
            assertThat(solo.tokens).containsExactly(Arrays.stream(want[0]).boxed().toArray(Integer[]::new));
            assertThat(solo.text.toString()).isEqualTo(c.text()).isEqualTo(codec.tokenizer().decode(want[0], true));

            // eight at once, with different prompt lengths, budgets and samplers: the greedy ones stay exact
            List<Collect> sinks = new ArrayList<>();
            for (int i = 0; i < prompts.length; i++) {
                Collect k = new Collect();
                sinks.add(k);
                SamplingParams p = i % 3 == 2 ? new SamplingParams(0.9f, 40, 0.95f, 0f, 1.1f, 0f, 7L + i) : SamplingParams.GREEDY;
                s.submit(GenerationRequest.of(prompts[i], i % 3 == 2 ? 5 + i : n, p, Set.of(), k));
            }
            for (int i = 0; i < prompts.length; i++) {
                Completion ci = sinks.get(i).await();
                if (i % 3 == 2) assertThat(ci.tokens()).hasSize(5 + i);
                else assertThat(ci.tokens()).as("request " + i + " among 8").containsExactly(want[i]);
            }
            assertThat(s.stats().running()).isZero();
            assertThat(s.stats().generatedTokens()).isEqualTo(n + 6L * n + (5 + 2) + (5 + 5));
        }
    }

    /**
     * Speculative decoding in the scheduler: eight requests at once drafted by the bundled model through an int8 KV
     * cache (most drafts accepted, some not): each greedy request gives exactly what it gives alone (one with a
     * repetition penalty, one with a stop id, one with a short budget), a sampled one its length; a request with
     * log-probabilities runs plainly among them.
     */
    @Test void draftedRequestsGiveTheirAloneOutput() throws Exception {
        int n = 24;
        int[][] prompts = Arrays.stream(TEXTS).map(codec::encode).toArray(int[][]::new);
        int[][] want = new int[prompts.length][];
        for (int i = 0; i < prompts.length; i++) want[i] = alone(prompts[i], n);
        SamplingParams penalised = new SamplingParams(0f, 0, 1f, 0f, 1.3f, 0f, null);
        int[] wantPenalised;
        {
            Session s = new Session(model.graph(), 128);
            wantPenalised = new Generator(s, new Sampler(penalised), Set.of(), List.of()).generate(prompts[3], n, null, null).tokens();
        }
        try (Model draftModel = Model.open(bundled(), null, new dev.cmf4j.backend.cpu.CpuBackend(), List.of(),
                h -> new dev.cmf4j.model.AttentionMemory(null, dev.cmf4j.backend.KvType.Q8));
             Scheduler s = new Scheduler(model.graph(), codec, new Scheduler.Config(8, 512, 16, 64, 16, 8),
                     new Scheduler.Draft(draftModel.graph(), 4))) {
            List<Collect> sinks = new ArrayList<>();
            for (int i = 0; i < prompts.length; i++) {
                Collect k = new Collect();
                sinks.add(k);
                GenerationRequest r = GenerationRequest.of(prompts[i], i == 5 ? 9 : n, i == 3 ? penalised
                        : i == 6 ? new SamplingParams(0.8f, 20, 0.9f, 0f, 1f, 0f, 11L) : SamplingParams.GREEDY,
                        i == 2 ? Set.of(want[2][10]) : Set.of(), k);
                if (i == 4) r = new GenerationRequest(r.prompt(), r.maxTokens(), r.sampling(), r.eos(), r.stops(), r.presencePenalty(),
                        r.frequencyPenalty(), r.logitBias(), 2, r.timeout(), r.sink(), r.json(), r.overlay());
                s.submit(r);
            }
            for (int i = 0; i < prompts.length; i++) {
                Completion c = sinks.get(i).await();
                if (i == 3) assertThat(c.tokens()).as("penalised").containsExactly(wantPenalised);
                else if (i == 5) assertThat(c.tokens()).containsExactly(Arrays.copyOf(want[5], 9));
                else if (i == 6) assertThat(c.tokens()).hasSize(n);
                else if (i == 2) {
                    int stop = 0;
                    while (want[2][stop] != want[2][10]) stop++;
                    assertThat(c.tokens()).containsExactly(Arrays.copyOf(want[2], stop));
                    assertThat(c.finish()).isEqualTo(Completion.Finish.STOP);
                } else assertThat(c.tokens()).as("request " + i).containsExactly(want[i]);
                assertThat(sinks.get(i).text.toString()).isEqualTo(c.text());
                if (i == 4) assertThat(sinks.get(i).logprobs).hasSize(n);
            }
            Scheduler.Stats st = s.stats();
            System.out.printf("scheduler with a draft: %d drafted, %d accepted, %d steps for %d tokens%n", st.draftedTokens(),
                    st.acceptedTokens(), st.steps(), st.generatedTokens());
            assertThat(st.draftedTokens()).isPositive();
            assertThat(st.acceptedTokens()).isPositive().isLessThanOrEqualTo(st.draftedTokens());
            assertThat(st.running()).isZero();
        }
    }

    /** A draft of fewer positions than the server's context drafts for the sequences that fit it, beside one that does not. */
    @Test void aDraftWithAShorterContextStillDraftsForTheSequencesThatFitIt() throws Exception {
        int n = 24;
        int[] shortPrompt = codec.encode(TEXTS[1]);
        int[] longPrompt = new int[40];
        for (int i = 0; i < longPrompt.length; i++) longPrompt[i] = shortPrompt[i % shortPrompt.length];
        int[] wantShort = alone(shortPrompt, n), wantLong = alone(longPrompt, n);
        var shortDraft = new com.fasterxml.jackson.databind.ObjectMapper().createObjectNode().put("max_position_embeddings", 36);
        try (Model draftModel = Model.open(bundled(), shortDraft, new dev.cmf4j.backend.cpu.CpuBackend());
             Scheduler s = new Scheduler(model.graph(), codec, new Scheduler.Config(4, 256, 8, 64, 16, 4),
                     new Scheduler.Draft(draftModel.graph(), 4))) {
            assertThat(draftModel.graph().spec().maxPositions()).isEqualTo(36);
            Collect longSink = new Collect(), shortSink = new Collect();
            s.submitAll(List.of(GenerationRequest.of(longPrompt, n, SamplingParams.GREEDY, Set.of(), longSink),
                    GenerationRequest.of(shortPrompt, n, SamplingParams.GREEDY, Set.of(), shortSink)));
            assertThat(longSink.await().tokens()).containsExactly(wantLong);
            assertThat(shortSink.await().tokens()).containsExactly(wantShort);
            Scheduler.Stats st = s.stats();
            System.out.printf("short draft: %d drafted, %d accepted%n", st.draftedTokens(), st.acceptedTokens());
            // the long sequence (40 positions and more) never fits the draft's 36; the short one (at most 30) drafts at
            // every step, and the draft is the model itself, so most of its 24 tokens come from accepted drafts (a step
            // that failed the long sequence's catch-up dropped every sequence's drafts: 8 of 24 were seen then)
            assertThat(st.acceptedTokens()).isEqualTo(st.draftedTokens()).isGreaterThanOrEqualTo(n / 2);
        }
    }

    @Test void cancelEndsTheSequenceBeforeTheNextStepAndOthersGoOn() throws Exception {
        int[] p = codec.encode(TEXTS[1]);
        int[] want = alone(p, 16);
        try (Scheduler s = scheduler(4, 8)) {
            Collect victim = new Collect(), other = new Collect();
            var ticket = s.submitAll(List.of(GenerationRequest.of(codec.encode(TEXTS[0]), 400, SamplingParams.GREEDY, Set.of(), victim),
                    GenerationRequest.of(p, 16, SamplingParams.GREEDY, Set.of(), other))).getFirst();
            victim.onToken = id -> { if (victim.tokens.size() == 3) ticket.cancel(); };
            Completion c = victim.await();
            assertThat(c.finish()).isEqualTo(Completion.Finish.CANCELLED);
            assertThat(c.tokens()).as("no token sampled after the cancel").hasSize(3);
            assertThat(other.await().tokens()).containsExactly(want);
            assertThat(s.live()).isEmpty();
        }
    }

    @Test void timeoutAndFailingSinkEndOnlyTheirOwnRequest() throws Exception {
        int[] p = codec.encode(TEXTS[2]);
        int[] want = alone(p, 16);
        try (Scheduler s = scheduler(4, 8)) {
            Collect slow = new Collect(), broken = new Collect(), fine = new Collect();
            broken.onToken = id -> { if (broken.tokens.size() == 2) throw new IllegalStateException("client gone"); };
            s.submitAll(List.of(
                    GenerationRequest.of(codec.encode(TEXTS[0]), 100_000, SamplingParams.GREEDY, Set.of(), slow).withTimeout(Duration.ofMillis(300)),
                    GenerationRequest.of(codec.encode(TEXTS[3]), 50, SamplingParams.GREEDY, Set.of(), broken),
                    GenerationRequest.of(p, 16, SamplingParams.GREEDY, Set.of(), fine)));
            Completion b = broken.await();
            assertThat(b.finish()).isEqualTo(Completion.Finish.ERROR);
            assertThat(b.error()).contains("client gone");
            assertThat(fine.await().tokens()).containsExactly(want);
            Completion t = slow.await();
            assertThat(t.finish()).isEqualTo(Completion.Finish.TIMEOUT);
            assertThat(t.totalNanos()).isGreaterThanOrEqualTo(300_000_000L);
        }
    }

    /** An Error out of a step (here a sink's) fails the step's requests, and the loop goes on serving the next ones. */
    @Test void anErrorInAStepFailsItsRequestsAndTheLoopGoesOn() throws Exception {
        int[] p = codec.encode(TEXTS[1]);
        int[] want = alone(p, 8);
        try (Scheduler s = scheduler(2, 8)) {
            Collect broken = new Collect();
            broken.onToken = id -> { if (broken.tokens.size() == 2) throw new StackOverflowError("deep sink"); };
            s.submit(GenerationRequest.of(codec.encode(TEXTS[3]), 50, SamplingParams.GREEDY, Set.of(), broken));
            Completion b = broken.await();
            assertThat(b.finish()).isEqualTo(Completion.Finish.ERROR);
            assertThat(b.error()).contains("deep sink");
            Collect next = new Collect();
            s.submit(GenerationRequest.of(p, 8, SamplingParams.GREEDY, Set.of(), next));
            assertThat(next.await().tokens()).containsExactly(want);
        }
    }

    @Test void aPromptThatExtendsAFinishedOnePrefillsOnlyItsNewTokens() throws Exception {
        int[] p = codec.encode(TEXTS[4]);
        try (Scheduler s = scheduler(2, 8)) {
            Collect first = new Collect();
            s.submit(GenerationRequest.of(p, 8, SamplingParams.GREEDY, Set.of(), first));
            int[] out = first.await().tokens();
            // the next turn: what the session holds (the prompt and all but the last token, never fed) and more
            int[] next = concat(p, out, codec.encode(" and then"));
            Collect second = new Collect();
            s.submit(GenerationRequest.of(next, 10, SamplingParams.GREEDY, Set.of(), second));
            Completion c = second.await();
            assertThat(c.cachedTokens()).isEqualTo(p.length + out.length - 1);
            assertThat(c.tokens()).containsExactly(alone(next, 10));
            assertThat(s.stats().cachedPromptTokens()).isEqualTo(p.length + out.length - 1);
        }
    }

    @Test void stopStringsLogprobsAndLogitBias() throws Exception {
        int[] p = codec.encode(TEXTS[5]);
        int[] want = alone(p, 12);
        String full = codec.tokenizer().decode(want, true);
        String stop = full.substring(full.length() / 2, full.length() / 2 + 3);
        try (Scheduler s = scheduler(2, 8)) {
            Collect cut = new Collect(), lp = new Collect(), bias = new Collect();
            s.submitAll(List.of(
                    GenerationRequest.of(p, 12, SamplingParams.GREEDY, Set.of(), cut).withStops(List.of(stop)),
                    new GenerationRequest(p, 4, SamplingParams.GREEDY, Set.of(), List.of(), 0f, 0f, Map.of(), 3, null, lp, null),
                    new GenerationRequest(p, 3, SamplingParams.GREEDY, Set.of(), List.of(), 0f, 0f, Map.of(77, 100f), -1, null, bias, null)));
            Completion c = cut.await();
            assertThat(c.finish()).isEqualTo(Completion.Finish.STOP);
            assertThat(c.text()).isEqualTo(full.substring(0, full.indexOf(stop)));
            assertThat(cut.text.toString()).isEqualTo(c.text());

            assertThat(lp.await().tokens()).containsExactly(Arrays.copyOf(want, 4));
            assertThat(lp.logprobs).hasSize(4);
            for (TokenLogprobs l : lp.logprobs) {
                assertThat(l.topIds()).hasSize(3);
                assertThat(l.topIds()[0]).as("greedy takes the most probable").isEqualTo(l.id());
                assertThat(l.logprob()).isEqualTo(l.topLogprobs()[0]).isLessThanOrEqualTo(0f);
                assertThat(l.topLogprobs()[1]).isLessThanOrEqualTo(l.topLogprobs()[0]);
            }
            assertThat(bias.await().tokens()).containsExactly(77, 77, 77);
        }
    }

    @Test void badInputAndAFullQueueAreRefusedAtSubmission() throws Exception {
        try (Scheduler s = scheduler(1, 1)) {
            int v = model.graph().vocab();
            assertThatThrownBy(() -> s.submit(GenerationRequest.of(new int[] {1, v}, 4, SamplingParams.GREEDY, Set.of(), new Collect())))
                    .isInstanceOf(GenerationException.BadInput.class).hasMessageContaining("outside the vocabulary");
            assertThatThrownBy(() -> s.submit(GenerationRequest.of(new int[512], 4, SamplingParams.GREEDY, Set.of(), new Collect())))
                    .isInstanceOf(GenerationException.ContextLimit.class);
            Collect running = new Collect(), waiting = new Collect();
            // the running request holds the loop in its first token until the queue is checked: it cannot end early
            // (an end-of-sequence, a slow machine) and hand its place to the waiting one first
            CountDownLatch hold = new CountDownLatch(1);
            running.onToken = id -> {
                try { hold.await(60, TimeUnit.SECONDS); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
            };
            var a = s.submit(GenerationRequest.of(codec.encode("The"), 400, SamplingParams.GREEDY, Set.of(), running));
            assertThat(running.started.await(30, TimeUnit.SECONDS)).isTrue();
            var b = s.submit(GenerationRequest.of(codec.encode("The"), 400, SamplingParams.GREEDY, Set.of(), waiting));
            assertThatThrownBy(() -> s.submit(GenerationRequest.of(codec.encode("The"), 4, SamplingParams.GREEDY, Set.of(), new Collect())))
                    .isInstanceOf(Scheduler.QueueFull.class);
            assertThat(s.stats().waiting()).isEqualTo(1);
            assertThat(s.live()).extracting(Scheduler.SequenceInfo::state).contains("waiting");
            b.cancel();
            a.cancel();
            hold.countDown();
            assertThat(running.await().finish()).isEqualTo(Completion.Finish.CANCELLED);
            try (Scheduler noQueue = scheduler(1, 0)) {   // a free place takes a request even with no queue
                Collect alone = new Collect();
                noQueue.submit(GenerationRequest.of(codec.encode("The"), 2, SamplingParams.GREEDY, Set.of(), alone));
                assertThat(alone.await().tokens()).hasSize(2);
            }
            assertThat(waiting.await().finish()).isEqualTo(Completion.Finish.CANCELLED);
            assertThat(waiting.await().tokens()).isEmpty();
            assertThat(running.await().finish()).isEqualTo(Completion.Finish.CANCELLED);
        }
    }

    @Test void jsonOutputAlwaysParsesAndFollowsItsSchemaWithinItsBudget() throws Exception {
        var json = new com.fasterxml.jackson.databind.ObjectMapper();
        JsonConstraint schema = JsonConstraint.of(json.readTree("""
                {"type": "object", "properties": {"command": {"type": "string"}, "exit_code": {"type": "integer"},
                 "flags": {"type": "array", "items": {"type": "string"}}}, "required": ["command", "exit_code"]}"""));
        try (Scheduler s = scheduler(4, 16)) {
            List<Collect> sinks = new ArrayList<>();
            // budgets from 3 tokens up: a document always fits when its shortest form does, a character a token
            // (the schema's is {"command":"","exit_code":0}, 28)
            int[] budgets = {3, 24, 28, 40};
            for (int i = 0; i < budgets.length; i++) {
                Collect k = new Collect();
                sinks.add(k);
                SamplingParams p = new SamplingParams(0.8f, 0, 1f, 0f, 1f, 0f, 5L + i);
                s.submit(GenerationRequest.of(codec.encode("Here is the JSON:"), budgets[i], p, codec.eosIds(), k)
                        .withJson(i < 2 ? JsonConstraint.anyObject() : schema));
            }
            for (int i = 0; i < sinks.size(); i++) {
                Completion c = sinks.get(i).await();
                assertThat(c.finish()).as(c.error()).isIn(Completion.Finish.STOP, Completion.Finish.LENGTH);
                var doc = json.readTree(c.text());
                assertThat(doc.isObject()).as(c.text()).isTrue();
                if (i >= 2) {
                    assertThat(doc.get("command").isTextual()).as(c.text()).isTrue();
                    assertThat(doc.get("exit_code").isIntegralNumber()).as(c.text()).isTrue();
                    doc.fieldNames().forEachRemaining(f -> assertThat(f).isIn("command", "exit_code", "flags"));
                }
                assertThat(c.tokens().length).isLessThanOrEqualTo(budgets[i]);
            }
        }
    }

    static int[] concat(int[]... parts) {
        int n = 0;
        for (int[] p : parts) n += p.length;
        int[] out = new int[n];
        int o = 0;
        for (int[] p : parts) { System.arraycopy(p, 0, out, o, p.length); o += p.length; }
        return out;
    }

    /**
     * A running sequence's state, exported between two steps from another thread, is the prompt and the tokens fed so
     * far; restored into the cache, it is taken by a request that extends it; unknown ids are refused.
     */
    @Test void exportsARunningSequenceAndRestoresIntoTheCache() throws Exception {
        int[] prompt = codec.encode(TEXTS[0]);
        try (Scheduler sch = scheduler(1, 4)) {
            Collect c = new Collect();
            CountDownLatch three = new CountDownLatch(3);
            CountDownLatch hold = new CountDownLatch(1);
            c.onToken = id -> {   // the loop waits after the third token, so the export lands between two steps
                three.countDown();
                if (three.getCount() == 0 && hold.getCount() > 0) try { hold.await(10, TimeUnit.SECONDS); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
            };
            Scheduler.Ticket t = sch.submit(GenerationRequest.of(prompt, 12, SamplingParams.GREEDY, Set.of(), c));
            assertThat(three.await(60, TimeUnit.SECONDS)).isTrue();
            CompletableFuture<Scheduler.SavedState> saved = CompletableFuture.supplyAsync(() -> {
                try { return sch.exportState(t.id()); } catch (InterruptedException e) { throw new IllegalStateException(e); }
            });
            Thread.sleep(50);
            hold.countDown();
            Scheduler.SavedState st = saved.get(60, TimeUnit.SECONDS);
            Completion done = c.await();
            assertThat(st.tokens()).isBetween(prompt.length + 2, prompt.length + 11);
            Session s = new Session(model.graph(), 512);
            s.importState(new java.io.ByteArrayInputStream(st.snapshot()));
            int[] fed = Arrays.copyOf(prompt, st.tokens());
            System.arraycopy(done.tokens(), 0, fed, prompt.length, st.tokens() - prompt.length);
            assertThat(s.history()).containsExactly(fed);

            // restored into the cache: a prompt extending it reuses every token, and the reply is the one alone
            Scheduler.SavedState back = sch.importState(st.snapshot(), dev.cmf4j.model.graph.Overlay.NONE);
            assertThat(sch.cached()).anyMatch(q -> q.id() == back.id() && q.tokens() == st.tokens() && q.stateBytes() > 0);
            int[] longer = Arrays.copyOf(fed, fed.length + 3);
            longer[fed.length] = done.tokens()[fed.length - prompt.length];
            longer[fed.length + 1] = prompt[0];
            longer[fed.length + 2] = prompt[1];
            Collect d = new Collect();
            sch.submit(GenerationRequest.of(longer, 6, SamplingParams.GREEDY, Set.of(), d));
            assertThat(d.await().cachedTokens()).isEqualTo(st.tokens());
            assertThat(d.tokens).containsExactly(Arrays.stream(alone(longer, 6)).boxed().toArray(Integer[]::new));
            assertThatThrownBy(() -> sch.exportState(987654)).isInstanceOf(java.util.NoSuchElementException.class);
            assertThatThrownBy(() -> sch.importState(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}, dev.cmf4j.model.graph.Overlay.NONE))
                    .isInstanceOf(GenerationException.BadInput.class).hasMessageContaining("not a cmf state snapshot");
        }
    }
}
