package dev.cmf4j.cli;

import java.lang.management.ManagementFactory;
import java.lang.module.ModuleFinder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * {@code java -jar cmf.jar ...} without {@code --add-modules jdk.incubator.vector}: a jar's manifest can enable native
 * access but cannot add a module, so the command runs itself again on the same Java with the flags {@code ./cmf}
 * passes, the caller's own JVM options kept, and exits with its exit code.
 */
final class Relaunch {
    static final String VECTOR = "jdk.incubator.vector";
    /**
     * The CPU kernels, the attention kernel and the row decoders compile after 1/50 of the JIT's usual call counts, as
     * {@code ./cmf} asks: a fresh JVM otherwise runs the first tokens' Vector API loops interpreted, and a GPU's decode
     * step decodes its embedding row on the host once a token, slowly until C2 takes it (docs/CPU_KERNELS.md, "Time to
     * first token"; docs/VULKAN.md, session 29). The q8 and q4_block decode loops wait for 1/5: compiled at 1/50, C2
     * sometimes worked from a profile too thin to resolve their vector calls, and that run decoded at a quarter to 2/5
     * of its speed (docs/CPU_KERNELS.md, "Decode loops compiled too early").
     */
    static final List<String> EARLY_KERNELS = List.of("-XX:CompileCommand=quiet",
            "-XX:CompileCommand=CompileThresholdScaling,dev.cmf4j.backend.cpu.kernel.*::*,0.02",
            "-XX:CompileCommand=CompileThresholdScaling,dev.cmf4j.backend.cpu.kernel.Q8Matrix::dotRowsVector,0.2",
            "-XX:CompileCommand=CompileThresholdScaling,dev.cmf4j.backend.cpu.kernel.Q4Int8::blockRows,0.2",
            "-XX:CompileCommand=CompileThresholdScaling,dev.cmf4j.backend.cpu.AttentionKernel::*,0.02",
            "-XX:CompileCommand=CompileThresholdScaling,dev.cmf4j.format.quant.*::*,0.02");

    private Relaunch() {}

    /** Whether this JVM lacks the Vector API module the CPU kernels need. */
    static boolean needed() { return ModuleLayer.boot().findModule(VECTOR).isEmpty(); }

    /** Runs the jar again with the module added; returns its exit code (1 with a message when that cannot work). */
    static int withVectorModule(String[] args) {
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        Path jar;
        try {
            jar = Path.of(Cmf.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        } catch (Exception e) {
            jar = null;
        }
        if (Boolean.getBoolean("cmf.relaunched") || ModuleFinder.ofSystem().find(VECTOR).isEmpty())
            return fail("this Java runtime (" + System.getProperty("java.home") + ") has no " + VECTOR + " module; run cmf on a full JDK 25");
        if (jar == null || !Files.isRegularFile(jar) || !Files.isExecutable(java))
            return fail("the Vector API module is not enabled; run java --add-modules " + VECTOR + " --enable-native-access=ALL-UNNAMED ...");
        List<String> cmd = new ArrayList<>(List.of(java.toString(), "--add-modules", VECTOR, "--enable-native-access=ALL-UNNAMED", "-Xss8m"));
        cmd.addAll(EARLY_KERNELS);
        cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments());   // the caller's -Xmx, -D..., later wins
        cmd.addAll(List.of("-Dcmf.relaunched=true", "-jar", jar.toString()));
        cmd.addAll(List.of(args));
        try {
            Process p = new ProcessBuilder(cmd).inheritIO().start();
            Runtime.getRuntime().addShutdownHook(new Thread(p::destroy));   // a signal to this JVM alone ends the child too
            return p.waitFor();
        } catch (Exception e) {
            return fail("cannot start " + java + ": " + e.getMessage());
        }
    }

    private static int fail(String message) {
        System.err.println("cmf: error: " + message);
        return 1;
    }
}
