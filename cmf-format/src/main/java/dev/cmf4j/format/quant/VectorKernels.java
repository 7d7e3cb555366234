package dev.cmf4j.format.quant;

import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;

/**
 * Vector API forms of {@link Kernels}: 8 floats per step (256-bit). Loaded only when
 * {@link Kernels#SIMD} holds, so a JVM without {@code jdk.incubator.vector} never touches it.
 * Each method computes exactly the scalar twin's f32 operations lane by lane.
 */
final class VectorKernels {
    private VectorKernels() {}

    private static final VectorSpecies<Float> F = FloatVector.SPECIES_256;
    private static final VectorSpecies<Byte> B8 = ByteVector.SPECIES_64;
    private static final VectorSpecies<Short> S8 = ShortVector.SPECIES_128;
    private static final VectorSpecies<Byte> B16 = ByteVector.SPECIES_128;
    private static final VectorSpecies<Short> S16 = ShortVector.SPECIES_256;
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    /** Worth using: the CPU's preferred vectors are at least 256 bits wide. */
    static boolean usable() { return FloatVector.SPECIES_PREFERRED.vectorBitSize() >= 256; }

    static void q8(MemorySegment d, long at, int n, float scale, float[] out, int off) {
        int i = 0;
        for (int end = n & ~7; i < end; i += 8) {
            FloatVector q = (FloatVector) ByteVector.fromMemorySegment(B8, d, at + i, LE).castShape(F, 0);
            q.mul(scale).intoArray(out, off + i);
        }
        Kernels.q8Scalar(d, at + i, n - i, scale, out, off + i);
    }

    static void q8Col(MemorySegment d, long at, int n, float scale, float[] col, float[] out, int off) {
        int i = 0;
        for (int end = n & ~7; i < end; i += 8) {
            FloatVector q = (FloatVector) ByteVector.fromMemorySegment(B8, d, at + i, LE).castShape(F, 0);
            q.mul(scale).mul(FloatVector.fromArray(F, col, i)).intoArray(out, off + i);
        }
        for (; i < n; i++) out[off + i] = d.get(Le.I8, at + i) * scale * col[i];
    }

    static void q4Group(MemorySegment d, long at, float scale, float[] out, int off) {
        // Widen the 16 bytes to shorts and move the high nibble to the upper byte: read back as
        // bytes (little-endian) that is lo0 hi0 lo1 hi1 ... — the element order, no shuffle needed.
        ShortVector x = (ShortVector) ByteVector.fromMemorySegment(B16, d, at, LE).castShape(S16, 0);
        ByteVector q = x.and((short) 0x0F).or(x.and((short) 0xF0).lanewise(VectorOperators.LSHL, 4)).reinterpretAsBytes();
        // (q − 8) is exact in f32 for q in 0..15, then one multiply: the scalar twin's operations.
        for (int p = 0; p < 4; p++) ((FloatVector) q.castShape(F, p)).sub(8f).mul(scale).intoArray(out, off + 8 * p);
    }

    static void bf16(MemorySegment d, long at, int n, float[] out, int off) {
        int i = 0;
        for (int end = n & ~7; i < end; i += 8) {
            IntVector w = (IntVector) ShortVector.fromMemorySegment(S8, d, at + 2L * i, LE).castShape(IntVector.SPECIES_256, 0);
            w.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats().intoArray(out, off + i);
        }
        Kernels.bf16Scalar(d, at + 2L * i, n - i, out, off + i);
    }
}
