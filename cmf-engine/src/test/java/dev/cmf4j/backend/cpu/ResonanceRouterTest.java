package dev.cmf4j.backend.cpu;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * The resonance router against fixtures/embryo/router_shell.json: trunk experts of embryo_a's layer 1 plus two grown
 * experts with finite shells (a noisy copy that wins, the same copy masked by its shell, an exact copy that ties its
 * source and loses to the lower id), on real router inputs.
 */
class ResonanceRouterTest {

    @Test void errorsScoresShellsAndTiesMatchTheGolden() throws Exception {
        JsonNode j = new ObjectMapper().readTree(Fixtures.require("embryo/router_shell.json").toFile());
        int h = j.get("hidden").asInt(), k = j.get("rank").asInt(), e = j.get("bias").size();
        float[] mu = flat(j.get("mu")), u = flat(j.get("u")), bias = flat(j.get("bias")), shell = new float[e];
        for (int i = 0; i < e; i++) shell[i] = j.get("shell").get(i).isNull() ? Float.POSITIVE_INFINITY : (float) j.get("shell").get(i).asDouble();
        ResonanceRouter r = new ResonanceRouter(e, k, h, mu, u, bias, shell);
        double[] err = new double[e], score = new double[e], off = new double[e], res = new double[h];
        java.util.Set<String> kinds = new java.util.TreeSet<>();
        for (JsonNode c : j.get("cases")) {
            String kind = c.get("kind").asText();
            kinds.add(kind);
            float[] x = flat(c.get("x"));
            r.errors(x, 0, err, res);
            r.scores(err, score, true);
            r.scores(err, off, false);
            for (int i = 0; i < e; i++) {
                assertThat(err[i]).as(kind + " err " + i).isCloseTo(c.get("err").get(i).asDouble(), within(1e-3));
                JsonNode want = c.get("score").get(i);
                if (want.isNull()) assertThat(score[i]).as(kind + " score " + i + " outside its shell").isEqualTo(Double.NEGATIVE_INFINITY);
                else assertThat(score[i]).as(kind + " score " + i).isCloseTo(want.asDouble(), within(1e-3));
            }
            assertThat(ResonanceRouter.winner(score)).as(kind + " winner").isEqualTo(c.get("winner").asInt());
            assertThat(r.route(x, 0, err, score, res)).as(kind + " route").isEqualTo(c.get("winner").asInt());
            assertThat(ResonanceRouter.winner(off)).as(kind + " winner without shells").isEqualTo(c.get("winner_shell_off").asInt());
        }
        assertThat(kinds).contains("grown_noisy_wins", "grown_masked_by_shell", "exact_tie_lower_index_wins", "trunk_winner");
    }

    @Test void anExactTieGoesToTheLowerExpert() {
        double[] s = {1.0, 3.0, 3.0, Double.NEGATIVE_INFINITY};
        assertThat(ResonanceRouter.winner(s)).isEqualTo(1);
        assertThat(ResonanceRouter.winner(new double[] {Double.NEGATIVE_INFINITY, Double.NEGATIVE_INFINITY})).isEqualTo(-1);
    }

    private static float[] flat(JsonNode n) {
        java.util.List<Float> out = new java.util.ArrayList<>();
        collect(n, out);
        float[] a = new float[out.size()];
        for (int i = 0; i < a.length; i++) a[i] = out.get(i);
        return a;
    }

    private static void collect(JsonNode n, java.util.List<Float> out) {
        if (n.isArray()) for (JsonNode c : n) collect(c, out);
        else out.add((float) n.asDouble());
    }
}
