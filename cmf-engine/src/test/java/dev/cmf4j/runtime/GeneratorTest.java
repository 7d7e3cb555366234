package dev.cmf4j.runtime;

import dev.cmf4j.model.HfFixture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/** Stops and streaming on a real model (qwen3 fixture), with a toy text stream: id → "<id>". */
class GeneratorTest {
    static HfFixture qwen3;

    @BeforeAll static void open() { qwen3 = HfFixture.open("qwen3"); }

    @AfterAll static void close() { if (qwen3 != null) qwen3.close(); }

    static final Generator.TextStream IDS = id -> "<" + id + ">";

    int[] greedy(int n) {
        Session s = new Session(qwen3.graph(), 256);
        return new Generator(s, new Sampler(SamplingParams.GREEDY), Set.of(), List.of())
                .generate(SessionTest.randomIds(12, 1024, 9), n, null, null).tokens();
    }

    @Test void stopsOnEos() {
        int[] free = greedy(10);
        Session s = new Session(qwen3.graph(), 256);
        Generator.Result r = new Generator(s, new Sampler(SamplingParams.GREEDY), Set.of(free[4]), List.of())
                .generate(SessionTest.randomIds(12, 1024, 9), 10, null, null);
        int firstEos = 0;
        while (free[firstEos] != free[4]) firstEos++;
        assertThat(r.reason()).isEqualTo(Generator.StopReason.EOS);
        assertThat(r.tokens()).containsExactly(java.util.Arrays.copyOf(free, firstEos));
    }

    @Test void stopStringCutsTheTextAndIsNeverStreamed() {
        int[] free = greedy(10);
        String stop = "<" + free[5] + "><" + free[6] + ">";
        Session s = new Session(qwen3.graph(), 256);
        List<String> pieces = new ArrayList<>();
        Generator.Result r = new Generator(s, new Sampler(SamplingParams.GREEDY), Set.of(), List.of(stop))
                .generate(SessionTest.randomIds(12, 1024, 9), 10, IDS, new Generator.Listener() {
                    @Override public void text(String piece) { pieces.add(piece); }
                });
        StringBuilder want = new StringBuilder();
        for (int i = 0; i < 10; i++) {
            String t = want + "<" + free[i] + ">";
            if (t.contains(stop)) break;
            want.append("<").append(free[i]).append(">");
        }
        String expected = want.substring(0, want.indexOf(stop) < 0 ? want.length() : want.indexOf(stop));
        assertThat(r.reason()).isEqualTo(Generator.StopReason.STOP_STRING);
        assertThat(r.text()).isEqualTo(expected.substring(0, Math.min(expected.length(), (want + "<" + free[6] + ">").indexOf(stop))));
        assertThat(String.join("", pieces)).isEqualTo(r.text());
        assertThat(r.text()).doesNotContain(stop);
    }

    @Test void maxTokensAndStreamingAgree() {
        Session s = new Session(qwen3.graph(), 256);
        List<Integer> streamed = new ArrayList<>();
        StringBuilder text = new StringBuilder();
        Generator.Result r = new Generator(s, new Sampler(SamplingParams.GREEDY), Set.of(), List.of())
                .generate(SessionTest.randomIds(12, 1024, 9), 7, IDS, new Generator.Listener() {
                    @Override public void token(int id) { streamed.add(id); }

                    @Override public void text(String piece) { text.append(piece); }
                });
        assertThat(r.tokens()).hasSize(7);
        assertThat(streamed).containsExactly(java.util.Arrays.stream(r.tokens()).boxed().toArray(Integer[]::new));
        assertThat(text.toString()).isEqualTo(r.text());
        assertThat(s.position()).isEqualTo(12 + 6);
    }

    /**
     * Generations driven step by step through one batch driver (each session drops out when its generation ends: by
     * its token budget, or by an EOS id) give the tokens each gives alone through {@link Generator#generate}.
     */
    @Test void generationsSteppedTogetherEqualEachAlone() {
        var g = qwen3.graph();
        int n = 3;
        int[][] prompts = {SessionTest.randomIds(12, 1024, 9), SessionTest.randomIds(5, 1024, 10), SessionTest.randomIds(20, 1024, 11)};
        int[] budget = {10, 4, 7};
        int[] free = greedy(10);
        Set<Integer> eos = Set.of(free[6]);   // ends the first prompt's generation early
        Generator.Result[] alone = new Generator.Result[n];
        for (int i = 0; i < n; i++)
            alone[i] = new Generator(new Session(g, 256), new Sampler(SamplingParams.GREEDY), eos, List.of())
                    .generate(prompts[i], budget[i], null, null);
        Session[] sessions = new Session[n];
        Generator.Generation[] gens = new Generator.Generation[n];
        for (int i = 0; i < n; i++) {
            sessions[i] = new Session(g, 256);
            gens[i] = new Generator(sessions[i], new Sampler(SamplingParams.GREEDY), eos, List.of()).start(budget[i], null, null);
        }
        BatchDriver driver = new BatchDriver(g, 32, 256);
        float[] logits = driver.prefill(sessions, prompts, 8);
        int[] next = new int[n];
        for (int i = 0; i < n; i++) next[i] = gens[i].next(logits, i * g.vocab());
        while (true) {
            List<Session> live = new ArrayList<>();
            List<int[]> ids = new ArrayList<>();
            List<Integer> who = new ArrayList<>();
            for (int i = 0; i < n; i++)
                if (next[i] >= 0) { live.add(sessions[i]); ids.add(new int[] {next[i]}); who.add(i); }
            if (live.isEmpty()) break;
            float[] step = driver.step(live.toArray(Session[]::new), ids.toArray(int[][]::new));
            for (int k = 0; k < who.size(); k++) next[who.get(k)] = gens[who.get(k)].next(step, k * g.vocab());
        }
        for (int i = 0; i < n; i++) {
            assertThat(gens[i].result().tokens()).as("generation " + i).containsExactly(alone[i].tokens());
            assertThat(gens[i].result().reason()).isEqualTo(alone[i].reason());
        }
        assertThat(alone[0].reason()).as("the EOS id stops the first").isEqualTo(Generator.StopReason.EOS);
    }
}
