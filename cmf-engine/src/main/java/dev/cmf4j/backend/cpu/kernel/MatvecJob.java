package dev.cmf4j.backend.cpu.kernel;

/**
 * Decode products on a {@link WorkerPool}, for one token or a few (a step of several sequences' decode rows):
 * prepares each matrix's activation once per token on the calling thread (cheap: one pass over x), then splits
 * the rows of all matrices into chunks of about equal bytes of weights (so matrices of different dtypes balance),
 * which the threads take dynamically. A chunk's rows are dotted with all the tokens ({@link WeightMatrix#dotRowsTokens}:
 * one token after another, or q8's token pairs): the first pass reads them from memory, the others from cache, so the
 * weights are streamed once per call however many tokens, and each token's result is bit for bit its single-token
 * product. One instance per pool, reused for every call (the pool runs
 * one job at a time, and a job holds it from its set-up to its end).
 */
final class MatvecJob implements WorkerPool.Task {
    /** Smallest chunk worth a hand-off: reading it takes a few microseconds. */
    private static final long MIN_CHUNK_BYTES = 32 << 10;
    /** Largest chunk of several tokens' products: its rows stay in a core's L2 from the first token to the last. */
    private static final long MULTI_CHUNK_BYTES = 256 << 10;
    /** Chunks per thread, so a thread slowed by a neighbour sheds work to the others. */
    private static final int CHUNKS_PER_THREAD = 8;

    private WeightMatrix[] ws = new WeightMatrix[4];
    private float[][] ys = new float[4][];
    private int[] yOffs = new int[4];
    private float[][] xps = new float[4][];
    private int[] xpOffs = new int[4];
    private short[][] xss = new short[4][];
    private int[] xsOffs = new int[4], xsStrides = new int[4];
    private int count, tokens = 1;
    /** Per matrix: floats between one token's prepared activations, and between one token's outputs. */
    private int[] xpStrides = new int[4], yStrides = new int[4];
    private boolean add;
    private int[] chunkMatrix = new int[64];
    private int[] chunkR0 = new int[64];
    private int[] chunkR1 = new int[64];
    private int chunks;

    void run(WorkerPool pool, float[] x, int xOff, WeightMatrix w, float[] y, int yOff, boolean add) {
        run(pool, x, xOff, 1, w, y, yOff, add);
    }

    /** {@code tokens} rows of x ([tokens, cols] from xOff) into [tokens, rows] of y from yOff. */
    void run(WorkerPool pool, float[] x, int xOff, int tokens, WeightMatrix w, float[] y, int yOff, boolean add) {
        pool.hold();
        try {
            ensure(1);
            count = 1;
            this.tokens = tokens;
            ws[0] = w;
            ys[0] = y;
            yOffs[0] = yOff;
            this.add = add;
            go(pool, x, xOff);
        } finally {
            pool.release();
        }
    }

    void runAll(WorkerPool pool, float[] x, WeightMatrix[] in, float[][] out) { runAll(pool, x, 1, in, out); }

    void runAll(WorkerPool pool, float[] x, int tokens, WeightMatrix[] in, float[][] out) {
        pool.hold();
        try {
            ensure(in.length);
            count = in.length;
            this.tokens = tokens;
            for (int i = 0; i < count; i++) {
                ws[i] = in[i];
                ys[i] = out[i];
                yOffs[i] = 0;
            }
            this.add = false;
            go(pool, x, 0);
        } finally {
            pool.release();
        }
    }

    private void go(WorkerPool pool, float[] x, int xOff) {
        // 1. prepared activations, one region of the pool's scratch per matrix that needs one
        int total = 0, totalShorts = 0;
        for (int i = 0; i < count; i++) {
            total += ws[i].preparedLength() * tokens;
            totalShorts += ws[i].preparedShorts() * tokens;
        }
        float[] prep = total > 0 ? pool.scratch(0, total) : null;
        short[] prepS = totalShorts > 0 ? pool.shortScratch(totalShorts) : null;
        int off = 0, offS = 0;
        long bytes = 0;
        for (int i = 0; i < count; i++) {
            WeightMatrix w = ws[i];
            int len = w.preparedLength();
            int same = -1;
            for (int j = 0; j < i && same < 0; j++) if (ws[j].preparedLength() > 0 && ws[j].samePreparation(w)) same = j;
            yStrides[i] = w.rows;
            if (same >= 0) {                                   // q/k/v of one dtype: one prepared copy
                xps[i] = xps[same];
                xpOffs[i] = xpOffs[same];
                xpStrides[i] = xpStrides[same];
                xss[i] = xss[same];
                xsOffs[i] = xsOffs[same];
                xsStrides[i] = xsStrides[same];
            } else if (len > 0) {
                int lenS = w.preparedShorts();
                for (int t = 0; t < tokens; t++) w.prepare(x, xOff + t * w.cols, prep, off + t * len, prepS, offS + t * lenS);
                xps[i] = prep;
                xpOffs[i] = off;
                xpStrides[i] = len;
                off += len * tokens;
                xss[i] = lenS > 0 ? prepS : null;
                xsOffs[i] = offS;
                xsStrides[i] = lenS;
                offS += lenS * tokens;
            } else {
                xps[i] = x;
                xpOffs[i] = xOff;
                xpStrides[i] = w.cols;
                xss[i] = null;
            }
            bytes += w.byteSize();
        }
        // 2. chunks of about equal bytes across all matrices
        long target = Math.max(MIN_CHUNK_BYTES, bytes / ((long) pool.threads() * CHUNKS_PER_THREAD));
        if (tokens > 1) target = Math.min(target, MULTI_CHUNK_BYTES);   // a chunk stays in L2 while every token reads it
        chunks = 0;
        for (int i = 0; i < count; i++) {
            WeightMatrix w = ws[i];
            long rowBytes = Math.max(1, w.byteSize() / w.rows);
            int align = w.rowAlignment();
            int step = (int) Math.max(1, Math.min(w.rows, target / rowBytes));
            step = Math.min(w.rows, (step + align - 1) / align * align);
            for (int r = 0; r < w.rows; r += step) addChunk(i, r, Math.min(w.rows, r + step));
        }
        try {
            pool.run(chunks, this);
        } finally {
            for (int i = 0; i < count; i++) { ws[i] = null; ys[i] = null; xps[i] = null; xss[i] = null; }
        }
    }

    @Override
    public void run(int chunk, int worker) {
        int m = chunkMatrix[chunk];
        ws[m].dotRowsTokens(xps[m], xpOffs[m], xpStrides[m], xss[m], xsOffs[m], xsStrides[m], tokens,
                chunkR0[chunk], chunkR1[chunk], ys[m], yOffs[m], yStrides[m], add);
    }

    private void addChunk(int m, int r0, int r1) {
        if (chunks == chunkMatrix.length) {
            int n = chunks * 2;
            chunkMatrix = java.util.Arrays.copyOf(chunkMatrix, n);
            chunkR0 = java.util.Arrays.copyOf(chunkR0, n);
            chunkR1 = java.util.Arrays.copyOf(chunkR1, n);
        }
        chunkMatrix[chunks] = m;
        chunkR0[chunks] = r0;
        chunkR1[chunks] = r1;
        chunks++;
    }

    private void ensure(int n) {
        if (ws.length < n) {
            ws = new WeightMatrix[n];
            ys = new float[n][];
            yOffs = new int[n];
            xps = new float[n][];
            xpOffs = new int[n];
            xss = new short[n][];
            xsOffs = new int[n];
            xsStrides = new int[n];
            xpStrides = new int[n];
            yStrides = new int[n];
        }
    }
}
