package dev.cmf4j.backend;

import dev.cmf4j.format.DType;

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
 * @param data       the whole tensor's payload
 * @param storedRows rows of the whole tensor (quantized layouts place per-row scales after all rows)
 */
public record Matrix(String name, DType dtype, MemorySegment data, long storedRows, int cols, long firstRow,
                     int rows, boolean inputMajor) {

    public Matrix {
        if (firstRow < 0 || rows < 0 || firstRow + rows > storedRows)
            throw new IllegalArgumentException(name + ": rows [" + firstRow + ", " + (firstRow + rows)
                    + ") outside the stored " + storedRows);
    }

    /** Outputs of y = M·x. */
    public int outDim() { return inputMajor ? cols : rows; }

    /** Inputs of y = M·x. */
    public int inDim() { return inputMajor ? rows : cols; }

    /** Rows {@code [from, from + n)} of this view as a view of their own. */
    public Matrix slice(int from, int n) {
        if (from < 0 || from + n > rows) throw new IllegalArgumentException(name + ": slice outside the view");
        return new Matrix(name, dtype, data, storedRows, cols, firstRow + from, n, inputMajor);
    }
}
