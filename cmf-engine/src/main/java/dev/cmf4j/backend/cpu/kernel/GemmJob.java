package dev.cmf4j.backend.cpu.kernel;

import jdk.incubator.vector.FloatVector;

/**
 * Prefill (a chunk of tokens) products on a {@link WorkerPool}, shared by every dtype.
 *
 * <p>Bound: arithmetic. Every weight is widened to float once per chunk (into a small panel that
 * stays in L2) and then used by all the chunk's tokens; the inner loop is a register tile of
 * {@code MR} rows × {@code 2·L} tokens: 8 rows (16 vector accumulators, 2 token vectors, 1 broadcast
 * weight: 16 FMAs per 10 loads) where the machine has 32 vector registers (AVX-512), 5 rows (10
 * accumulators) where it has 16 (AVX2). Each output is one FMA chain per K-panel whatever the tile,
 * so both tiles give the same bits.
 *
 * <p>Steps: (1) X [tokens, cols] is packed once into token tiles [tp / 2L][cols][2L] (tp = tokens
 * rounded up to the tile, padding zero; each tile's K-panel contiguous, columns in the 4-bit group
 * order when the matrices unpack that way), shared by all matrices of the call, split over threads
 * by columns;
 * (2) work chunks are blocks of {@code MC} = 16·MR rows of one matrix; per block and per K-panel of
 * {@value #KC} columns the matrix's {@code unpack} writes the block's panel as float, then every
 * token tile runs the register tile over it, accumulating into a per-thread Y^T block; (3) the
 * block is written to Y (transposed back, optionally added).
 */
final class GemmJob implements WorkerPool.Task {
    private static final int L = Simd.L;
    /**
     * Rows of the register tile: 8 on 512-bit vectors (AVX-512 has 32 vector registers), 5 on 256-bit ones (16
     * registers; 6 rows' 12 accumulators were boxed by C2 there).
     */
    static final int MR = L == 16 ? 8 : 5;
    static final int MC = 16 * MR;
    static final int KC = 256;
    private static final int PACK_COLS = 128;

    private static final int NR = 2 * L;

    private final WeightMatrix[] one = new WeightMatrix[1];
    private final float[][] oneY = new float[1][];
    private WeightMatrix[] ws;
    private float[][] ys;
    private float[] x;
    private int xOff, yOff, tokens, tp, cols;
    private boolean add;
    private float[] xT;
    private WorkerPool pool;
    private boolean packing;
    private boolean permuted;
    private int packChunks;
    private int[] chunkMatrix = new int[64];
    private int[] chunkR0 = new int[64];
    private int chunks;

    void run(WorkerPool pool, float[] x, int xOff, int tokens, WeightMatrix w, float[] y, int yOff, boolean add) {
        pool.hold();
        try {
            one[0] = w;
            oneY[0] = y;
            run(pool, x, xOff, tokens, one, oneY, yOff, add);
        } finally {
            one[0] = null;
            oneY[0] = null;
            pool.release();
        }
    }

    /** Holds the pool from the set-up to the end: its fields and scratch are this job's alone meanwhile. */
    void run(WorkerPool pool, float[] x, int xOff, int tokens, WeightMatrix[] ws, float[][] ys, int yOff, boolean add) {
        pool.hold();
        try {
            runHeld(pool, x, xOff, tokens, ws, ys, yOff, add);
        } finally {
            pool.release();
        }
    }

    private void runHeld(WorkerPool pool, float[] x, int xOff, int tokens, WeightMatrix[] ws, float[][] ys, int yOff, boolean add) {
        boolean perm = ws[0].groupPermuted();
        for (int i = 1; i < ws.length; i++)
            if (ws[i].groupPermuted() != perm) {      // mixed column orders (rare): one pass per order
                for (boolean p : new boolean[] {false, true}) {
                    var sub = new java.util.ArrayList<Integer>();
                    for (int j = 0; j < ws.length; j++) if (ws[j].groupPermuted() == p) sub.add(j);
                    WeightMatrix[] w2 = new WeightMatrix[sub.size()];
                    float[][] y2 = new float[sub.size()][];
                    for (int j = 0; j < w2.length; j++) { w2[j] = ws[sub.get(j)]; y2[j] = ys[sub.get(j)]; }
                    run(pool, x, xOff, tokens, w2, y2, yOff, add);
                }
                return;
            }
        if (!Simd.VECTOR || tokens < L) {              // too few tokens to fill a tile: one product per token
            for (int i = 0; i < ws.length; i++) {
                WeightMatrix w = ws[i];
                for (int t = 0; t < tokens; t++)
                    w.matvec(x, xOff + t * w.cols, ys[i], yOff + t * w.rows, add, pool);
            }
            return;
        }
        this.ws = ws;
        this.ys = ys;
        this.x = x;
        this.xOff = xOff;
        this.yOff = yOff;
        this.tokens = tokens;
        this.add = add;
        this.cols = ws[0].cols;
        this.tp = Simd.roundUp(tokens, NR);
        this.permuted = perm;
        this.xT = pool.scratch(1, cols * tp);
        this.pool = pool;
        try {
            packing = true;
            packChunks = Simd.ceilDiv(cols, PACK_COLS);
            pool.run(packChunks, this);
            packing = false;
            chunks = 0;
            for (int i = 0; i < ws.length; i++)
                for (int r = 0; r < ws[i].rows; r += MC) addChunk(i, r);
            pool.run(chunks, this);
        } finally {
            this.ws = null;
            this.ys = null;
            this.x = null;
            this.xT = null;
            this.pool = null;
        }
    }

