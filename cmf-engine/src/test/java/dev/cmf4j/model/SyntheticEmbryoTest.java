package dev.cmf4j.model;

import dev.cmf4j.model.graph.State;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * tools/embryo/MakeEmbryo.java (run as the source launcher runs it, on this JVM's class path) writes a synthetic
 * Embryo that opens, decodes and keeps the state size its geometry gives; the same tool with the default preset
 * makes the 56M benchmark model of docs/EMBRYO.md.
 */
class SyntheticEmbryoTest {

    @Test void theGeneratorsTinyPresetRuns(@TempDir Path tmp) throws Exception {
        Path tool = null;
        for (Path p = Path.of("").toAbsolutePath(); p != null && tool == null; p = p.getParent())
            if (Files.exists(p.resolve("tools/embryo/MakeEmbryo.java"))) tool = p.resolve("tools/embryo/MakeEmbryo.java");
        assertThat(tool).as("tools/embryo/MakeEmbryo.java above " + Path.of("").toAbsolutePath()).isNotNull();
        Path out = tmp.resolve("tiny.cmf");
        Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"), tool.toString(), "--preset", "tiny", "--seed", "3", "--out", out.toString())
                .redirectErrorStream(true).start();
        String log = new String(p.getInputStream().readAllBytes());
        assertThat(p.waitFor(120, TimeUnit.SECONDS)).isTrue();
        assertThat(p.exitValue()).as(log).isZero();
        assertThat(log).contains("180,232 parameters");
        try (Model m = Model.open(out)) {
            // 3 GDN layers × 4·(3·(2·2·16 + 2·16) + 2·16·16) + 1 anchor × 2·2·8·16·4, as embryo_a's geometry
            assertThat(m.spec().fixedStateBytes()).isEqualTo(11648);
            assertThat(m.spec().headClusters().count()).isEqualTo(16);
            State st = m.graph().newState(16, 64);
            float[] logp = new float[m.graph().vocab()];
            m.graph().forward(st, new int[] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0, 10, logp, false, null);
            double mass = 0;
            for (float x : logp) mass += Math.exp(x);
            assertThat(mass).as("the head's output is a distribution").isCloseTo(1.0, org.assertj.core.api.Assertions.within(1e-4));
            assertThat(st.stateBytes()).isEqualTo(11648);
        }
    }
}
