package dev.cmf4j.convert.quant;

import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.MemorySegment;

/**
 * One tensor being encoded: the tensor-wide decisions are made (for q8_2f, the column field), and
 * the payload is written in independent work units — rows for most dtypes, 32-element groups for
 * q4_block. Different threads may encode disjoint unit ranges into the same destination at once;
 * each call uses only its own scratch (a row or a group), so memory stays bounded.
 */
public abstract class TensorEncoder {
    protected final TensorShape shape;
    protected final FloatSource src;

    protected TensorEncoder(TensorShape shape, FloatSource src) {
        this.shape = shape;
        this.src = src;
    }

    public final TensorShape shape() { return shape; }

    /** Bytes of the finished payload. */
    public abstract long encodedSize();

    /** Independent work units of this tensor (rows, or groups for q4_block). */
    public abstract long units();

    /** Elements one unit covers (cols, or 32); a hint for sizing parallel chunks. */
    public abstract long unitElements();

    /**
     * Encodes units {@code [start, start+count)} into {@code dst}, the WHOLE payload segment
     * ({@link #encodedSize()} bytes); each unit writes only its own bytes.
     */
    public final void encode(long start, long count, MemorySegment dst) {
        if (dst.byteSize() != encodedSize())
            throw new IllegalArgumentException("destination is " + dst.byteSize() + " bytes, " + shape + " encodes to "
                    + encodedSize());
        if (start < 0 || count < 0 || start > units() - count)
            throw new IndexOutOfBoundsException("units [" + start + ", +" + count + ") outside " + units() + " of " + shape);
        if (count > 0) encodeUnits(start, count, dst);
    }

    /** Encodes every unit on the calling thread. */
    public final void encodeAll(MemorySegment dst) { encode(0, units(), dst); }

    protected abstract void encodeUnits(long start, long count, MemorySegment dst);
}
