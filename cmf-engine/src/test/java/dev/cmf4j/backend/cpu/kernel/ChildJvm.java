package dev.cmf4j.backend.cpu.kernel;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** A probe's main run in a child JVM on this test classpath with given JVM options: its standard output, asserted to exit 0. */
final class ChildJvm {
    private ChildJvm() {}

    static String output(Class<?> main, List<String> jvmOptions, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--add-modules", "jdk.incubator.vector", "-cp", System.getProperty("java.class.path")));
        cmd.addAll(jvmOptions);
        cmd.add(main.getName());
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.DISCARD).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertThat(p.waitFor(300, TimeUnit.SECONDS)).as("child " + jvmOptions + " finished").isTrue();
        assertThat(p.exitValue()).as("child " + jvmOptions + ": " + out).isZero();
        return out;
    }
}
