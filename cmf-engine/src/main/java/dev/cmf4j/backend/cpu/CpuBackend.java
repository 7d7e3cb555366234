package dev.cmf4j.backend.cpu;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.kernel.KernelMatMul;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;

import java.util.ArrayList;
import java.util.List;

/**
 * The CPU: the fast kernels with the reference {@link CpuMatMul} for what they do not cover (input-major matrices,
 * dtypes without a kernel), all on one process-wide worker pool (threads = {@code -Dcmf.threads}, else the
 * available processors).
 */
public final class CpuBackend implements Backend {
    private static volatile WorkerPool pool;

    private final MatMul matmul;
    private final WorkerPool hostPool;
    private final String why;
    private final List<String> notes = new ArrayList<>();

    /** The fast kernels on the shared pool. */
    public CpuBackend() { this(newMatMul(), pool(), null); }

    /**
     * @param matmul the products (a test's reference matmul, a bench's own pool)
     * @param hostPool the threads of the other operators
     * @param why    why the CPU runs although a GPU was asked for (a note and part of the description), or null
     */
    public CpuBackend(MatMul matmul, WorkerPool hostPool, String why) {
        this.matmul = matmul;
        this.hostPool = hostPool;
        this.why = why;
        if (why != null) notes.add("--device auto: no usable GPU (" + why + "); using the CPU");
    }

    /** The process-wide worker pool. */
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

    /**
     * The CPU reference products every device check compares against (the Vulkan and CUDA product checks, their goldens
     * on quantized files, {@code selftest}): for every dtype, each weight row decoded to floats and dotted with the float
     * activations ({@link CpuMatMul}), as the device kernels compute them. The default kernels ({@link #newMatMul}) may
     * round more than that (q4_block decode on int8 activations), so no device is held to them.
     */
    public static CpuBackend reference() { return new CpuBackend(new CpuMatMul(pool()), pool(), null); }

    @Override public String device() { return "cpu"; }

    @Override public String description() {
        return "cpu (" + hostPool.threads() + " threads" + (why == null ? "" : "; no GPU: " + why) + ")";
    }

    @Override public MatMul matmul() { return matmul; }

    @Override public WorkerPool hostPool() { return hostPool; }

    @Override public synchronized List<String> takeNotes() {
        List<String> out = List.copyOf(notes);
        notes.clear();
        return out;
    }
}
