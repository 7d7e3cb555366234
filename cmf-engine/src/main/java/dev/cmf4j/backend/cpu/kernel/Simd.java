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

    /**
     * Σ of the L lanes of a vector stored at t[o..o+L), in a fixed order: lane i + lane i+8 (16 lanes), then i + i+4,
     * i + i+2, i + i+1, as a butterfly of lane permutes would. The same bits in every JIT tier, where a vector's
     * {@code reduceLanes(ADD)} sums in one order interpreted and in another once C2 compiles it (a product's last bit
     * would depend on how warm the JVM is); and cheaper than that butterfly in C2 code (plain loads and adds).
     */
    static float laneSum(float[] t, int o) {
        float s0, s1, s2, s3, s4, s5, s6, s7;
        if (L == 16) {
            s0 = t[o] + t[o + 8]; s1 = t[o + 1] + t[o + 9]; s2 = t[o + 2] + t[o + 10]; s3 = t[o + 3] + t[o + 11];
            s4 = t[o + 4] + t[o + 12]; s5 = t[o + 5] + t[o + 13]; s6 = t[o + 6] + t[o + 14]; s7 = t[o + 7] + t[o + 15];
        } else {
            s0 = t[o]; s1 = t[o + 1]; s2 = t[o + 2]; s3 = t[o + 3]; s4 = t[o + 4]; s5 = t[o + 5]; s6 = t[o + 6]; s7 = t[o + 7];
        }
        return ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7));
    }

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
