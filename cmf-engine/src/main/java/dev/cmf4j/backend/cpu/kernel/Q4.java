package dev.cmf4j.backend.cpu.kernel;

import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShuffle;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static dev.cmf4j.backend.cpu.kernel.Simd.F;
import static dev.cmf4j.backend.cpu.kernel.Simd.L;
import static dev.cmf4j.backend.cpu.kernel.Simd.LE;

/**
 * What the 4-bit layouts share: a group of 32 weights is 16 bytes of nibbles, byte j holding
 * element 2j in its low nibble and 2j+1 in its high one, value (q − 8)·scale; a row's groups are
 * contiguous (q4_block with cols % 32 == 0, q4tp always).
 *
 * <p>Decode reads the nibbles as int lanes: one load of L ints covers {@value #GPS_DOC} groups
 * (4 int lanes per group), and nibble k of a lane (bits 4k..4k+3) is element 8·(lane % 4) + k of
 * its group. {@code v & (15 << 4k)} is that nibble times 16^k, which converts to float exactly, so
 * with the activation pre-multiplied by 16^−k (exact: a power of two) each nibble costs one AND,
 * one convert and one FMA — no shifts, no shuffles; the top nibble is a plain shift. The −8 offset
 * is folded out: Σ(q−8)·x = Σq·x − 8·Σx, with the per-lane Σx prepared alongside. The activation
 * is rearranged once per call ({@link #prepare}); per row the group scales are decoded into a
 * small array first.
 */
final class Q4 {
    private Q4() {}

    static final int GPS_DOC = 2;
    /** Groups per int-vector load: L int lanes, 4 per 16-byte group. */
    static final int GPS = Math.max(1, L / 4);
    /** Floats of prepared activation per load step: 8 nibble positions × L lanes, then L lane sums. */
    static final int STEP = 9 * L;
    private static final float[] POW16 = {1f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 0x1p-16f, 0x1p-20f, 0x1p-24f, 1f};
    /**
     * Lane i takes group i/4 of a step's scales: one load and a constant shuffle, where blends through an array of
     * masks were not intrinsified under {@code -Xbatch}.
     */
    private static final VectorShuffle<Float> SPREAD = VectorShuffle.fromOp(F, i -> i / 4);

    static int steps(int gpr) {
        return (gpr + GPS - 1) / GPS;
    }

    /** Floats of prepared activation for a row of {@code gpr} groups. */
    static int preparedLength(int gpr) {
        return steps(gpr) * STEP;
    }

    /**
     * Rearranges x[xOff..xOff+cols) for {@link #dotRow}: per load step, for nibble k = 0..7 the L
     * lanes' elements times 16^−k (k < 7), then the lanes' sums; zero past cols.
     */
    static void prepare(float[] x, int xOff, int cols, int gpr, float[] dst, int dOff) {
        int steps = steps(gpr);
        for (int s = 0; s < steps; s++) {
            int base = dOff + s * STEP;
            for (int i = 0; i < L; i++) {
                int c0 = (s * GPS + i / 4) * 32 + 8 * (i % 4);
                float sum = 0f;
                for (int k = 0; k < 8; k++) {
                    int c = c0 + k;
                    float v = c < cols ? x[xOff + c] : 0f;
                    dst[base + k * L + i] = v * POW16[k];
                    sum += v;
                }
                dst[base + 8 * L + i] = sum;
            }
        }
    }

    /**
     * Σ_c W[row][c]·x[c] for one row: nibbles from byte offset {@code nib} ({@code gpr}·16 bytes),
     * group scales in {@code sc[0..gpr)}, prepared activation at {@code xp[xo..]}.
     */
    static float dotRow(MemorySegment m, long nib, int gpr, float[] sc, float[] xp, int xo) {
        FloatVector acc = FloatVector.zero(F), corr = acc;
        int full = gpr / GPS, rest = gpr - full * GPS, steps = rest > 0 ? full + 1 : full;
        long o = nib;
        int x = xo;
        for (int s = 0; s < steps; s++, o += 4L * L, x += STEP) {
            // the row's last groups: a masked load, the scales of absent groups 0
            IntVector v = s < full ? IntVector.fromMemorySegment(Simd.I, m, o, LE)
                    : IntVector.fromMemorySegment(Simd.I, m, o, LE, Simd.I.indexInRange(0, 4 * rest));
            FloatVector sv = FloatVector.fromArray(F, sc, s * GPS).rearrange(SPREAD);   // lanes 4j..4j+3: group j's scale
            // Σ_k nibble_k(v) · x_k lane-wise (the activation pre-scaled by 16^−k)
            FloatVector p0 = ((FloatVector) v.and(15).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, x));
            FloatVector p1 = ((FloatVector) v.and(15 << 4).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, x + L));
            p0 = ((FloatVector) v.and(15 << 8).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, x + 2 * L), p0);
            p1 = ((FloatVector) v.and(15 << 12).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, x + 3 * L), p1);
            p0 = ((FloatVector) v.and(15 << 16).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, x + 4 * L), p0);
            p1 = ((FloatVector) v.and(15 << 20).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, x + 5 * L), p1);
            p0 = ((FloatVector) v.and(15 << 24).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, x + 6 * L), p0);
            p1 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, x + 7 * L), p1);
            acc = p0.add(p1).fma(sv, acc);
            corr = FloatVector.fromArray(F, xp, x + 8 * L).fma(sv, corr);
        }
        return corr.fma(FloatVector.broadcast(F, -8f), acc).reduceLanes(VectorOperators.ADD);
    }

    /** Length of a row-scale buffer for {@code gpr} groups (whole load steps and one vector more, padding zero). */
    static int scaleLength(int gpr) {
        return steps(gpr) * GPS + L;
    }

    /** sc[g] = the f16 at {@code off + 2g} for g < n (the q4_block scale plane is contiguous per row). */
    static void f16Scales(MemorySegment m, long off, int n, float[] sc) {
        int g = 0;
        for (int vec = n - n % L; g < vec; g += L) F16Matrix.widen(m, off + 2L * g, sc, g);
        for (; g < n; g++) sc[g] = Simd.f16(m, off + 2L * g);
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
