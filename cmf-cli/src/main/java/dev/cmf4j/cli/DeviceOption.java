package dev.cmf4j.cli;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cuda.DeviceChoice;
import picocli.CommandLine.Option;

import java.io.PrintWriter;

/**
 * {@code --device cuda|vulkan|cpu|auto}, shared by run, generate, logits, bench and selftest: where the weight products
 * run. {@code auto} takes an NVIDIA GPU, else a Vulkan GPU, when one is usable and says on standard error why not otherwise.
 */
public final class DeviceOption {
    @Option(names = "--device", paramLabel = "DEV", defaultValue = "cpu",
            description = "cpu (default), cuda (an NVIDIA GPU; an error when none is usable), vulkan (a Vulkan device: AMD, Intel,"
                    + " NVIDIA, or Mesa's software lavapipe; an error when none is usable), or auto (cuda when usable, else a"
                    + " Vulkan GPU, else cpu; see `cmf devices`)")
    String device = "cpu";

    /** The backend for one model on the chosen device; its notes (auto fell back to the CPU, ...) on {@code err}. */
    Backend open(PrintWriter err) {
        Backend b = DeviceChoice.parse(device).open();
        for (String note : b.takeNotes()) err.println("cmf: " + note);
        return b;
    }
}
