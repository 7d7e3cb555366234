package dev.cmf4j.backend.cpu;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.format.DType;

/**
 * The reference CPU matmul: weights stay in their stored dtype and are read in place. Each output row is
 * decoded once into a small per-thread buffer (float32 rows are read straight from the map) and dotted
 * with every token of the chunk, so a chunk of T tokens reads the weights once, not T times. Rows are
 * split across the worker pool.
 *
 * <p>Bound: one pass over the weight bytes per call; the dot products run on the Vector API.
 * A faster kernel (int8 dots on the quantized codes, tiling) replaces this class behind {@link MatMul}.
 */
public final class CpuMatMul implements MatMul {
    private final WorkerPool pool;
    private final ThreadLocal<float[]> rowBuffer = ThreadLocal.withInitial(() -> new float[256]);

    public CpuMatMul(WorkerPool pool) { this.pool = pool; }

    public CpuMatMul() { this(CpuBackend.pool()); }

    @Override public void apply(Matrix w, float[] x, int tokens, float[] y) {
        if (w.inputMajor()) { applyInputMajor(w, x, tokens, y); return; }
        int out = w.rows(), in = w.cols();
        if (x.length < (long) tokens * in || y.length < (long) tokens * out)
            throw new IllegalArgumentException(w.name() + ": buffers too small for " + tokens + " tokens");
        boolean direct = w.dtype() == DType.F32;
        // grain: enough rows per task that a task reads >= ~16 KiB of weights
        int grain = Math.max(1, 16384 / Math.max(1, in * (w.dtype() == DType.F32 ? 4 : 1)));
        if ((long) out * in * tokens < 32768) grain = out;
        pool.parallelFor(out, grain, (from, to) -> {
            if (direct) {
                long rowBytes = 4L * in;
                for (int o = from; o < to; o++) {
                    long base = (w.firstRow() + o) * rowBytes;
                    for (int t = 0; t < tokens; t++)
                        y[t * out + o] = VectorMath.dot(w.data(), base, x, t * in, in);
                }
            } else {
                float[] row = buffer(in);
                for (int o = from; o < to; o++) {
                    w.decodeRow(o, row, 0);
                    for (int t = 0; t < tokens; t++) y[t * out + o] = VectorMath.dot(row, 0, x, t * in, in);
                }
            }
        });
    }

    /** x·W with W stored [in, out]: each stored row scales into every output (axpy), single-threaded. */
    private void applyInputMajor(Matrix w, float[] x, int tokens, float[] y) {
        int in = w.rows(), out = w.cols();
        float[] row = buffer(out);
        java.util.Arrays.fill(y, 0, tokens * out, 0f);
        for (int i = 0; i < in; i++) {
            w.decodeRow(i, row, 0);
            for (int t = 0; t < tokens; t++) {
                VectorMath.axpy(x[t * in + i], row, 0, y, t * out, out);
            }
        }
    }

    private float[] buffer(int n) {
        float[] b = rowBuffer.get();
        if (b.length < n) { b = new float[n]; rowBuffer.set(b); }
        return b;
    }

    /** Scalar reference: decode every row and sum in double. Tests compare kernels against it. */
    public static void reference(Matrix w, float[] x, int tokens, float[] y) {
        int out = w.outDim(), in = w.inDim();
        float[] row = new float[w.cols()];
        double[] acc = new double[tokens * out];
        for (int r = 0; r < w.rows(); r++) {
            w.decodeRow(r, row, 0);
            for (int t = 0; t < tokens; t++)
                for (int c = 0; c < w.cols(); c++) {
                    if (w.inputMajor()) acc[t * out + c] += (double) row[c] * x[t * in + r];
                    else acc[t * out + r] += (double) row[c] * x[t * in + c];
                }
        }
        for (int i = 0; i < acc.length; i++) y[i] = (float) acc[i];
    }
}
