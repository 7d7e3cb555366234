package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Payloads whose decoded values are derivable by hand, one per dtype: they pin the layouts
 * (plane order, nibble/bit order, ladder rungs, overlays) by equality, not by an error bound.
 */
class DequantizerKnownAnswerTest {
    private static float[] all(DType t, MemorySegment data, long... shape) {
        return Dequantizers.of(t).all(data, shape);
    }

    @Test void f32F16Bf16() {
        assertThat(all(DType.F32, new Bytes().f32(1.5f, -0f, Float.MIN_VALUE).seg(), 3))
                .containsExactly(1.5f, -0f, Float.MIN_VALUE);
        // f16: 1.0, -2.0, smallest subnormal 2^-24, 65504, -inf
        assertThat(all(DType.F16, new Bytes().u16(0x3C00).u16(0xC000).u16(0x0001).u16(0x7BFF).u16(0xFC00).seg(), 5))
                .containsExactly(1f, -2f, 0x1p-24f, 65504f, Float.NEGATIVE_INFINITY);
        // bf16 = top half of f32 bits
        assertThat(all(DType.BF16, new Bytes().u16(0x3F80).u16(0xC0A0).u16(0x0001).seg(), 1, 3))
                .containsExactly(1f, -5f, Float.intBitsToFloat(0x00010000));
    }

    @Test void q8Row() {
        var p = new Bytes().i8(1, -2, 127, -128, 0, 3).f16(0.5f, 0.25f).seg();
        assertThat(all(DType.Q8_ROW, p, 2, 3)).containsExactly(0.5f, -1f, 63.5f, -32f, 0f, 0.75f);
    }

    @Test void q8TwoFieldMultipliesRowThenColumn() {
        var p = new Bytes().i8(1, -2, 3, 4).f16(0.5f, 2f).f16(1f, 0.25f).seg();
        assertThat(all(DType.Q8_2F, p, 2, 2)).containsExactly(0.5f, -0.25f, 6f, 2f);
        // Order matters for rounding: q·s·c is (q·s)·c in f32.
        float s = Float.float16ToFloat(Float.floatToFloat16(0.1f)), c = Float.float16ToFloat(Float.floatToFloat16(0.3f));
        var q = new Bytes().i8(77).f16(0.1f).f16(0.3f).seg();
        assertThat(Float.floatToIntBits(all(DType.Q8_2F, q, 1, 1)[0])).isEqualTo(Float.floatToIntBits(77 * s * c));
    }

    @Test void q4BlockGroupsRunOverTheFlattenedTensor() {
        // 2 rows × 20 cols = 40 elements = 2 groups (the second zero-padded). Group 0 scale 1, group 1 scale 0.5.
        Bytes b = new Bytes();
        for (int k = 0; k < 16; k++) b.u8(0x8 | ((k % 16) << 4));       // low nibble 8 → 0, high nibble k → k−8
        for (int k = 0; k < 16; k++) b.u8(k < 4 ? 0xF0 : 0x00);          // group 1: even → −8, odd → 7 (for k<4)
        b.f16(1f, 0.5f);
        float[] got = all(DType.Q4_BLOCK, b.seg(), 2, 20);
        float[] want = new float[40];
        for (int i = 0; i < 32; i++) want[i] = i % 2 == 0 ? 0f : (i / 2) - 8;
        for (int i = 32; i < 40; i++) want[i] = i % 2 == 0 ? -4f : 3.5f;
        assertThat(got).containsExactly(want);
        // Row 1 alone starts in the middle of group 0.
        float[] row1 = new float[20];
        Dequantizers.of(DType.Q4_BLOCK).rows(b.seg(), new long[] {2, 20}, 1, 1, row1, 0);
        assertThat(row1).containsExactly(java.util.Arrays.copyOfRange(want, 20, 40));
    }

