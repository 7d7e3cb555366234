package dev.cmf4j.runtime;

import dev.cmf4j.format.CmfException;
import dev.cmf4j.model.Model;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A model file truncated after it was mapped: reading its missing pages is a clean error naming the file (the JVM
 * turns the fault into an exception, the graph into the file's typed error), never a crash of the JVM; the
 * scheduler fails the running requests and goes on serving.
 */
class TruncatedModelFileTest {
    @TempDir Path tmp;

    @Test void truncatedUnderTheMappingIsACleanErrorAndTheSchedulerGoesOn() throws Exception {
        Path bundled = bundled(), copy = tmp.resolve("model.cmf");
        Files.copy(bundled, copy);
        try (Model model = Model.open(copy)) {
            TextCodec codec = TextCodec.of(model.file());
            int[] prompt = codec.encode("The ls command");
            for (int i = 0; i < 4; i++) assertThat(greedy(model, prompt, 16)).hasSize(16);   // the JIT compiles the kernels
            model.file().checkIntact();

            try (FileChannel ch = FileChannel.open(copy, StandardOpenOption.WRITE)) {
                ch.truncate(Files.size(copy) / 4);
            }
            assertThatThrownBy(() -> model.file().checkIntact()).isInstanceOf(CmfException.Io.class)
                    .hasMessageContaining("model.cmf").hasMessageContaining("truncated");
            assertThatThrownBy(() -> greedy(model, prompt, 4)).isInstanceOf(CmfException.Io.class)
                    .hasMessageContaining("model.cmf").hasMessageContaining("truncated");

            try (Scheduler s = new Scheduler(model.graph(), codec, new Scheduler.Config(2, 256, 4, 64, 16, 0))) {
                for (int round = 0; round < 2; round++) {   // the loop survives the first failure and answers the next
                    SchedulerTest.Collect a = new SchedulerTest.Collect(), b = new SchedulerTest.Collect();
                    s.submitAll(List.of(GenerationRequest.of(prompt, 4, SamplingParams.GREEDY, Set.of(), a),
                            GenerationRequest.of(codec.encode("A"), 4, SamplingParams.GREEDY, Set.of(), b)));
                    for (SchedulerTest.Collect c : List.of(a, b)) {
                        Completion done = c.await();
                        assertThat(done.finish()).isEqualTo(Completion.Finish.ERROR);
                        assertThat(done.error()).contains("truncated");
                    }
                }
            }
        }
    }

    @Test void aFileReplacedByRenameLeavesTheMappingIntact() throws IOException {
        Path copy = tmp.resolve("model.cmf");
        Files.copy(bundled(), copy);
        try (Model model = Model.open(copy)) {
            int[] prompt = TextCodec.of(model.file()).encode("The ls command");
            int[] before = greedy(model, prompt, 3);
            Path other = tmp.resolve("other.cmf");
            Files.write(other, new byte[100]);
            Files.move(other, copy, java.nio.file.StandardCopyOption.REPLACE_EXISTING, java.nio.file.StandardCopyOption.ATOMIC_MOVE);
            model.file().checkIntact();
            assertThat(greedy(model, prompt, 3)).containsExactly(before);
        }
    }

    private static int[] greedy(Model model, int[] prompt, int n) {
        try (Session s = new Session(model.graph(), prompt.length + n + 1)) {
            return new Generator(s, new Sampler(SamplingParams.GREEDY), Set.of(), List.of()).generate(prompt, n, null, null).tokens();
        }
    }

    private static Path bundled() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve("models/default.cmf"))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above the working directory").isNotNull();
        return dir.resolve("models/default.cmf");
    }
}
