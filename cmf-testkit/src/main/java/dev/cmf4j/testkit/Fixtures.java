package dev.cmf4j.testkit;

import org.junit.jupiter.api.Assumptions;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Finds the shared golden fixtures: {@code $CMF_FIXTURES}, else {@code ../shared/fixtures} next to the
 * repository root. Tests that need them call {@link #require(String)}, which skips (not fails) with a
 * message saying where to put them when they are absent; CI always has them.
 */
public final class Fixtures {
    private Fixtures() {}

    /** The fixtures root, or null when none is found. */
    public static Path root() {
        String env = System.getenv("CMF_FIXTURES");
        if (env != null && !env.isBlank()) {
            Path p = Path.of(env);
            return Files.isDirectory(p) ? p : null;
        }
        String repo = System.getProperty("cmf.repo.root");
        Path base = repo != null ? Path.of(repo) : Path.of("").toAbsolutePath();
        for (Path p = base.toAbsolutePath(); p != null; p = p.getParent()) {
            Path cand = p.resolveSibling("shared").resolve("fixtures");
            if (Files.isDirectory(cand)) return cand;
            cand = p.resolve("shared").resolve("fixtures");
            if (Files.isDirectory(cand) && !p.equals(base)) return cand;
        }
        return null;
    }

    /** The fixture at {@code relative} (e.g. "cmf/tiny"), or skips the calling test with directions. */
    public static Path require(String relative) {
        Path root = root();
        Assumptions.assumeTrue(root != null,
                "golden fixtures not found: set CMF_FIXTURES or place them at ../shared/fixtures next to the repository");
        Path p = root.resolve(relative);
        Assumptions.assumeTrue(Files.exists(p), "fixture missing: " + p);
        return p;
    }
}