    @Test void q4Tiled() {
        Bytes b = new Bytes().f16(2f);
        for (int k = 0; k < 16; k++) b.u8(k | (15 - k) << 4);
        float[] got = all(DType.Q4_TILED, b.seg(), 1, 32);
        for (int k = 0; k < 16; k++) {
            assertThat(got[2 * k]).isEqualTo((k - 8) * 2f);
            assertThat(got[2 * k + 1]).isEqualTo((7 - k) * 2f);
        }
    }

    /** lo = −3, step = 1 makes the ladder exact powers of two: t[c] = 2^(c−3). */
    @Test void q4tpLadderAndCodeStream() {
        int gpr = 4;                       // 128 columns: codes 1 and 3 straddle byte boundaries
        int[] codes = {0, 7, 31, 20};
        Bytes b = new Bytes();
        for (int g = 0; g < gpr; g++) for (int k = 0; k < 16; k++) b.u8(0x9 | 0x6 << 4);   // +1, −2
        b.f16(-3f, 1f);
        long bits = 0;
        for (int g = 0; g < gpr; g++) bits |= (long) codes[g] << (5 * g);
        for (int i = 0; i < TpLadder.codeStride(gpr); i++) b.u8((int) (bits >>> (8 * i)) & 0xFF);
        float[] got = all(DType.Q4TP, b.seg(), 1, 128);
        for (int g = 0; g < gpr; g++) {
            float t = (float) Math.pow(2, codes[g] - 3);
            for (int k = 0; k < 16; k++) {
                assertThat(got[32 * g + 2 * k]).isEqualTo(t);
                assertThat(got[32 * g + 2 * k + 1]).isEqualTo(-2 * t);
            }
        }
    }

    @Test void ladderIsRepeatedF32Multiplication() {
        float lo = Float.float16ToFloat(Float.floatToFloat16(-5.37f)), st = Float.float16ToFloat(Float.floatToFloat16(0.173f));
        float[] t = new float[32];
        TpLadder.q4tp(lo, st, t);
        float ratio = (float) StrictMath.pow(2, st), x = (float) StrictMath.pow(2, lo);
        for (int c = 0; c < 32; c++) {
            assertThat(t[c]).isEqualTo(x);
            x *= ratio;
        }
        float[] two = new float[32];
        TpLadder.q2tp(lo, st, two);
        assertThat(Float.floatToRawIntBits(two[0])).isZero();
        for (int c = 1; c < 32; c++) assertThat(two[c]).isEqualTo(t[c - 1]);
    }

    @Test void q2tpRungZeroIsExactZeroAndAffineVariant() {
        Bytes b = new Bytes();
        for (int i = 0; i < 16; i++) b.u8(0xE4);          // codes 0,1,2,3 in every byte (LSB-first)
        b.f16(-3f, 1f);
        b.u8(0 | (5 << 5) & 0xFF).u8(5 >> 3);              // group 0 rung 0, group 1 rung 5 → s = 2^(5−1−3) = 2
        float[] got = all(DType.Q2TP, b.seg(), 1, 64);
        for (int i = 0; i < 32; i++) assertThat(got[i]).isEqualTo(0f);
        float[] grid = {-1.5f, -0.5f, 0.5f, 1.5f};
        for (int i = 32; i < 64; i++) assertThat(got[i]).isEqualTo(grid[i % 4] * 2f);
        float[] affine = Dequantizers.q2tpPrismAffine().all(b.seg(), new long[] {1, 64});
        for (int i = 32; i < 64; i++) assertThat(affine[i]).isEqualTo((i % 4 - 1f) * 2f);
    }

