package dev.cmf4j.backend.cuda;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** Builds the mock libcuda/libnvrtc ({@code mockcuda.c}) with the system C compiler; skips the test class where there is none. */
final class MockCuda {
    private MockCuda() {}

    /** The built library in {@code dir}; a compiler that rejects the mock fails (a broken test source, not a missing tool). */
    static Path build(Path dir) throws Exception {
        Path src = dir.resolve("mockcuda.c");
        try (InputStream in = MockCuda.class.getResourceAsStream("mockcuda.c")) {
            Files.write(src, in.readAllBytes());
        }
        Path lib = dir.resolve("libmockcuda.so");
        Process p;
        try {
            p = new ProcessBuilder("cc", "-shared", "-fPIC", "-O1", "-o", lib.toString(), src.toString(), "-lm", "-pthread")
                    .redirectErrorStream(true).start();
        } catch (java.io.IOException e) {
            assumeTrue(false, "no C compiler (cc) to build the mock CUDA library");
            return null;
        }
        String out = new String(p.getInputStream().readAllBytes());
        int rc = p.waitFor(60, TimeUnit.SECONDS) ? p.exitValue() : -1;
        if (rc != 0) throw new AssertionError("mockcuda.c does not build (rc " + rc + "):\n" + out);
        return lib;
    }

    /** Calls the mock library {@code lib}'s test knob {@code void fn(int)}. */
    static void set(Path lib, String fn, int arg) {
        try {
            java.lang.foreign.Linker.nativeLinker().downcallHandle(
                    java.lang.foreign.SymbolLookup.libraryLookup(lib, java.lang.foreign.Arena.global()).find(fn).orElseThrow(),
                    java.lang.foreign.FunctionDescriptor.ofVoid(java.lang.foreign.ValueLayout.JAVA_INT)).invokeWithArguments(arg);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /** The mock library {@code lib}'s test reading {@code fn()} (a counter or a byte count), as a long (int ones widened). */
    static long read(Path lib, String fn, java.lang.foreign.ValueLayout result) {
        try {
            var h = java.lang.foreign.Linker.nativeLinker().downcallHandle(
                    java.lang.foreign.SymbolLookup.libraryLookup(lib, java.lang.foreign.Arena.global()).find(fn).orElseThrow(),
                    java.lang.foreign.FunctionDescriptor.of(result));
            return result == java.lang.foreign.ValueLayout.JAVA_INT ? (long) (int) h.invoke() : (long) h.invoke();
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }
}
