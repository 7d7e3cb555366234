package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/** Any row range decodes to exactly the corresponding slice of the whole-tensor decode. */
class RowRangeConsistencyTest {
    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4_TILED", "Q4TP",
            "Q2TP", "VBIT", "VBIT_RO", "Q1", "Q1S", "Q1T"})
    void rowRangesMatchWholeTensor(DType t) {
        Random rnd = new Random(t.id);
        for (long[] shape : new long[][] {{7, 96}, {2, 3, 64}, {1, 160}, {160}}) {
            byte[] p = RandomPayloads.of(t, shape, rnd);
            RowDecoder d = Dequantizers.of(t).decoder(MemorySegment.ofArray(p), shape);
            float[] all = d.all();
            int rows = (int) d.rows(), cols = (int) d.cols();
            for (int trial = 0; trial < 20; trial++) {
                int r0 = rnd.nextInt(rows), n = 1 + rnd.nextInt(rows - r0), off = rnd.nextInt(5);
                float[] out = new float[off + n * cols + 3];
                Arrays.fill(out, Float.NaN);
                d.rows(r0, n, out, off);
                assertThat(bits(Arrays.copyOfRange(out, off, off + n * cols)))
                        .as("%s rows [%d, +%d)", Arrays.toString(shape), r0, n)
                        .containsExactly(bits(Arrays.copyOfRange(all, r0 * cols, (r0 + n) * cols)));
                assertThat(out[off + n * cols]).isNaN();       // nothing written past the range
                if (off > 0) assertThat(out[off - 1]).isNaN();
            }
        }
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK"})
    void shapesWithoutGroupAlignment(DType t) {
        Random rnd = new Random(99);
        long[] shape = {5, 41};
        byte[] p = RandomPayloads.of(t, shape, rnd);
        RowDecoder d = Dequantizers.of(t).decoder(MemorySegment.ofArray(p), shape);
        float[] all = d.all();
        for (int r = 0; r < 5; r++) {
            float[] row = new float[41];
            d.rows(r, 1, row, 0);
            assertThat(bits(row)).containsExactly(bits(Arrays.copyOfRange(all, 41 * r, 41 * r + 41)));
        }
    }

    private static int[] bits(float[] f) {
        int[] b = new int[f.length];
        for (int i = 0; i < f.length; i++) b[i] = Float.floatToIntBits(f[i]);
        return b;
    }
}