    @Test void vbitMsbFirstRowsPaddedToBytes() {
        // 2 rows × 32: row 0 at 4 bits (level 7), row 1 at 3 bits (level 3), 3·32 = 96 bits = 12 B.
        Bytes b = new Bytes().u8(4, 3).f16(0.5f, 2f);
        for (int i = 0; i < 16; i++) b.u8(0x0F);            // u = 0, 15, 0, 15 ...
        // row 1: codes 0..7 repeating, 3 bits each, MSB-first: 000 001 010 011 100 101 110 111 = 0x05 0x39 0x77
        for (int i = 0; i < 4; i++) b.u8(0x05, 0x39, 0x77);
        float[] got = all(DType.VBIT, b.seg(), 2, 32);
        for (int i = 0; i < 32; i++) {
            assertThat(got[i]).isEqualTo(i % 2 == 0 ? -3.5f : 4f);
            assertThat(got[32 + i]).isEqualTo((i % 8 - 3) * 2f);
        }
        // vbit_ro: same rows with the offset table [0, 16, 28].
        Bytes ro = new Bytes().u8(4, 3).f16(0.5f, 2f).u32(0).u32(16).u32(28);
        for (int i = 0; i < 16; i++) ro.u8(0x0F);
        for (int i = 0; i < 4; i++) ro.u8(0x05, 0x39, 0x77);
        assertThat(all(DType.VBIT_RO, ro.seg(), 2, 32)).containsExactly(got);
    }

    @Test void vbitEightBits() {
        Bytes b = new Bytes().u8(8).f16(1f);
        for (int i = 0; i < 32; i++) b.u8(127 + i - 16);
        float[] got = all(DType.VBIT, b.seg(), 1, 32);
        for (int i = 0; i < 32; i++) assertThat(got[i]).isEqualTo(i - 16f);
    }

    @Test void q1SignBitsLsbFirst() {
        Bytes b = new Bytes().f16(0.25f).u8(0b0000_0101, 0xFF, 0x00, 0x80);
        float[] got = all(DType.Q1, b.seg(), 1, 32);
        assertThat(got[0]).isEqualTo(0.25f);
        assertThat(got[1]).isEqualTo(-0.25f);
        assertThat(got[2]).isEqualTo(0.25f);
        assertThat(got[3]).isEqualTo(-0.25f);
        for (int i = 8; i < 16; i++) assertThat(got[i]).isEqualTo(0.25f);
        for (int i = 16; i < 31; i++) assertThat(got[i]).isEqualTo(-0.25f);
        assertThat(got[31]).isEqualTo(0.25f);
    }

    @Test void q1sOverlayOverwritesFlatIndices() {
        Bytes b = new Bytes();
        for (int t = 0; t < 2; t++) b.f16(1f).u8(0, 0, 0, 0);          // 2 rows × 32, all −1
        b.u32(2).u32(5).f16(9f).u32(40).f16(-7f);
        float[] got = all(DType.Q1S, b.seg(), 2, 32);
        for (int i = 0; i < 64; i++) assertThat(got[i]).isEqualTo(i == 5 ? 9f : i == 40 ? -7f : -1f);
        float[] row1 = new float[32];
        Dequantizers.of(DType.Q1S).rows(b.seg(), new long[] {2, 32}, 1, 1, row1, 0);
        assertThat(row1[8]).isEqualTo(-7f);
    }

    @Test void q1tTritsAndRowOverlay() {
        // byte 196 = 1 + 2·3 + 0·9 + 1·27 + 2·81 → trits 1, 2, 0, 1, 2 → +s, −s, 0, +s, −s
        Bytes b = new Bytes();
        for (int r = 0; r < 2; r++) { b.f16(0.5f); for (int j = 0; j < 7; j++) b.u8(196); }
        b.u32(0).u32(1).u32(3);                      // row 0: 1 entry, row 1: 2 entries
        b.u16(3).f16(4f);
        b.u16(0).f16(-1f).u16(31).f16(2f);
        float[] got = all(DType.Q1T, b.seg(), 2, 32);
        float[] pattern = {0.5f, -0.5f, 0f, 0.5f, -0.5f};
        for (int r = 0; r < 2; r++)
            for (int k = 0; k < 32; k++) {
                float want = pattern[k % 5];
                if (r == 0 && k == 3) want = 4f;
                if (r == 1 && k == 0) want = -1f;
                if (r == 1 && k == 31) want = 2f;
                assertThat(got[32 * r + k]).as("row %d col %d", r, k).isEqualTo(want);
            }
    }
}
