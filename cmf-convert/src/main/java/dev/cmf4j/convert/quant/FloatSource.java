package dev.cmf4j.convert.quant;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * Float32 values of one source tensor, read by flat (row-major) element offset. Quantizers pull
 * from it a row or a group at a time, so a tensor that lives in a memory-mapped safetensors file
 * is never copied whole into the heap. Implementations must allow concurrent reads.
 */
@FunctionalInterface
public interface FloatSource {
    /** Reads elements {@code [offset, offset+len)} into {@code dst[dstOff...]}. */
    void read(long offset, float[] dst, int dstOff, int len);

    ValueLayout.OfFloat F32_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    ValueLayout.OfShort I16_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    static FloatSource of(float[] values) {
        Objects.requireNonNull(values, "values");
        return (offset, dst, dstOff, len) -> System.arraycopy(values, Math.toIntExact(offset), dst, dstOff, len);
    }

    /** Little-endian IEEE single values (safetensors F32). */
    static FloatSource f32(MemorySegment data) {
        return (offset, dst, dstOff, len) -> MemorySegment.copy(data, F32_LE, offset * 4, dst, dstOff, len);
    }

    /** Little-endian IEEE half values (safetensors F16), widened exactly. */
    static FloatSource f16(MemorySegment data) {
        return (offset, dst, dstOff, len) -> {
            for (int i = 0; i < len; i++) dst[dstOff + i] = Float.float16ToFloat(data.get(I16_LE, (offset + i) * 2));
        };
    }

    /** Little-endian bfloat16 values (safetensors BF16), widened exactly. */
    static FloatSource bf16(MemorySegment data) {
        return (offset, dst, dstOff, len) -> {
            for (int i = 0; i < len; i++) dst[dstOff + i] = Float.intBitsToFloat(data.get(I16_LE, (offset + i) * 2) << 16);
        };
    }
}
