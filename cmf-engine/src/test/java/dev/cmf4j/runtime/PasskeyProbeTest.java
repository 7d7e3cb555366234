package dev.cmf4j.runtime;

import dev.cmf4j.model.Model;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/** The passkey probe's prompt puts the key the asked distance before the end of the question, on the bundled model. */
class PasskeyProbeTest {
    static Path bundled() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve("models/default.cmf"))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above the module").isNotNull();
        return dir.resolve("models/default.cmf");
    }

    @Test
    void theKeyStandsAtTheAskedDistanceAndAShortProbeRuns() {
        try (Model m = Model.open(bundled())) {
            TextCodec codec = TextCodec.of(m.file());
            for (int d : new int[] {64, 300}) {
                int[][] p = PasskeyProbe.prompt(codec, "52719", d);
                String text = codec.decode(p[0]) + codec.decode(p[1]);
                assertThat(text).contains("The pass key is 52719.").endsWith("What is the pass key? The pass key is");
                // the ids after the head (which ends with the key's second mention) up to the question's end: d
                int[] head = codec.encode("There is a pass key hidden in this text; remember it. The pass key is 52719. Remember it. 52719 is the pass key.\n");
                assertThat(p[0].length - head.length + p[1].length).isEqualTo(d);
            }
            var r = PasskeyProbe.run(m.graph(), codec, new int[] {16}, 1, 7);
            assertThat(r).hasSize(1);
            assertThat(r.get(0).answers()).hasSize(1).allSatisfy(a -> assertThat(a).isNotEmpty());
            assertThat(r.get(0).trials()).isEqualTo(1);
        }
    }
}
