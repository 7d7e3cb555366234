package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.util.Arrays;

/**
 * A tensor payload that does not fit its dtype and shape: wrong length, a field out of range
 * (a vbit width, a row offset, an overlay index), or a shape the dtype cannot hold. Thrown before
 * any element is decoded, so a hostile file never reaches an out-of-bounds read deep in a kernel.
 * The container reader adds the file and tensor name around it.
 */
public final class PayloadException extends IllegalArgumentException {
    private final DType dtype;
    private final long[] shape;

    public PayloadException(DType dtype, long[] shape, String problem) {
        super(dtype.label + Arrays.toString(shape) + ": " + problem);
        this.dtype = dtype;
        this.shape = shape.clone();
    }

    public DType dtype() { return dtype; }

    public long[] shape() { return shape.clone(); }
}
