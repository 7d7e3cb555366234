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
 * Routing descriptors on the llama fixture: two "skills" fitted to prompts drawn from two halves of the vocabulary;
 * held-out prompts of each half route to their own skill (least E), E lies in [0, 1], the descriptor survives its
 * f16 round trip through the registry record, the basis is orthonormal, and the novelty threshold sends a prompt to
 * the backbone.
 */
class SkillRouterTest {
    static List<int[]> prompts(SplittableRandom rnd, int n, int from, int to) {
        List<int[]> out = new ArrayList<>();
        for (int i = 0; i < n; i++) out.add(rnd.ints(16, from, to).toArray());
        return out;
    }

    @Test void heldOutPromptsRouteToTheSkillOfTheirKind() throws Exception {
        try (HfFixture hf = HfFixture.open("llama")) {
            var g = hf.graph();
            SplittableRandom rnd = new SplittableRandom(7);
            SkillRouter.Descriptor low = SkillRouter.fit(g, prompts(rnd, 8, 3, 300), 0, 3);
            SkillRouter.Descriptor high = SkillRouter.fit(g, prompts(rnd, 8, 700, 1024), 0, 3);
            assertThat(low.rank()).isEqualTo(3);
            int h = g.hidden();
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) {
                    double dot = 0;
                    for (int i = 0; i < h; i++) dot += low.basis()[a * h + i] * low.basis()[b * h + i];
                    assertThat(dot).isCloseTo(a == b ? 1 : 0, within(1e-4));
                }
            List<SkillRecord> skills = List.of(record("low", low), record("high", high));
            var never = new ObjectMapper().readTree("{\"temperature\": 0.1, \"novelty_theta\": 1.01}");
            var always = new ObjectMapper().readTree("{\"temperature\": 0.1, \"novelty_theta\": 0}");
            int right = 0, total = 0;
            for (String kind : List.of("low", "high"))
                for (int[] p : kind.equals("low") ? prompts(rnd, 5, 3, 300) : prompts(rnd, 5, 700, 1024)) {
                    SkillRouter.Route r = SkillRouter.route(g, p, skills, never);
                    assertThat(r.scores()).hasSize(2).allSatisfy(s -> assertThat(s.error()).isBetween(0.0, 1.0));
                    assertThat(r.winner()).isEqualTo(r.best());
                    if (r.best().equals(kind)) right++;
                    total++;
                    assertThat(SkillRouter.route(g, p, skills, always).winner()).isNull();
                }
            System.out.printf("routing: %d of %d held-out prompts to their own skill%n", right, total);
            assertThat(right).isEqualTo(total);
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
