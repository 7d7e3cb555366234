package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.format.DType;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/** The engine-facing adapter: same results as the engine's scalar reference, windows and fallbacks included. */
class KernelMatMulTest {

    /**
     * Allowed error per output beyond 1e-4·(1 + |ref|): q4_block's decode products (fewer tokens than a GEMM tile) run
     * on int8 activations ({@link Q4Int8}), which add at most ½·Σ_c |w|·absmax_g(c)/127.
     */
    static float[] slack(Matrix w, float[] x, int tokens) {
        float[] s = new float[tokens * w.outDim()];
        if (w.dtype() != DType.Q4_BLOCK || w.inputMajor() || w.cols() % 32 != 0 || tokens >= Simd.L || !Q4BlockMatrix.INT8_DEFAULT) return s;
        int stored = (int) w.storedRows(), cols = w.cols();
        float[] row = new float[cols];
        for (int r = 0; r < w.rows(); r++) {
            ReferenceKernels.dequantRow(w.dtype(), w.data(), stored, cols, (int) w.firstRow() + r, row);
            for (int t = 0; t < tokens; t++) {
                double a = 0;
                for (int g = 0; g < cols; g += 32) {
                    double m = 0, sw = 0;
                    for (int c = g; c < g + 32; c++) {
                        m = Math.max(m, Math.abs(x[t * cols + c]));
                        sw += Math.abs(row[c]);
                    }
                    a += sw * m / 127;
                }
                s[t * w.outDim() + r] = (float) (0.5 * (1 + 1e-4) * a);
            }
        }
        return s;
    }

    /** Dense reference from the scalar dequantizer, either orientation. */
    static void reference(Matrix w, float[] x, int tokens, float[] y) {
        int stored = (int) w.storedRows(), cols = w.cols();
        float[] row = new float[cols];
        double[] acc = new double[y.length];
        int out = w.outDim(), in = w.inDim();
        for (int r = 0; r < w.rows(); r++) {
            ReferenceKernels.dequantRow(w.dtype(), w.data(), stored, cols, (int) w.firstRow() + r, row);
            for (int t = 0; t < tokens; t++)
                for (int c = 0; c < cols; c++) {
                    if (w.inputMajor()) acc[t * out + c] += (double) row[c] * x[t * in + r];
                    else acc[t * out + r] += (double) row[c] * x[t * in + c];
                }
        }
        for (int i = 0; i < y.length; i++) y[i] = (float) acc[i];
    }

    @Test
    void matchesTheEnginesReferenceForWholeMatricesWindowsAndFallbacks() {
        Random rnd = new Random(8);
        try (WorkerPool pool = new WorkerPool(2)) {
            KernelMatMul mm = new KernelMatMul(pool, new CpuMatMul());
            int stored = 48, cols = 96;
            for (DType d : new DType[] {DType.Q8_2F, DType.Q4_BLOCK, DType.BF16, DType.F32}) {
                MemorySegment m = TestWeights.encode(d, TestWeights.randomMatrix(rnd, stored, cols), stored, cols);
                Matrix whole = Matrix.of("w", d, m, stored, cols);
                Matrix expert = whole.slice(16, 16, false);
                Matrix inputMajor = whole.slice(0, stored, true);
                for (Matrix w : new Matrix[] {whole, expert, inputMajor}) {
                    for (int tokens : new int[] {1, 20}) {
                        float[] x = TestWeights.randomVector(rnd, tokens * w.inDim());
                        float[] y = new float[tokens * w.outDim()], ref = new float[tokens * w.outDim()];
                        mm.apply(w, x, tokens, y);
                        reference(w, x, tokens, ref);
                        float[] slack = slack(w, x, tokens);
                        for (int i = 0; i < y.length; i++)
                            assertThat((double) y[i]).as("%s %s tokens=%d [%d]", d, w.inputMajor() ? "input-major" : w.rows() + " rows", tokens, i)
                                    .isCloseTo(ref[i], org.assertj.core.data.Offset.offset(1e-4 * (1 + Math.abs(ref[i])) + slack[i]));
                        float[] acc = y.clone();
                        mm.applyAdd(w, x, tokens, acc);
                        for (int i = 0; i < y.length; i++) assertThat((double) acc[i]).isCloseTo(2.0 * y[i], org.assertj.core.data.Offset.offset(1e-4 * (1 + Math.abs(y[i]))));
                    }
                }
                // shared-input products (q/k/v, gate/up): one job, same results
                for (int tokens : new int[] {1, 19}) {
                    Matrix[] ws = {whole, expert, whole.slice(3, 30, false)};
                    float[] x = TestWeights.randomVector(rnd, tokens * cols);
                    float[][] ys = new float[ws.length][], refs = new float[ws.length][];
                    for (int i = 0; i < ws.length; i++) {
                        ys[i] = new float[tokens * ws[i].outDim()];
                        refs[i] = new float[ys[i].length];
                        reference(ws[i], x, tokens, refs[i]);
                    }
                    mm.applyShared(ws, x, tokens, ys);
                    for (int i = 0; i < ws.length; i++) {
                        float[] slack = slack(ws[i], x, tokens);
                        for (int j = 0; j < ys[i].length; j++)
                            assertThat((double) ys[i][j]).as("%s shared %d tokens=%d [%d]", d, i, tokens, j)
                                    .isCloseTo(refs[i][j], org.assertj.core.data.Offset.offset(1e-4 * (1 + Math.abs(refs[i][j])) + slack[j]));
                    }
                }
                assertThat(mm.kernel(inputMajor)).isNull();
                assertThat(mm.kernel(expert).rows()).isEqualTo(16);
            }
        }
    }

    /** A file mapped at the address of a closed one must not hit the closed file's cached kernel. */
    @Test
    void aNewMappingAtAClosedMappingsAddressGetsItsOwnKernel() {
        Random rnd = new Random(3);
        int stored = 8, cols = 64;
        MemorySegment owned = TestWeights.encode(DType.Q8_2F, TestWeights.randomMatrix(rnd, stored, cols), stored, cols);
        try (WorkerPool pool = new WorkerPool(2)) {
            KernelMatMul mm = new KernelMatMul(pool, new CpuMatMul());
            float[] x = TestWeights.randomVector(rnd, cols), first = new float[stored], second = new float[stored];
            java.lang.foreign.Arena a = java.lang.foreign.Arena.ofShared();
            MemorySegment viewA = MemorySegment.ofAddress(owned.address()).reinterpret(owned.byteSize(), a, null);
            mm.apply(Matrix.of("w", DType.Q8_2F, viewA, stored, cols), x, 1, first);
            a.close();
            // the file mapped at the same address holds other weights: a stale cached kernel would still give `first`
            MemorySegment other = TestWeights.encode(DType.Q8_2F, TestWeights.randomMatrix(rnd, stored, cols), stored, cols);
            owned.copyFrom(other);
            float[] want = new float[stored];
            new CpuMatMul().apply(Matrix.of("w", DType.Q8_2F, other, stored, cols), x, 1, want);
            try (java.lang.foreign.Arena b = java.lang.foreign.Arena.ofConfined()) {
                MemorySegment viewB = MemorySegment.ofAddress(owned.address()).reinterpret(owned.byteSize(), b, null);
                assertThat(viewB).isEqualTo(viewA); // same key: this is the case the scope check guards
                mm.apply(Matrix.of("w", DType.Q8_2F, viewB, stored, cols), x, 1, second);
            }
            assertThat(second).isNotEqualTo(first);
            for (int i = 0; i < stored; i++)
                assertThat((double) second[i]).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-4 * (1 + Math.abs(want[i]))));
        }
    }
}
