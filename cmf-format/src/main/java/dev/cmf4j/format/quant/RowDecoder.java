package dev.cmf4j.format.quant;

import java.util.Objects;

/**
 * One tensor payload, already checked against its dtype and shape, ready to decode any range of
 * rows to float32. Obtained from {@link Dequantizer#decoder}; cheap to keep and safe to share
 * between threads (it holds only the payload view and read-only tables).
 */
public abstract class RowDecoder {
    protected final TensorShape shape;

    protected RowDecoder(TensorShape shape) { this.shape = shape; }

    public final TensorShape shape() { return shape; }

    public final long rows() { return shape.rows(); }

    public final long cols() { return shape.cols(); }

    /**
     * Decodes rows {@code [rowStart, rowStart+rowCount)} into {@code out[outOff ...]}, row-major,
     * {@code rowCount*cols} floats.
     */
    public final void rows(long rowStart, int rowCount, float[] out, int outOff) {
        Objects.requireNonNull(out, "out");
        if (rowCount < 0 || rowStart < 0 || rowStart > shape.rows() - rowCount)
            throw new IndexOutOfBoundsException("rows [" + rowStart + ", " + rowStart + "+" + rowCount + ") outside "
                    + shape.rows() + " rows of " + shape);
        long need = (long) rowCount * shape.cols();
        if (outOff < 0 || need > out.length - (long) outOff)
            throw new IndexOutOfBoundsException("out[" + outOff + "..] has room for " + Math.max(0, out.length - outOff)
                    + " floats, " + need + " needed for " + rowCount + " rows of " + shape);
        if (rowCount == 0 || shape.cols() == 0) return;
        decode(rowStart, rowCount, out, outOff);
    }

    /** The whole tensor as float32, row-major (the tensor must have fewer than 2^31 elements). */
    public final float[] all() {
        long n = shape.elements();
        if (n > Integer.MAX_VALUE - 16)
            throw new IllegalStateException(shape + " has " + n + " elements: too many for one float[]; decode row ranges");
        float[] out = new float[(int) n];
        if (shape.rows() > 0) rows(0, Math.toIntExact(shape.rows()), out, 0);
        return out;
    }

    /** Bounds already checked: rowStart+rowCount ≤ rows, out has room, rowCount ≥ 1, cols ≥ 1. */
    protected abstract void decode(long rowStart, int rowCount, float[] out, int outOff);
}
