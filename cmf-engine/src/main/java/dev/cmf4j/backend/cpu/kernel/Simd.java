package dev.cmf4j.backend.cpu.kernel;

import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * The vector species the kernels use, chosen once from the machine's preferred width: {@code F}
 * holds {@code L} floats (8 on AVX2, 16 on AVX-512) and the narrower species hold the same number
 * of lanes, so one load of {@code L} int8 weights (or bf16/f16 halves) widens to exactly one float
 * vector. Widths below 8 floats (128-bit SIMD) have no byte species of matching lane count; there
 * the kernels take their scalar paths ({@link #VECTOR} is false).
 */
final class Simd {
    private Simd() {}

    static final VectorSpecies<Float> F = FloatVector.SPECIES_PREFERRED;
    static final int L = F.length();
    /** True when the vector paths are usable (8 or 16 float lanes). */
    static final boolean VECTOR = (L == 8 || L == 16) && !Boolean.getBoolean("cmf.kernel.scalar");
    static final VectorSpecies<Integer> I = VECTOR ? VectorSpecies.of(int.class, F.vectorShape()) : IntVector.SPECIES_64;
    /** L bytes. */
    static final VectorSpecies<Byte> B = VECTOR ? VectorSpecies.of(byte.class, VectorShape.forBitSize(L * 8)) : ByteVector.SPECIES_64;
    /** L shorts. */
    static final VectorSpecies<Short> S = VECTOR ? VectorSpecies.of(short.class, VectorShape.forBitSize(L * 16)) : ShortVector.SPECIES_64;

    static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    static final ValueLayout.OfShort HALF = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(LE);
    static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(LE);

    /** The f16 at byte offset {@code off}, as a float. */
    static float f16(MemorySegment m, long off) {
        return Float.float16ToFloat(m.get(HALF, off));
    }

    /** The bf16 at byte offset {@code off}, as a float. */
    static float bf16(MemorySegment m, long off) {
        return Float.intBitsToFloat(m.get(HALF, off) << 16);
    }

    static int ceilDiv(int a, int b) {
        return (a + b - 1) / b;
    }

    static int roundUp(int a, int b) {
        return ceilDiv(a, b) * b;
    }
}
