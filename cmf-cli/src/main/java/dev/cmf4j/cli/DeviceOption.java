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
            description = "split the model over the first N NVIDIA GPUs (needs --device cuda): tensor parallel (each GPU a share"
                    + " of the heads, MLP rows and vocabulary, NCCL all-reduces between them) or by layers, as --split says;"
                    + " default 1")
    int gpus = 1;

    @Option(names = "--split", paramLabel = "HOW",
            description = "with --gpus N: tensor (each GPU a share of every layer's heads, MLP rows and vocabulary, NCCL all-reduces"
                    + " between them) or layers (a pipeline: each GPU a contiguous range of layers, the first the embedding, the"
                    + " last the head, the rows handed on through the host; any layer kind, no NCCL). Default: tensor when the"
                    + " model splits so, else layers, saying why")
    String split;

    /** A model split over --gpus GPUs, the GPUs it runs on, and why that split was taken (one line). */
    record Split(dev.cmf4j.model.graph.SplitGraph graph, java.util.List<dev.cmf4j.backend.cuda.CudaBackend> gpus, String why)
            implements AutoCloseable {
        @Override public void close() {
            graph.close();
            DeviceOption.close(gpus);
        }
    }

    /** Checks --gpus and --split before anything is opened: what they need is said first. */
    void checkSplit() {
        if (gpus < 1) throw new IllegalArgumentException("--gpus must be >= 1, got " + gpus);
        if (split != null && !split.equals("tensor") && !split.equals("layers"))
            throw new IllegalArgumentException("--split " + split + ": expected tensor or layers");
        if (split != null && gpus == 1) throw new IllegalArgumentException("--split needs --gpus N (2 or more)");
        if (gpus > 1 && DeviceChoice.parse(device) != DeviceChoice.CUDA)
            throw new IllegalArgumentException("--gpus " + gpus + " needs --device cuda (the GPUs sum their parts through NCCL)");
    }

    /**
     * {@code m} split over the first --gpus GPUs as --split says (or, by default, tensor parallel when the model splits
     * so, else by layers); the GPUs' notes and the choice on {@code err}.
     */
    Split openSplit(dev.cmf4j.model.Model m, PrintWriter err) {
        checkSplit();
        String tensorProblem = "layers".equals(split) ? null : m.tensorParallelProblem(gpus);
        if ("tensor".equals(split) && tensorProblem != null) throw new dev.cmf4j.model.ModelException(m.file().label() + ": " + tensorProblem);
        if (split == null && tensorProblem == null || "tensor".equals(split)) {
            var group = openGroup(err);
            try {
                return new Split(m.tensorParallel(group.size(), group::get), group, split == null
                        ? "the model splits by heads, MLP rows and vocabulary (--split layers for a pipeline)" : "--split tensor");
            } catch (RuntimeException e) {
                close(group);
                throw e;
            }
        }
        java.util.List<dev.cmf4j.backend.cuda.CudaBackend> stages = dev.cmf4j.backend.cuda.CudaBackend.stages(gpus);
        for (Backend b : stages) for (String note : b.takeNotes()) err.println("cmf: " + note);
        try {
            return new Split(m.layerSplit(stages.size(), stages::get), stages, split != null ? "--split layers"
                    : "tensor parallel is refused for this model: " + tensorProblem);
        } catch (RuntimeException e) {
            close(stages);
            throw e;
        }
    }

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
        if (split != null) throw new IllegalArgumentException("--split is taken with --gpus by run and bench only");
        Backend b = DeviceChoice.parse(device).open();
        for (String note : b.takeNotes()) err.println("cmf: " + note);
        return b;
    }
}
