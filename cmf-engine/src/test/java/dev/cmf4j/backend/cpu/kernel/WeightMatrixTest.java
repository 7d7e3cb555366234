package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Every fast kernel against its scalar twin ({@link ReferenceKernels}) on random weights and
 * activations, on random shapes including ragged ones (cols not a multiple of the vector width or of
 * the 32-weight group, rows not a multiple of the register tile or of the chunking), for decode,
 * fused residual add, several matrices at once and prefill chunks of ragged token counts.
 * Error bound, normalised per output: |y − y_ref| ≤ 2e-5 · Σ_c |W[r][c]·x[c]| (+1e-30). q4_block is built with its
 * float-activation kernel here ({@code -Dcmf.q4.int8=false}); its default int8-activation decode has its own bound
 * and tests in {@link Q4Int8Test}.
 */
class WeightMatrixTest {
    static final double TOL = 2e-5;
    static WorkerPool pool;

    @BeforeAll static void start() { pool = new WorkerPool(3); }     // more threads than cores on purpose
    @AfterAll static void stop() { pool.close(); }

    static final int[][] SHAPES = {
            {1, 1}, {3, 7}, {5, 31}, {7, 32}, {13, 33}, {2, 64}, {17, 100}, {37, 256}, {6, 257},
            {97, 288}, {101, 512}, {200, 96}, {23, 1000}, {130, 2048},
    };

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void matvecMatchesScalarReference(DType dtype) {
        Random rnd = new Random(1234 + dtype.id);
        for (int[] s : SHAPES) {
            int rows = s[0], cols = s[1];
            WeightMatrix w = matrix(rnd, dtype, rows, cols);
            float[] x = TestWeights.randomVector(rnd, cols);
            float[] ref = new float[rows], scale = new float[rows], y = new float[rows];
            ReferenceKernels.matvec(dtype, w.data, rows, cols, x, ref);
            ReferenceKernels.absMatvec(dtype, w.data, rows, cols, x, scale);
            w.matvec(x, y, pool);
            assertClose(y, 0, ref, scale, dtype + " matvec " + rows + "x" + cols);

            // fused residual add, with offsets into larger arrays
            float[] xo = new float[cols + 5];
            System.arraycopy(x, 0, xo, 5, cols);
            float[] yo = new float[rows + 3];
            float[] base = TestWeights.randomVector(rnd, rows);
            System.arraycopy(base, 0, yo, 3, rows);
            w.matvec(xo, 5, yo, 3, true, pool);
            float[] want = new float[rows];
            for (int r = 0; r < rows; r++) want[r] = ref[r] + base[r];
            float[] sc = new float[rows];
            for (int r = 0; r < rows; r++) sc[r] = scale[r] + Math.abs(base[r]);
            assertClose(yo, 3, want, sc, dtype + " matvecAdd " + rows + "x" + cols);
        }
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void matmulMatchesScalarReference(DType dtype) {
        Random rnd = new Random(99 + dtype.id);
        int[] tokenCounts = {3, 19, 34};
        int[][] shapes = {{5, 31}, {13, 33}, {101, 512}, {203, 300}};
        for (int[] s : shapes) {
            int rows = s[0], cols = s[1];
            WeightMatrix w = matrix(rnd, dtype, rows, cols);
            for (int tokens : tokenCounts) {
                float[] x = TestWeights.randomVector(rnd, tokens * cols);
                float[] y = new float[tokens * rows];
                w.matmul(x, tokens, y, pool);
                float[] xt = new float[cols], ref = new float[rows], scale = new float[rows];
                float[] yAdd = TestWeights.randomVector(rnd, tokens * rows), yAdd0 = yAdd.clone();
                w.matmulAdd(x, tokens, yAdd, pool);
                for (int t = 0; t < tokens; t++) {
                    System.arraycopy(x, t * cols, xt, 0, cols);
                    ReferenceKernels.matvec(dtype, w.data, rows, cols, xt, ref);
                    ReferenceKernels.absMatvec(dtype, w.data, rows, cols, xt, scale);
                    String what = dtype + " matmul " + rows + "x" + cols + " tokens=" + tokens + " t=" + t;
                    assertClose(y, t * rows, ref, scale, what);
                    float[] want = new float[rows], sc = new float[rows];
                    for (int r = 0; r < rows; r++) {
                        want[r] = ref[r] + yAdd0[t * rows + r];
                        sc[r] = scale[r] + Math.abs(yAdd0[t * rows + r]);
                    }
                    assertClose(yAdd, t * rows, want, sc, what + " (add)");
                }
            }
        }
    }

    /**
     * The prefill GEMM's scalar twin, bit for bit: each output is, per K-panel of {@link GemmJob#KC} columns, one
     * FMA chain from zero over the panel's columns in order (the 4-bit layouts' nibble order within each 32-group),
     * of {@code unpack}'s floats and the activation; the panel sums are added in order to zero (then stored, or added
     * to y). Whatever register tile runs it (8 rows on AVX-512, 5 on AVX2) and however the rows fall into blocks,
     * tiles and ragged rows (rows 5..203 here, blocks of {@link GemmJob#MC}).
     */
    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void matmulGivesTheBitsOfItsScalarTwin(DType dtype) {
        org.junit.jupiter.api.Assumptions.assumeTrue(Simd.VECTOR, "the GEMM runs only on vector paths");
        Random rnd = new Random(7 + dtype.id);
        int[][] shapes = {{5, 31}, {13, 64}, {203, 300}, {130, 544}, {37, 1024}};
        for (int[] s : shapes) {
            int rows = s[0], cols = s[1];
            WeightMatrix w = matrix(rnd, dtype, rows, cols);
            float[] wf = new float[rows * cols];
            w.unpack(0, rows, 0, cols, wf, 0, cols);            // one call: unpack is per element, the panel cut does not matter
            for (int tokens : new int[] {Simd.L, 2 * Simd.L + 3, 70}) {
                float[] x = TestWeights.randomVector(rnd, tokens * cols);
                float[] y = new float[tokens * rows], yAdd = TestWeights.randomVector(rnd, tokens * rows), yAdd0 = yAdd.clone();
                w.matmul(x, tokens, y, pool);
                w.matmulAdd(x, tokens, yAdd, pool);
                float[] xp = new float[cols];
                for (int t = 0; t < tokens; t++) {
                    for (int c = 0; c < cols; c++) xp[w.groupPermuted() ? WeightMatrix.permutedColumn(c) : c] = x[t * cols + c];
                    for (int r = 0; r < rows; r++) {
                        float total = 0f;
                        for (int k0 = 0; k0 < cols; k0 += GemmJob.KC) {
                            float chain = 0f;
                            for (int k = k0; k < Math.min(cols, k0 + GemmJob.KC); k++) chain = Math.fma(wf[r * cols + k], xp[k], chain);
                            total += chain;
                        }
                        String what = dtype + " " + rows + "x" + cols + " tokens=" + tokens + " t=" + t + " r=" + r;
                        assertThat(y[t * rows + r]).as(what).isEqualTo(total);
                        assertThat(yAdd[t * rows + r]).as(what + " (add)").isEqualTo(yAdd0[t * rows + r] + total);
                    }
                }
            }
        }
    }

    /**
     * A few tokens as decode products (several sequences' decode rows): each token's output is what matvec gives for
     * it alone (the same dot; within the kernels' rounding bound of the sum of |terms|, as a not yet compiled Vector
     * API loop and another chunking of the rows may round differently), with offsets, the residual add, and for
     * several matrices of mixed dtypes (their own preparations per token) in one job.
     */
    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void matvecRowsGiveEachTokensOwnMatvec(DType dtype) {
        Random rnd = new Random(555 + dtype.id);
        for (int[] s : new int[][] {{5, 31}, {37, 256}, {130, 2048}})
            for (int tokens : new int[] {2, 5, 16}) {
                int rows = s[0], cols = s[1];
                WeightMatrix w = matrix(rnd, dtype, rows, cols);
                float[] x = TestWeights.randomVector(rnd, 3 + tokens * cols);
                float[] y = TestWeights.randomVector(rnd, 2 + tokens * rows), y0 = y.clone();
                w.matvecRows(x, 3, tokens, y, 2, true, pool);
                float[] one = new float[rows], xt = new float[cols], scale = new float[rows];
                for (int t = 0; t < tokens; t++) {
                    w.matvec(x, 3 + t * cols, one, 0, false, pool);
                    System.arraycopy(x, 3 + t * cols, xt, 0, cols);
                    ReferenceKernels.absMatvec(dtype, w.data, rows, cols, xt, scale);
                    float[] want = new float[rows], sc = new float[rows];
                    for (int r = 0; r < rows; r++) {
                        want[r] = y0[2 + t * rows + r] + one[r];
                        sc[r] = scale[r] + Math.abs(y0[2 + t * rows + r]);
                    }
                    assertClose(y, 2 + t * rows, want, sc, dtype + " matvecRows " + rows + "x" + cols + " tokens " + tokens + " t " + t);
                }
            }
        DType other = dtype == DType.Q4TP ? DType.BF16 : DType.Q4TP;
        WeightMatrix[] ws = {matrix(rnd, dtype, 70, 320), matrix(rnd, other, 9, 320), matrix(rnd, dtype, 33, 320)};
        int tokens = 7;
        float[] xs = TestWeights.randomVector(rnd, tokens * 320);
        float[][] ys = {new float[tokens * 70], new float[tokens * 9], new float[tokens * 33]};
        WeightMatrix.matvecAllRows(xs, tokens, ws, ys, pool);
        float[] xt = new float[320];
        for (int i = 0; i < ws.length; i++)
            for (int t = 0; t < tokens; t++) {
                int rows = ws[i].rows;
                float[] one = new float[rows], scale = new float[rows];
                ws[i].matvec(xs, t * 320, one, 0, false, pool);
                System.arraycopy(xs, t * 320, xt, 0, 320);
                ReferenceKernels.absMatvec(ws[i].dtype(), ws[i].data, rows, 320, xt, scale);
                assertClose(ys[i], t * rows, one, scale, "matvecAllRows matrix " + i + " (" + ws[i].dtype() + ") t " + t);
            }
    }

    /**
     * q8 products of several tokens (on AVX-512 token pairs against row pairs, each weight converted once for two tokens)
     * give every token the bits of its own single-token product: 1..8 tokens, odd and even row counts and chunks, columns
     * with a tail past the last whole block or under one block, with and without the residual add, and beside a matrix
     * of another dtype in one job. Bit for bit, so a draft's verification or a batch neighbour cannot change a sequence.
     */
    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"Q8_ROW", "Q8_2F"})
    void q8SeveralTokensGiveEachTokenTheBitsOfItsOwnProduct(DType dtype) {
        Random rnd = new Random(808 + dtype.id);
        for (int[] s : new int[][] {{1, 1}, {3, 7}, {2, 64}, {5, 130}, {6, 257}, {37, 1000}, {64, 1024}, {129, 2048}}) {
            int rows = s[0], cols = s[1];
            WeightMatrix w = matrix(rnd, dtype, rows, cols);
            for (int tokens = 1; tokens <= 8; tokens++) {
                float[] x = TestWeights.randomVector(rnd, 3 + tokens * cols);
                float[] y = TestWeights.randomVector(rnd, 2 + tokens * rows), y0 = y.clone(), fresh = new float[tokens * rows];
                w.matvecRows(x, 3, tokens, y, 2, true, pool);
                w.matvecRows(x, 3, tokens, fresh, 0, false, pool);
                float[] one = new float[rows];
                for (int t = 0; t < tokens; t++) {
                    w.matvec(x, 3 + t * cols, one, 0, false, pool);
                    for (int r = 0; r < rows; r++) {
                        String what = dtype + " " + rows + "x" + cols + " tokens " + tokens + " t " + t + " row " + r;
                        assertThat(Float.floatToRawIntBits(fresh[t * rows + r])).as(what).isEqualTo(Float.floatToRawIntBits(one[r]));
                        assertThat(Float.floatToRawIntBits(y[2 + t * rows + r])).as(what + " (add)")
                                .isEqualTo(Float.floatToRawIntBits(y0[2 + t * rows + r] + one[r]));
                    }
                }
            }
        }
        WeightMatrix[] ws = {matrix(rnd, dtype, 71, 320), matrix(rnd, DType.BF16, 9, 320), matrix(rnd, dtype, 34, 320)};
        for (int tokens : new int[] {2, 5, 8}) {
            float[] xs = TestWeights.randomVector(rnd, tokens * 320);
            float[][] ys = {new float[tokens * 71], new float[tokens * 9], new float[tokens * 34]};
            WeightMatrix.matvecAllRows(xs, tokens, ws, ys, pool);
            for (int i : new int[] {0, 2}) {
                int rows = ws[i].rows;
                float[] one = new float[rows];
                for (int t = 0; t < tokens; t++) {
                    ws[i].matvec(xs, t * 320, one, 0, false, pool);
                    for (int r = 0; r < rows; r++)
                        assertThat(Float.floatToRawIntBits(ys[i][t * rows + r])).as("matvecAllRows " + i + " tokens " + tokens + " t " + t + " row " + r)
                                .isEqualTo(Float.floatToRawIntBits(one[r]));
                }
            }
        }
    }

    /**
     * q8's scalar twin (what a cold JVM runs until C2 has compiled the vector loop) gives the vector loop's bits: ragged
     * widths (under one block, a block, pairs of blocks, tails), with and without the add, activations spanning huge,
     * tiny, subnormal and signed-zero values, all 256 byte codes. A run's text must not depend on which one ran.
     */
    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"Q8_ROW", "Q8_2F"})
    void q8ColdTwinGivesTheVectorLoopsBits(DType dtype) {
        Random rnd = new Random(515 + dtype.id);
        for (int cols : new int[] {1, 7, 63, 64, 65, 127, 128, 129, 192, 255, 256, 257, 384, 640, 1000, 1152, 2048, 2049}) {
            int rows = 19;
            float[] wf = TestWeights.randomMatrix(rnd, rows, cols);
            for (int i = 0; i < Math.min(256, cols); i++) wf[i] = (i - 128) / 127f * 0.3f;   // row 0: every code
            Q8Matrix w = (Q8Matrix) matrix(dtype, rows, cols, wf);
            for (int trial = 0; trial < 6; trial++) {
                float[] x = TestWeights.randomVector(rnd, cols);
                for (int c = 0; c < cols; c++)
                    switch (trial) {
                        case 1 -> x[c] *= 1e30f;
                        case 2 -> x[c] *= 1e-36f;                    // prepared ·2^-16 goes subnormal
                        case 3 -> x[c] = rnd.nextInt(4) == 0 ? (rnd.nextBoolean() ? 0f : -0f) : x[c] * (float) Math.pow(10, rnd.nextInt(41) - 20);
                        case 4 -> x[c] = Float.MIN_VALUE * (rnd.nextInt(2001) - 1000);
                        default -> { }
                    }
                float[] xp = new float[3 + w.preparedLength()];
                w.prepare(x, 0, xp, 3);
                float[] base = TestWeights.randomVector(rnd, rows + 2);
                for (boolean add : new boolean[] {false, true}) {
                    float[] vec = base.clone(), twin = base.clone();
                    w.dotRowsVector(xp, 3, 0, rows, vec, 2, add);
                    w.dotRowsLanes(xp, 3, 0, rows, twin, 2, add);
                    for (int r = 0; r < rows + 2; r++)
                        assertThat(Float.floatToIntBits(twin[r])).as(dtype + " cols " + cols + " trial " + trial + " add " + add + " row " + r
                                + ": twin " + twin[r] + " vector " + vec[r]).isEqualTo(Float.floatToIntBits(vec[r]));
                }
            }
            // the pair loops (which a cold JVM leaves aside until they run compiled) against each token's vector loop
            if (Simd.VECTOR)
                for (int tokens = 2; tokens <= 5; tokens++) {
                    int len = w.preparedLength();
                    float[] xp = new float[tokens * len];
                    for (int t = 0; t < tokens; t++) w.prepare(TestWeights.randomVector(rnd, cols), 0, xp, t * len);
                    float[] pairs = new float[tokens * rows], single = new float[tokens * rows];
                    w.pairRows(xp, 0, len, tokens, 1, rows, pairs, 0, rows, false);
                    for (int t = 0; t < tokens; t++) w.dotRowsVector(xp, t * len, 1, rows, single, t * rows, false);
                    for (int i = 0; i < pairs.length; i++)
                        assertThat(Float.floatToIntBits(pairs[i])).as(dtype + " cols " + cols + " tokens " + tokens + " at " + i).isEqualTo(Float.floatToIntBits(single[i]));
                }
        }
    }

    @Test
    void severalMatricesOfMixedDtypesInOneJob() {
        Random rnd = new Random(7);
        int cols = 320;
        // repeated dtypes: q4/bf16 share one prepared activation, two q8_2f tensors (different column fields) must not
        DType[] types = {DType.Q8_2F, DType.Q4_BLOCK, DType.BF16, DType.Q4TP, DType.Q8_2F, DType.Q4_BLOCK, DType.BF16};
        int[] rows = {70, 33, 129, 8, 21, 40, 9};
        WeightMatrix[] ws = new WeightMatrix[types.length];
        for (int i = 0; i < ws.length; i++) ws[i] = matrix(rnd, types[i], rows[i], cols);
        float[] x = TestWeights.randomVector(rnd, cols);
        float[][] ys = new float[ws.length][];
        for (int i = 0; i < ws.length; i++) ys[i] = new float[rows[i]];
        WeightMatrix.matvecAll(x, ws, ys, pool);
        for (int i = 0; i < ws.length; i++) {
            float[] ref = new float[rows[i]], scale = new float[rows[i]];
            ReferenceKernels.matvec(types[i], ws[i].data, rows[i], cols, x, ref);
            ReferenceKernels.absMatvec(types[i], ws[i].data, rows[i], cols, x, scale);
            assertClose(ys[i], 0, ref, scale, "matvecAll " + types[i]);
        }
        int tokens = 21;
        float[] xs = TestWeights.randomVector(rnd, tokens * cols);
        for (int i = 0; i < ws.length; i++) ys[i] = new float[tokens * rows[i]];
        WeightMatrix.matmulAll(xs, tokens, ws, ys, pool);
        float[] xt = new float[cols];
        for (int i = 0; i < ws.length; i++) {
            float[] ref = new float[rows[i]], scale = new float[rows[i]];
            for (int t = 0; t < tokens; t++) {
                System.arraycopy(xs, t * cols, xt, 0, cols);
                ReferenceKernels.matvec(types[i], ws[i].data, rows[i], cols, xt, ref);
                ReferenceKernels.absMatvec(types[i], ws[i].data, rows[i], cols, xt, scale);
                assertClose(ys[i], t * rows[i], ref, scale, "matmulAll " + types[i] + " t=" + t);
            }
        }
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void rowWindowOfAStoredTensor(DType dtype) {
        // e.g. one expert of a [experts·out, in] tensor: rows [first, first+n) read in place
        Random rnd = new Random(21 + dtype.id);
        for (int cols : new int[] {64, 45}) {
            int stored = 50, first = 7, n = 20;
            float[] wf = TestWeights.randomMatrix(rnd, stored, cols);
            MemorySegment m = TestWeights.encode(dtype, wf, stored, cols);
            WeightMatrix w = of(dtype, m, stored, cols, first, n);
            float[] x = TestWeights.randomVector(rnd, cols);
            float[] all = new float[stored], scale = new float[stored];
            ReferenceKernels.matvec(dtype, m, stored, cols, x, all);
            ReferenceKernels.absMatvec(dtype, m, stored, cols, x, scale);
            float[] want = java.util.Arrays.copyOfRange(all, first, first + n);
            float[] sc = java.util.Arrays.copyOfRange(scale, first, first + n);
            float[] y = new float[n];
            w.matvec(x, y, pool);
            assertClose(y, 0, want, sc, dtype + " window matvec cols=" + cols);
            WeightMatrix whole = of(dtype, m, stored, cols, 0, stored);
            float[] y2 = new float[n - 3];
            whole.rowWindow(first, n).rowWindow(3, n - 3).matvec(x, y2, pool);   // windows share the tables
            assertClose(y2, 0, java.util.Arrays.copyOfRange(want, 3, n), java.util.Arrays.copyOfRange(sc, 3, n),
                    dtype + " window of window cols=" + cols);
            int tokens = 18;
            float[] xs = new float[tokens * cols];
            for (int t = 0; t < tokens; t++) System.arraycopy(x, 0, xs, t * cols, cols);
            float[] ys = new float[tokens * n];
            w.matmul(xs, tokens, ys, pool);
            for (int t = 0; t < tokens; t++) assertClose(ys, t * n, want, sc, dtype + " window matmul cols=" + cols);
        }
        assertThatThrownBy(() -> WeightMatrix.of(dtype, Arena.ofAuto().allocate(WeightMatrix.byteSize(dtype, 10, 32)), 10, 32, 5, 6))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("outside the stored 10");
    }

    @Test
    void referenceDequantizesWhatTheEncoderWrote() {
        // guards the test encoders and the reference against each other: error within the quantizer's step
        Random rnd = new Random(5);
        int rows = 9, cols = 70;
        float[] w = TestWeights.randomMatrix(rnd, rows, cols);
        for (DType d : new DType[] {DType.F32, DType.F16, DType.BF16, DType.Q8_ROW, DType.Q8_2F, DType.Q4_BLOCK, DType.Q4TP}) {
            MemorySegment m = TestWeights.encode(d, w, rows, cols);
            float[] row = new float[cols];
            for (int r = 0; r < rows; r++) {
                ReferenceKernels.dequantRow(d, m, rows, cols, r, row);
                float amax = 0;
                for (int c = 0; c < cols; c++) amax = Math.max(amax, Math.abs(w[r * cols + c]));
                for (int c = 0; c < cols; c++) {
                    double tol = switch (d) {
                        case F32 -> 0; case F16 -> 1e-3 * amax; case BF16 -> 8e-3 * amax;
                        // half a quantization step: row scale (times the column field for q8_2f)
                        case Q8_ROW -> 0.51 * Simd.f16(m, (long) rows * cols + 2L * r);
                        case Q8_2F -> 0.51 * Simd.f16(m, (long) rows * cols + 2L * r)
                                * Simd.f16(m, (long) rows * cols + 2L * rows + 2L * c);
                        default -> amax / 7.0 * 0.6 + amax * 0.02;
                    };
                    assertThat((double) Math.abs(row[c] - w[r * cols + c])).as(d + " r" + r + " c" + c).isLessThanOrEqualTo(tol + 1e-7);
                }
            }
        }
    }

    @Test
    void rejectsWrongSizesAndDtypes() {
        MemorySegment m = Arena.ofAuto().allocate(100);
        assertThatThrownBy(() -> WeightMatrix.of(DType.Q8_ROW, m, 10, 10)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("q8_row [10, 10] needs 120 bytes");
        assertThatThrownBy(() -> WeightMatrix.of(DType.VBIT, m, 10, 10)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("vbit");
        WeightMatrix w = WeightMatrix.of(DType.Q8_ROW, Arena.ofAuto().allocate(120), 10, 10);
        assertThatThrownBy(() -> w.matvec(new float[9], new float[10], pool)).isInstanceOf(IndexOutOfBoundsException.class);
    }

    /**
     * Threads sharing one pool (a server's sessions on the process-wide pool) get each their own products: a job's
     * set-up and its chunks are one unit, so another thread's job cannot swap the matrices or scratch under it.
     */
    @Test
    void threadsSharingOnePoolGetTheirOwnProducts() throws Exception {
        Random rnd = new Random(11);
        int cols = 200;
        WeightMatrix[] mats = {matrix(rnd, DType.Q8_2F, 300, cols), matrix(rnd, DType.F16, 170, cols), matrix(rnd, DType.Q4_BLOCK, 96, cols)};
        int tokens = 9;
        float[] x = TestWeights.randomVector(rnd, tokens * cols);
        float[][] want = new float[mats.length][];
        for (int m = 0; m < mats.length; m++) {
            want[m] = new float[tokens * mats[m].rows];
            mats[m].matmul(x, tokens, want[m], pool);
        }
        int threads = 4;
        var failures = new java.util.concurrent.ConcurrentLinkedQueue<Throwable>();
        var start = new java.util.concurrent.CountDownLatch(1);
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            int id = t;
            ts[t] = new Thread(() -> {
                try {
                    start.await();
                    for (int round = 0; round < 150; round++) {
                        int m = (id + round) % mats.length;
                        float[] y = new float[tokens * mats[m].rows];
                        switch (round % 3) {
                            case 0 -> mats[m].matmul(x, tokens, y, pool);
                            case 1 -> mats[m].matvecRows(x, 0, tokens, y, 0, false, pool);
                            default -> { for (int k = 0; k < tokens; k++) mats[m].matvec(x, k * cols, y, k * mats[m].rows, false, pool); }
                        }
                        for (int i = 0; i < y.length; i++)
                            if (Math.abs(y[i] - want[m][i]) > 1e-3f * (1 + Math.abs(want[m][i])))
                                throw new AssertionError("thread " + id + " round " + round + " matrix " + m + " [" + i + "]: " + y[i] + " want " + want[m][i]);
                    }
                } catch (Throwable e) {
                    failures.add(e);
                }
            });
            ts[t].start();
        }
        start.countDown();
        for (Thread t : ts) t.join();
        assertThat(failures).isEmpty();
    }

    static WeightMatrix matrix(Random rnd, DType dtype, int rows, int cols) {
        return matrix(dtype, rows, cols, TestWeights.randomMatrix(rnd, rows, cols));
    }

    static WeightMatrix matrix(DType dtype, int rows, int cols, float[] w) {
        return of(dtype, TestWeights.encode(dtype, w, rows, cols), rows, cols, 0, rows);
    }

    /** {@link WeightMatrix#of}, q4_block with its float-activation kernel. */
    static WeightMatrix of(DType dtype, MemorySegment m, int stored, int cols, int first, int n) {
        return dtype == DType.Q4_BLOCK ? new Q4BlockMatrix(m, stored, cols, first, n, false) : WeightMatrix.of(dtype, m, stored, cols, first, n);
    }

    static void assertClose(float[] y, int yOff, float[] ref, float[] scale, String what) {
        for (int r = 0; r < ref.length; r++) {
            double err = Math.abs((double) y[yOff + r] - ref[r]);
            double bound = TOL * scale[r] + 1e-30;
            if (!(err <= bound))
                throw new AssertionError(what + ": row " + r + " got " + y[yOff + r] + " want " + ref[r]
                        + " (|err| " + err + " > " + bound + ")");
        }
    }
}
