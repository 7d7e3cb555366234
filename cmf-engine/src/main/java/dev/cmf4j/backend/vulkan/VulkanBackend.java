package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.OpResult;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A Vulkan device (AMD, Intel, NVIDIA, Apple through MoltenVK, or Mesa's lavapipe on the CPU): a dense decoder runs
 * whole on it ({@link VulkanResidentForward}); any other model runs the host graph with its weight products on the
 * device ({@link VulkanMatMul}, weights resident) and every other operator on the CPU's pool (docs/VULKAN.md).
 */
public final class VulkanBackend implements Backend {
    private final VulkanMatMul matmul;
    private final List<String> notes = new ArrayList<>();

    /** The device of {@code ctx}, with the CPU kernels for the products it does not take. */
    public VulkanBackend(VulkanContext ctx) { this(new VulkanMatMul(ctx, CpuBackend.newMatMul())); }

    /** Over products already set up; closing this closes them. */
    public VulkanBackend(VulkanMatMul matmul) {
        this.matmul = Objects.requireNonNull(matmul, "matmul");
        if (matmul.context().info().software())
            notes.add("vulkan: " + matmul.context().info().name() + " is a software device (CPU rasterizer): correct, slower than --device cpu");
    }

    @Override public String device() { return "vulkan"; }

    @Override public String description() { return "vulkan: " + matmul.context().describe(); }

    @Override public MatMul matmul() { return matmul; }

    @Override public WorkerPool hostPool() { return CpuBackend.pool(); }

    @Override public boolean runsWholeModels() { return true; }

    @Override public DeviceForward deviceForward(DecoderPlan plan, KvType kv) { return matmul.denseForward(plan, kv, VulkanBackend::note); }

    @Override public void hostGraph(String label, String why) {
        note("vulkan: " + label + ": hybrid path (weight products on the device, every other operator on the CPU): " + why);
    }

    /** A model's path, on standard error as it opens (as the CUDA backend's notes). */
    private static void note(String line) { System.err.println("cmf: " + line); }

    @Override public List<OpResult> checkOperators(boolean quick) { return VulkanOpCheck.run(matmul, quick); }

    @Override public List<String> takeNotes() {
        List<String> out = List.copyOf(notes);
        notes.clear();
        return out;
    }

    @Override public void close() { matmul.close(); }
}
