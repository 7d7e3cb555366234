package dev.cmf4j.backend.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The real q4 kernels of {@code matvec_q4.cu} (not the mock's C twins) run on the CPU with emulated warps
 * ({@code kernel_emulator.cpp}: 32 threads in lockstep at each shuffle) inside the mock driver, and go through
 * {@link CudaMatMul}'s upload and launch path against the CPU kernels. Skipped where no C/C++ compiler exists.
 */
class CudaKernelEmulationTest {
    @TempDir Path tmp;

    static int sh(Path dir, String... cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        int rc = p.waitFor(120, TimeUnit.SECONDS) ? p.exitValue() : -1;
        if (rc != 0) System.out.println(String.join(" ", cmd) + ": " + out);
        return rc;
    }

    @Test void theRealQ4KernelsOnEmulatedWarpsMatchTheCpu() throws Throwable {
        for (String r : List.of("mockcuda.c", "kernel_emulator.cpp", "matvec_q4.cu"))
            try (InputStream in = CudaKernelEmulationTest.class.getResourceAsStream(r)) { Files.write(tmp.resolve(r), in.readAllBytes()); }
        int rc;
        try {
            rc = sh(tmp, "cc", "-c", "-fPIC", "-O1", "-DMOCK_EMULATE_Q4", "mockcuda.c", "-o", "mock.o");
            if (rc == 0) rc = sh(tmp, "c++", "-c", "-fPIC", "-O1", "-std=c++17", "kernel_emulator.cpp", "-o", "emu.o");
            if (rc == 0) rc = sh(tmp, "c++", "-shared", "-pthread", "-o", "libemucuda.so", "mock.o", "emu.o");
        } catch (java.io.IOException e) {
            rc = -1;
        }
        assumeTrue(rc == 0, "no C and C++ compiler (cc, c++) to build the kernel emulator");
        Path lib = tmp.resolve("libemucuda.so");
        var launches = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find("emu_launches").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.JAVA_LONG));
        try (CudaContext c = new CudaContext(CudaDriver.load(List.of(lib.toString())), 0, List.of(lib.toString()),
                new KernelCache(tmp.resolve("cache")))) {
            CudaMockTest.q4MatmulsMatchTheCpu(c);
        }
        assertThat((long) launches.invokeExact()).as("launches of the emulated kernels").isGreaterThan(50);
    }
}
