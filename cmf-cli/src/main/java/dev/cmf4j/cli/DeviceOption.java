package dev.cmf4j.cli;

import dev.cmf4j.backend.cuda.DeviceChoice;
import picocli.CommandLine.Option;

import java.io.PrintWriter;

/**
 * {@code --device cuda|cpu|auto}, shared by run, generate, logits and bench: where the weight products run.
 * {@code auto} takes the GPU when one is usable and says on standard error why not otherwise.
 */
public final class DeviceOption {
    @Option(names = "--device", paramLabel = "DEV", defaultValue = "cpu",
            description = "cpu (default), cuda (an NVIDIA GPU; an error when none is usable), or auto (cuda when usable, else cpu)")
    String device = "cpu";

    /** The matmul for one model on the chosen device; a note on {@code err} when auto fell back to the CPU. */
    DeviceChoice.Resolved resolve(PrintWriter err) {
        DeviceChoice.Resolved r = DeviceChoice.parse(device).newMatMul();
        if (r.fallbackReason() != null) err.println("cmf: --device auto: no usable GPU (" + r.fallbackReason() + "); using the CPU");
        for (String note : r.takeNotes()) err.println("cmf: " + note);
        return r;
    }
}
