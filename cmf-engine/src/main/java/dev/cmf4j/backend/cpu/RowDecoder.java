package dev.cmf4j.backend.cpu;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * Decodes one row of a stored matrix (any dtype) into float32. Every CMF dtype is row-decodable:
 * quantized layouts keep per-row (and q8_2f per-column) scales beside the codes.
 */
public interface RowDecoder {
    /**
     * Writes row {@code row} of the [storedRows, cols] tensor in {@code data} to {@code out[off, off+cols)}.
     */
    void decode(MemorySegment data, long storedRows, int cols, long row, float[] out, int off);

    ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    ValueLayout.OfShort U16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** The decoder for {@code dtype}. */
    static RowDecoder of(DType dtype) { return RowDecoders.of(dtype); }
}
