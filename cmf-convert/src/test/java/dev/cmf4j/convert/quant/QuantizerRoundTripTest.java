package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.format.quant.PayloadException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Encode → decode through the format's dequantizers: exactness where promised, bounded error elsewhere. */
class QuantizerRoundTripTest {
    @Test void f32IsExactIncludingSpecials() {
        float[] w = {1.5f, -0f, Float.MIN_VALUE, Float.NaN, Float.NEGATIVE_INFINITY, 3e38f};
        float[] d = Codec.roundTrip(DType.F32, w, 2, 3);
        for (int i = 0; i < w.length; i++) assertThat(Float.floatToRawIntBits(d[i])).isEqualTo(Float.floatToRawIntBits(w[i]));
    }

    @Test void f16RoundsToNearestEven() {
        float one = 1f, ulp = 0x1p-10f;
        float[] w = {one + ulp / 2, one + 3 * ulp / 2, one + ulp / 2 + 0x1p-20f, 65520f, 65519f, 0x1p-25f, 0x1p-25f + 0x1p-40f, -2.5f};
        float[] d = Codec.roundTrip(DType.F16, w, w.length);
        assertThat(d).containsExactly(one, one + 2 * ulp, one + ulp, Float.POSITIVE_INFINITY, 65504f, 0f, 0x1p-24f, -2.5f);
    }

    @Test void bf16RoundsToNearestEven() {
        float ulp = 0x1p-7f;
        float[] w = {1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 0x1p-20f, Float.MAX_VALUE, -0f, Float.NaN};
        float[] d = Codec.roundTrip(DType.BF16, w, w.length);
        assertThat(d[0]).isEqualTo(1f);
        assertThat(d[1]).isEqualTo(1 + 2 * ulp);
        assertThat(d[2]).isEqualTo(1 + ulp);
        assertThat(d[3]).isEqualTo(Float.POSITIVE_INFINITY);
        assertThat(Float.floatToRawIntBits(d[4])).isEqualTo(0x80000000);
        assertThat(d[5]).isNaN();
        // Every representable bf16 survives unchanged; every f32 lands within half a bf16 ulp.
        Random rnd = new Random(7);
        float[] x = new float[4096];
        for (int i = 0; i < x.length; i++) x[i] = (float) (rnd.nextGaussian() * Math.exp(rnd.nextGaussian() * 5));
        float[] y = Codec.roundTrip(DType.BF16, x, x.length);
        for (int i = 0; i < x.length; i++) {
            assertThat(Float.floatToRawIntBits(y[i]) & 0xFFFF).isZero();
            assertThat((double) Math.abs(x[i] - y[i])).isLessThanOrEqualTo(Math.ulp(y[i]) * 0x1p16 / 2);
        }
    }

    /** Per-element bound: the error never exceeds half a quantization step (no clipping). */
    @Test void q8RowErrorIsAtMostHalfAStep() {
        Random rnd = new Random(1);
        int rows = 33, cols = 200;
        float[] w = Codec.weights(rnd, rows, cols);
        float[] d = Codec.roundTrip(DType.Q8_ROW, w, rows, cols);
        for (int r = 0; r < rows; r++) {
            float amax = 0;
            for (int c = 0; c < cols; c++) amax = Math.max(amax, Math.abs(w[r * cols + c]));
            float step = Float.float16ToFloat(Float.floatToFloat16(amax / 127));
            for (int c = 0; c < cols; c++)
                assertThat(Math.abs(w[r * cols + c] - d[r * cols + c])).isLessThanOrEqualTo(step * 0.5f * 1.01f + 1e-9f);
        }
    }

    @Test void q4BlockErrorIsAtMostHalfAStepOverFlattenedGroups() {
        Random rnd = new Random(2);
        long[] shape = {7, 45};                       // groups straddle rows; last group padded
        float[] w = Codec.weights(rnd, 7, 45);
        float[] d = Codec.roundTrip(DType.Q4_BLOCK, w, shape);
        for (int g = 0; g * 32 < w.length; g++) {
            float amax = 0;
            for (int i = 32 * g; i < Math.min(w.length, 32 * g + 32); i++) amax = Math.max(amax, Math.abs(w[i]));
            float step = Float.float16ToFloat(Float.floatToFloat16(amax / 7));
            for (int i = 32 * g; i < Math.min(w.length, 32 * g + 32); i++)
                assertThat(Math.abs(w[i] - d[i])).isLessThanOrEqualTo(step * 0.5f * 1.01f + 1e-9f);
        }
    }

