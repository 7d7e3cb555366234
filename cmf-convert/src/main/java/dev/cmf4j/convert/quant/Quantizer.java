package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * Encodes float32 tensors into one CMF dtype (docs/QUANTIZATION.md has the rules). One final
 * class per dtype; {@link #of} finds it. Implementations are stateless and thread-safe.
 *
 * <pre>{@code
 * Quantizer q = Quantizer.of(DType.Q4TP);
 * TensorEncoder enc = q.begin(FloatSource.f32(mapped), shape);   // tensor-wide passes
 * MemorySegment out = ...;  // enc.encodedSize() bytes, e.g. a slice of the output file
 * enc.encode(0, enc.units(), out);                               // or split units over threads
 * }</pre>
 */
public interface Quantizer {
    DType dtype();

    /** Payload bytes for {@code shape}; throws if the dtype cannot hold the shape. */
    long encodedSize(long[] shape);

    /** Whether the dtype can hold {@code shape} (e.g. q4tp needs the last dimension % 32 == 0). */
    boolean supports(long[] shape);

    /** Makes the tensor-wide decisions (reading {@code src} as often as they need) and returns the encoder. */
    TensorEncoder begin(FloatSource src, long[] shape);

    /** Encodes the whole tensor on the calling thread into {@code dst} (exactly encodedSize bytes). */
    default void encode(FloatSource src, long[] shape, MemorySegment dst) {
        begin(src, shape).encodeAll(dst);
    }

    default void encode(float[] src, long[] shape, MemorySegment dst) {
        checkCount(src, shape);
        encode(FloatSource.of(src), shape, dst);
    }

    /** Convenience for small tensors: the payload as a byte array. */
    default byte[] encode(float[] src, long[] shape) {
        checkCount(src, shape);
        long n = encodedSize(shape);
        if (n > Integer.MAX_VALUE - 16) throw new IllegalArgumentException("payload of " + n + " bytes does not fit a byte[]");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment dst = arena.allocate(Math.max(1, n)).asSlice(0, n);
            encode(src, shape, dst);
            return dst.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
        }
    }

    private void checkCount(float[] src, long[] shape) {
        long n = TensorShape.of(dtype(), shape).elements();
        if (src.length != n)
            throw new IllegalArgumentException(src.length + " values given for " + TensorShape.of(dtype(), shape) + " (" + n + " elements)");
    }

    /** The quantizer producing {@code dtype}; f32, f16, bf16, q8_row, q8_2f, q4_block and q4tp have one. */
    /** The encoder for {@code dtype} given the source's dtype: a GGUF Q4_0 tensor keeps its own grid in q4_block. */
    static Quantizer forSource(DType dtype, String sourceDtype) {
        return dtype == DType.Q4_BLOCK && "Q4_0".equals(sourceDtype) ? Q4BlockQuantizer.ggmlQ4_0() : of(dtype);
    }

    static Quantizer of(DType dtype) {
        return switch (dtype) {
            case F32 -> new F32Quantizer();
            case F16 -> new F16Quantizer();
            case BF16 -> new Bf16Quantizer();
            case Q8_ROW -> new Q8RowQuantizer();
            case Q8_2F -> new Q8TwoFieldQuantizer();
            case Q4_BLOCK -> new Q4BlockQuantizer();
            case Q4TP -> new Q4TpQuantizer();
            default -> throw new UnsupportedOperationException("no encoder for dtype " + dtype.label
                    + " (encoders exist for f32, f16, bf16, q8_row, q8_2f, q4_block, q4tp)");
        };
    }
}
