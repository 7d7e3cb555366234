package dev.cmf4j.convert;

/**
 * The float32 values of one tensor to be converted, read by flat (row-major) element offset. Sources
 * read from a memory map or compute a re-arrangement of one on demand, so a converter never holds a
 * whole model in memory. Implementations allow concurrent reads.
 */
@FunctionalInterface
public interface TensorData {
    /** Reads elements {@code [offset, offset + len)} into {@code dst[dstOff ...]}. */
    void read(long offset, float[] dst, int dstOff, int len);

    /** Drops anything cached for reading (called once the tensor has been written). */
    default void release() {}
}