    @Override
    public void run(int chunk, int worker) {
        if (packing) pack(chunk);
        else tile(chunkMatrix[chunk], chunkR0[chunk], worker);
    }

    /**
     * X^T tiles: [token tile][k'][NR lanes] = X[t][k] for the chunk's columns (each tile's K-panel is
     * contiguous, so the register tile streams it without L1 set conflicts) (k' = k, or its place in the 4-bit group order
     * when the matrices unpack that way), zero for the padding tokens. PACK_COLS is a multiple of
     * 32, so a chunk holds whole groups.
     */
    private void pack(int chunk) {
        int k0 = chunk * PACK_COLS, k1 = Math.min(cols, k0 + PACK_COLS);
        float[] src = x, dst = xT;
        int n = tokens, ld = tp, c = cols, base = xOff;
        boolean p = permuted;
        // token by token, each reading its columns in a row: X's rows are cols·4 bytes apart (a multiple of 4 KiB for
        // the usual widths), so walking one column down the tokens put every load in the same L1 set
        for (int t0 = 0; t0 < ld; t0 += NR) {
            int tile = t0 / NR * c * NR;
            for (int t = t0; t < t0 + NR; t++) {
                int lane = tile + t - t0;
                if (t >= n) {
                    for (int k = k0; k < k1; k++) dst[lane + (p ? WeightMatrix.permutedColumn(k) : k) * NR] = 0f;
                    continue;
                }
                int s = base + t * c;
                if (p) for (int k = k0; k < k1; k++) dst[lane + WeightMatrix.permutedColumn(k) * NR] = src[s + k];
                else for (int k = k0; k < k1; k++) dst[lane + k * NR] = src[s + k];
            }
        }
    }

    private void tile(int m, int r0, int worker) {
        WeightMatrix w = ws[m];
        int mc = Math.min(MC, w.rows - r0);
        float[] wp = pool.workerScratch(worker, 0, MC * KC);
        float[] yT = pool.workerScratch(worker, 1, MC * tp);
        java.util.Arrays.fill(yT, 0, mc * tp, 0f);
        for (int k0 = 0; k0 < cols; k0 += KC) {
            int kc = Math.min(KC, cols - k0);
            w.unpack(r0, mc, k0, kc, wp, 0, kc);
            for (int t0 = 0; t0 < tp; t0 += NR) {
                int i = 0;
                int xo = (t0 / NR * cols + k0) * NR;
                if (MR == 8) for (; i + 8 <= mc; i += 8) tile8(wp, i * kc, kc, xT, xo, tp, yT, i * tp + t0);
                else for (; i + 5 <= mc; i += 5) tile5(wp, i * kc, kc, xT, xo, tp, yT, i * tp + t0);
                for (; i < mc; i++) tile1(wp, i * kc, kc, xT, xo, tp, yT, i * tp + t0);
            }
        }
        float[] y = ys[m];
        int rows = w.rows, base = yOff + r0;
        for (int t = 0; t < tokens; t++) {               // row-contiguous stores into Y (yT is small, in L1/L2)
            int d = base + t * rows;
            if (add) for (int i = 0; i < mc; i++) y[d + i] += yT[i * tp + t];
            else for (int i = 0; i < mc; i++) y[d + i] = yT[i * tp + t];
        }
    }


