package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * Decodes one CMF dtype to float32 (CMF_FORMAT.md §2; docs/QUANTIZATION.md). One final class per
 * dtype implements it; {@link Dequantizers#of} finds the one for a {@link DType}.
 *
 * <p>Shape convention: {@code cols} = last dimension, {@code rows} = product of the others. A
 * payload is a {@link MemorySegment} (typically a zero-copy slice of the file's memory map); it
 * is checked against the shape before anything is read, and a mismatch is a
 * {@link PayloadException}. Implementations hold no state and are safe to use from any thread.
 */
public interface Dequantizer {
    DType dtype();

    /**
     * Checks {@code data} against {@code shape} (length, and any internal tables the dtype has)
     * and returns a decoder over it. Do this once per tensor and reuse the decoder when decoding
     * row by row: for vbit the check scans the per-row widths.
     */
    RowDecoder decoder(MemorySegment data, long[] shape);

    /** Decodes rows {@code [rowStart, rowStart+rowCount)} into {@code out[outOff...]}. */
    default void rows(MemorySegment data, long[] shape, long rowStart, int rowCount, float[] out, int outOff) {
        decoder(data, shape).rows(rowStart, rowCount, out, outOff);
    }

    /** The whole tensor as float32, row-major. */
    default float[] all(MemorySegment data, long[] shape) {
        return decoder(data, shape).all();
    }

    /** Checks the payload length (and tables) without decoding; throws {@link PayloadException}. */
    default void check(MemorySegment data, long[] shape) {
        decoder(data, shape);
    }
}
