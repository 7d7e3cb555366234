package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.convert.quant.Quantizer;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.Npy;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.testkit.Fixtures;
import dev.cmf4j.testkit.Npz;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The kernels against the outside world: (1) files written by the reference converter, whose
 * tensors the reference reader dequantized into {@code dequant-<Q>.npz} — W·x from the kernel must
 * match golden-W·x; (2) payloads written by the project's own encoders ({@code cmf-convert}) and
 * decoded by the format's dequantizers — a second, independent reading of the layouts.
 */
class KernelConformanceTest {
    static WorkerPool pool;

    @BeforeAll static void start() { pool = new WorkerPool(2); }
    @AfterAll static void stop() { pool.close(); }

    @ParameterizedTest
    @ValueSource(strings = {"F32", "F16", "Q8_ROW", "Q8_2F", "Q4_BLOCK"})
    void matvecOfReferenceFilesMatchesTheReferenceReader(String q) throws Exception {
        Path dir = Fixtures.require("cmf/tiny");
        Map<String, Npy.Array> golden = Npz.read(dir.resolve("dequant-" + q + ".npz"));
        Random rnd = new Random(3);
        int checked = 0;
        try (CmfFile f = CmfFile.open(dir.resolve("tiny-" + q + ".cmf"))) {
            for (TensorEntry t : f.tensors()) {
                if (t.ndim() != 2 || !WeightMatrix.supports(t.dtype())) continue;
                WeightMatrix w = WeightMatrix.forTensor(t);
                float[] g = golden.get(t.name()).toFloats();
                int rows = w.rows(), cols = w.cols();
                float[] x = TestWeights.randomVector(rnd, cols), y = new float[rows];
                w.matvec(x, y, pool);
                // q4_block decodes with int8 activations (Q4Int8): plus their rounding, ½·Σ_c |w|·d_g(c), d_g = absmax/127
                boolean int8 = w instanceof Q4BlockMatrix q4 && q4.int8();
                for (int r = 0; r < rows; r++) {
                    double want = 0, scale = 0, act = 0;
                    for (int c = 0; c < cols; c++) {
                        want += (double) g[r * cols + c] * x[c];
                        scale += Math.abs((double) g[r * cols + c] * x[c]);
                        if (int8) act += Math.abs((double) g[r * cols + c]) * groupAbsMax(x, c) / 127;
                    }
                    assertThat(Math.abs(y[r] - want)).as("%s %s row %d", q, t.name(), r)
                            .isLessThanOrEqualTo(2e-5 * scale + 0.5 * (1 + 1e-4) * act + 1e-30);
                }
                int tokens = 20;
                float[] xs = TestWeights.randomVector(rnd, tokens * cols), ys = new float[tokens * rows];
                w.matmul(xs, tokens, ys, pool);
                for (int t0 = 0; t0 < tokens; t0++)
                    for (int r = 0; r < rows; r++) {
                        double want = 0, scale = 0;
                        for (int c = 0; c < cols; c++) {
                            want += (double) g[r * cols + c] * xs[t0 * cols + c];
                            scale += Math.abs((double) g[r * cols + c] * xs[t0 * cols + c]);
                        }
                        assertThat(Math.abs(ys[t0 * rows + r] - want)).as("%s %s matmul t%d row %d", q, t.name(), t0, r)
                                .isLessThanOrEqualTo(2e-5 * scale + 1e-30);
                    }
                checked++;
            }
        }
        assertThat(checked).as("2-D tensors checked in tiny-%s", q).isGreaterThanOrEqualTo(7);
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void referenceKernelsReadTheProjectEncodersLikeTheFormatDequantizers(DType dtype) {
        Random rnd = new Random(11);
        int[][] shapes = dtype == DType.Q4TP ? new int[][] {{3, 32}, {17, 96}, {40, 256}}
                : new int[][] {{3, 32}, {17, 96}, {40, 256}, {5, 33}, {7, 70}};
        for (int[] s : shapes) {
            int rows = s[0], cols = s[1];
            long[] shape = {rows, cols};
            Quantizer qz = Quantizer.of(dtype);
            if (!qz.supports(shape)) continue;
            float[] w = TestWeights.randomMatrix(rnd, rows, cols);
            MemorySegment m = Arena.ofAuto().allocate(Math.max(1, qz.encodedSize(shape))).asSlice(0, qz.encodedSize(shape));
            qz.encode(w, shape, m);
            float[] theirs = Dequantizers.of(dtype).all(m, shape), mine = new float[cols];
            for (int r = 0; r < rows; r++) {
                ReferenceKernels.dequantRow(dtype, m, rows, cols, r, mine);
                for (int c = 0; c < cols; c++)
                    assertThat(mine[c]).as("%s %dx%d [%d,%d]", dtype, rows, cols, r, c).isEqualTo(theirs[r * cols + c]);
            }
            WeightMatrix k = WeightMatrixTest.of(dtype, m, rows, cols, 0, rows);     // q4_block: its float-activation kernel
            float[] x = TestWeights.randomVector(rnd, cols), y = new float[rows], ref = new float[rows], sc = new float[rows];
            k.matvec(x, y, pool);
            ReferenceKernels.matvec(dtype, m, rows, cols, x, ref);
            ReferenceKernels.absMatvec(dtype, m, rows, cols, x, sc);
            WeightMatrixTest.assertClose(y, 0, ref, sc, dtype + " encoder-written " + rows + "x" + cols);
        }
    }

    /** max |x| over the 32-column group holding column c. */
    private static double groupAbsMax(float[] x, int c) {
        double m = 0;
        for (int k = c - c % 32; k < Math.min(x.length, c - c % 32 + 32); k++) m = Math.max(m, Math.abs(x[k]));
        return m;
    }
}
