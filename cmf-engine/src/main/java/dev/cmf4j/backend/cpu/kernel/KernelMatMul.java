package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;

import java.lang.foreign.MemorySegment;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The engine's {@link MatMul} on the fast kernels: a [out, in] matrix of a supported dtype runs
 * {@link WeightMatrix#matvec} for one token, {@link WeightMatrix#matvecRows} for a few (up to
 * {@code -Dcmf.cpu.matvecMaxTokens}: a step of several sequences' decode rows, the weights streamed once) and
 * {@link WeightMatrix#matmul} (tiled prefill) for a chunk; everything else (input-major matrices, dtypes without a kernel) goes to {@code fallback}.
 *
 * <p>One {@link WeightMatrix} per stored tensor is built on first use and kept (keyed by the
 * payload segment and valid only while that segment's mapping is the same and alive, so one
 * instance may outlive the files it has served); a {@link Matrix} that views some rows of it (one expert of a stacked tensor)
 * becomes a {@link WeightMatrix#rowWindow} sharing its tables, which costs one small object.
 */
public final class KernelMatMul implements MatMul {
    private final WorkerPool pool;
    private final MatMul fallback;
    private final ConcurrentHashMap<SegmentKey, WeightMatrix> tensors = new ConcurrentHashMap<>();
    /** Most tokens a product runs as decode products (each token's dot in turn over cached rows) before the tiled GEMM. */
    private final int matvecMaxTokens = Integer.getInteger("cmf.cpu.matvecMaxTokens", 8);

    /**
     * A cache key: a payload segment as {@link MemorySegment#equals} sees it (same memory, same start), hashed by its
     * address without allocating (the segment's own hashCode boxes its base and offset into an array on every
     * product). Stored keys are immutable; a lookup goes through the calling thread's reusable {@link #PROBE}.
     */
    private static final class SegmentKey {
        private MemorySegment seg;
        private int hash;

        SegmentKey of(MemorySegment s) {
            seg = s;
            hash = Long.hashCode(s.address());
            return this;
        }

        @Override public int hashCode() { return hash; }

        @Override public boolean equals(Object o) { return o instanceof SegmentKey k && seg.equals(k.seg); }
    }

    private static final ThreadLocal<SegmentKey> PROBE = ThreadLocal.withInitial(SegmentKey::new);

    /**
     * @param pool     the threads the kernels run on
     * @param fallback for what the kernels do not cover
     */
    public KernelMatMul(WorkerPool pool, MatMul fallback) {
        this.pool = Objects.requireNonNull(pool, "pool");
        this.fallback = Objects.requireNonNull(fallback, "fallback");
    }

    public WorkerPool pool() { return pool; }

    @Override
    public void apply(Matrix w, float[] x, int tokens, float[] y) {
        WeightMatrix k = kernel(w);
        if (k == null) { fallback.apply(w, x, tokens, y); return; }
        if (tokens == 1) k.matvec(x, 0, y, 0, false, pool);
        else if (tokens <= matvecMaxTokens) k.matvecRows(x, 0, tokens, y, 0, false, pool);
        else k.matmul(x, 0, tokens, y, 0, false, pool);
    }

    /**
     * Products sharing one input (q/k/v, gate/up) as one pool job: the rows of all matrices are split
     * over the threads together (one hand-off and one barrier instead of one per matrix), and for a
     * chunk the activation is packed once. Falls back to one product each when any matrix has no kernel.
     */
    @Override
    public void applyShared(Matrix[] ws, float[] x, int tokens, float[][] ys) {
        if (ws.length != ys.length) throw new IllegalArgumentException(ws.length + " matrices, " + ys.length + " outputs");
        WeightMatrix[] ks = kernels(ws.length);
        try {
            for (int i = 0; i < ws.length; i++) {
                ks[i] = kernel(ws[i]);
                if (ks[i] == null || ks[i].cols() != ks[0].cols()) { MatMul.super.applyShared(ws, x, tokens, ys); return; }
            }
            if (tokens == 1) WeightMatrix.matvecAll(x, ks, ys, pool);
            else if (tokens <= matvecMaxTokens) WeightMatrix.matvecAllRows(x, tokens, ks, ys, pool);
            else WeightMatrix.matmulAll(x, tokens, ks, ys, pool);
        } finally {
            java.util.Arrays.fill(ks, null);   // hold no matrix past the call
        }
    }

    /**
     * The calling thread's array for {@code n} kernels of one shared product (q/k/v, gate/up: n ≤ 4), so a decode
     * step allocates none; the jobs copy or drop what they read from it before returning.
     */
    private static WeightMatrix[] kernels(int n) {
        if (n >= SHARED_MAX) return new WeightMatrix[n];
        WeightMatrix[][] byCount = SHARED_KERNELS.get();
        WeightMatrix[] ks = byCount[n];
        return ks != null ? ks : (byCount[n] = new WeightMatrix[n]);
    }

    private static final int SHARED_MAX = 5;
    private static final ThreadLocal<WeightMatrix[][]> SHARED_KERNELS = ThreadLocal.withInitial(() -> new WeightMatrix[SHARED_MAX][]);

    /** y += W·x for each token (residual add fused into the product). */
    public void applyAdd(Matrix w, float[] x, int tokens, float[] y) {
        WeightMatrix k = kernel(w);
        if (k == null) {
            int out = w.outDim();
            float[] tmp = new float[tokens * out];
            fallback.apply(w, x, tokens, tmp);
            for (int i = 0; i < tmp.length; i++) y[i] += tmp[i];
            return;
        }
        if (tokens == 1) k.matvec(x, 0, y, 0, true, pool);
        else if (tokens <= matvecMaxTokens) k.matvecRows(x, 0, tokens, y, 0, true, pool);
        else k.matmul(x, 0, tokens, y, 0, true, pool);
    }

    /** The kernel for {@code w}, or null when {@code w} is input-major or its dtype has no kernel. */
    public WeightMatrix kernel(Matrix w) {
        if (w.inputMajor() || !WeightMatrix.supports(w.dtype()) || w.rows() == 0) return null;
        MemorySegment seg = w.data();
        SegmentKey probe = PROBE.get().of(seg);
        WeightMatrix whole = tensors.get(probe);
        probe.seg = null;   // the probe holds no payload between calls
        // Segments compare by address and size, not by mapping: a file mapped where a closed one was
        // would hit the closed file's entry. An entry counts only for the same (live) scope.
        if (whole == null || !whole.data.scope().equals(seg.scope())) {
            // a stale hit means some mapping closed: drop its entries then (a plain miss must not scan the cache,
            // or first use of a file with thousands of tensors, e.g. one per expert, turns quadratic)
            if (whole != null) tensors.values().removeIf(k -> !k.data.scope().isAlive());
            whole = WeightMatrix.of(w.dtype(), seg, w.storedRows(), w.cols(), 0, Math.toIntExact(w.storedRows()));
            tensors.put(new SegmentKey().of(seg), whole);
        }
        if (whole.dtype() != w.dtype() || whole.cols() != w.cols())
            throw new IllegalArgumentException(w.name() + ": payload already seen as " + whole + ", now as " + w.dtype().label + " with " + w.cols() + " cols");
        return w.firstRow() == 0 && w.rows() == whole.rows() ? whole : whole.rowWindow(Math.toIntExact(w.firstRow()), w.rows());
    }
}
