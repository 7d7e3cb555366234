package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.TensorEntry;

import java.lang.foreign.MemorySegment;
import java.util.Objects;

/**
 * A 2-D weight tensor {@code [rows = out, cols = in]} read in place, in its stored dtype, from a
 * memory segment (normally the mmap slice of a CMF tensor), with the two products the graph needs:
 * {@link #matvec} for one token (decode; bound by memory bandwidth) and {@link #matmul} for a chunk
 * of tokens (prefill; bound by arithmetic, each weight panel reused across the chunk).
 *
 * <p>One final subclass per storage layout (CMF_FORMAT.md §2). A subclass supplies two hooks: a
 * fused dot of rows against a (possibly prepared) activation vector, and {@code unpack}, which
 * widens a small row×column panel to float for the shared prefill tile loop ({@link GemmJob}). No
 * method allocates after the pool's scratch buffers have grown to the model's sizes, and no method
 * ever dequantizes a whole matrix.
 *
 * <p>Instances are immutable and thread-safe; concurrent calls through one {@link WorkerPool} are
 * serialised by the pool.
 */
public abstract sealed class WeightMatrix
        permits F32Matrix, F16Matrix, Bf16Matrix, Q8Matrix, Q4BlockMatrix, Q4tpMatrix {

    /** The whole stored tensor's payload. */
    final MemorySegment data;
    /** Rows of the stored tensor (per-row planes of quantized layouts come after all of them). */
    final long storedRows;
    /** First stored row of this matrix: row r here is stored row row0 + r. */
    final long row0;
    final int rows;
    final int cols;

    WeightMatrix(MemorySegment data, long storedRows, int cols, long row0, int rows, DType dtype) {
        Objects.requireNonNull(data, "data");
        if (storedRows <= 0 || cols <= 0)
            throw new IllegalArgumentException("matrix shape must be positive, got [" + storedRows + ", " + cols + "]");
        if (row0 < 0 || rows <= 0 || row0 + rows > storedRows)
            throw new IllegalArgumentException("rows [" + row0 + ", " + (row0 + rows) + ") outside the stored " + storedRows);
        long want = byteSize(dtype, storedRows, cols);
        if (data.byteSize() != want)
            throw new IllegalArgumentException(dtype.label + " [" + storedRows + ", " + cols + "] needs " + want
                    + " bytes, segment has " + data.byteSize());
        this.data = data;
        this.storedRows = storedRows;
        this.row0 = row0;
        this.rows = rows;
        this.cols = cols;
    }

    /**
     * A kernel over {@code data} holding a [rows, cols] matrix of {@code dtype}.
     *
     * @throws IllegalArgumentException when the dtype has no matrix kernel or the segment size does
     *                                  not match the layout
     */
    public static WeightMatrix of(DType dtype, MemorySegment data, int rows, int cols) {
        return of(dtype, data, rows, cols, 0, rows);
    }

    /**
     * A kernel over rows {@code [firstRow, firstRow + rows)} of a stored [storedRows, cols] tensor of
     * {@code dtype} whose whole payload is {@code data} — e.g. one expert of a [experts·out, in]
     * tensor, without copying.
     */
    public static WeightMatrix of(DType dtype, MemorySegment data, long storedRows, int cols, long firstRow, int rows) {
        return switch (dtype) {
            case F32 -> new F32Matrix(data, storedRows, cols, firstRow, rows);
            case F16 -> new F16Matrix(data, storedRows, cols, firstRow, rows);
            case BF16 -> new Bf16Matrix(data, storedRows, cols, firstRow, rows);
            case Q8_ROW -> new Q8Matrix(data, storedRows, cols, firstRow, rows, false);
            case Q8_2F -> new Q8Matrix(data, storedRows, cols, firstRow, rows, true);
            case Q4_BLOCK -> new Q4BlockMatrix(data, storedRows, cols, firstRow, rows);
            case Q4TP -> new Q4tpMatrix(data, storedRows, cols, firstRow, rows);
            default -> throw new IllegalArgumentException("no CPU matrix kernel for dtype " + dtype.label
                    + " (supported: f32, f16, bf16, q8_row, q8_2f, q4_block, q4tp)");
        };
    }

    /**
     * A kernel over a CMF tensor's payload, read in place: cols = last dimension, rows = product of
     * the others (so a [experts, out, in] tensor is one matrix of experts·out rows).
     *
     * @throws IllegalArgumentException for an unsupported dtype, a 0-D tensor, or more than 2^31−1
     *                                  rows or columns
     */
    public static WeightMatrix forTensor(TensorEntry t) {
        if (t.ndim() < 1) throw new IllegalArgumentException("tensor " + t.name() + " is 0-D, not a matrix");
        long cols = t.cols(), rows = t.rows();
        if (rows > Integer.MAX_VALUE || cols > Integer.MAX_VALUE)
            throw new IllegalArgumentException("tensor " + t.name() + " has " + rows + " x " + cols + ": too large for one kernel");
        try {
            return of(t.dtype(), t.data(), (int) rows, (int) cols);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("tensor " + t.name() + ": " + e.getMessage(), e);
        }
    }

    /** True when {@link #of} accepts this dtype. */
    public static boolean supports(DType dtype) {
        return switch (dtype) {
            case F32, F16, BF16, Q8_ROW, Q8_2F, Q4_BLOCK, Q4TP -> true;
            default -> false;
        };
    }

    /** Bytes a [rows, cols] matrix of {@code dtype} occupies (CMF_FORMAT.md §2). */
    public static long byteSize(DType dtype, long rows, long cols) {
        long n = rows * cols;
        long gpr = (cols + 31) / 32;
        return switch (dtype) {
            case F32 -> 4 * n;
            case F16, BF16 -> 2 * n;
            case Q8_ROW -> n + 2 * rows;
            case Q8_2F -> n + 2 * rows + 2 * cols;
            case Q4_BLOCK -> (n + 31) / 32 * 18;
            case Q4TP -> rows * gpr * 16 + 4 * rows + rows * ((gpr * 5 + 7) / 8);
            default -> throw new IllegalArgumentException("no CPU matrix kernel for dtype " + dtype.label);
        };
    }

    public abstract DType dtype();

    /**
     * Rows {@code [from, from + n)} of this matrix as a matrix of their own, sharing the weights
     * and any per-tensor tables (cheap: no copy, no per-row work).
     */
    public final WeightMatrix rowWindow(int from, int n) {
        if (from < 0 || n <= 0 || from + n > rows)
            throw new IllegalArgumentException("window [" + from + ", " + (from + n) + ") outside the " + rows + " rows of " + this);
        return window(row0 + from, n);
    }

    /** The same tensor seen from stored row {@code firstRow}, {@code n} rows. */
    abstract WeightMatrix window(long firstRow, int n);

    public final int rows() { return rows; }

    public final int cols() { return cols; }

    /** Bytes of weights one full pass reads (the stored size; pro rata for a row window). */
    public final long byteSize() {
        return rows == storedRows ? data.byteSize() : data.byteSize() / storedRows * rows;
    }

    // ---------------------------------------------------------------- decode: one token

    /** y[0..rows) = W·x[0..cols). */
    public final void matvec(float[] x, float[] y, WorkerPool pool) {
        matvec(x, 0, y, 0, false, pool);
    }

    /** y[0..rows) += W·x[0..cols) (a residual add fused into the product). */
    public final void matvecAdd(float[] x, float[] y, WorkerPool pool) {
        matvec(x, 0, y, 0, true, pool);
    }

    /** y[yOff..yOff+rows) = (add ? y : 0) + W·x[xOff..xOff+cols). */
    public final void matvec(float[] x, int xOff, float[] y, int yOff, boolean add, WorkerPool pool) {
        Objects.checkFromIndexSize(xOff, cols, x.length);
        Objects.checkFromIndexSize(yOff, rows, y.length);
        pool.matvecJob.run(pool, x, xOff, this, y, yOff, add);
    }

    /**
     * Several products of one input, e.g. Q, K and V of one token or gate and up: ys[i] = W_i·x,
     * as one job whose work is split over all the matrices by bytes, so the pool synchronises once.
     * All matrices must have the same {@code cols}.
     */
    public static void matvecAll(float[] x, WeightMatrix[] ws, float[][] ys, WorkerPool pool) {
        checkAll("matvecAll", x, 1, ws, ys);
        pool.matvecJob.runAll(pool, x, ws, ys);
    }

    /** Several products of one input: as many outputs as matrices, equal cols, each X and Y_i holding {@code tokens} rows. */
    private static void checkAll(String what, float[] x, int tokens, WeightMatrix[] ws, float[][] ys) {
        if (ws.length != ys.length) throw new IllegalArgumentException("matrices and outputs differ in count");
        for (int i = 0; i < ws.length; i++) {
            if (ws[i].cols != ws[0].cols) throw new IllegalArgumentException(what + " needs equal cols");
            Objects.checkFromIndexSize(0, tokens * ws[i].cols, x.length);
            Objects.checkFromIndexSize(0, tokens * ws[i].rows, ys[i].length);
        }
    }

    /**
     * A few tokens' products as decode products ({@link #matvec} per token, the same result for each): Y[t] = W·X[t]
     * for t < tokens, the weights streamed once; for the rows of several sequences' decode step, where the tiled
     * {@link #matmul} would widen every weight for a handful of columns.
     */
    public final void matvecRows(float[] x, int xOff, int tokens, float[] y, int yOff, boolean add, WorkerPool pool) {
        Objects.checkFromIndexSize(xOff, tokens * cols, x.length);
        Objects.checkFromIndexSize(yOff, tokens * rows, y.length);
        if (tokens == 0) return;
        pool.matvecJob.run(pool, x, xOff, tokens, this, y, yOff, add);
    }

    /** {@link #matvecAll} for {@code tokens} rows of x: ys[i] is [tokens, rows_i]. */
    public static void matvecAllRows(float[] x, int tokens, WeightMatrix[] ws, float[][] ys, WorkerPool pool) {
        checkAll("matvecAllRows", x, tokens, ws, ys);
        if (tokens == 0) return;
        pool.matvecJob.runAll(pool, x, tokens, ws, ys);
    }

    // ---------------------------------------------------------------- prefill: a chunk of tokens

    /** Y[t][0..rows) = W·X[t][0..cols) for t in 0..tokens; X is [tokens, cols], Y [tokens, rows], row-major. */
    public final void matmul(float[] x, int tokens, float[] y, WorkerPool pool) {
        matmul(x, 0, tokens, y, 0, false, pool);
    }

    /** Y[t] += W·X[t] (residual add fused). */
    public final void matmulAdd(float[] x, int tokens, float[] y, WorkerPool pool) {
        matmul(x, 0, tokens, y, 0, true, pool);
    }

    /** Y[yOff + t·rows + r] = (add ? Y : 0) + Σ_c W[r][c]·X[xOff + t·cols + c]. */
    public final void matmul(float[] x, int xOff, int tokens, float[] y, int yOff, boolean add, WorkerPool pool) {
        if (tokens < 0) throw new IllegalArgumentException("tokens < 0");
        Objects.checkFromIndexSize(xOff, tokens * cols, x.length);
        Objects.checkFromIndexSize(yOff, tokens * rows, y.length);
        if (tokens == 0) return;
        pool.gemmJob.run(pool, x, xOff, tokens, this, y, yOff, add);
    }

    /**
     * Several products of one chunk (Q, K, V; gate, up): Y_i[t] = W_i·X[t], one job (X is packed once
     * for all). All matrices must have the same {@code cols}; each Y_i is [tokens, rows_i].
     */
    public static void matmulAll(float[] x, int tokens, WeightMatrix[] ws, float[][] ys, WorkerPool pool) {
        checkAll("matmulAll", x, tokens, ws, ys);
        if (tokens == 0) return;
        pool.gemmJob.run(pool, x, 0, tokens, ws, ys, 0, false);
    }

    // ---------------------------------------------------------------- hooks for the subclasses

    /** Floats of prepared activation {@link #prepare} writes; 0 when the dot reads x as it is. */
    int preparedLength() { return 0; }

    /** Rewrites x once per call into the form {@link #dotRows} reads (fold a column field, reorder). */
    void prepare(float[] x, int xOff, float[] dst, int dstOff) {}

    /**
     * True when {@code o}'s {@link #prepare} writes exactly what this one's does for the same x, so
     * products sharing an input (q/k/v) prepare it once and keep one copy in L1.
     */
    boolean samePreparation(WeightMatrix o) {
        return o.getClass() == getClass() && o.cols == cols && o.preparedLength() == preparedLength()
                && o.preparedShorts() == preparedShorts();
    }

    /** Shorts of prepared activation (int8 activations) {@link #prepare(float[], int, float[], int, short[], int)} writes; 0 for most layouts. */
    int preparedShorts() { return 0; }

    /** {@link #prepare}, for layouts whose prepared activation also has a short part. */
    void prepare(float[] x, int xOff, float[] dst, int dstOff, short[] sdst, int sdstOff) { prepare(x, xOff, dst, dstOff); }

    /** {@link #dotRows}, for layouts whose prepared activation also has a short part. */
    void dotRows(float[] xp, int xpOff, short[] xs, int xsOff, int r0, int r1, float[] y, int yOff, boolean add) {
        dotRows(xp, xpOff, r0, r1, y, yOff, add);
    }

    /**
     * {@link #dotRows} for {@code tokens} tokens: token t's prepared activation at {@code xpOff + t·xpStride} (its short
     * part at {@code xsOff + t·xsStride}), its results at {@code yOff + t·yStride}, each bit for bit its own call's. A
     * layout may override it to convert each weight once for several tokens.
     */
    void dotRowsTokens(float[] xp, int xpOff, int xpStride, short[] xs, int xsOff, int xsStride, int tokens, int r0, int r1,
                       float[] y, int yOff, int yStride, boolean add) {
        for (int t = 0; t < tokens; t++)
            dotRows(xp, xpOff + t * xpStride, xs, xsOff + t * xsStride, r0, r1, y, yOff + t * yStride, add);
    }

    /** Row count that decode chunks should be multiples of (a tiled layout's tile). */
    int rowAlignment() { return 1; }

    /**
     * y[yOff + r] = (add ? y : 0) + row r · x for r in [r0, r1), reading the prepared activation
     * at {@code xp[xpOff..]} (or x itself when {@link #preparedLength} is 0).
     */
    abstract void dotRows(float[] xp, int xpOff, int r0, int r1, float[] y, int yOff, boolean add);

    /**
     * True when {@link #unpack} writes each 32-column group in the nibble order of the 4-bit
     * layouts (the 16 even columns, then the 16 odd ones) rather than in column order; the prefill
     * loop then packs the activation in the same order, which saves the unpack an interleave.
     */
    boolean groupPermuted() { return false; }

    /** Where column c lands inside its 32-group under {@link #groupPermuted}: evens first, then odds. */
    static int permutedColumn(int c) {
        int j = c & 31;
        return (c & ~31) + (j >> 1) + ((j & 1) << 4);
    }

    /**
     * Writes W[r0 + i][k0 + j] as float to dst[dOff + i·ld + j] for i < nr, j < nk (j in group
     * order, see {@link #groupPermuted}). k0 is a multiple of 32 and nk a multiple of 32 unless
     * k0 + nk == cols.
     */
    abstract void unpack(int r0, int nr, int k0, int nk, float[] dst, int dOff, int ld);

    @Override
    public String toString() {
        return dtype().label + "[" + rows + ", " + cols + "]";
    }
}
