package dev.cmf4j.cli;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The JIT flags live in three copies: {@code ./cmf}, the jar's relaunch ({@link Relaunch#EARLY_KERNELS}) and the
 * README's java line. A flag added to one and not the others would make the three ways of starting cmf4j compile
 * the kernels differently (the decode loops' thresholds decide whether a run can collapse: docs/CPU_KERNELS.md).
 */
class LauncherFlagsTest {
    @Test
    void launcherRelaunchAndReadmePassTheSameJitFlags() throws Exception {
        Path root = Path.of("..").toAbsolutePath().normalize();
        String launcher = Files.readString(root.resolve("cmf")), readme = Files.readString(root.resolve("README.md"));
        int inLauncher = launcher.split("CompileThresholdScaling", -1).length - 1;
        int inReadme = readme.split("CompileThresholdScaling", -1).length - 1;
        long ours = Relaunch.EARLY_KERNELS.stream().filter(f -> f.contains("CompileThresholdScaling")).count();
        for (String flag : Relaunch.EARLY_KERNELS) {
            assertThat(launcher).as("./cmf passes " + flag).contains(flag);
            assertThat(readme).as("README's java line passes " + flag).contains(flag);
        }
        assertThat(inLauncher).as("./cmf's threshold flags").isEqualTo(ours);
        assertThat(inReadme).as("README's threshold flags").isEqualTo(ours);
    }
}