    /**
     * yT[8 rows][2L tokens] += wp[8 rows][kc] · xT[kc][2L tokens], for 512-bit vectors: 16 accumulators + 2 token
     * vectors + 1 broadcast of AVX-512's 32 registers.
     */
    private static void tile8(float[] wp, int w0, int kc, float[] xT, int x0, int ldy, float[] yT, int y0) {
        var F = Simd.F;
        FloatVector a00 = FloatVector.zero(F), a01 = FloatVector.zero(F);
        FloatVector a10 = FloatVector.zero(F), a11 = FloatVector.zero(F);
        FloatVector a20 = FloatVector.zero(F), a21 = FloatVector.zero(F);
        FloatVector a30 = FloatVector.zero(F), a31 = FloatVector.zero(F);
        FloatVector a40 = FloatVector.zero(F), a41 = FloatVector.zero(F);
        FloatVector a50 = FloatVector.zero(F), a51 = FloatVector.zero(F);
        FloatVector a60 = FloatVector.zero(F), a61 = FloatVector.zero(F);
        FloatVector a70 = FloatVector.zero(F), a71 = FloatVector.zero(F);
        int w1 = w0 + kc, w2 = w1 + kc, w3 = w2 + kc, w4 = w3 + kc, w5 = w4 + kc, w6 = w5 + kc, w7 = w6 + kc;
        for (int k = 0; k < kc; k++) {
            int xo = x0 + k * NR;
            FloatVector x0v = FloatVector.fromArray(F, xT, xo);
            FloatVector x1v = FloatVector.fromArray(F, xT, xo + L);
            FloatVector b = FloatVector.broadcast(F, wp[w0 + k]);
            a00 = b.fma(x0v, a00); a01 = b.fma(x1v, a01);
            b = FloatVector.broadcast(F, wp[w1 + k]);
            a10 = b.fma(x0v, a10); a11 = b.fma(x1v, a11);
            b = FloatVector.broadcast(F, wp[w2 + k]);
            a20 = b.fma(x0v, a20); a21 = b.fma(x1v, a21);
            b = FloatVector.broadcast(F, wp[w3 + k]);
            a30 = b.fma(x0v, a30); a31 = b.fma(x1v, a31);
            b = FloatVector.broadcast(F, wp[w4 + k]);
            a40 = b.fma(x0v, a40); a41 = b.fma(x1v, a41);
            b = FloatVector.broadcast(F, wp[w5 + k]);
            a50 = b.fma(x0v, a50); a51 = b.fma(x1v, a51);
            b = FloatVector.broadcast(F, wp[w6 + k]);
            a60 = b.fma(x0v, a60); a61 = b.fma(x1v, a61);
            b = FloatVector.broadcast(F, wp[w7 + k]);
            a70 = b.fma(x0v, a70); a71 = b.fma(x1v, a71);
        }
        // Written out, never a helper taking the vectors: past C2's node budget the helper is not inlined and all 16
        // vectors are boxed on every call (prefill about 5x slower on AVX-512; docs/CPU_KERNELS.md, "C2's node budget").
        FloatVector.fromArray(F, yT, y0).add(a00).intoArray(yT, y0);
        FloatVector.fromArray(F, yT, y0 + L).add(a01).intoArray(yT, y0 + L);
        FloatVector.fromArray(F, yT, y0 + ldy).add(a10).intoArray(yT, y0 + ldy);
        FloatVector.fromArray(F, yT, y0 + ldy + L).add(a11).intoArray(yT, y0 + ldy + L);
        FloatVector.fromArray(F, yT, y0 + 2 * ldy).add(a20).intoArray(yT, y0 + 2 * ldy);
        FloatVector.fromArray(F, yT, y0 + 2 * ldy + L).add(a21).intoArray(yT, y0 + 2 * ldy + L);
        FloatVector.fromArray(F, yT, y0 + 3 * ldy).add(a30).intoArray(yT, y0 + 3 * ldy);
        FloatVector.fromArray(F, yT, y0 + 3 * ldy + L).add(a31).intoArray(yT, y0 + 3 * ldy + L);
        FloatVector.fromArray(F, yT, y0 + 4 * ldy).add(a40).intoArray(yT, y0 + 4 * ldy);
        FloatVector.fromArray(F, yT, y0 + 4 * ldy + L).add(a41).intoArray(yT, y0 + 4 * ldy + L);
        FloatVector.fromArray(F, yT, y0 + 5 * ldy).add(a50).intoArray(yT, y0 + 5 * ldy);
        FloatVector.fromArray(F, yT, y0 + 5 * ldy + L).add(a51).intoArray(yT, y0 + 5 * ldy + L);
        FloatVector.fromArray(F, yT, y0 + 6 * ldy).add(a60).intoArray(yT, y0 + 6 * ldy);
        FloatVector.fromArray(F, yT, y0 + 6 * ldy + L).add(a61).intoArray(yT, y0 + 6 * ldy + L);
        FloatVector.fromArray(F, yT, y0 + 7 * ldy).add(a70).intoArray(yT, y0 + 7 * ldy);
        FloatVector.fromArray(F, yT, y0 + 7 * ldy + L).add(a71).intoArray(yT, y0 + 7 * ldy + L);
    }

