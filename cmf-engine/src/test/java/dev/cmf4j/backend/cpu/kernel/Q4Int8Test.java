package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The int8-activation q4_block decode ({@link Q4Int8}): the vector kernel over the repacked copy
 * against its scalar twin over the stored payload, bit for bit (tiles cut by chunks and windows,
 * rows past the last tile, fused add, several tokens); and the twin against the exact product
 * ({@link ReferenceKernels}, in double) within the activation-rounding bound
 * |y − y_ref| ≤ ½·Σ_c |W[r][c]|·d_g(c)·(1 + 1e-4) + 3e-5·Σ_c |W[r][c]·x[c]|.
 */
class Q4Int8Test {
    static WorkerPool pool;

    @BeforeAll static void start() { pool = new WorkerPool(3); }
    @AfterAll static void stop() { pool.close(); }

    static final int[][] SHAPES = {{1, 32}, {5, 64}, {16, 96}, {17, 512}, {33, 544}, {100, 2048}, {130, 1024}, {300, 576}, {48, 8192}};

    @Test
    void vectorKernelEqualsScalarTwinAndStaysWithinTheActivationBound() {
        Assumptions.assumeTrue(Q4Int8.USABLE, "needs 256-bit vectors");
        Random rnd = new Random(28);
        for (int[] s : SHAPES) {
            int rows = s[0], cols = s[1], gpr = cols / 32;
            float[] wf = TestWeights.randomMatrix(rnd, rows, cols);
            MemorySegment data = TestWeights.encode(DType.Q4_BLOCK, wf, rows, cols);
            Q4BlockMatrix w = new Q4BlockMatrix(data, rows, cols, 0, rows, true);
            assertThat(w.int8()).isTrue();
            float[] x = TestWeights.randomVector(rnd, cols);
            if (s[0] == 17) x[3] = 0f;                                  // a column of zeros is fine
            if (s[0] == 5) java.util.Arrays.fill(x, 0, 32, 0f);          // an all-zero group: d = 0

            float[] y = new float[rows];
            w.matvec(x, y, pool);
            float[] twin = twin(data, rows, gpr, x, 0, rows, null);
            for (int r = 0; r < rows; r++)
                assertThat(Float.floatToRawIntBits(y[r])).as("%dx%d row %d: %s vs twin %s", rows, cols, r, y[r], twin[r])
                        .isEqualTo(Float.floatToRawIntBits(twin[r]));

            // against the exact product: only the activation rounding
            float[] ref = new float[rows], abs = new float[rows];
            ReferenceKernels.matvec(DType.Q4_BLOCK, data, rows, cols, x, ref);
            ReferenceKernels.absMatvec(DType.Q4_BLOCK, data, rows, cols, x, abs);
            float[] d = new float[gpr];
            Q4Int8.prepare(x, 0, gpr, d, 0, new short[Q4Int8.preparedShorts(gpr)], 0);
            float[] row = new float[cols];
            double worst = 0;
            for (int r = 0; r < rows; r++) {
                ReferenceKernels.dequantRow(DType.Q4_BLOCK, data, rows, cols, r, row);
                double act = 0;
                for (int c = 0; c < cols; c++) act += Math.abs(row[c]) * d[c / 32];
                double bound = 0.5 * act * (1 + 1e-4) + 3e-5 * abs[r] + 1e-30;
                double err = Math.abs((double) y[r] - ref[r]);
                assertThat(err).as("%dx%d row %d: %s vs exact %s", rows, cols, r, y[r], ref[r]).isLessThanOrEqualTo(bound);
                worst = Math.max(worst, err / (abs[r] + 1e-30));
            }
            assertThat(worst).as("relative error on %dx%d", rows, cols).isLessThan(0.02);

            // fused add, offsets, and a window whose rows start inside a tile
            float[] base = TestWeights.randomVector(rnd, rows + 4);
            float[] ya = base.clone();
            float[] xo = new float[cols + 3];
            System.arraycopy(x, 0, xo, 3, cols);
            w.matvec(xo, 3, ya, 4, true, pool);
            float[] twinAdd = twin(data, rows, gpr, x, 0, rows, java.util.Arrays.copyOfRange(base, 4, 4 + rows));
            for (int r = 0; r < rows; r++)
                assertThat(ya[4 + r]).as("add row %d", r).isEqualTo(twinAdd[r]);
            if (rows > 3) {
                int from = 3, n = rows - 4;
                if (n > 0) {
                    WeightMatrix win = w.rowWindow(from, n);
                    float[] yw = new float[n];
                    win.matvec(x, yw, pool);
                    float[] tw = twin(data, rows, gpr, x, from, from + n, null);
                    for (int r = 0; r < n; r++)
                        assertThat(yw[r]).as("window row %d", r).isEqualTo(tw[r]);
                }
            }
        }
    }

