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

    @Option(names = "--gpus", paramLabel = "N", defaultValue = "1",
            description = "split the model over the first N NVIDIA GPUs (tensor parallel: each GPU a share of the heads, MLP"
                    + " rows and vocabulary, NCCL all-reduces between them; needs --device cuda and NCCL); default 1")
    int gpus = 1;

    /** The ranks --gpus asks for (GPU r is rank r), or null for one device; their notes on {@code err}. */
    java.util.List<dev.cmf4j.backend.cuda.CudaBackend> openGroup(PrintWriter err) {
        if (gpus < 1) throw new IllegalArgumentException("--gpus must be >= 1, got " + gpus);
        if (gpus == 1) return null;
        if (DeviceChoice.parse(device) != DeviceChoice.CUDA)
            throw new IllegalArgumentException("--gpus " + gpus + " needs --device cuda (the GPUs sum their parts through NCCL)");
        java.util.List<dev.cmf4j.backend.cuda.CudaBackend> group;
        try {
            group = dev.cmf4j.backend.cuda.CudaBackend.group(gpus);
        } catch (dev.cmf4j.backend.cuda.CudaUnavailableException e) {
            if (e.getMessage() != null && e.getMessage().startsWith("--gpus")) throw e;
            throw new dev.cmf4j.backend.cuda.CudaUnavailableException("--gpus " + gpus + ": " + e.getMessage(), e);
        }
        for (Backend b : group) for (String note : b.takeNotes()) err.println("cmf: " + note);
        return group;
    }

    /** Closes the ranks of {@link #openGroup}. */
    static void close(java.util.List<? extends Backend> group) {
        if (group != null) for (Backend b : group) b.close();
    }

    /** The backend for one model on the chosen device; its notes (auto fell back to the CPU, ...) on {@code err}. */
    Backend open(PrintWriter err) {
        // run and bench take --gpus before they open one device; any other command would run on one device unasked
        if (gpus != 1) throw new IllegalArgumentException("--gpus is taken by run and bench only");
        Backend b = DeviceChoice.parse(device).open();
        for (String note : b.takeNotes()) err.println("cmf: " + note);
        return b;
    }
}
