package dev.cmf4j.backend.cpu.kernel;

/**
 * Decode (one token) products on a {@link WorkerPool}: prepares each matrix's activation once on
 * the calling thread (cheap: one pass over x), then splits the rows of all matrices into chunks of
 * about equal bytes of weights (so matrices of different dtypes balance), which the threads take
 * dynamically. One instance per pool, reused for every call (the pool runs one job at a time).
 */
final class MatvecJob implements WorkerPool.Task {
    /** Smallest chunk worth a hand-off: reading it takes a few microseconds. */
    private static final long MIN_CHUNK_BYTES = 32 << 10;
    /** Chunks per thread, so a thread slowed by a neighbour sheds work to the others. */
    private static final int CHUNKS_PER_THREAD = 8;

    private WeightMatrix[] ws = new WeightMatrix[4];
    private float[][] ys = new float[4][];
    private int[] yOffs = new int[4];
    private float[][] xps = new float[4][];
    private int[] xpOffs = new int[4];
    private int count;
    private boolean add;
    private int[] chunkMatrix = new int[64];
    private int[] chunkR0 = new int[64];
    private int[] chunkR1 = new int[64];
    private int chunks;

    void run(WorkerPool pool, float[] x, int xOff, WeightMatrix w, float[] y, int yOff, boolean add) {
        ensure(1);
        count = 1;
        ws[0] = w;
        ys[0] = y;
        yOffs[0] = yOff;
        this.add = add;
        go(pool, x, xOff);
    }

    void runAll(WorkerPool pool, float[] x, WeightMatrix[] in, float[][] out) {
        ensure(in.length);
        count = in.length;
        for (int i = 0; i < count; i++) {
            ws[i] = in[i];
            ys[i] = out[i];
            yOffs[i] = 0;
        }
        this.add = false;
        go(pool, x, 0);
    }

    private void go(WorkerPool pool, float[] x, int xOff) {
        // 1. prepared activations, one region of the pool's scratch per matrix that needs one
        int total = 0;
        for (int i = 0; i < count; i++) total += ws[i].preparedLength();
        float[] prep = total > 0 ? pool.scratch(0, total) : null;
        int off = 0;
        long bytes = 0;
        for (int i = 0; i < count; i++) {
            WeightMatrix w = ws[i];
            int len = w.preparedLength();
            int same = -1;
            for (int j = 0; j < i && same < 0; j++) if (ws[j].preparedLength() > 0 && ws[j].samePreparation(w)) same = j;
            if (same >= 0) {                                   // q/k/v of one dtype: one prepared copy
                xps[i] = xps[same];
                xpOffs[i] = xpOffs[same];
            } else if (len > 0) {
                w.prepare(x, xOff, prep, off);
                xps[i] = prep;
                xpOffs[i] = off;
                off += len;
            } else {
                xps[i] = x;
                xpOffs[i] = xOff;
            }
            bytes += w.byteSize();
        }
        // 2. chunks of about equal bytes across all matrices
        long target = Math.max(MIN_CHUNK_BYTES, bytes / ((long) pool.threads() * CHUNKS_PER_THREAD));
        chunks = 0;
        for (int i = 0; i < count; i++) {
            WeightMatrix w = ws[i];
            long rowBytes = Math.max(1, w.byteSize() / w.rows);
            int step = (int) Math.max(1, Math.min(w.rows, target / rowBytes));
            for (int r = 0; r < w.rows; r += step) addChunk(i, r, Math.min(w.rows, r + step));
        }
        try {
            pool.run(chunks, this);
        } finally {
            for (int i = 0; i < count; i++) { ws[i] = null; ys[i] = null; xps[i] = null; }
        }
    }

    @Override
    public void run(int chunk, int worker) {
        int m = chunkMatrix[chunk];
        ws[m].dotRows(xps[m], xpOffs[m], chunkR0[chunk], chunkR1[chunk], ys[m], yOffs[m], add);
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
        }
    }
}