    /**
     * yT[5 rows][2L tokens] += wp[5 rows][kc] · xT[kc][2L tokens]. Five rows, not six: with 12
     * accumulators C2 (JDK 25, AVX2) runs out of registers and boxes one accumulator on the heap
     * every iteration (measured 2.4x slower); 10 accumulators + 2 token vectors + 1 broadcast fit.
     */
    private static void tile5(float[] wp, int w0, int kc, float[] xT, int x0, int ldy, float[] yT, int y0) {
        var F = Simd.F;
        FloatVector a00 = FloatVector.zero(F), a01 = FloatVector.zero(F);
        FloatVector a10 = FloatVector.zero(F), a11 = FloatVector.zero(F);
        FloatVector a20 = FloatVector.zero(F), a21 = FloatVector.zero(F);
        FloatVector a30 = FloatVector.zero(F), a31 = FloatVector.zero(F);
        FloatVector a40 = FloatVector.zero(F), a41 = FloatVector.zero(F);
        int w1 = w0 + kc, w2 = w1 + kc, w3 = w2 + kc, w4 = w3 + kc;
        for (int k = 0; k < kc; k++) {
            int xo = x0 + k * NR;
            FloatVector x0v = FloatVector.fromArray(F, xT, xo);
            FloatVector x1v = FloatVector.fromArray(F, xT, xo + L);
            FloatVector b = FloatVector.broadcast(F, wp[w0 + k]);
            a00 = b.fma(x0v, a00); a01 = b.fma(x1v, a01);
            b = FloatVector.broadcast(F, wp[w1 + k]);
            a10 = b.fma(x0v, a10); a11 = b.fma(x1v, a11);
            b = FloatVector.broadcast(F, wp[w2 + k]);
            a20 = b.fma(x0v, a20); a21 = b.fma(x1v, a21);
            b = FloatVector.broadcast(F, wp[w3 + k]);
            a30 = b.fma(x0v, a30); a31 = b.fma(x1v, a31);
            b = FloatVector.broadcast(F, wp[w4 + k]);
            a40 = b.fma(x0v, a40); a41 = b.fma(x1v, a41);
        }
        FloatVector.fromArray(F, yT, y0).add(a00).intoArray(yT, y0);
        FloatVector.fromArray(F, yT, y0 + L).add(a01).intoArray(yT, y0 + L);
        FloatVector.fromArray(F, yT, y0 + ldy).add(a10).intoArray(yT, y0 + ldy);
        FloatVector.fromArray(F, yT, y0 + ldy + L).add(a11).intoArray(yT, y0 + ldy + L);
        FloatVector.fromArray(F, yT, y0 + 2 * ldy).add(a20).intoArray(yT, y0 + 2 * ldy);
        FloatVector.fromArray(F, yT, y0 + 2 * ldy + L).add(a21).intoArray(yT, y0 + 2 * ldy + L);
        FloatVector.fromArray(F, yT, y0 + 3 * ldy).add(a30).intoArray(yT, y0 + 3 * ldy);
        FloatVector.fromArray(F, yT, y0 + 3 * ldy + L).add(a31).intoArray(yT, y0 + 3 * ldy + L);
        FloatVector.fromArray(F, yT, y0 + 4 * ldy).add(a40).intoArray(yT, y0 + 4 * ldy);
        FloatVector.fromArray(F, yT, y0 + 4 * ldy + L).add(a41).intoArray(yT, y0 + 4 * ldy + L);
    }

    /** yT[1 row][2L tokens] += wp[1 row][kc] · xT[kc][2L tokens] (the ragged rows of a block). */
    private static void tile1(float[] wp, int w0, int kc, float[] xT, int x0, int ldy, float[] yT, int y0) {
        var F = Simd.F;
        FloatVector a0 = FloatVector.zero(F), a1 = FloatVector.zero(F);
        for (int k = 0; k < kc; k++) {
            int xo = x0 + k * NR;
            FloatVector b = FloatVector.broadcast(F, wp[w0 + k]);
            a0 = b.fma(FloatVector.fromArray(F, xT, xo), a0);
            a1 = b.fma(FloatVector.fromArray(F, xT, xo + L), a1);
        }
        FloatVector.fromArray(F, yT, y0).add(a0).intoArray(yT, y0);
        FloatVector.fromArray(F, yT, y0 + L).add(a1).intoArray(yT, y0 + L);
    }

    private void addChunk(int m, int r0) {
        if (chunks == chunkMatrix.length) {
            chunkMatrix = java.util.Arrays.copyOf(chunkMatrix, chunks * 2);
            chunkR0 = java.util.Arrays.copyOf(chunkR0, chunks * 2);
        }
        chunkMatrix[chunks] = m;
        chunkR0[chunks] = r0;
        chunks++;
    }
}
