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
    public CudaBackend(CudaMatMul matmul) { this.matmul = Objects.requireNonNull(matmul, "matmul"); }

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

    @Override public void close() { matmul.close(); }
}
