package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;

import java.util.List;
import java.util.Objects;

/**
 * An NVIDIA GPU: a dense decoder runs whole on it ({@link ResidentForward}); any other model runs the host graph
 * with its weight products on the GPU ({@link CudaMatMul}) and the other operators on the CPU's pool.
 */
public final class CudaBackend implements Backend {
    private final CudaMatMul matmul;

    /** The GPU of {@code ctx}, with the CPU kernels for the products it does not take. */
    public CudaBackend(CudaContext ctx) { this(new CudaMatMul(ctx, CpuBackend.newMatMul())); }

    /** Over products already set up (tests choose their options first); closing this closes them. */
    public CudaBackend(CudaMatMul matmul) { this(matmul, null); }

    @Override public String device() { return "cuda"; }

    @Override public String description() { return "cuda: " + matmul.context().info(); }

    @Override public MatMul matmul() { return matmul; }

    @Override public WorkerPool hostPool() { return CpuBackend.pool(); }

    @Override public boolean runsWholeModels() { return true; }

    @Override public DeviceForward deviceForward(DecoderPlan plan, KvType kv) { return matmul.denseForward(plan, kv, null); }

    @Override public DeviceForward deviceForward(DecoderPlan plan, KvType kv, dev.cmf4j.backend.SealedLayers sealed) {
        return matmul.denseForward(plan, kv, sealed);
    }

    @Override public dev.cmf4j.backend.cpu.NystromGolden.Error[] checkO1Golden(dev.cmf4j.backend.cpu.NystromGolden golden) {
        return SealedGolden.check(matmul.context(), golden);
    }

    @Override public void hostGraph(String label, String why) { matmul.hostGraph(label, why); }

    @Override public List<dev.cmf4j.backend.OpResult> checkOperators(boolean quick) { return OpCheck.run(matmul.context(), quick); }

    @Override public List<String> takeNotes() { return matmul.context().takeNotes(); }

    /**
     * The first {@code gpus} GPUs as the ranks of one tensor-parallel group: rank i on GPU i, NCCL's communicators
     * between them (issue 26). A {@link CudaUnavailableException} when the machine has fewer GPUs, or no NCCL.
     */
    public static List<CudaBackend> group(int gpus) { return group(gpus, CudaContext::get, Nccl::load); }

    /** As {@link #group(int)} with the contexts and the library given (tests: the mock driver's). */
    static List<CudaBackend> group(int gpus, java.util.function.IntFunction<CudaContext> contexts, java.util.function.Supplier<Nccl> library) {
        if (gpus < 2) throw new IllegalArgumentException("--gpus " + gpus + ": a group has 2 or more GPUs");
        CudaContext first = contexts.apply(0);
        int count = first.driver().deviceCount();
        if (count < gpus)
            throw new CudaUnavailableException("--gpus " + gpus + ": this machine has " + count + " GPU" + (count == 1 ? "" : "s"));
        Nccl nccl = library.get();
        int[] devices = new int[gpus];
        for (int i = 0; i < gpus; i++) devices[i] = i;
        java.lang.foreign.MemorySegment[] comms = nccl.initAll(devices);
        List<CudaBackend> out = new java.util.ArrayList<>(gpus);
        for (int r = 0; r < gpus; r++) {
            CudaMatMul mm = new CudaMatMul(r == 0 ? first : contexts.apply(r), CpuBackend.newMatMul());
            TensorRank rank = new TensorRank(nccl, comms[r], r, gpus);
            mm.useTensorRank(rank);
            out.add(new CudaBackend(mm, rank));
        }
        return List.copyOf(out);
    }

    /**
     * The first {@code gpus} GPUs, each a backend of its own for a whole copy of a model (serve's replicas): GPU i on
     * its own owner thread, nothing shared between them. A {@link CudaUnavailableException} naming
     * {@code --replicas} when the machine has fewer GPUs.
     */
    public static List<CudaBackend> replicas(int gpus) { return replicas(gpus, CudaContext::get); }

    /** As {@link #replicas(int)} with the contexts given (tests: the mock driver's). */
    static List<CudaBackend> replicas(int gpus, java.util.function.IntFunction<CudaContext> contexts) {
        return independent(gpus, "--replicas", "one replica per GPU", contexts);
    }

    /**
     * The first {@code gpus} GPUs as the stages of a split by layers ({@code --gpus N --split layers}): each a backend
     * of its own, nothing shared (the stages' rows go through the host). Errors name {@code --gpus}.
     */
    public static List<CudaBackend> stages(int gpus) { return independent(gpus, "--gpus", "one stage per GPU", CudaContext::get); }

    private static List<CudaBackend> independent(int gpus, String option, String each, java.util.function.IntFunction<CudaContext> contexts) {
        if (gpus < 1) throw new IllegalArgumentException(option + " must be >= 1, got " + gpus);
        CudaContext first;
        try {
            first = contexts.apply(0);
        } catch (CudaUnavailableException e) {
            throw new CudaUnavailableException(option + " " + gpus + ": " + e.getMessage(), e);
        }
        int count = first.driver().deviceCount();
        if (count < gpus)
            throw new CudaUnavailableException(option + " " + gpus + ": this machine has " + count + " GPU" + (count == 1 ? "" : "s")
                    + " (" + each + ")");
        List<CudaBackend> out = new java.util.ArrayList<>(gpus);
        for (int r = 0; r < gpus; r++) out.add(new CudaBackend(r == 0 ? first : contexts.apply(r)));
        return List.copyOf(out);
    }

    /** This GPU's rank in a group (its communicator destroyed at close), or null. */
    private final TensorRank rank;

    private CudaBackend(CudaMatMul matmul, TensorRank rank) {
        this.matmul = Objects.requireNonNull(matmul, "matmul");
        this.rank = rank;
    }

    @Override public int tensorRanks() { return matmul.tensorRanks(); }

    @Override public void close() {
        matmul.close();
        if (rank != null) rank.nccl().destroy(rank.comm());
    }
}
