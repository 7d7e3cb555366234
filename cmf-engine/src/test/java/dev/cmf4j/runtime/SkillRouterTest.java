package dev.cmf4j.runtime;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.model.HfFixture;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * Routing descriptors on the llama fixture: two "skills" fitted (rank n − 1) to prompts drawn from two halves of the
 * vocabulary; every prompt routes to the skill whose subspace holds it (its E near 0, the other's well above), E lies
 * in [0, 1], the descriptor survives its f16 round trip through the registry record, the basis is orthonormal, and the
 * novelty threshold sends a prompt to the backbone.
 */
class SkillRouterTest {
    static List<int[]> prompts(SplittableRandom rnd, int n, int from, int to) {
        List<int[]> out = new ArrayList<>();
        for (int i = 0; i < n; i++) out.add(rnd.ints(16, from, to).toArray());
        return out;
    }

    @Test void promptsRouteToTheSkillWhoseSubspaceHoldsThem() throws Exception {
        try (HfFixture hf = HfFixture.open("llama")) {
            var g = hf.graph();
            SplittableRandom rnd = new SplittableRandom(7);
            List<int[]> lowPrompts = prompts(rnd, 6, 3, 300), highPrompts = prompts(rnd, 6, 700, 1024);
            // rank n − 1: each subspace passes through all of its own prompts (their E is 0 but for f16 rounding)
            SkillRouter.Descriptor low = SkillRouter.fit(g, lowPrompts, 0, 5), high = SkillRouter.fit(g, highPrompts, 0, 5);
            assertThat(low.rank()).isEqualTo(5);
            assertThat(low.errMean()).isLessThan(1e-6);
            int h = g.hidden();
            for (int a = 0; a < 5; a++)
                for (int b = 0; b < 5; b++) {
                    double dot = 0;
                    for (int i = 0; i < h; i++) dot += low.basis()[a * h + i] * low.basis()[b * h + i];
                    assertThat(dot).isCloseTo(a == b ? 1 : 0, within(1e-4));
                }
            List<SkillRecord> skills = List.of(record("low", low), record("high", high));
            var never = new ObjectMapper().readTree("{\"temperature\": 0.1, \"novelty_theta\": 1.01}");
            var always = new ObjectMapper().readTree("{\"temperature\": 0.1, \"novelty_theta\": 0}");
            for (String kind : List.of("low", "high"))
                for (int[] p : kind.equals("low") ? lowPrompts : highPrompts) {
                    SkillRouter.Route r = SkillRouter.route(g, p, skills, never);
                    assertThat(r.scores()).hasSize(2).allSatisfy(s -> assertThat(s.error()).isBetween(0.0, 1.0));
                    assertThat(r.best()).isEqualTo(kind);
                    assertThat(r.winner()).isEqualTo(kind);
                    assertThat(r.scores().getFirst().error()).isLessThan(0.05);
                    assertThat(r.scores().get(1).error()).isGreaterThan(0.2);
                    assertThat(SkillRouter.route(g, p, skills, always).winner()).isNull();
                }
            // held-out prompts: measured, not asserted (random weights give the kinds little structure)
            int right = 0;
            for (int[] p : prompts(rnd, 5, 3, 300)) if ("low".equals(SkillRouter.route(g, p, skills, never).best())) right++;
            for (int[] p : prompts(rnd, 5, 700, 1024)) if ("high".equals(SkillRouter.route(g, p, skills, never).best())) right++;
            System.out.printf("routing: %d of 10 held-out prompts to their own kind (random-weight fixture)%n", right);
        }
    }

    static SkillRecord record(String id, SkillRouter.Descriptor d) {
        SkillRecord r = new SkillRecord(id, id, List.of(), d.selection(), null, null, null, null, null, null);
        SkillRouter.Descriptor back = SkillRouter.Descriptor.of(r, d.mean().length);
        assertThat(back.rank()).isEqualTo(d.rank());
        for (int i = 0; i < d.mean().length; i++) assertThat(back.mean()[i]).isCloseTo(d.mean()[i], within(2e-3f * Math.max(1f, Math.abs(d.mean()[i]))));
        return r;
    }
}
