package dev.cmf4j.backend.cpu.kernel;

import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static dev.cmf4j.backend.cpu.kernel.Simd.F;
import static dev.cmf4j.backend.cpu.kernel.Simd.L;
import static dev.cmf4j.backend.cpu.kernel.Simd.LE;

/**
 * What the 4-bit layouts share: a group of 32 weights is 16 bytes of nibbles, byte k holding
 * element 2k in its low nibble and 2k+1 in its high one, value (q − 8)·scale.
 *
 * <p>The activation is prepared once per call so the group dot needs no shuffles: per group,
 * {@code xe[0..16)} holds the even elements and {@code xe[16..32)} the odd ones, so the low nibbles
 * of L consecutive bytes meet L consecutive floats of the even half and the high nibbles the odd
 * half. The −8 offset is folded out: Σ(q−8)·x = Σq·x − 8·Σx, with Σx per group stored after the
 * reordered activation (gpr floats), so the inner loop is mask/shift, convert, FMA.
 */
final class Q4 {
    private Q4() {}

    /** Floats of prepared activation for {@code gpr} groups: reordered values, then group sums. */
    static int preparedLength(int gpr) {
        return gpr * 32 + gpr;
    }

    /**
     * Writes x[xOff..xOff+cols) reordered per group (zero padded to gpr·32) to dst[dOff..], and
     * the group sums to dst[dOff + gpr·32 ..].
     */
    static void prepare(float[] x, int xOff, int cols, int gpr, float[] dst, int dOff) {
        int sums = dOff + gpr * 32;
        for (int g = 0; g < gpr; g++) {
            int src = xOff + g * 32, d = dOff + g * 32;
            int n = Math.min(32, cols - g * 32);
            float s = 0f;
            if (n == 32) {
                for (int j = 0; j < 16; j++) {
                    float e = x[src + 2 * j], o = x[src + 2 * j + 1];
                    dst[d + j] = e;
                    dst[d + 16 + j] = o;
                    s += e + o;
                }
            } else {
                for (int j = 0; j < 32; j++) {
                    float v = j < n ? x[src + j] : 0f;
                    dst[d + (j >> 1) + ((j & 1) << 4)] = v;
                    s += v;
                }
            }
            dst[sums + g] = s;
        }
    }

    /**
     * Σ_j q_j·x_j over one group (no −8, no scale) as a vector of L partial sums: the group's 16
     * nibble bytes at byte offset {@code o}, the prepared activation of the group at {@code xe[xb..xb+32)}.
     */
    static FloatVector groupDot(MemorySegment m, long o, float[] xe, int xb, FloatVector p) {
        for (int b = 0; b < 16; b += L) {          // 2 iterations on AVX2, 1 on AVX-512 (L is a constant)
            IntVector q = (IntVector) ByteVector.fromMemorySegment(Simd.B, m, o + b, LE)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2I, Simd.I, 0);
            FloatVector lo = (FloatVector) q.and(15).convert(VectorOperators.I2F, 0);
            FloatVector hi = (FloatVector) q.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0);
            p = lo.fma(FloatVector.fromArray(F, xe, xb + b), p);
            p = hi.fma(FloatVector.fromArray(F, xe, xb + 16 + b), p);
        }
        return p;
    }

    /**
     * Writes the group at byte offset {@code o} as (q−8)·scale in nibble order (the 16 low nibbles =
     * even columns, then the 16 high ones = odd columns) to dst[d..d+32): no interleave needed.
     */
    static void unpackGroupPermuted(MemorySegment m, long o, float scale, float[] dst, int d) {
        FloatVector s = FloatVector.broadcast(F, scale), off = FloatVector.broadcast(F, -8f * scale);
        for (int b = 0; b < 16; b += L) {
            IntVector q = (IntVector) ByteVector.fromMemorySegment(Simd.B, m, o + b, LE)
                    .convertShape(VectorOperators.ZERO_EXTEND_B2I, Simd.I, 0);
            ((FloatVector) q.and(15).convert(VectorOperators.I2F, 0)).fma(s, off).intoArray(dst, d + b);
            ((FloatVector) q.lanewise(VectorOperators.LSHR, 4).convert(VectorOperators.I2F, 0)).fma(s, off).intoArray(dst, d + 16 + b);
        }
    }

    /** Writes the group at byte offset {@code o} as (q−8)·scale in natural order to dst[d..d+n). */
    static void unpackGroup(MemorySegment m, long o, float scale, float[] dst, int d, int n) {
        if (n == 32) {
            for (int k = 0; k < 16; k++) {
                int b = m.get(ValueLayout.JAVA_BYTE, o + k);
                dst[d + 2 * k] = ((b & 15) - 8) * scale;
                dst[d + 2 * k + 1] = (((b >>> 4) & 15) - 8) * scale;
            }
        } else {
            for (int j = 0; j < n; j++) {
                int b = m.get(ValueLayout.JAVA_BYTE, o + (j >> 1));
                int q = (j & 1) == 0 ? b & 15 : (b >>> 4) & 15;
                dst[d + j] = (q - 8) * scale;
            }
        }
    }
}
