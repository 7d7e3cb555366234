package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.cpu.NystromGolden;
import dev.cmf4j.backend.cpu.NystromHead;
import dev.cmf4j.backend.cuda.KernelSignature.Kernel;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

/**
 * A Nyström kernel golden ({@code fixtures/o1}) replayed through the sealed layers' device kernels ({@code resident_o1.cu}),
 * one head, as a sealed layer runs them: the prompt's segment means on the device, M on the host in float64, the far
 * keys [S, p − W) folded in by ro_absorb_prompt, ring and sinks by ro_seal_copy, then each decode row ro_attend
 * (the leaving key into the far sums, one softmax) and ro_commit. {@code cmf selftest --o1-golden F --device cuda}.
 */
final class SealedGolden {
    private SealedGolden() {}

    /** Both output sets of {@code g} through the device kernels of {@code ctx}. */
    static NystromGolden.Error[] check(CudaContext ctx, NystromGolden g) {
        return g.check((golden, sinks) -> ctx.call(() -> run(ctx, golden, sinks)));
    }

    /** Owner thread: rows p..t−1's outputs [t − p, dv]. */
    private static float[] run(CudaContext ctx, NystromGolden g, int sinks) {
        CudaDriver cu = ctx.driver();
        int d = g.d(), dv = g.dv(), w = g.w(), t = g.t(), p = g.p(), m = NystromHead.landmarks(p, g.m());
        float scale = (float) (1 / Math.sqrt(d));
        Kernel means = Kernels.O1_MEANS.load(ctx), absorb = Kernels.O1_ABSORB_PROMPT.load(ctx), copy = Kernels.O1_SEAL_COPY.load(ctx);
        Kernel attend = Kernels.O1_ATTEND.load(ctx), commit = Kernels.O1_COMMIT.load(ctx);
        List<Long> owned = new ArrayList<>();
        try (Arena a = Arena.ofConfined()) {
            int[] positions = new int[t];
            for (int r = 0; r < t; r++) positions[r] = r;
            long q = upload(cu, a, owned, MemorySegment.ofArray(g.q())), k = upload(cu, a, owned, MemorySegment.ofArray(g.k()));
            long v = upload(cu, a, owned, MemorySegment.ofArray(g.v())), pos = upload(cu, a, owned, MemorySegment.ofArray(positions));
            long dm = alloc(cu, owned, 16L * m * d), far = alloc(cu, owned, 4L * SealedSteps.headFloats(m, d, dv));
            long ringK = alloc(cu, owned, 4L * w * d), ringV = alloc(cu, owned, 4L * w * dv);
            long sinkK = alloc(cu, owned, 4L * sinks * d), sinkV = alloc(cu, owned, 4L * sinks * dv), out = alloc(cu, owned, 4L * (t - p) * dv);
            launch(cu, means, 1, m, 128, a, q, d, d, p, m, dm);
            launch(cu, means, 1, m, 128, a, k, d, d, p, m, dm + 8L * m * d);
            MemorySegment host = a.allocate(16L * m * d, 8);
            cu.synchronize();
            cu.copyToHost(host, dm, 16L * m * d);
            double[] qm = new double[m * d], km = new double[m * d];
            for (int i = 0; i < m * d; i++) {
                qm[i] = host.getAtIndex(ValueLayout.JAVA_DOUBLE, i);
                km[i] = host.getAtIndex(ValueLayout.JAVA_DOUBLE, m * d + i);
            }
            float[] init = new float[(int) SealedSteps.headFloats(m, d, dv)];
            SealedSteps.headInit(init, 0, qm, km, m, d, dv, scale);
            MemorySegment buf = a.allocate(4L * init.length, 16);
            MemorySegment.copy(init, 0, buf, ValueLayout.JAVA_FLOAT, 0, init.length);
            cu.copyToDevice(far, buf, 4L * init.length);
            launch(cu, absorb, 1, m, 128, a, k, v, far, 1, 1, d, dv, m, sinks, Math.max(sinks, p - w), scale);
            launch(cu, copy, w + sinks, 1, 256, a, k, v, ringK, ringV, sinkK, sinkV, d, dv, w, sinks, p);
            for (int r = p; r < t; r++) {   // each decode row as a decode step: the row is its own chunk
                long at = pos + 4L * r;
                launch(cu, attend, 1, 1, 128, a, q + 4L * r * d, k + 4L * r * d, v + 4L * r * dv, ringK, ringV, sinkK, sinkV, far, 0L,
                        out + 4L * (r - p) * dv, 1, 1, d, dv, w, sinks, m, scale, 1, at);
                launch(cu, commit, 1, 1, 256, a, k + 4L * r * d, v + 4L * r * dv, ringK, ringV, 1, w, d, dv, at);
            }
            cu.synchronize();
            MemorySegment res = a.allocate(4L * (t - p) * dv, 16);
            cu.copyToHost(res, out, res.byteSize());
            return res.toArray(ValueLayout.JAVA_FLOAT);
        } finally {
            for (long dptr : owned) cu.memFree(dptr);
        }
    }

    private static long alloc(CudaDriver cu, List<Long> owned, long bytes) {
        long d = cu.memAlloc(Math.max(16, bytes));
        owned.add(d);
        return d;
    }

    private static long upload(CudaDriver cu, Arena a, List<Long> owned, MemorySegment heap) {
        long d = alloc(cu, owned, heap.byteSize());
        MemorySegment buf = a.allocate(heap.byteSize(), 16);
        buf.copyFrom(heap);
        cu.copyToDevice(d, buf, heap.byteSize());
        return d;
    }

    private static void launch(CudaDriver cu, Kernel k, int gx, int gy, int block, Arena a, Object... args) {
        cu.launch(k.fn(), gx, gy, 1, block, 1, 1, 0, MemorySegment.NULL, k.pack(a, args));
    }
}
