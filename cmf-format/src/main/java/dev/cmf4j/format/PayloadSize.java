package dev.cmf4j.format;

/**
 * Payload byte counts implied by a dtype and a shape (CMF_FORMAT.md §2). The reader checks every
 * directory record against these so a dequantizer can trust that its slice holds what the layout
 * promises. Matrices are {@code rows = product of all dims but the last}, {@code cols = last dim};
 * {@code gpr} = groups of 32 per row, rounded up.
 */
public final class PayloadSize {
    private PayloadSize() {}

    public static final int GROUP = 32;

    public static long elements(long[] shape) {
        long n = 1;
        for (long d : shape) n = Math.multiplyExact(n, d);
        return n;
    }

    public static long rows(long[] shape) {
        long n = 1;
        for (int i = 0; i < shape.length - 1; i++) n = Math.multiplyExact(n, shape[i]);
        return n;
    }

    public static long cols(long[] shape) { return shape.length == 0 ? 1 : shape[shape.length - 1]; }

    /**
     * The exact payload size for fixed-size layouts, or the smallest possible size (as a negative
     * number {@code -min-1}) for variable-size layouts (vbit, vbit_ro, q1s, q1t), or
     * {@link Long#MIN_VALUE} when the dtype is reserved and has no known layout.
     *
     * @throws ArithmeticException when the size does not fit in a long
     */
    public static long expected(DType dtype, long[] shape) {
        long n = elements(shape), rows = rows(shape), cols = cols(shape);
        long gpr = ceilDiv(cols, GROUP);
        long codeBytes = Math.multiplyExact(rows, ceilDiv(Math.multiplyExact(gpr, 5), 8));
        return switch (dtype) {
            case F32, U32 -> Math.multiplyExact(n, 4);
            case F16, BF16 -> Math.multiplyExact(n, 2);
            case U8 -> n;
            case U64 -> Math.multiplyExact(n, 8);
            case Q8_ROW -> Math.addExact(n, Math.multiplyExact(rows, 2));
            case Q8_2F -> Math.addExact(Math.addExact(n, Math.multiplyExact(rows, 2)), Math.multiplyExact(cols, 2));
            case Q4_BLOCK -> Math.multiplyExact(ceilDiv(n, GROUP), 18);
            case Q4_TILED -> Math.multiplyExact(Math.multiplyExact(rows, gpr), 18);
            case Q4TP -> Math.addExact(Math.addExact(Math.multiplyExact(Math.multiplyExact(rows, gpr), 16),
                    Math.multiplyExact(rows, 4)), codeBytes);
            case Q2TP -> Math.addExact(Math.addExact(Math.multiplyExact(Math.multiplyExact(rows, gpr), 8),
                    Math.multiplyExact(rows, 4)), codeBytes);
            case Q1 -> Math.multiplyExact(Math.multiplyExact(rows, gpr), 6);
            case VBIT -> -1 - Math.addExact(rows, Math.multiplyExact(Math.multiplyExact(rows, gpr), 2));
            case VBIT_RO -> -1 - Math.addExact(Math.addExact(rows, Math.multiplyExact(Math.multiplyExact(rows, gpr), 2)),
                    Math.multiplyExact(Math.addExact(rows, 1), 4));
            case Q1S -> -1 - Math.addExact(Math.multiplyExact(Math.multiplyExact(rows, gpr), 6), 4);
            case Q1T -> -1 - Math.addExact(Math.multiplyExact(Math.multiplyExact(rows, gpr), 9),
                    Math.multiplyExact(Math.addExact(rows, 1), 4));
            case MIX8_4, Q4_COL -> Long.MIN_VALUE;
        };
    }

    /**
     * Null when {@code nbytes} fits the dtype and shape, else a sentence saying what was expected.
     */
    public static String check(DType dtype, long[] shape, long nbytes) {
        long e;
        try {
            e = expected(dtype, shape);
        } catch (ArithmeticException ex) {
            return "shape " + java.util.Arrays.toString(shape) + " is too large to address";
        }
        if (e == Long.MIN_VALUE) return null;
        if (e >= 0 && nbytes != e) return "nbytes " + nbytes + " does not match " + dtype.label + " of shape "
                + java.util.Arrays.toString(shape) + " (expected " + e + ")";
        if (e < 0 && nbytes < -1 - e) return "nbytes " + nbytes + " is too small for " + dtype.label + " of shape "
                + java.util.Arrays.toString(shape) + " (at least " + (-1 - e) + ")";
        return null;
    }

    static long ceilDiv(long a, long b) { return a == 0 ? 0 : Math.addExact(a, b - 1) / b; }
}
