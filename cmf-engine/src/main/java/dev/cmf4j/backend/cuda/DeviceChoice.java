package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cpu.CpuBackend;

import java.util.Locale;
import java.util.function.Supplier;

/**
 * The {@code --device cuda|cpu|auto} choice and what it resolves to: {@code cpu} the CPU kernels;
 * {@code cuda} the GPU (a clear {@link CudaUnavailableException} when there is none); {@code auto} the GPU
 * when one is usable (the driver, a GPU, and its kernels: the fatbin shipped in the jar, or NVRTC to compile them
 * when that is stale or does not fit the GPU), else the CPU, with a one-line note saying why.
 */
public enum DeviceChoice {
    CPU, CUDA, AUTO;

    /** Parses {@code cpu}, {@code cuda} (or {@code gpu}) or {@code auto}, case-insensitively. */
    public static DeviceChoice parse(String s) {
        return switch (s == null ? "" : s.trim().toLowerCase(Locale.ROOT)) {
            case "cpu" -> CPU;
            case "cuda", "gpu" -> CUDA;
            case "auto" -> AUTO;
            default -> throw new IllegalArgumentException("--device " + s + ": expected cuda, cpu or auto");
        };
    }

    /** A new backend for one model on this device (one per open model; the caller closes it after the model). */
    public Backend open() { return open(CudaContext::get); }

    /** As {@link #open()} with the GPU opener given (tests pass one that fails). */
    Backend open(Supplier<CudaContext> gpu) {
        if (this == CPU) return new CpuBackend();
        try {
            return new CudaBackend(gpu.get());
        } catch (CudaUnavailableException | CudaException e) {
            if (this == CUDA) {
                if (e instanceof CudaUnavailableException u) throw u;
                throw new CudaUnavailableException("--device cuda: " + e.getMessage(), e);
            }
            return new CpuBackend(CpuBackend.newMatMul(), CpuBackend.pool(), e.getMessage());
        }
    }
}
