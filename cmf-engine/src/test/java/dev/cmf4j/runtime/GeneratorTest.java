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
}
