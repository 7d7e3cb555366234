package dev.cmf4j.convert;

import java.util.Arrays;

/**
 * One tensor a converter will write: its CMF name and shape ({@code [out, in]} for matrices), the
 * dtype it had in the source (for the policy and provenance; e.g. "F32", "BF16", "Q8_0"), and its
 * values. {@code transform} says how it was derived from the source ("" = copied as is).
 */
public record SourceTensor(String name, long[] shape, String sourceDtype, String transform, TensorData data) {
    public SourceTensor {
        shape = shape.clone();
    }

    @Override public long[] shape() { return shape.clone(); }

    public int rank() { return shape.length; }

    public long numel() {
        long n = 1;
        for (long d : shape) n = Math.multiplyExact(n, d);
        return n;
    }

    @Override public String toString() { return name + Arrays.toString(shape) + " " + sourceDtype; }
}
