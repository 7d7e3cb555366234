package dev.cmf4j.format;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * One tensor of an open CMF file: its directory record plus a zero-copy view of its payload.
 *
 * @param name   the tensor's name (HF names plus namespaces such as {@code skill.ID.*})
 * @param dtype  how the payload is encoded
 * @param shape  dimensions, outermost first ({@code [out, in]} for matrices); never more than 6
 * @param offset payload offset relative to its file's data section (a multiple of 64)
 * @param nbytes payload length in bytes
 * @param hash   hash64 of the payload as stored in the directory (checked by {@link CmfFile#verify})
 * @param data   the payload, a slice of the file's memory map: valid until the file is closed
 */
public record TensorEntry(String name, DType dtype, long[] shape, long offset, long nbytes, long hash,
                          MemorySegment data) {

    public TensorEntry {
        shape = shape.clone();
    }

    /** A copy of the dimensions. */
    @Override public long[] shape() { return shape.clone(); }

    public int ndim() { return shape.length; }

    /** One dimension. */
    public long dim(int i) { return shape[i]; }

    /** Number of elements (product of the dimensions; 1 for a scalar). */
    public long elements() { return PayloadSize.elements(shape); }

    /** Rows in the dequantization convention: the product of all dimensions but the last (1 for 1-D). */
    public long rows() { return PayloadSize.rows(shape); }

    /** Columns in the dequantization convention: the last dimension (1 for a scalar). */
    public long cols() { return PayloadSize.cols(shape); }

    @Override public boolean equals(Object o) {
        return o instanceof TensorEntry t && name.equals(t.name) && dtype == t.dtype && Arrays.equals(shape, t.shape)
                && offset == t.offset && nbytes == t.nbytes && hash == t.hash;
    }

    @Override public int hashCode() { return name.hashCode() * 31 + Long.hashCode(hash); }

    @Override public String toString() {
        return name + " " + dtype.label + Arrays.toString(shape) + " @" + offset + " +" + nbytes + " hash=" + Hash64.hex(hash);
    }
}
