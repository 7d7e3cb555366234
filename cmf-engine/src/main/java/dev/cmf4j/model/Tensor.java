package dev.cmf4j.model;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * One stored weight as the engine sees it: its name, dtype, shape and payload bytes, read in place
 * (usually a slice of the file's memory map). A tensor of rank above two is viewed as a matrix of
 * {@link #rows()} = product of the leading dimensions by {@link #cols()} = the last dimension, the way
 * every CMF row-wise quantization lays it out.
 */
public record Tensor(String name, DType dtype, long[] shape, MemorySegment data) {
    public Tensor {
        shape = shape.clone();
    }

    @Override public long[] shape() { return shape.clone(); }

    public int rank() { return shape.length; }

    public long dim(int i) { return shape[i]; }

    /** Number of elements. */
    public long size() { long n = 1; for (long d : shape) n *= d; return n; }

    /** Rows of the matrix view (product of all but the last dimension; 1 for a vector). */
    public long rows() { long n = 1; for (int i = 0; i < shape.length - 1; i++) n *= shape[i]; return n; }

    /** Columns of the matrix view (the last dimension). */
    public long cols() { return shape.length == 0 ? 1 : shape[shape.length - 1]; }

    @Override public String toString() { return name + " " + dtype.label + Arrays.toString(shape); }

    @Override public boolean equals(Object o) {
        return o instanceof Tensor t && t.name.equals(name) && t.dtype == dtype && Arrays.equals(t.shape, shape);
    }

    @Override public int hashCode() { return name.hashCode(); }
}
