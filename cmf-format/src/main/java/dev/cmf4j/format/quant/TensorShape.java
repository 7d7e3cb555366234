package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.util.Arrays;

/**
 * The matrix view every codec works on: {@code cols} = the last dimension, {@code rows} = the
 * product of all the others (a 1-D tensor is one row, a 0-D scalar is 1×1). All products are
 * overflow-checked, so a hostile shape yields a {@link PayloadException}, never a wrapped size.
 */
public record TensorShape(DType dtype, long[] dims, long rows, long cols, long elements) {
    public static final int GROUP = 32;

    public static TensorShape of(DType dtype, long[] dims) {
        if (dims == null) throw new PayloadException(dtype, new long[0], "shape is null");
        long rows = 1, cols = 1;
        try {
            for (int i = 0; i < dims.length; i++) {
                if (dims[i] < 0) throw new PayloadException(dtype, dims, "negative dimension " + dims[i]);
                if (i == dims.length - 1) cols = dims[i];
                else rows = Math.multiplyExact(rows, dims[i]);
            }
            return new TensorShape(dtype, dims.clone(), rows, cols, Math.multiplyExact(rows, cols));
        } catch (ArithmeticException e) {
            throw new PayloadException(dtype, dims, "element count overflows 64 bits");
        }
    }

    /** 32-element groups per row; the dtypes that tile rows require cols % 32 == 0. */
    public long groupsPerRow() { return cols / GROUP; }

    public void requireColsMultipleOfGroup() {
        if (cols % GROUP != 0)
            throw fail("last dimension " + cols + " is not a multiple of " + GROUP + " (required by " + dtype.label + ")");
    }

    /** Fails unless the payload is exactly {@code expected} bytes; {@code layout} names the parts summed. */
    public void requireLength(long actual, long expected, String layout) {
        if (actual != expected)
            throw fail("payload is " + actual + " bytes, expected " + expected + " (" + layout + ")");
    }

    /** Fails unless the payload holds at least {@code minimum} bytes (variable-length dtypes). */
    public void requireAtLeast(long actual, long minimum, String what) {
        if (actual < minimum)
            throw fail("payload is " + actual + " bytes, too short for " + what + " (" + minimum + " bytes)");
    }

    public PayloadException fail(String problem) { return new PayloadException(dtype, dims, problem); }

    /** {@code a*b+c...} with overflow turned into a PayloadException. */
    public long mul(long a, long b) {
        try { return Math.multiplyExact(a, b); }
        catch (ArithmeticException e) { throw fail("payload size overflows 64 bits"); }
    }

    public long add(long a, long b) {
        try { return Math.addExact(a, b); }
        catch (ArithmeticException e) { throw fail("payload size overflows 64 bits"); }
    }

    @Override public String toString() { return dtype.label + Arrays.toString(dims); }

    @Override public boolean equals(Object o) {
        return o instanceof TensorShape t && t.dtype == dtype && Arrays.equals(t.dims, dims);
    }

    @Override public int hashCode() { return dtype.hashCode() * 31 + Arrays.hashCode(dims); }
}
