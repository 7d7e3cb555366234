package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShuffle;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Locale;

import static dev.cmf4j.backend.cpu.kernel.Simd.F;
import static dev.cmf4j.backend.cpu.kernel.Simd.L;
import static dev.cmf4j.backend.cpu.kernel.Simd.LE;

/**
 * q4_block decode loop variants measured against the shipped kernel ('0'), one thread, GB/s of
 * q4_block bytes per CPU-second (see {@link CpuTimeProbe}; each variant is run twice and the second
 * pass printed, because C2 compiles these large vector methods late). Results and conclusions are
 * in docs/CPU_KERNELS.md ("q4_block decode: what was tried"). Variants:
 * <ul>
 * <li>A: one row per pass, AND + convert per nibble, group scales by one load + lane permute, the
 *     −8 correction out of the loop (Σ s_g·X_g per row from group sums);
 * <li>B: A over two rows per pass sharing each activation load;
 * <li>C: the float-bit trick: nibble shifted into the top mantissa bits of 1.0f (1 + q/16), no convert;
 * <li>E: A with the scale vector built by two broadcasts + blend (the shipped kernel's way);
 * <li>F: A with the seven nibble masks hoisted into locals; G: A with one FMA chain instead of two;
 * <li>H: A reading the activation from a 64-byte-aligned native segment instead of a float[];
 * <li>I, J: A and H without the per-row work (scale widening, correction): the loop alone.
 * </ul>
 * <pre>java --add-modules jdk.incubator.vector -cp cmf-bench/target/benchmarks.jar dev.cmf4j.backend.cpu.kernel.Q4Experiment 0ACHIJ</pre>
 * Helpers stay out of the hot loops on purpose: a helper of more than 325 bytecodes is not inlined
 * by C2 and then boxes every vector it takes or returns (10–30× slower).
 */
public final class Q4Experiment {
    static final int GPS = L / 4;
    static final float[] POW16 = {1f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 0x1p-16f, 0x1p-20f, 0x1p-24f, 0x1p-28f};
    static final VectorShuffle<Float> SPREAD = VectorShuffle.fromOp(F, i -> i / 4);
    /** Lanes 4j..4j+3 (group j of a step, j ≥ 1) for E's scale blends: GPS = L/4 groups, any vector width. */
    @SuppressWarnings("unchecked")
    static final VectorMask<Float>[] GROUP_LANES = new VectorMask[GPS];
    static {
        for (int j = 1; j < GPS; j++) {
            boolean[] b = new boolean[L];
            for (int i = 4 * j; i < 4 * j + 4; i++) b[i] = true;
            GROUP_LANES[j] = VectorMask.fromArray(F, b, 0);
        }
    }

    /** k-major x·16^−k per step, 8L floats per step. pow: use POW16 (true) or 16 for all (false). */
    static float[] prep(float[] x, int gpr, boolean pow) {
        int steps = gpr / GPS;
        float[] d = new float[steps * 8 * L];
        for (int s = 0; s < steps; s++)
            for (int i = 0; i < L; i++) {
                int c0 = (s * GPS + i / 4) * 32 + 8 * (i % 4);
                for (int k = 0; k < 8; k++) d[s * 8 * L + k * L + i] = x[c0 + k] * (pow ? (k == 7 ? 1f : POW16[k]) : 16f);
            }
        return d;
    }

    static float[] groupSums(float[] x, int gpr) {
        float[] g = new float[gpr + L];
        for (int j = 0; j < gpr; j++) { float s = 0; for (int c = 0; c < 32; c++) s += x[j * 32 + c]; g[j] = s; }
        return g;
    }

    static float corr(float[] sc, float[] gs, int gpr) {
        FloatVector a = FloatVector.zero(F);
        for (int g = 0; g < gpr; g += L) a = FloatVector.fromArray(F, sc, g).fma(FloatVector.fromArray(F, gs, g), a);
        return a.reduceLanes(VectorOperators.ADD);
    }

    static FloatVector cvt(IntVector v) { return (FloatVector) v.convert(VectorOperators.I2F, 0); }

