package dev.cmf4j.format;

import org.junit.jupiter.api.Assumptions;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Fixture lookup for this module's tests. cmf-testkit depends on cmf-format, so these tests cannot
 * use {@code dev.cmf4j.testkit.Fixtures}; this is the same rule: {@code $CMF_FIXTURES}, else
 * {@code shared/fixtures} next to or above the repository; skips with directions when absent.
 */
final class TestFixtures {
    private TestFixtures() {}

    static Path require(String relative) {
        Path root = null;
        String env = System.getenv("CMF_FIXTURES");
        if (env != null && !env.isBlank() && Files.isDirectory(Path.of(env))) root = Path.of(env);
        if (root == null) {
            String repo = System.getProperty("cmf.repo.root");
            for (Path p = Path.of(repo != null ? repo : "").toAbsolutePath(); p != null && root == null; p = p.getParent()) {
                Path cand = p.resolveSibling("shared").resolve("fixtures");
                if (Files.isDirectory(cand)) root = cand;
            }
        }
        Assumptions.assumeTrue(root != null,
                "golden fixtures not found: set CMF_FIXTURES or place them at ../shared/fixtures next to the repository");
        Path p = root.resolve(relative);
        Assumptions.assumeTrue(Files.exists(p), "fixture missing: " + p);
        return p;
    }
}
