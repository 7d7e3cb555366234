package dev.cmf4j.runtime;

import dev.cmf4j.backend.cpu.KvCache;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.HfFixture;
import dev.cmf4j.model.Mixer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Sessions on gemma3 (sliding + full layers): chunking, caches, bad input. */
class SessionTest {
    static HfFixture gemma3;

    @BeforeAll static void open() { gemma3 = HfFixture.open("gemma3"); }

    @AfterAll static void close() { if (gemma3 != null) gemma3.close(); }

    static int[] randomIds(int n, int vocab, long seed) {
        Random r = new Random(seed);
        int[] ids = new int[n];
        for (int i = 0; i < n; i++) ids[i] = 3 + r.nextInt(vocab - 3);
        return ids;
    }

    @Test void chunkSizeDoesNotChangeTheLogits() {
        int[] ids = randomIds(50, gemma3.graph().vocab(), 1);
        float[] ref = new Session(gemma3.graph(), 128, 64).logitsAll(ids);
        for (int chunk : new int[] {1, 3, 8, 17}) {
            float[] got = new Session(gemma3.graph(), 128, chunk).logitsAll(ids);
            double d = 0;
            for (int i = 0; i < ref.length; i++) d = Math.max(d, Math.abs(ref[i] - got[i]));
            assertThat(d).as("chunk " + chunk).isLessThan(1e-4);
        }
    }

    @Test void prefillThenDecodeEqualsOneForward() {
        int[] ids = randomIds(30, gemma3.graph().vocab(), 2);
        int v = gemma3.graph().vocab();
        float[] all = new Session(gemma3.graph(), 64).logitsAll(ids);
        Session s = new Session(gemma3.graph(), 64);
        s.prefill(java.util.Arrays.copyOf(ids, 20));
        for (int i = 20; i < 30; i++) {
            float[] l = s.decode(ids[i]);
            double d = 0;
            for (int j = 0; j < v; j++) d = Math.max(d, Math.abs(l[j] - all[i * v + j]));
            assertThat(d).as("position " + i).isLessThan(1e-4);
        }
    }

    @Test void slidingLayersKeepOnlyTheirWindow() {
        int window = ((Mixer.Attention) gemma3.spec().layer(0).mixer()).window();
        int[] ids = randomIds(10 * window, gemma3.graph().vocab(), 3);
        Session s = new Session(gemma3.graph(), 4096, 16);
        s.prefill(ids);
        for (int i = 0; i < 5 * window; i++) s.decode(ids[i % ids.length]);
        int total = s.position();
        assertThat(total).isEqualTo(15 * window);
        for (int l = 0; l < gemma3.spec().numLayers(); l++) {
            Mixer.Attention a = (Mixer.Attention) gemma3.spec().layer(l).mixer();
            KvCache c = s.state().kvCache(l);
            if (a.sliding()) {
                assertThat(c.capacity()).as("layer " + l + " ring").isEqualTo(window);
                assertThat(c.storeFloats()).isEqualTo(2L * window * a.kvDim());
            } else {
                assertThat(c.capacity()).as("layer " + l + " full").isGreaterThanOrEqualTo(total);
            }
        }
    }

    @Test void greedyThroughTheSessionMatchesTheGolden() throws Exception {
        Golden g = Golden.load(gemma3.dir());
        Session s = new Session(gemma3.graph(), 4096);
        Generator gen = new Generator(s, new Sampler(SamplingParams.GREEDY), java.util.Set.of(), java.util.List.of());
        Generator.Result r = gen.generate(g.inputIds(), g.greedyIds().length, null, null);
        assertThat(r.tokens()).containsExactly(g.greedyIds());
        assertThat(r.reason()).isEqualTo(Generator.StopReason.MAX_TOKENS);
    }

    @Test void badInputIsAClearError() {
        Session s = new Session(gemma3.graph(), 16);
        assertThatThrownBy(() -> s.prefill(new int[0])).isInstanceOf(GenerationException.BadInput.class)
                .hasMessageContaining("empty prompt");
        assertThatThrownBy(() -> s.prefill(new int[] {5, 1024})).isInstanceOf(GenerationException.BadInput.class)
                .hasMessageContaining("token id 1024").hasMessageContaining("[0, 1024)");
        assertThatThrownBy(() -> s.prefill(new int[] {-1})).isInstanceOf(GenerationException.BadInput.class);
        assertThat(s.position()).isZero();
        assertThatThrownBy(() -> s.prefill(new int[17])).isInstanceOf(GenerationException.ContextLimit.class)
                .hasMessageContaining("context limit of 16");
        s.prefill(new int[16]);
        assertThatThrownBy(() -> s.decode(3)).isInstanceOf(GenerationException.ContextLimit.class);
    }

    @Test void aClosedSessionRefusesToRun() {
        Session s = new Session(gemma3.graph(), 16);
        float[] before = s.prefill(new int[] {5, 6}).clone();
        s.close();
        s.close();   // idempotent
        assertThatThrownBy(() -> s.decode(7)).isInstanceOf(IllegalStateException.class).hasMessageContaining("closed");
        assertThat(s.position()).isEqualTo(2);
        try (Session t = new Session(gemma3.graph(), 16)) {
            assertThat(t.prefill(new int[] {5, 6})).containsExactly(before);   // other sessions unaffected
        }
    }

    @Test void generationStopsAtTheContextLimit() {
        Session s = new Session(gemma3.graph(), 12);
        Generator gen = new Generator(s, new Sampler(SamplingParams.GREEDY), java.util.Set.of(), java.util.List.of());
        Generator.Result r = gen.generate(randomIds(8, 1024, 4), 100, null, null);
        assertThat(r.reason()).isEqualTo(Generator.StopReason.CONTEXT_LIMIT);
        assertThat(r.tokens()).hasSize(5);
    }
}
