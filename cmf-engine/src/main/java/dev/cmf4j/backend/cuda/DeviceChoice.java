package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.vulkan.VulkanBackend;
import dev.cmf4j.backend.vulkan.VulkanContext;
import dev.cmf4j.backend.vulkan.VulkanException;
import dev.cmf4j.backend.vulkan.VulkanUnavailableException;

import java.util.Locale;
import java.util.function.Supplier;

/**
 * The {@code --device cuda|vulkan|cpu|auto} choice and what it resolves to: {@code cpu} the CPU kernels;
 * {@code cuda} the NVIDIA GPU (a clear {@link CudaUnavailableException} when there is none); {@code vulkan} a Vulkan
 * device (a clear {@link VulkanUnavailableException} when there is none; a software one such as lavapipe is taken);
 * {@code auto} the NVIDIA GPU when one is usable (the driver, a GPU, and its kernels: the fatbin shipped in the jar, or
 * NVRTC to compile them when that is stale or does not fit the GPU), else a Vulkan GPU (never a software device, which
 * is slower than the CPU backend), else the CPU, with a one-line note saying why.
 */
public enum DeviceChoice {
    CPU, CUDA, VULKAN, AUTO;

    /** Parses {@code cpu}, {@code cuda} (or {@code gpu}), {@code vulkan} (or {@code vk}) or {@code auto}, case-insensitively. */
    public static DeviceChoice parse(String s) {
        return switch (s == null ? "" : s.trim().toLowerCase(Locale.ROOT)) {
            case "cpu" -> CPU;
            case "cuda", "gpu" -> CUDA;
            case "vulkan", "vk" -> VULKAN;
            case "auto" -> AUTO;
            default -> throw new IllegalArgumentException("--device " + s + ": expected cuda, vulkan, cpu or auto");
        };
    }

    /** A new backend for one model on this device (one per open model; the caller closes it after the model). */
    public Backend open() { return open(CudaContext::get, VulkanContext::get); }

    /** As {@link #open()} with the device openers given (tests pass ones that fail). */
    Backend open(Supplier<CudaContext> gpu, Supplier<VulkanContext> vulkan) {
        if (this == CPU) return new CpuBackend();
        if (this == VULKAN) {
            try {
                return new VulkanBackend(vulkan.get());
            } catch (VulkanException e) {
                throw new VulkanUnavailableException("--device vulkan: " + e.getMessage(), e);
            }
        }
        String cudaWhy;
        try {
            return new CudaBackend(gpu.get());
        } catch (CudaUnavailableException | CudaException e) {
            if (this == CUDA) {
                if (e instanceof CudaUnavailableException u) throw u;
                throw new CudaUnavailableException("--device cuda: " + e.getMessage(), e);
            }
            cudaWhy = e.getMessage();
        }
        String vulkanWhy;
        try {
            VulkanContext v = vulkan.get();
            if (!v.info().software()) return new VulkanBackend(v);
            vulkanWhy = "only the software device " + v.info().name() + ", slower than the CPU; --device vulkan takes it";
        } catch (VulkanUnavailableException | VulkanException e) {
            vulkanWhy = e.getMessage();
        }
        return new CpuBackend(CpuBackend.newMatMul(), CpuBackend.pool(), cudaWhy + "; vulkan: " + vulkanWhy);
    }
}
