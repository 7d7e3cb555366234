package dev.cmf4j.cli;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The one-file launcher, {@code target/cmf.jar} as {@code mvn package} makes it, run as a user without a checkout
 * would: {@code java -jar cmf.jar ...} with no flags (the jar runs itself again with the Vector API module) and with
 * {@code --add-modules} given (no second JVM); both print what the command prints in process. Runs after
 * {@code package}, in the integration-test phase (cmf-cli's pom).
 */
class PackagedJarTest {
    static Path jar, model, root;

    @BeforeAll static void find() throws IOException {
        jar = Path.of("target/cmf.jar").toAbsolutePath();
        Path classes = Path.of("target/classes/dev/cmf4j/cli/Cmf.class");
        assumeTrue(Files.isRegularFile(jar) && Files.getLastModifiedTime(jar).compareTo(Files.getLastModifiedTime(classes)) >= 0,
                "target/cmf.jar is missing or older than the classes: run mvn verify (this test runs after package)");
        root = Path.of(System.getProperty("cmf.repo.root", "..")).toAbsolutePath().normalize();
        model = root.resolve("models/default.cmf");
    }

    record Result(int code, String out, String err) {}

    static Result java(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        cmd.addAll(List.of(args));
        Path out = Files.createTempFile("cmf-jar", ".out"), err = Files.createTempFile("cmf-jar", ".err");
        try {
            Process p = new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(err.toFile()).start();
            assertThat(p.waitFor(120, TimeUnit.SECONDS)).as("finished: " + cmd).isTrue();
            return new Result(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
        } finally {
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
        }
    }

    @Test void javaDashJarRunsTheCommandWithoutFlags() throws Exception {
        // run without FILE takes models/default.cmf under cmf.home: found only if the caller's -D reached the relaunch
        Result r = java("-Dcmf.home=" + root, "-jar", jar.toString(), "run", "-p", "The ls command", "--greedy", "-n", "6");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(Run.run("run", model.toString(), "-p", "The ls command", "--greedy", "-n", "6").out());
    }

    @Test void javaDashJarWithTheModuleFlagRunsInOneJvm() throws Exception {
        Result r = java("--add-modules", "jdk.incubator.vector", "-Dcmf.relaunched=true", "-jar", jar.toString(),
                "generate", model.toString(), "--ids", "1,2,3", "--greedy", "-n", "8", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(Run.run("generate", model.toString(), "--ids", "1,2,3", "--greedy", "-n", "8", "--json").out());
        assertThat(r.err()).as("Enable-Native-Access in the manifest").doesNotContain("restricted method");
    }

    /**
     * An Embryo sequence (anchor rings and delta states) saved by one process and continued by a second: the text one
     * in-process run of both prompts writes.
     */
    @Test void anEmbryoStateSavedByOneProcessContinuesInAnother(@org.junit.jupiter.api.io.TempDir Path tmp) throws Exception {
        String embryo = dev.cmf4j.testkit.Fixtures.require("embryo/embryo_a").resolve("model.cmf").toString();
        String snap = tmp.resolve("e.cmfstate").toString();
        String head = "The ls command lists the files of a directory; with -l it prints", tail = " one file per line";
        String[] one = {"--add-modules", "jdk.incubator.vector", "-Dcmf.relaunched=true", "-jar", jar.toString(), "run", embryo, "--greedy"};
        Result first = java(concat(one, "-p", head, "-n", "0", "--state-out", snap));
        assertThat(first.code()).as(first.err()).isZero();
        Result second = java(concat(one, "-p", tail, "-n", "24", "--state-in", snap));
        assertThat(second.code()).as(second.err()).isZero();
        assertThat(second.out()).isEqualTo(Run.run("run", embryo, "--greedy", "-p", head + tail, "-n", "24").out());
    }

    /**
     * The build rewrites picocli's Java 5 class files as version 50 with stack maps (src/build/UpgradeClassFiles.java), so
     * the JDK's AOT cache can hold them: every class file in the jar is version 50 or later and passes the JDK's verifier
     * port, and the rewritten picocli prints the usage and the errors the original prints in process.
     */
    @Test void everyClassFileIsJava6OrLaterAndPicocliStillWorks() throws Exception {
        int picocli = 0;
        try (java.util.zip.ZipFile z = new java.util.zip.ZipFile(jar.toFile())) {
            java.lang.classfile.ClassFile cf = java.lang.classfile.ClassFile.of(java.lang.classfile.ClassFile.ClassHierarchyResolverOption.of(
                    java.lang.classfile.ClassHierarchyResolver.defaultResolver().orElse(java.lang.classfile.ClassHierarchyResolver.ofResourceParsing(
                            new java.net.URLClassLoader(new java.net.URL[] {jar.toUri().toURL()}, null)))));
            for (var e : java.util.Collections.list(z.entries())) {
                if (!e.getName().endsWith(".class") || e.getName().startsWith("META-INF/")) continue;
                byte[] b = z.getInputStream(e).readAllBytes();
                assertThat(cf.parse(b).majorVersion()).as(e.getName()).isGreaterThanOrEqualTo(50);
                if (e.getName().startsWith("picocli/")) {
                    picocli++;
                    assertThat(cf.verify(b)).as(e.getName()).isEmpty();
                }
            }
        }
        assertThat(picocli).as("picocli classes in the jar").isGreaterThan(100);
        String[] jvm = {"--add-modules", "jdk.incubator.vector", "-Dcmf.relaunched=true", "-jar", jar.toString()};
        for (String[] args : new String[][] {{"--help"}, {"run", "--help"}, {"run", "--no-such-option"}, {"rnu"}, {"--version"}}) {
            Result r = java(concat(jvm, args));
            Run want = Run.run(args);
            assertThat(r.code()).as(String.join(" ", args)).isEqualTo(want.code());
            assertThat(r.out()).as(String.join(" ", args)).isEqualTo(want.out());
            assertThat(r.err().replaceAll("WARNING: Using incubator modules: jdk.incubator.vector\\R", "")).as(String.join(" ", args)).isEqualTo(want.err());
        }
    }

    private static String[] concat(String[] a, String... b) {
        String[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
