package dev.cmf4j.cli;

import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The {@code ./cmf} launcher's start-up cache (target/cmf.aot and its stamp): the JVM runs whatever classes a cache
 * holds without checking them against the jar, so the launcher decides. A cache whose stamp does not match the jar
 * is trained again; a damaged one whose stamp matches is ignored by the JVM, and no JVM message reaches the user.
 * Either way the run prints what the command prints in process. Runs after {@code package}, with
 * {@link PackagedJarTest}, on the checkout's own target/ (CMF_JAVA skips the launcher's rebuild check).
 */
class LauncherCacheTest {
    @Test void aMismatchedCacheIsTrainedAgainAndADamagedOneIsIgnoredQuietly() throws Exception {
        PackagedJarTest.find();
        Path root = PackagedJarTest.root, launcher = root.resolve("cmf");
        assumeTrue(Files.isExecutable(launcher) && Files.isRegularFile(PackagedJarTest.model), "no ./cmf launcher or bundled model");
        Path aot = PackagedJarTest.jar.resolveSibling("cmf.aot"), stamp = aot.resolveSibling("cmf.aot.stamp");
        String[] args = {"run", "-p", "The ls command", "--greedy", "-n", "6"};
        String expected = Run.run("run", PackagedJarTest.model.toString(), "-p", "The ls command", "--greedy", "-n", "6").out();

        Files.write(aot, new byte[4096]);
        Files.writeString(stamp, "a jar built before this one\n");
        PackagedJarTest.Result trained = launch(launcher, args);
        assertThat(trained.code()).as(trained.err()).isZero();
        assertThat(trained.out()).isEqualTo(expected);
        assertThat(trained.err()).contains("training the start-up cache").doesNotContain("[warning]", "[error]");
        assertThat(Files.readString(stamp)).doesNotContain("before");
        assertThat(Files.size(aot)).as("a trained cache").isGreaterThan(1 << 20);

        byte[] damaged = Files.readAllBytes(aot);
        java.util.Arrays.fill(damaged, 0, 4096, (byte) 0x5a);   // the header: the JVM refuses the file and runs without it
        Files.write(aot, damaged);
        PackagedJarTest.Result quiet = launch(launcher, args);
        assertThat(quiet.code()).as(quiet.err()).isZero();
        assertThat(quiet.out()).isEqualTo(expected);
        assertThat(quiet.err()).as("nothing from the JVM, no training").isBlank();
        Files.deleteIfExists(aot);   // the next ./cmf trains a good one (the stamp still matches: remove it too)
        Files.deleteIfExists(stamp);
    }

    private static PackagedJarTest.Result launch(Path launcher, String... args) throws Exception {
        Path out = Files.createTempFile("cmf-launch", ".out"), err = Files.createTempFile("cmf-launch", ".err");
        try {
            ProcessBuilder pb = new ProcessBuilder(concat(launcher.toString(), args)).redirectOutput(out.toFile()).redirectError(err.toFile());
            Map<String, String> env = pb.environment();
            env.put("CMF_JAVA", Path.of(System.getProperty("java.home"), "bin", "java").toString());
            env.remove("CMF_AOT");
            env.remove("CMF_JAVA_OPTS");
            Process p = pb.start();
            assertThat(p.waitFor(180, TimeUnit.SECONDS)).as("finished").isTrue();
            Thread.sleep(200);   // the launcher's stderr filter may write after the JVM exits
            return new PackagedJarTest.Result(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
        } finally {
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
        }
    }

    private static String[] concat(String first, String... rest) {
        String[] all = new String[rest.length + 1];
        all[0] = first;
        System.arraycopy(rest, 0, all, 1, rest.length);
        return all;
    }
}