    @Test
    void severalTokensGiveEachTokensOwnProduct() {
        Assumptions.assumeTrue(Q4Int8.USABLE, "needs 256-bit vectors");
        Random rnd = new Random(7);
        int rows = 70, cols = 640, tokens = 5;
        float[] wf = TestWeights.randomMatrix(rnd, rows, cols);
        MemorySegment data = TestWeights.encode(DType.Q4_BLOCK, wf, rows, cols);
        Q4BlockMatrix w = new Q4BlockMatrix(data, rows, cols, 0, rows, true);
        float[] x = TestWeights.randomVector(rnd, tokens * cols);
        float[] y = new float[tokens * rows];
        w.matvecRows(x, 0, tokens, y, 0, false, pool);
        for (int t = 0; t < tokens; t++) {
            float[] one = twin(data, rows, cols / 32, java.util.Arrays.copyOfRange(x, t * cols, (t + 1) * cols), 0, rows, null);
            for (int r = 0; r < rows; r++) assertThat(y[t * rows + r]).as("token %d row %d", t, r).isEqualTo(one[r]);
        }
    }

    /**
     * In one job with other dtypes (q4_block matrices sharing one prepared activation, a float layout beside them),
     * and as the few-token fallback of matmul: each output is the matrix's own single-token product, bit for bit.
     */
    @Test
    void sharedPreparationAndSmallChunksGiveTheSingleProducts() {
        Assumptions.assumeTrue(Q4Int8.USABLE, "needs 256-bit vectors");
        Random rnd = new Random(11);
        int cols = 320;
        DType[] types = {DType.Q4_BLOCK, DType.BF16, DType.Q4_BLOCK, DType.Q8_2F};
        int[] rows = {70, 9, 33, 40};
        WeightMatrix[] ws = new WeightMatrix[types.length];
        for (int i = 0; i < ws.length; i++)
            ws[i] = WeightMatrix.of(types[i], TestWeights.encode(types[i], TestWeights.randomMatrix(rnd, rows[i], cols), rows[i], cols), rows[i], cols);
        assertThat(((Q4BlockMatrix) ws[0]).int8()).as("int8 is the default").isTrue();
        float[] x = TestWeights.randomVector(rnd, cols);
        float[][] ys = new float[ws.length][];
        for (int i = 0; i < ws.length; i++) ys[i] = new float[rows[i]];
        WeightMatrix.matvecAll(x, ws, ys, pool);
        for (int i = 0; i < ws.length; i++) {
            float[] one = new float[rows[i]];
            ws[i].matvec(x, one, pool);
            assertThat(ys[i]).as("matvecAll %d (%s)", i, types[i]).isEqualTo(one);
        }
        int tokens = 3;                                                 // fewer than a GEMM tile: one matvec per token
        float[] xs = TestWeights.randomVector(rnd, tokens * cols), yt = new float[tokens * rows[0]];
        ws[0].matmul(xs, tokens, yt, pool);
        for (int t = 0; t < tokens; t++) {
            float[] one = new float[rows[0]];
            ws[0].matvec(xs, t * cols, one, 0, false, pool);
            assertThat(java.util.Arrays.copyOfRange(yt, t * rows[0], (t + 1) * rows[0])).as("matmul token %d", t).isEqualTo(one);
        }
    }

    /** The scalar twin over stored rows [r0, r1), optionally added to {@code base}. */
    private static float[] twin(MemorySegment data, int rows, int gpr, float[] x, int r0, int r1, float[] base) {
        float[] d = new float[gpr];
        short[] xs = new short[Q4Int8.preparedShorts(gpr)];
        Q4Int8.prepare(x, 0, gpr, d, 0, xs, 0);
        float[] y = base != null ? base.clone() : new float[r1 - r0];
        Q4Int8.dotRowsScalar(data, rows, gpr, r0, r1, d, 0, xs, 0, y, 0, base != null);
        return y;
    }
}
