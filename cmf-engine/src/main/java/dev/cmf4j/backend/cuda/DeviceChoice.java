package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.CpuBackend;

import java.util.List;
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

    /** A resolved backend: the matmul for one model, a one-line description, and why a GPU was not used (or null). */
    public record Resolved(MatMul matmul, String description, String fallbackReason) implements AutoCloseable {
        /** One-line notes from opening the GPU not yet shown (e.g. kernels compiled with NVRTC as the shipped fatbin was stale). */
        public List<String> takeNotes() { return matmul instanceof CudaMatMul g ? g.context().takeNotes() : List.of(); }

        @Override public void close() {
            if (matmul instanceof AutoCloseable c) {
                try { c.close(); } catch (Exception e) { throw new IllegalStateException(e); }
            }
        }
    }

    /** A new matmul for one model on this device (one per open model, like {@link CpuBackend#newMatMul()}). */
    public Resolved newMatMul() { return resolve(CudaContext::get); }

    /** As {@link #newMatMul()} with the GPU opener given (tests pass one that fails). */
    Resolved resolve(Supplier<CudaContext> gpu) {
        if (this == CPU) return new Resolved(CpuBackend.newMatMul(), "cpu (" + CpuBackend.pool().threads() + " threads)", null);
        try {
            CudaContext ctx = gpu.get();
            return new Resolved(new CudaMatMul(ctx, CpuBackend.newMatMul()), "cuda: " + ctx.info(), null);
        } catch (CudaUnavailableException | CudaException e) {
            if (this == CUDA) {
                if (e instanceof CudaUnavailableException u) throw u;
                throw new CudaUnavailableException("--device cuda: " + e.getMessage(), e);
            }
            return new Resolved(CpuBackend.newMatMul(), "cpu (" + CpuBackend.pool().threads() + " threads; no GPU: "
                    + e.getMessage() + ")", e.getMessage());
        }
    }
}
