package dev.cmf4j.testkit;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Builds cmf-engine's mock CUDA driver ({@code cmf-engine/src/test/resources/dev/cmf4j/backend/cuda/mockcuda.c}) for
 * tests of other modules that run the CUDA backend in a JVM of their own or through {@code -Dcmf.cuda.driver}; skips
 * the test where there is no C compiler. (cmf-engine's own tests build it from their class path: MockCuda.)
 */
public final class MockCudaLibrary {
    private MockCudaLibrary() {}

    /** {@code dir}/libmockcuda.so built from the source found above the working directory; a build error fails. */
    public static Path build(Path dir) throws Exception {
        Path root = Path.of("").toAbsolutePath(), src = null;
        for (Path d = root; d != null && src == null; d = d.getParent()) {
            Path c = d.resolve("cmf-engine/src/test/resources/dev/cmf4j/backend/cuda/mockcuda.c");
            if (Files.isRegularFile(c)) src = c;
        }
        if (src == null) throw new IllegalStateException("cmf-engine's mockcuda.c not found above " + root);
        Path out = dir.resolve("libmockcuda.so");
        Process p;
        try {
            p = new ProcessBuilder("cc", "-shared", "-fPIC", "-O1", "-o", out.toString(), src.toString(), "-lm", "-pthread")
                    .redirectErrorStream(true).start();
        } catch (java.io.IOException e) {
            assumeTrue(false, "no C compiler (cc) to build the mock CUDA library");
            return null;
        }
        String log = new String(p.getInputStream().readAllBytes());
        if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) throw new AssertionError("mockcuda.c does not build:\n" + log);
        return out;
    }
}
