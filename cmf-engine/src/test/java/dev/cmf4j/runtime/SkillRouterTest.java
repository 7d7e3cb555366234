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
 * Routing descriptors on the llama fixture: two "skills" fitted (rank n − 1 over the prompts not held out) to prompts
 * drawn from two halves of the vocabulary; every fitted prompt routes to the skill whose subspace holds it (its E near
 * 0, the other's well above), E ≥ 0, the descriptor (held-out φ included) survives its f16 round trip
 * through the registry record, the basis is orthonormal, and the novelty threshold sends a prompt to the backbone.
 * The decision and the calibration fit are checked against hand computations.
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
            List<int[]> lowPrompts = prompts(rnd, 7, 3, 300), highPrompts = prompts(rnd, 7, 700, 1024);
            // the last one of 7 is held out; rank n − 1 over the other 6: each subspace passes through all of them
            // (their E is 0 but for f16 rounding)
            SkillRouter.Descriptor low = SkillRouter.fit(g, lowPrompts, 0, 5), high = SkillRouter.fit(g, highPrompts, 0, 5);
            assertThat(low.rank()).isEqualTo(5);
            assertThat(low.holdoutCount()).isEqualTo(1);
            assertThat(low.metric()).isEqualTo("mse_unit");
            assertThat(low.errMean()).as("measured against the f16 descriptor as stored").isLessThan(1e-3);
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
                for (int[] p : (kind.equals("low") ? lowPrompts : highPrompts).subList(0, 6)) {
                    SkillRouter.Route r = SkillRouter.route(g, p, skills, never);
                    assertThat(r.scores()).hasSize(2).allSatisfy(s -> assertThat(s.error()).as("unit φ, ‖μ‖ ≤ 1").isBetween(0.0, 4.0));
                    assertThat(r.best()).isEqualTo(kind);
                    assertThat(r.winner()).isEqualTo(kind);
                    assertThat(r.calibrated()).isTrue();
                    assertThat(SkillRouter.route(g, p, skills, null).winner()).as("uncalibrated: least E under 0.30").isEqualTo(kind);
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

    /** The decision's numbers for three rows, computed by hand (python, doubles) from the reference's recipe. */
    @Test void decisionMatchesAHandComputation() {
        List<SkillRouter.Row> rows = List.of(new SkillRouter.Row("b", 0.4, 0.4, null, null),
                new SkillRouter.Row("a", 0.1, 0.1, 0.05, 0.02), new SkillRouter.Row("c", 0.9, 0.9, null, null));
        SkillRouter.Route r = SkillRouter.decide(rows, new SkillRouter.Calibration(0.2, 0.6, 0, 0.05), 0.3);
        assertThat(r.scores()).extracting(SkillRouter.Score::skill).containsExactly("a", "b", "c");
        double[] conf = {0.8055124120405226, 0.17973411350014978, 0.014753474459327466};
        for (int i = 0; i < 3; i++) assertThat(r.scores().get(i).confidence()).isCloseTo(conf[i], within(1e-12));
        // margin 1/1.1 − 1/1.4, z = (0.1 − 0.05)/0.02
        assertThat(r.novelty()).isCloseTo(0.6084085430198567, within(1e-12));
        assertThat(r.novel()).isTrue();
        assertThat(r.winner()).isNull();
        assertThat(SkillRouter.decide(rows, new SkillRouter.Calibration(0.2, 0.61, 0, 0.05), 0.3).winner()).isEqualTo("a");
        assertThat(r.weights()).containsEntry("a", r.scores().getFirst().confidence());
        // uncalibrated: no confidence, novel when the least E exceeds τ
        SkillRouter.Route u = SkillRouter.decide(rows, null, 0.3);
        assertThat(u.calibrated()).isFalse();
        assertThat(u.novelty()).isNaN();
        assertThat(u.winner()).isEqualTo("a");
        assertThat(SkillRouter.decide(rows, null, 0.05).winner()).isNull();
    }

    /**
     * Two skills of hidden size 4 (metric mse, mean 0, basis e1 resp. e2): a held-out φ (a, b, 0, 0) has raw error b²
     * under the first and a² under the second. Three held-out φ of the first sit at (1, 0, 0, 0) (own raw 0, other 1)
     * and the second's one held-out φ sits there too (own raw 1, other 0): NLL(T) = 3·ln(1 + e^(−1/T)) + ln(1 + e^(1/T)),
     * least where σ(1/T) = 3/4, T = 1/ln 3 = 0.9102 (the grid steps by ×1.15). At that T every sample has confidence
     * 0.75, margin 1 − 1/2 and z = 0: novelty 0.5·0.5 + 0.25/(1 + 4) + 0.25·0.25 = 0.3625, so θ = 0.3625 + 1e-4.
     */
    @Test void calibrationFitsTheHandComputedTemperatureAndThreshold() {
        float[] e1 = {1, 0, 0, 0}, e2 = {0, 1, 0, 0}, zero = new float[4];
        float[] three = new float[12];
        for (int k = 0; k < 3; k++) three[4 * k] = 1;
        var a = new SkillRouter.Descriptor("mse", 2, zero, e1, 1, 0.0, 0.5, three);
        var b = new SkillRouter.Descriptor("mse", 2, zero, e2, 1, 0.0, 0.5, new float[] {1, 0, 0, 0});
        var other = new SkillRouter.Descriptor("mse", 3, zero, e1, 1, 0.0, 0.5, null);   // another phi_layer: no samples, not compared
        List<SkillRecord> skills = List.of(record("a", a), record("b", b), record("c", other));
        SkillRouter.Calibration c = SkillRouter.calibrate(skills, 4, 0.05);
        assertThat(c.samples()).isEqualTo(4);
        assertThat(Math.abs(Math.log(c.temperature() * Math.log(3)))).isLessThan(Math.log(1.15) / 2 + 1e-9);
        assertThat(c.noveltyTheta()).isCloseTo(0.3626, within(0.005));
        assertThat(SkillRouter.Calibration.of(c.toJson())).isEqualTo(c);
        assertThat(SkillRouter.calibrate(List.of(record("c", other)), 4, 0.05)).as("no held-out φ").isNull();
    }

    static SkillRecord record(String id, SkillRouter.Descriptor d) {
        SkillRecord r = new SkillRecord(id, id, List.of(), d.selection(), null, null, null, null, null, null);
        SkillRouter.Descriptor back = SkillRouter.Descriptor.of(r, d.mean().length);
        assertThat(back.rank()).isEqualTo(d.rank());
        assertThat(back.holdout()).containsExactly(d.holdout(), within(2e-3f));
        for (int i = 0; i < d.mean().length; i++) assertThat(back.mean()[i]).isCloseTo(d.mean()[i], within(2e-3f * Math.max(1f, Math.abs(d.mean()[i]))));
        return r;
    }
}
