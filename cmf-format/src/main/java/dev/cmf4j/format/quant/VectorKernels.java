package dev.cmf4j.format.quant;

import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShuffle;
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
    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    /** Interleave two 8-lane vectors: ZIP_LO = a0 b0 a1 b1 a2 b2 a3 b3, ZIP_HI = a4 b4 ... a7 b7. */
    private static final VectorShuffle<Float> ZIP_LO = zip(0), ZIP_HI = zip(4);

    private static VectorShuffle<Float> zip(int base) {
        int[] idx = new int[8];
        // Two-vector rearrange: index i < 8 takes lane i of this vector, i − 8 (wrapped) lane i of the other.
        for (int i = 0; i < 8; i++) idx[i] = (i & 1) == 0 ? base + i / 2 : base + i / 2 - 8;
        return VectorShuffle.fromArray(F, idx, 0);
    }

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
        for (int h = 0; h < 2; h++) {
            ByteVector v = ByteVector.fromMemorySegment(B8, d, at + 8 * h, LE);
            // (q − 8) is exact in f32 for q in 0..15, then one multiply: the scalar twin's operations.
            FloatVector lo = ((FloatVector) v.and((byte) 0x0F).castShape(F, 0)).sub(8f).mul(scale);
            FloatVector hi = ((FloatVector) v.lanewise(VectorOperators.LSHR, 4).and((byte) 0x0F).castShape(F, 0)).sub(8f).mul(scale);
            lo.rearrange(ZIP_LO, hi).intoArray(out, off + 16 * h);
            lo.rearrange(ZIP_HI, hi).intoArray(out, off + 16 * h + 8);
        }
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
