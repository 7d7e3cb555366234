package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.OpResult;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A Vulkan device (AMD, Intel, NVIDIA, Apple through MoltenVK, or Mesa's lavapipe on the CPU): the host graph with its
 * weight products on the device ({@link VulkanMatMul}, weights resident) and every other operator on the CPU's pool.
 * No model runs whole on it yet ({@link #runsWholeModels} is false): docs/VULKAN.md says what is still to come.
 */
public final class VulkanBackend implements Backend {
    private final VulkanMatMul matmul;
    private final List<String> notes = new ArrayList<>();

    /** The device of {@code ctx}, with the CPU kernels for the products it does not take. */
    public VulkanBackend(VulkanContext ctx) { this(new VulkanMatMul(ctx, CpuBackend.newMatMul())); }

    /** Over products already set up; closing this closes them. */
    public VulkanBackend(VulkanMatMul matmul) {
        this.matmul = Objects.requireNonNull(matmul, "matmul");
        notes.add("vulkan: " + matmul.context().info().name() + ": hybrid path (weight products on the device, every other operator on the CPU)");
        if (matmul.context().info().software())
            notes.add("vulkan: " + matmul.context().info().name() + " is a software device (CPU rasterizer): correct, slower than --device cpu");
    }

    @Override public String device() { return "vulkan"; }

    @Override public String description() { return "vulkan: " + matmul.context().describe(); }

    @Override public MatMul matmul() { return matmul; }

    @Override public WorkerPool hostPool() { return CpuBackend.pool(); }

    @Override public List<OpResult> checkOperators(boolean quick) { return VulkanOpCheck.run(matmul, quick); }

    @Override public List<String> takeNotes() {
        List<String> out = List.copyOf(notes);
        notes.clear();
        return out;
    }

    @Override public void close() { matmul.close(); }
}
