package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.format.DType;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link CpuBackend#reference}, what every device check compares against: for every weight dtype its products are the
 * float-activation ones, the float64 sum of the decoded rows times the unrounded activations, within f32 summation
 * (2e-5·Σ_c |w·x| per output; int8 activations would add about ½·Σ_c |w|·absmax/127, far more).
 */
class ReferenceProductsTest {
    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void referenceProductsAreTheFloatActivationProducts(DType dtype) {
        Random rnd = new Random(11);
        MatMul reference = CpuBackend.reference().matmul();
        for (int cols : dtype == DType.Q4TP ? new int[] {64, 96} : new int[] {40, 96}) {
            int rows = 19;
            Matrix whole = Matrix.of("w", dtype, TestWeights.encode(dtype, TestWeights.randomMatrix(rnd, rows, cols), rows, cols), rows, cols);
            for (Matrix m : List.of(whole, whole.slice(3, 11, false)))
                for (int tokens : new int[] {1, 3}) {
                    float[] x = TestWeights.randomVector(rnd, tokens * cols), y = new float[tokens * m.rows()], want = new float[y.length];
                    reference.apply(m, x, tokens, y);
                    CpuMatMul.reference(m, x, tokens, want);
                    float[] row = new float[cols];
                    for (int r = 0; r < m.rows(); r++) {
                        m.decodeRow(r, row, 0);
                        for (int t = 0; t < tokens; t++) {
                            double scale = 0;
                            for (int c = 0; c < cols; c++) scale += Math.abs((double) row[c] * x[t * cols + c]);
                            assertThat((double) Math.abs(y[t * m.rows() + r] - want[t * m.rows() + r]))
                                    .as("%s cols %d rows %d+%d token %d row %d", dtype, cols, m.firstRow(), m.rows(), t, r)
                                    .isLessThanOrEqualTo(2e-5 * scale + 1e-30);
                        }
                    }
                }
        }
    }
}