    /** A: tight single row, AND+CVT, scale by load+rearrange, correction outside. */
    static void dotA(MemorySegment m, int r0, int r1, int gpr, long scalesOff, float[] xp, float[] gs, float[] sc, float[] y) {
        for (int r = r0; r < r1; r++) {
            long g0 = (long) r * gpr;
            Q4.f16Scales(m, scalesOff + 2 * g0, gpr, sc);
            y[r] = rowA(m, g0 * 16, gpr / GPS, sc, xp) - 8f * corr(sc, gs, gpr);
        }
    }

    static float rowA(MemorySegment m, long o, int steps, float[] sc, float[] xp) {
        FloatVector acc = FloatVector.zero(F);
        int xi = 0;
        for (int s = 0; s < steps; s++, o += 4L * L, xi += 8 * L) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE);
            FloatVector sv = FloatVector.fromArray(F, sc, s * GPS).rearrange(SPREAD);
            FloatVector p0 = ((FloatVector) v.and(15).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, xi));
            FloatVector p1 = ((FloatVector) v.and(15 << 4).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, xi + L));
            p0 = ((FloatVector) v.and(15 << 8).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 2 * L), p0);
            p1 = ((FloatVector) v.and(15 << 12).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 3 * L), p1);
            p0 = ((FloatVector) v.and(15 << 16).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 4 * L), p0);
            p1 = ((FloatVector) v.and(15 << 20).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 5 * L), p1);
            p0 = ((FloatVector) v.and(15 << 24).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 6 * L), p0);
            p1 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 7 * L), p1);
            acc = p0.add(p1).fma(sv, acc);
        }
        return acc.reduceLanes(VectorOperators.ADD);
    }

    static float rowF(MemorySegment m, long o, int steps, float[] sc, float[] xp) {
        FloatVector acc = FloatVector.zero(F);
        int xi = 0;
        IntVector m0 = IntVector.broadcast(Simd.I, 15), m1 = IntVector.broadcast(Simd.I, 15 << 4), m2 = IntVector.broadcast(Simd.I, 15 << 8),
                m3 = IntVector.broadcast(Simd.I, 15 << 12), m4 = IntVector.broadcast(Simd.I, 15 << 16), m5 = IntVector.broadcast(Simd.I, 15 << 20),
                m6 = IntVector.broadcast(Simd.I, 15 << 24);
        for (int s = 0; s < steps; s++, o += 4L * L, xi += 8 * L) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE);
            FloatVector sv = FloatVector.fromArray(F, sc, s * GPS).rearrange(SPREAD);
            FloatVector p0 = ((FloatVector) v.and(m0).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, xi));
            FloatVector p1 = ((FloatVector) v.and(m1).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, xi + L));
            p0 = ((FloatVector) v.and(m2).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 2 * L), p0);
            p1 = ((FloatVector) v.and(m3).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 3 * L), p1);
            p0 = ((FloatVector) v.and(m4).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 4 * L), p0);
            p1 = ((FloatVector) v.and(m5).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 5 * L), p1);
            p0 = ((FloatVector) v.and(m6).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 6 * L), p0);
            p1 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 7 * L), p1);
            acc = p0.add(p1).fma(sv, acc);
        }
        return acc.reduceLanes(VectorOperators.ADD);
    }

    static float rowG(MemorySegment m, long o, int steps, float[] sc, float[] xp) {
        FloatVector acc = FloatVector.zero(F);
        int xi = 0;
        for (int s = 0; s < steps; s++, o += 4L * L, xi += 8 * L) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE);
            FloatVector p = ((FloatVector) v.and(15).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, xi));
            p = ((FloatVector) v.and(15 << 4).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + L), p);
            p = ((FloatVector) v.and(15 << 8).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 2 * L), p);
            p = ((FloatVector) v.and(15 << 12).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 3 * L), p);
            p = ((FloatVector) v.and(15 << 16).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 4 * L), p);
            p = ((FloatVector) v.and(15 << 20).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 5 * L), p);
            p = ((FloatVector) v.and(15 << 24).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 6 * L), p);
            p = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 7 * L), p);
            acc = p.fma(FloatVector.fromArray(F, sc, s * GPS).rearrange(SPREAD), acc);
        }
        return acc.reduceLanes(VectorOperators.ADD);
    }

    static float rowH(MemorySegment m, long o, int steps, float[] sc, MemorySegment xs) {
        FloatVector acc = FloatVector.zero(F);
        long xi = 0;
        for (int s = 0; s < steps; s++, o += 4L * L, xi += 32L * L) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE);
            FloatVector sv = FloatVector.fromArray(F, sc, s * GPS).rearrange(SPREAD);
            FloatVector p0 = ((FloatVector) v.and(15).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromMemorySegment(F, xs, xi, LE));
            FloatVector p1 = ((FloatVector) v.and(15 << 4).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromMemorySegment(F, xs, xi + 4 * L, LE));
            p0 = ((FloatVector) v.and(15 << 8).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromMemorySegment(F, xs, xi + 8 * L, LE), p0);
            p1 = ((FloatVector) v.and(15 << 12).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromMemorySegment(F, xs, xi + 12 * L, LE), p1);
            p0 = ((FloatVector) v.and(15 << 16).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromMemorySegment(F, xs, xi + 16 * L, LE), p0);
            p1 = ((FloatVector) v.and(15 << 20).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromMemorySegment(F, xs, xi + 20 * L, LE), p1);
            p0 = ((FloatVector) v.and(15 << 24).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromMemorySegment(F, xs, xi + 24 * L, LE), p0);
            p1 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromMemorySegment(F, xs, xi + 28 * L, LE), p1);
            acc = p0.add(p1).fma(sv, acc);
        }
        return acc.reduceLanes(VectorOperators.ADD);
    }

    static MemorySegment XS;

    static void dotRowH(MemorySegment m, int r0, int r1, int gpr, long scalesOff, MemorySegment xs, float[] gs, float[] sc, float[] y) {
        for (int r = r0; r < r1; r++) {
            long g0 = (long) r * gpr;
            Q4.f16Scales(m, scalesOff + 2 * g0, gpr, sc);
            y[r] = rowH(m, g0 * 16, gpr / GPS, sc, xs) - 8f * corr(sc, gs, gpr);
        }
    }

    static void dotRow(char c, MemorySegment m, int r0, int r1, int gpr, long scalesOff, float[] xp, float[] gs, float[] sc, float[] y) {
        for (int r = r0; r < r1; r++) {
            long g0 = (long) r * gpr;
            Q4.f16Scales(m, scalesOff + 2 * g0, gpr, sc);
            float d = c == 'F' ? rowF(m, g0 * 16, gpr / GPS, sc, xp) : rowG(m, g0 * 16, gpr / GPS, sc, xp);
            y[r] = d - 8f * corr(sc, gs, gpr);
        }
    }

    /** B: two rows per pass sharing x loads. */
    static void dotB(MemorySegment m, int r0, int r1, int gpr, long scalesOff, float[] xp, float[] gs, float[] sc, float[] sc2, float[] y) {
        float[] res = new float[2];
        for (int r = r0; r < r1; r += 2) {
            long g0 = (long) r * gpr;
            Q4.f16Scales(m, scalesOff + 2 * g0, gpr, sc);
            Q4.f16Scales(m, scalesOff + 2 * (g0 + gpr), gpr, sc2);
            rowB(m, g0 * 16, 16L * gpr, gpr / GPS, sc, sc2, xp, res);
            y[r] = res[0] - 8f * corr(sc, gs, gpr);
            y[r + 1] = res[1] - 8f * corr(sc2, gs, gpr);
        }
    }

    static void rowB(MemorySegment m, long o, long stride, int steps, float[] sc, float[] sc2, float[] xp, float[] res) {
        FloatVector acc = FloatVector.zero(F), acc2 = acc;
        int xi = 0;
        for (int s = 0; s < steps; s++, o += 4L * L, xi += 8 * L) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE);
            IntVector u = IntVector.fromMemorySegment(Simd.I, m, o + stride, LE);
            FloatVector x = FloatVector.fromArray(F, xp, xi);
            FloatVector p = ((FloatVector) v.and(15).convert(VectorOperators.I2F, 0)).mul(x), q = ((FloatVector) u.and(15).convert(VectorOperators.I2F, 0)).mul(x);
            x = FloatVector.fromArray(F, xp, xi + L);
            p = ((FloatVector) v.and(15 << 4).convert(VectorOperators.I2F, 0)).fma(x, p); q = ((FloatVector) u.and(15 << 4).convert(VectorOperators.I2F, 0)).fma(x, q);
            x = FloatVector.fromArray(F, xp, xi + 2 * L);
            p = ((FloatVector) v.and(15 << 8).convert(VectorOperators.I2F, 0)).fma(x, p); q = ((FloatVector) u.and(15 << 8).convert(VectorOperators.I2F, 0)).fma(x, q);
            x = FloatVector.fromArray(F, xp, xi + 3 * L);
            p = ((FloatVector) v.and(15 << 12).convert(VectorOperators.I2F, 0)).fma(x, p); q = ((FloatVector) u.and(15 << 12).convert(VectorOperators.I2F, 0)).fma(x, q);
            x = FloatVector.fromArray(F, xp, xi + 4 * L);
            p = ((FloatVector) v.and(15 << 16).convert(VectorOperators.I2F, 0)).fma(x, p); q = ((FloatVector) u.and(15 << 16).convert(VectorOperators.I2F, 0)).fma(x, q);
            x = FloatVector.fromArray(F, xp, xi + 5 * L);
            p = ((FloatVector) v.and(15 << 20).convert(VectorOperators.I2F, 0)).fma(x, p); q = ((FloatVector) u.and(15 << 20).convert(VectorOperators.I2F, 0)).fma(x, q);
            x = FloatVector.fromArray(F, xp, xi + 6 * L);
            p = ((FloatVector) v.and(15 << 24).convert(VectorOperators.I2F, 0)).fma(x, p); q = ((FloatVector) u.and(15 << 24).convert(VectorOperators.I2F, 0)).fma(x, q);
            x = FloatVector.fromArray(F, xp, xi + 7 * L);
            p = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convert(VectorOperators.I2F, 0)).fma(x, p);
            q = ((FloatVector) u.lanewise(VectorOperators.LSHR, 28).convert(VectorOperators.I2F, 0)).fma(x, q);
            acc = p.fma(FloatVector.fromArray(F, sc, s * GPS).rearrange(SPREAD), acc);
            acc2 = q.fma(FloatVector.fromArray(F, sc2, s * GPS).rearrange(SPREAD), acc2);
        }
        res[0] = acc.reduceLanes(VectorOperators.ADD);
        res[1] = acc2.reduceLanes(VectorOperators.ADD);
    }

    /** C: float-bit trick (1 + q/16), x·16, single row. */
    static void dotC(MemorySegment m, int r0, int r1, int gpr, long scalesOff, float[] xp, float[] gs, float[] sc, float[] y) {
        for (int r = r0; r < r1; r++) {
            long g0 = (long) r * gpr;
            Q4.f16Scales(m, scalesOff + 2 * g0, gpr, sc);
            y[r] = rowC(m, g0 * 16, gpr / GPS, sc, xp) - 24f * corr(sc, gs, gpr);
        }
    }

    static float rowC(MemorySegment m, long o, int steps, float[] sc, float[] xp) {
        FloatVector acc = FloatVector.zero(F);
        int xi = 0;
        IntVector mk = IntVector.broadcast(Simd.I, 0x00780000), one = IntVector.broadcast(Simd.I, 0x3F800000);
        for (int s = 0; s < steps; s++, o += 4L * L, xi += 8 * L) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE);
            FloatVector sv = FloatVector.fromArray(F, sc, s * GPS).rearrange(SPREAD);
            FloatVector p0 = v.lanewise(VectorOperators.LSHL, 19).and(mk).or(one).reinterpretAsFloats().mul(FloatVector.fromArray(F, xp, xi));
            FloatVector p1 = v.lanewise(VectorOperators.LSHL, 15).and(mk).or(one).reinterpretAsFloats().mul(FloatVector.fromArray(F, xp, xi + L));
            p0 = v.lanewise(VectorOperators.LSHL, 11).and(mk).or(one).reinterpretAsFloats().fma(FloatVector.fromArray(F, xp, xi + 2 * L), p0);
            p1 = v.lanewise(VectorOperators.LSHL, 7).and(mk).or(one).reinterpretAsFloats().fma(FloatVector.fromArray(F, xp, xi + 3 * L), p1);
            p0 = v.lanewise(VectorOperators.LSHL, 3).and(mk).or(one).reinterpretAsFloats().fma(FloatVector.fromArray(F, xp, xi + 4 * L), p0);
            p1 = v.lanewise(VectorOperators.LSHR, 1).and(mk).or(one).reinterpretAsFloats().fma(FloatVector.fromArray(F, xp, xi + 5 * L), p1);
            p0 = v.lanewise(VectorOperators.LSHR, 5).and(mk).or(one).reinterpretAsFloats().fma(FloatVector.fromArray(F, xp, xi + 6 * L), p0);
            p1 = v.lanewise(VectorOperators.LSHR, 9).and(mk).or(one).reinterpretAsFloats().fma(FloatVector.fromArray(F, xp, xi + 7 * L), p1);
            acc = p0.add(p1).fma(sv, acc);
        }
        return acc.reduceLanes(VectorOperators.ADD);
    }

    /** E: like A but with scale by two broadcasts + blend (the current shape) to isolate the scale cost. */
    static void dotE(MemorySegment m, int r0, int r1, int gpr, long scalesOff, float[] xp, float[] gs, float[] sc, float[] y) {
        for (int r = r0; r < r1; r++) {
            long g0 = (long) r * gpr;
            Q4.f16Scales(m, scalesOff + 2 * g0, gpr, sc);
            y[r] = rowE(m, g0 * 16, gpr / GPS, sc, xp) - 8f * corr(sc, gs, gpr);
        }
    }

    static float rowE(MemorySegment m, long o, int steps, float[] sc, float[] xp) {
        FloatVector acc = FloatVector.zero(F);
        int xi = 0;
        for (int s = 0; s < steps; s++, o += 4L * L, xi += 8 * L) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE);
            // GPS broadcasts + blends (2 on AVX2's 8 lanes, 4 on AVX-512's 16), as Q4.scales builds it
            FloatVector sv = FloatVector.broadcast(F, sc[s * GPS]);
            for (int j = 1; j < GPS; j++) sv = sv.blend(FloatVector.broadcast(F, sc[s * GPS + j]), GROUP_LANES[j]);
            FloatVector p0 = ((FloatVector) v.and(15).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, xi));
            FloatVector p1 = ((FloatVector) v.and(15 << 4).convert(VectorOperators.I2F, 0)).mul(FloatVector.fromArray(F, xp, xi + L));
            p0 = ((FloatVector) v.and(15 << 8).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 2 * L), p0);
            p1 = ((FloatVector) v.and(15 << 12).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 3 * L), p1);
            p0 = ((FloatVector) v.and(15 << 16).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 4 * L), p0);
            p1 = ((FloatVector) v.and(15 << 20).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 5 * L), p1);
            p0 = ((FloatVector) v.and(15 << 24).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 6 * L), p0);
            p1 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 28).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, xp, xi + 7 * L), p1);
            acc = p0.add(p1).fma(sv, acc);
        }
        return acc.reduceLanes(VectorOperators.ADD);
    }

    public static void main(String[] args) {
        Arena arena = Arena.ofShared();
        int cols = 2048, gpr = cols / 32;
        String only = args.length > 0 ? args[0] : "ABCE0";
        for (int rows : new int[] {128, 8192}) {
            MemorySegment m = CpuTimeProbe.encode(DType.Q4_BLOCK, rows, cols, arena);
            Q4BlockMatrix w = (Q4BlockMatrix) WeightMatrix.of(DType.Q4_BLOCK, m, rows, cols);
            long scalesOff = (long) rows * cols / 32 * 16;
            float[] x = new float[cols];
            for (int i = 0; i < cols; i++) x[i] = (float) Math.sin(i) + 0.3f;
            float[] xp0 = new float[w.preparedLength()];
            w.prepare(x, 0, xp0, 0);
            float[] xpA = prep(x, gpr, true), xpC = prep(x, gpr, false), gs = groupSums(x, gpr);
            float[] sc = new float[gpr + 2 * L], sc2 = new float[gpr + 2 * L];
            float[] y0 = new float[rows], yA = new float[rows], yB = new float[rows], yC = new float[rows], yE = new float[rows];
            double bytes = w.byteSize();
            XS = arena.allocate(4L * (xpA.length + gpr + 2 * L), 64);
            MemorySegment.copy(xpA, 0, XS, java.lang.foreign.ValueLayout.JAVA_FLOAT, 0, xpA.length);
            for (int pass = 0; pass < 2; pass++) for (char c : only.toCharArray()) {
                double s = switch (c) {
                    case '0' -> CpuTimeProbe.cpuSecondsPerRun(() -> w.dotRows(xp0, 0, 0, rows, y0, 0, false), 10, 0.5);
                    case 'A' -> CpuTimeProbe.cpuSecondsPerRun(() -> dotA(m, 0, rows, gpr, scalesOff, xpA, gs, sc, yA), 10, 0.5);
                    case 'B' -> CpuTimeProbe.cpuSecondsPerRun(() -> dotB(m, 0, rows, gpr, scalesOff, xpA, gs, sc, sc2, yB), 10, 0.5);
                    case 'C' -> CpuTimeProbe.cpuSecondsPerRun(() -> dotC(m, 0, rows, gpr, scalesOff, xpC, gs, sc, yC), 10, 0.5);
                    case 'F', 'G' -> CpuTimeProbe.cpuSecondsPerRun(() -> dotRow(c, m, 0, rows, gpr, scalesOff, xpA, gs, sc, yE), 10, 0.5);
                    case 'H' -> CpuTimeProbe.cpuSecondsPerRun(() -> dotRowH(m, 0, rows, gpr, scalesOff, XS, gs, sc, yE), 10, 0.5);
                    case 'I' -> CpuTimeProbe.cpuSecondsPerRun(() -> { for (int r = 0; r < rows; r++) yE[r] = rowA(m, (long) r * gpr * 16, gpr / GPS, sc, xpA); }, 10, 0.5);
                    case 'J' -> CpuTimeProbe.cpuSecondsPerRun(() -> { for (int r = 0; r < rows; r++) yE[r] = rowH(m, (long) r * gpr * 16, gpr / GPS, sc, XS); }, 10, 0.5);
                    case 'E' -> CpuTimeProbe.cpuSecondsPerRun(() -> dotE(m, 0, rows, gpr, scalesOff, xpA, gs, sc, yE), 10, 0.5);
                    default -> throw new IllegalArgumentException("" + c);
                };
                if (pass == 1) System.out.printf(Locale.ROOT, "%c %5dx%d %7.2f GB/s per CPU-s%n", c, rows, cols, bytes / s / 1e9);
            }
            w.dotRows(xp0, 0, 0, rows, y0, 0, false);
            dotA(m, 0, rows, gpr, scalesOff, xpA, gs, sc, yA);
            dotB(m, 0, rows, gpr, scalesOff, xpA, gs, sc, sc2, yB);
            dotC(m, 0, rows, gpr, scalesOff, xpC, gs, sc, yC);
            dotE(m, 0, rows, gpr, scalesOff, xpA, gs, sc, yE);
            double eA = 0, eB = 0, eC = 0, eE = 0, mag = 0;
            for (int r = 0; r < rows; r++) {
                mag = Math.max(mag, Math.abs(y0[r]));
                eA = Math.max(eA, Math.abs(yA[r] - y0[r])); eB = Math.max(eB, Math.abs(yB[r] - y0[r]));
                eC = Math.max(eC, Math.abs(yC[r] - y0[r])); eE = Math.max(eE, Math.abs(yE[r] - y0[r]));
            }
            System.out.printf(Locale.ROOT, "max|y| %.4g  diff A %.3g B %.3g C %.3g E %.3g%n", mag, eA, eB, eC, eE);
        }
    }
}
