package dev.cmf4j.langchain4j;

import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.Message;
import dev.cmf4j.api.Sampling;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.jar.JarFile;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The {@code examples/} project (not a module of this build) built and run as a user's project would be: against
 * this build's jars installed into a fresh local repository (what {@code mvn install} puts in {@code ~/.m2}: jar, pom,
 * sources and javadoc), every other artifact from the machine's local repository through a {@code file:} mirror, so
 * nothing is downloaded. It lives in the reactor's last module because every jar it needs is built by then.
 */
class ExamplesProjectTest {
    /** What the example's cmf4j dependency needs, lowest first. */
    static final List<String> MODULES = List.of("cmf-format", "cmf-text", "cmf-convert", "cmf-hub", "cmf-engine", "cmf4j");

    @Test void theExamplesProjectBuildsAndRunsAgainstTheInstalledArtifacts(@TempDir Path tmp) throws Exception {
        Path root = Path.of(System.getProperty("cmf.repo.root"));
        String version = System.getProperty("cmf.version"), localRepo = System.getProperty("cmf.local.repo");
        assumeTrue(onPath("mvn"), "mvn is not on the PATH: the examples project cannot be built here");
        assertThat(Files.readString(root.resolve("examples/pom.xml"))).as("examples/pom.xml names this build's version")
                .contains("<version>" + version + "</version>");
        assertThat(Files.readString(root.resolve("README.md"))).as("README's Java example is examples/'s Hello.java")
                .contains("```java\n" + Files.readString(root.resolve("examples/src/main/java/example/Hello.java")) + "```\n");

        Path repo = tmp.resolve("repo");
        install(root.resolve("pom.xml"), null, repo, "cmf4j-parent", version);
        for (String m : MODULES) {
            Path target = root.resolve(m).resolve("target");
            Path jar = target.resolve(m + "-" + version + ".jar");
            assertThat(jar).as("built by this reactor").isRegularFile();
            try (JarFile j = new JarFile(jar.toFile())) {
                assertThat(j.getManifest().getMainAttributes().getValue("Automatic-Module-Name")).as(m).startsWith("dev.cmf4j.");
            }
            for (String kind : List.of("sources", "javadoc"))
                assertThat(target.resolve(m + "-" + version + "-" + kind + ".jar")).as(m + " " + kind + " jar").isRegularFile();
            install(root.resolve(m).resolve("pom.xml"), jar, repo, m, version);
        }
        Path settings = tmp.resolve("settings.xml");
        Files.writeString(settings, """
                <settings><mirrors><mirror><id>this-machine</id><mirrorOf>*</mirrorOf><url>%s</url></mirror></mirrors></settings>
                """.formatted(Path.of(localRepo).toUri()));
        Path project = tmp.resolve("examples");
        copyTree(root.resolve("examples"), project);

        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        List<String> build = List.of("mvn", "-B", "-q", "-s", settings.toString(), "-Dmaven.repo.local=" + repo, "-f", project.resolve("pom.xml").toString(), "package");
        Result b = run(build, tmp);
        assertThat(b.code).as("mvn package of examples/:\n" + b.out).isZero();

        Path model = root.resolve("models/default.cmf");
        Result r = run(List.of(java, "--add-modules", "jdk.incubator.vector", "-jar", project.resolve("target/cmf4j-examples.jar").toString(), model.toString()), tmp);
        assertThat(r.code).as("the example's run:\n" + r.out).isZero();
        String expected;
        try (CmfModel m = Cmf.open(model)) {
            var reply = m.newChat().complete(List.of(Message.user("What does tar do?")), Sampling.greedy().withMaxTokens(40));
            expected = reply.text() + "\n[" + reply.tokens().length + " tokens, " + reply.finish() + "]";
        }
        assertThat(r.out).contains(expected);
    }

    /** Lays a jar and its pom out as {@code mvn install} does. */
    static void install(Path pom, Path jar, Path repo, String artifact, String version) throws IOException {
        Path dir = repo.resolve("dev/cmf4j").resolve(artifact).resolve(version);
        Files.createDirectories(dir);
        Files.copy(pom, dir.resolve(artifact + "-" + version + ".pom"));
        if (jar != null) Files.copy(jar, dir.resolve(artifact + "-" + version + ".jar"));
    }

    static void copyTree(Path from, Path to) throws IOException {
        try (Stream<Path> s = Files.walk(from)) {
            for (Path p : s.filter(p -> !from.relativize(p).startsWith("target")).toList())
                if (Files.isDirectory(p)) Files.createDirectories(to.resolve(from.relativize(p).toString()));
                else Files.copy(p, to.resolve(from.relativize(p).toString()), StandardCopyOption.REPLACE_EXISTING);
        }
    }

    record Result(int code, String out) {}

    static Result run(List<String> cmd, Path dir) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(new ArrayList<>(cmd)).directory(dir.toFile()).redirectErrorStream(true);
        pb.environment().put("JAVA_HOME", System.getProperty("java.home"));
        Process p = pb.start();
        byte[] out = p.getInputStream().readAllBytes();
        assertThat(p.waitFor(5, TimeUnit.MINUTES)).as(String.join(" ", cmd) + " finished").isTrue();
        return new Result(p.exitValue(), new String(out, java.nio.charset.StandardCharsets.UTF_8));
    }

    static boolean onPath(String exe) {
        for (String d : System.getenv().getOrDefault("PATH", "").split(java.io.File.pathSeparator))
            if (Files.isExecutable(Path.of(d, exe))) return true;
        return false;
    }
}
