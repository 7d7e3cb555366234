package dev.cmf4j.model.graph;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.cpu.NystromHead;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A sealed layer's state ({@link SealedKv}: exact prompt, sealing, ring with pending chunks, sinks, delayed insertion)
 * driven with the o1 golden's q, k, v as one head: its decode rows match the float64 golden within the README bounds
 * (max 1e-3, mean 1e-4), fed one row at a time and in chunks. The golden's dv (8) is below its d (16): values are
 * padded with zeros and the first dv outputs compared.
 */
class SealedKvGoldenTest {
    @ParameterizedTest(name = "sinks {0}, chunk {1}, kv {2}")
    @CsvSource({"4,1,F32", "0,1,F32", "4,7,F32", "0,5,F32"})
    void sealedStateMatchesTheGolden(int sinks, int chunk, KvType kv) throws Exception {
        JsonNode j = new ObjectMapper().readTree(Fixtures.require("o1/nystrom_golden.json").toFile());
        int d = j.get("d").asInt(), dv = j.get("dv").asInt(), t = j.get("t").asInt(), p = j.get("p").asInt();
        float[] q = rows(j.get("q"), t, d, d), k = rows(j.get("k"), t, d, d), v = rows(j.get("v"), t, dv, d);
        JsonNode want = j.get(sinks == 0 ? "out_sink0" : "out");
        Mixer.Attention head = new Mixer.Attention(1, 1, d, "q", "k", "v", "o", null, null, null, null, null, null, null,
                false, (float) (1 / Math.sqrt(d)), 0f, 0, null, null, -1);
        SealedKv st = new SealedKv(head, new AttentionMemory.Sealed("all", j.get("m").asInt(), j.get("w").asInt(), sinks), kv, t);
        st.sealIfDue(p);
        st.cache().beginChunk(0, p);
        System.arraycopy(k, 0, st.cache().pendingKeys(), 0, p * d);
        System.arraycopy(v, 0, st.cache().pendingValues(), 0, p * d);
        st.pendQueries(q, 0, p);
        st.commit();
        st.requestSeal();
        float[] out = new float[t * d], scores = new float[st.scratchFloats()];
        NystromHead.Row row = new NystromHead.Row();
        for (int r = p; r < t; r += chunk) {
            int n = Math.min(chunk, t - r);
            st.sealIfDue(n);
            assertThat(st.sealed()).isTrue();
            st.cache().beginChunk(r, n);
            System.arraycopy(k, r * d, st.cache().pendingKeys(), 0, n * d);
            System.arraycopy(v, r * d, st.cache().pendingValues(), 0, n * d);
            for (int i = r; i < r + n; i++) st.attend(q, i * d, 0, i, Float.NaN, scores, row, out, i * d);
            st.commit();
        }
        double max = 0, sum = 0;
        for (int r = p; r < t; r++)
            for (int c = 0; c < dv; c++) {
                double e = Math.abs(out[r * d + c] - want.get(r).get(c).asDouble());
                max = Math.max(max, e);
                sum += e;
            }
        double mean = sum / ((t - p) * dv);
        System.out.printf("sealed state, sinks %d chunk %d: max %.3g mean %.3g%n", sinks, chunk, max, mean);
        assertThat(max).isLessThan(1e-3);
        assertThat(mean).isLessThan(1e-4);
        assertThat(st.bytes()).isPositive();
    }

    private static float[] rows(JsonNode a, int n, int cols, int width) {
        float[] out = new float[n * width];
        for (int r = 0; r < n; r++)
            for (int c = 0; c < cols; c++) out[r * width + c] = (float) a.get(r).get(c).asDouble();
        return out;
    }
}
