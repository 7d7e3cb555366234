package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.lang.foreign.MemorySegment;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Every decoder refuses a payload that does not fit its shape, with a typed error that says why. */
class PayloadCheckTest {
    private static final long[] SHAPE = {3, 64};

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"F32", "F16", "BF16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "Q4_TILED", "Q4TP", "Q2TP", "Q1"})
    void fixedSizeDtypesRefuseOneByteTooFewOrTooMany(DType t) {
        byte[] ok = RandomPayloads.of(t, SHAPE, new java.util.Random(1));
        Dequantizer d = Dequantizers.of(t);
        d.check(MemorySegment.ofArray(ok), SHAPE);
        for (int delta : new int[] {-1, 1}) {
            byte[] bad = java.util.Arrays.copyOf(ok, ok.length + delta);
            assertThatThrownBy(() -> d.all(MemorySegment.ofArray(bad), SHAPE))
                    .isInstanceOf(PayloadException.class)
                    .hasMessageContaining(t.label)
                    .hasMessageContaining("payload is " + bad.length + " bytes, expected " + ok.length);
        }
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"VBIT", "VBIT_RO", "Q1S", "Q1T"})
    void variableSizeDtypesRefuseTruncationAndExtension(DType t) {
        byte[] ok = RandomPayloads.of(t, SHAPE, new java.util.Random(2));
        Dequantizer d = Dequantizers.of(t);
        d.check(MemorySegment.ofArray(ok), SHAPE);
        for (int cut = 0; cut < ok.length; cut += Math.max(1, ok.length / 37)) {
            byte[] bad = java.util.Arrays.copyOf(ok, cut);
            assertThatThrownBy(() -> d.check(MemorySegment.ofArray(bad), SHAPE)).isInstanceOf(PayloadException.class);
        }
        assertThatThrownBy(() -> d.check(MemorySegment.ofArray(java.util.Arrays.copyOf(ok, ok.length + 1)), SHAPE))
                .isInstanceOf(PayloadException.class);
    }

    @Test void vbitRefusesWidthsOutsideTheAllowedSet() {
        for (int bad : new int[] {0, 1, 2, 7, 9, 255}) {
            byte[] p = RandomPayloads.of(DType.VBIT, SHAPE, new java.util.Random(3));
            p[1] = (byte) bad;
            assertThatThrownBy(() -> Dequantizers.of(DType.VBIT).check(MemorySegment.ofArray(p), SHAPE))
                    .isInstanceOf(PayloadException.class).hasMessageContaining("row 1 has bit width " + bad);
        }
    }

    @Test void vbitRoRefusesInconsistentOffsets() {
        byte[] p = RandomPayloads.of(DType.VBIT_RO, SHAPE, new java.util.Random(4));
        long offsets = 3 + 3 * 2 * 2;
        p[(int) offsets + 4] ^= 1;                           // row_offsets[1] off by one
        assertThatThrownBy(() -> Dequantizers.of(DType.VBIT_RO).check(MemorySegment.ofArray(p), SHAPE))
                .isInstanceOf(PayloadException.class).hasMessageContaining("row 0 spans");
    }

    @Test void q1sRefusesIndexBeyondTensorAndHugeCount() {
        byte[] p = new Bytes().zeros(3 * 2 * 6).u32(1).u32(3 * 64).f16(1f).array();
        assertThatThrownBy(() -> Dequantizers.of(DType.Q1S).check(MemorySegment.ofArray(p), SHAPE))
                .isInstanceOf(PayloadException.class).hasMessageContaining("flat index 192");
        byte[] huge = new Bytes().zeros(3 * 2 * 6).u32(0xFFFFFFFFL).array();
        assertThatThrownBy(() -> Dequantizers.of(DType.Q1S).check(MemorySegment.ofArray(huge), SHAPE))
                .isInstanceOf(PayloadException.class).hasMessageContaining("count(4294967295)");
    }

    @Test void q1tRefusesBadRowPointersAndColumns() {
        byte[] decreasing = new Bytes().zeros(3 * 2 * 9).u32(0).u32(2).u32(1).u32(2).u16(0).f16(1f).u16(0).f16(1f).array();
        assertThatThrownBy(() -> Dequantizers.of(DType.Q1T).check(MemorySegment.ofArray(decreasing), SHAPE))
                .isInstanceOf(PayloadException.class).hasMessageContaining("row_ptr decreases");
        byte[] badCol = new Bytes().zeros(3 * 2 * 9).u32(0).u32(1).u32(1).u32(1).u16(64).f16(1f).array();
        assertThatThrownBy(() -> Dequantizers.of(DType.Q1T).check(MemorySegment.ofArray(badCol), SHAPE))
                .isInstanceOf(PayloadException.class).hasMessageContaining("column 64");
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = {"Q4_TILED", "Q4TP", "Q2TP", "VBIT", "VBIT_RO", "Q1", "Q1S", "Q1T"})
    void tiledDtypesNeedColsMultipleOf32(DType t) {
        assertThatThrownBy(() -> Dequantizers.of(t).check(MemorySegment.ofArray(new byte[4096]), new long[] {2, 40}))
                .isInstanceOf(PayloadException.class).hasMessageContaining("not a multiple of 32");
    }

    @Test void hostileShapesNeverWrap() {
        long big = 1L << 40;
        assertThatThrownBy(() -> Dequantizers.of(DType.F32).check(MemorySegment.ofArray(new byte[16]), new long[] {big, big}))
                .isInstanceOf(PayloadException.class).hasMessageContaining("overflows");
        assertThatThrownBy(() -> Dequantizers.of(DType.Q8_ROW).check(MemorySegment.ofArray(new byte[16]), new long[] {1L << 62, 3}))
                .isInstanceOf(PayloadException.class).hasMessageContaining("overflows");
        assertThatThrownBy(() -> Dequantizers.of(DType.F16).check(MemorySegment.ofArray(new byte[16]), new long[] {-1, 8}))
                .isInstanceOf(PayloadException.class).hasMessageContaining("negative");
        // A large shape against a small payload is a length error, not an allocation.
        assertThatThrownBy(() -> Dequantizers.of(DType.VBIT).check(MemorySegment.ofArray(new byte[16]), new long[] {1L << 40, 32}))
                .isInstanceOf(PayloadException.class);
    }

    @Test void reservedAndRawDtypesHaveNoDecoder() {
        for (DType t : DType.values()) {
            if (t.reserved()) assertThatThrownBy(() -> Dequantizers.of(t)).isInstanceOf(UnsupportedOperationException.class)
                    .hasMessageContaining("reserved");
            else if (t.raw()) assertThatThrownBy(() -> Dequantizers.of(t)).isInstanceOf(UnsupportedOperationException.class)
                    .hasMessageContaining("raw table");
            else assertThat(Dequantizers.of(t).dtype()).isEqualTo(t);
        }
    }

    @Test void rowRangesAreBoundsChecked() {
        byte[] p = RandomPayloads.of(DType.Q8_ROW, SHAPE, new java.util.Random(5));
        RowDecoder d = Dequantizers.of(DType.Q8_ROW).decoder(MemorySegment.ofArray(p), SHAPE);
        assertThatThrownBy(() -> d.rows(2, 2, new float[256], 0)).isInstanceOf(IndexOutOfBoundsException.class);
        assertThatThrownBy(() -> d.rows(-1, 1, new float[256], 0)).isInstanceOf(IndexOutOfBoundsException.class);
        assertThatThrownBy(() -> d.rows(0, 2, new float[127], 0)).isInstanceOf(IndexOutOfBoundsException.class);
        assertThatThrownBy(() -> d.rows(0, 1, new float[64], 1)).isInstanceOf(IndexOutOfBoundsException.class);
        d.rows(0, 0, new float[0], 0);
    }
}
