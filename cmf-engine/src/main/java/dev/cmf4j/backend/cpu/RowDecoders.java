package dev.cmf4j.backend.cpu;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/** The row decoders by dtype. Float formats are decoded here; quantized ones by the format's dequantizers. */
final class RowDecoders {
    private RowDecoders() {}

    static RowDecoder of(DType dtype) {
        return switch (dtype) {
            case F32 -> RowDecoders::f32;
            case F16 -> RowDecoders::f16;
            case BF16 -> RowDecoders::bf16;
            default -> throw new UnsupportedOperationException("no CPU row decoder for dtype " + dtype.label);
        };
    }

    static void f32(MemorySegment data, long storedRows, int cols, long row, float[] out, int off) {
        MemorySegment.copy(data, RowDecoder.F32, row * cols * 4L, out, off, cols);
    }

    static void f16(MemorySegment data, long storedRows, int cols, long row, float[] out, int off) {
        long base = row * cols * 2L;
        for (int c = 0; c < cols; c++) out[off + c] = Float.float16ToFloat(data.get(RowDecoder.U16, base + 2L * c));
    }

    static void bf16(MemorySegment data, long storedRows, int cols, long row, float[] out, int off) {
        long base = row * cols * 2L;
        for (int c = 0; c < cols; c++) out[off + c] = Float.intBitsToFloat(data.get(RowDecoder.U16, base + 2L * c) << 16);
    }
}
