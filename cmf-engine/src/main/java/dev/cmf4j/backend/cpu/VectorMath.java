package dev.cmf4j.backend.cpu;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;

/**
 * Float32 vector kernels on the preferred SIMD width, each with a plain scalar twin ({@code *Scalar})
 * that the tests compare against.
 */
public final class VectorMath {
    private VectorMath() {}

    static final VectorSpecies<Float> F = FloatVector.SPECIES_PREFERRED;
    private static final java.lang.foreign.ValueLayout.OfFloat F32LE =
            java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** Σ a[ao+i]·b[bo+i] for i < n. */
    public static float dot(float[] a, int ao, float[] b, int bo, int n) {
        int i = 0;
        int bound = F.loopBound(n);
        if (bound > 0) {
            FloatVector acc = FloatVector.zero(F);
            for (; i < bound; i += F.length())
                acc = FloatVector.fromArray(F, a, ao + i).fma(FloatVector.fromArray(F, b, bo + i), acc);
            float s = acc.reduceLanes(VectorOperators.ADD);
            for (; i < n; i++) s += a[ao + i] * b[bo + i];
            return s;
        }
        float s = 0f;
        for (; i < n; i++) s += a[ao + i] * b[bo + i];
        return s;
    }

    /** Σ w[i]·x[xo+i] with w read as little-endian float32 straight from {@code seg} at byte {@code wo}. */
    public static float dot(MemorySegment seg, long wo, float[] x, int xo, int n) {
        int i = 0;
        int bound = F.loopBound(n);
        FloatVector acc = FloatVector.zero(F);
        for (; i < bound; i += F.length())
            acc = FloatVector.fromMemorySegment(F, seg, wo + 4L * i, ByteOrder.LITTLE_ENDIAN)
                    .fma(FloatVector.fromArray(F, x, xo + i), acc);
        float s = acc.reduceLanes(VectorOperators.ADD);
        for (; i < n; i++) s += seg.get(F32LE, wo + 4L * i) * x[xo + i];
        return s;
    }

    /** y[yo+i] += a·x[xo+i] for i < n. */
    public static void axpy(float a, float[] x, int xo, float[] y, int yo, int n) {
        int i = 0;
        int bound = F.loopBound(n);
        FloatVector va = FloatVector.broadcast(F, a);
        for (; i < bound; i += F.length())
            FloatVector.fromArray(F, x, xo + i).fma(va, FloatVector.fromArray(F, y, yo + i)).intoArray(y, yo + i);
        for (; i < n; i++) y[yo + i] += a * x[xo + i];
    }

    /** 8 int8 lanes widened to 8 float lanes (int8 KV cache). */
    private static final VectorSpecies<Float> F8 = FloatVector.SPECIES_256;
    private static final VectorSpecies<Byte> B8 = jdk.incubator.vector.ByteVector.SPECIES_64;

    /** Σ a[ao+i]·x[xo+i] over int8 x (exact integers in float). */
    public static float dotBytes(float[] a, int ao, byte[] x, int xo, int n) {
        int i = 0;
        float s = 0f;
        if (n >= 8) {
            FloatVector acc = FloatVector.zero(F8);
            for (; i + 8 <= n; i += 8) {
                FloatVector xv = (FloatVector) jdk.incubator.vector.ByteVector.fromArray(B8, x, xo + i).castShape(F8, 0);
                acc = FloatVector.fromArray(F8, a, ao + i).fma(xv, acc);
            }
            s = acc.reduceLanes(VectorOperators.ADD);
        }
        for (; i < n; i++) s += a[ao + i] * x[xo + i];
        return s;
    }

    /** y[yo+i] += a·x[xo+i] over int8 x. */
    public static void axpyBytes(float a, byte[] x, int xo, float[] y, int yo, int n) {
        int i = 0;
        FloatVector va = FloatVector.broadcast(F8, a);
        for (; i + 8 <= n; i += 8) {
            FloatVector xv = (FloatVector) jdk.incubator.vector.ByteVector.fromArray(B8, x, xo + i).castShape(F8, 0);
            xv.fma(va, FloatVector.fromArray(F8, y, yo + i)).intoArray(y, yo + i);
        }
        for (; i < n; i++) y[yo + i] += a * x[xo + i];
    }

    /**
     * The first index (relative to {@code off}) of the largest of {@code x[off, off + n)}, as {@link #argmaxScalar}:
     * the maximum in one vector pass, then its first place; rows holding a NaN take the scalar rule.
     */
    public static int argmax(float[] x, int off, int n) {
        int bound = F.loopBound(n);
        if (bound == 0) return argmaxScalar(x, off, n);
        FloatVector m = FloatVector.fromArray(F, x, off);
        for (int i = F.length(); i < bound; i += F.length()) m = m.max(FloatVector.fromArray(F, x, off + i));
        float max = m.reduceLanes(VectorOperators.MAX);
        for (int i = bound; i < n; i++) max = Math.max(max, x[off + i]);
        if (Float.isNaN(max)) return argmaxScalar(x, off, n);
        for (int i = 0; i < bound; i += F.length()) {
            int lane = FloatVector.fromArray(F, x, off + i).eq(max).firstTrue();
            if (lane < F.length()) return i + lane;
        }
        for (int i = bound; i < n; i++) if (x[off + i] == max) return i;
        return argmaxScalar(x, off, n);   // unreachable: max is one of the elements
    }

    /** The first index (relative to {@code off}) where {@code x[off + i] > x[off + best]} no longer finds a larger one. */
    public static int argmaxScalar(float[] x, int off, int n) {
        int best = 0;
        for (int i = 1; i < n; i++) if (x[off + i] > x[off + best]) best = i;
        return best;
    }

    /** Scalar reference of {@link #dot(float[], int, float[], int, int)} (double accumulation). */
    public static double dotScalar(float[] a, int ao, float[] b, int bo, int n) {
        double s = 0;
        for (int i = 0; i < n; i++) s += (double) a[ao + i] * b[bo + i];
        return s;
    }
}
