package dev.cmf4j.backend;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.format.quant.RowDecoder;

import java.lang.foreign.MemorySegment;

/**
 * A weight matrix read in place: {@code rows} consecutive rows, starting at {@code firstRow}, of a stored
 * tensor viewed as [storedRows, cols] (leading dimensions flattened). A 3-D expert tensor yields one
 * Matrix per expert this way without copying, for every row-wise quantization.
 *
 * <p>{@code inputMajor} says the rows are the matrix's inputs (stored [in, out], used as x·W); the usual
 * layout is [out, in] (W·x).
 *
 * @param name       tensor name, for messages
 * @param data       the whole tensor's payload (a slice of the file's map)
 * @param decoder    the dtype's row decoder over the whole tensor, checked against its shape
 * @param storedRows rows of the whole tensor
 */
public record Matrix(String name, DType dtype, MemorySegment data, RowDecoder decoder, long storedRows, int cols,
                     long firstRow, int rows, boolean inputMajor) {

    public Matrix {
        if (firstRow < 0 || rows < 0 || firstRow + rows > storedRows)
            throw new IllegalArgumentException(name + ": rows [" + firstRow + ", " + (firstRow + rows)
                    + ") outside the stored " + storedRows);
    }

    /**
     * The whole stored tensor [storedRows, cols] as an [out, in] matrix (its payload checked against the
     * dtype's layout here, so a truncated tensor fails at load, naming it).
     */
    public static Matrix of(String name, DType dtype, MemorySegment data, long storedRows, int cols) {
        RowDecoder dec;
        try {
            dec = Dequantizers.of(dtype).decoder(data, new long[] {storedRows, cols});
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("tensor '" + name + "': " + e.getMessage(), e);
        }
        return new Matrix(name, dtype, data, dec, storedRows, cols, 0, Math.toIntExact(storedRows), false);
    }

    /** Outputs of y = M·x. */
    public int outDim() { return inputMajor ? cols : rows; }

    /** Inputs of y = M·x. */
    public int inDim() { return inputMajor ? rows : cols; }

    /** Rows {@code [from, from + n)} of this view, as an [out, in] or (inputMajor) [in, out] matrix. */
    public Matrix slice(long from, int n, boolean inputMajor) {
        if (from < 0 || from + n > rows) throw new IllegalArgumentException(name + ": slice outside the view");
        return new Matrix(name, dtype, data, decoder, storedRows, cols, firstRow + from, n, inputMajor);
    }

    /** Decodes row {@code r} of this view into {@code out[off, off+cols)}. */
    public void decodeRow(int r, float[] out, int off) { decoder.rows(firstRow + r, 1, out, off); }
}