    /**
     * The documented bounds (docs/QUANTIZATION.md) on weights with row amplitude spread and outlier
     * input channels: relative RMSE per dtype.
     */
    @Test void relativeErrorBoundsOnSyntheticWeights() {
        Random rnd = new Random(3);
        int rows = 96, cols = 256;
        float[] w = Codec.weights(rnd, rows, cols);
        double q8 = Codec.relRmse(w, Codec.roundTrip(DType.Q8_ROW, w, rows, cols));
        double q82f = Codec.relRmse(w, Codec.roundTrip(DType.Q8_2F, w, rows, cols));
        double q4 = Codec.relRmse(w, Codec.roundTrip(DType.Q4_BLOCK, w, rows, cols));
        double q4tp = Codec.relRmse(w, Codec.roundTrip(DType.Q4TP, w, rows, cols));
        double f16 = Codec.relRmse(w, Codec.roundTrip(DType.F16, w, rows, cols));
        double bf16 = Codec.relRmse(w, Codec.roundTrip(DType.BF16, w, rows, cols));
        System.out.printf("synthetic rel RMSE: f16 %.2e bf16 %.2e q8_row %.4f q8_2f %.4f q4_block %.4f q4tp %.4f%n", f16, bf16, q8, q82f, q4, q4tp);
        assertThat(f16).isLessThan(3e-4);
        assertThat(bf16).isLessThan(2.5e-3);
        assertThat(q8).isLessThan(0.03);
        assertThat(q82f).isLessThan(0.01).isLessThan(q8);      // the column field absorbs the outlier channels
        assertThat(q4).isLessThan(0.2);
        assertThat(q4tp).isLessThan(0.2).isLessThan(q4 * 1.05);
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void zerosStayZerosAndSizesMatchTheDecoder(DType t) {
        for (long[] shape : new long[][] {{4, 64}, {2, 3, 96}, {128}, {1, 32}}) {
            float[] w = new float[(int) java.util.Arrays.stream(shape).reduce(1, Math::multiplyExact)];
            byte[] p = Quantizer.of(t).encode(w, shape);
            assertThat((long) p.length).isEqualTo(Quantizer.of(t).encodedSize(shape));
            float[] d = Dequantizers.of(t).all(MemorySegment.ofArray(p), shape);
            for (float v : d) assertThat(v).isEqualTo(0f);
        }
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void parallelUnitRangesGiveTheSameBytes(DType t) throws Exception {
        Random rnd = new Random(t.id);
        long[] shape = {37, 96};
        float[] w = Codec.weights(rnd, 37, 96);
        byte[] serial = Quantizer.of(t).encode(w, shape);
        TensorEncoder enc = Quantizer.of(t).begin(FloatSource.of(w), shape);
        ExecutorService pool = Executors.newFixedThreadPool(4);
        try (Arena arena = Arena.ofShared()) {
            MemorySegment dst = arena.allocate(enc.encodedSize());
            List<Future<?>> jobs = new ArrayList<>();
            long units = enc.units(), chunk = 5;
            for (long u = units - chunk; u > -chunk; u -= chunk) {      // out of order on purpose
                long start = Math.max(0, u), count = Math.min(chunk, u + chunk - start);
                jobs.add(pool.submit(() -> enc.encode(start, count, dst)));
            }
            for (Future<?> f : jobs) f.get();
            assertThat(dst.toArray(ValueLayout.JAVA_BYTE)).isEqualTo(serial);
        } finally {
            pool.shutdown();
        }
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4TP"})
    void nonFiniteWeightsAreRefusedByName(DType t) {
        float[] w = new float[64];
        w[37] = Float.NaN;
        assertThatThrownBy(() -> Quantizer.of(t).encode(w, new long[] {2, 32}))
                .isInstanceOf(PayloadException.class).hasMessageContaining("source element 37 is NaN");
    }

    @Test void shapeAndDestinationMistakesAreClear() {
        assertThat(Quantizer.of(DType.Q4TP).supports(new long[] {4, 40})).isFalse();
        assertThatThrownBy(() -> Quantizer.of(DType.Q4TP).encodedSize(new long[] {4, 40}))
                .isInstanceOf(PayloadException.class).hasMessageContaining("not a multiple of 32");
        assertThatThrownBy(() -> Quantizer.of(DType.Q8_ROW).encode(new float[5], new long[] {2, 3}))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("5 values given");
        assertThatThrownBy(() -> Quantizer.of(DType.Q8_ROW).encode(new float[6], new long[] {2, 3}, MemorySegment.ofArray(new byte[11])))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("destination is 11 bytes");
        assertThatThrownBy(() -> Quantizer.of(DType.VBIT)).isInstanceOf(UnsupportedOperationException.class);
    }

    @Test void hugeWeightsThatOverflowF16ScalesAreRefused() {
        float[] w = new float[32];
        w[0] = 1e7f;                                  // 1e7/7 > 65504
        assertThatThrownBy(() -> Quantizer.of(DType.Q4_BLOCK).encode(w, new long[] {32}))
                .isInstanceOf(PayloadException.class).hasMessageContaining("exceeds the f16 range");
    }

    /**
     * Scales are f16, so a row whose step is below the smallest f16 subnormal (2^-24) cannot be
     * represented; it gets that subnormal as its step instead of 0, and the error stays within
     * half of the step actually stored.
     */
    @Test void rowsBelowTheF16RangeUseTheSmallestSubnormalStep() {
        float[] w = new float[64];
        for (int i = 0; i < 64; i++) w[i] = (i % 2 == 0 ? 1 : -1) * 2e-6f * (i + 1) / 64;
        float[] d = Codec.roundTrip(DType.Q8_ROW, w, 1, 64);
        for (int i = 0; i < 64; i++) assertThat(Math.abs(w[i] - d[i])).isLessThanOrEqualTo(0x1p-25f);
        assertThat(d[63]).isNotZero();
    }
}
