package dev.cmf4j.backend.cpu;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.kernel.KernelMatMul;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;

/**
 * The process-wide CPU backend: one worker pool (threads = {@code -Dcmf.threads}, else the available
 * processors) and the matmul the engine uses by default: the fast kernels, with the reference
 * {@link CpuMatMul} for what they do not cover (input-major matrices, dtypes without a kernel), one
 * instance per open model.
 */
public final class CpuBackend {
    private CpuBackend() {}

    private static volatile WorkerPool pool;

    public static WorkerPool pool() {
        WorkerPool p = pool;
        if (p == null) {
            synchronized (CpuBackend.class) {
                if (pool == null) {
                    int n = Integer.getInteger("cmf.threads", Runtime.getRuntime().availableProcessors());
                    pool = new WorkerPool(Math.max(1, n));
                }
                p = pool;
            }
        }
        return p;
    }

    /**
     * A new default matmul (kernels first, reference fallback) on the shared pool. Use one per open model:
     * it caches per-tensor kernel state keyed by the tensor's memory, which must not outlive the mapping.
     */
    public static MatMul newMatMul() { return new KernelMatMul(pool(), new CpuMatMul(pool())); }
}
