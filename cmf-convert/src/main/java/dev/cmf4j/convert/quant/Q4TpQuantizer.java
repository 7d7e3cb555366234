package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TensorShape;
import dev.cmf4j.format.quant.TpLadder;

import java.lang.foreign.MemorySegment;

/**
 * q4tp: q4 nibbles whose group scales are 5-bit rungs on a per-row geometric ladder
 * (layout in {@link dev.cmf4j.format.quant.Q4TpDequantizer}). Per row:
 * <ol>
 *   <li>each live group's ideal scale {@code f16(absmax/7)} in log2; all-zero groups are left out
 *       of the row's range (they decode to zero whatever their rung);</li>
 *   <li>{@code lo} = the smallest log2 scale, rounded to f16 FIRST; {@code step} = (largest − lo)/31
 *       rounded to f16, then raised one f16 ulp at a time until rung 31 covers the largest;</li>
 *   <li>the ladder is built exactly as the reader builds it ({@link TpLadder#q4tp}); each group's
 *       code is the nearest rung in log2, then whichever of that rung and its two neighbours gives
 *       the group the smallest squared error (a coarser rung sometimes wins: nibbles re-round);</li>
 *   <li>nibbles {@code rint(w/t[code])} clamped to [−8, 7], against the reconstructed scale.</li>
 * </ol>
 * Needs cols % 32 == 0. Work unit: a row.
 */
public final class Q4TpQuantizer implements Quantizer {
    @Override public DType dtype() { return DType.Q4TP; }

    @Override public boolean supports(long[] shape) {
        return TensorShape.of(dtype(), shape).cols() % 32 == 0;
    }

    @Override public long encodedSize(long[] shape) {
        TensorShape s = TensorShape.of(dtype(), shape);
        s.requireColsMultipleOfGroup();
        long gpr = s.groupsPerRow();
        return s.add(s.add(s.mul(s.mul(s.rows(), gpr), 16), s.mul(s.rows(), 4)), s.mul(s.rows(), TpLadder.codeStride(gpr)));
    }

    @Override public TensorEncoder begin(FloatSource src, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long size = encodedSize(dims);
        int gpr = (int) s.groupsPerRow();
        int stride = (int) TpLadder.codeStride(gpr);
        long params = s.rows() * gpr * 16L;
        long codes = params + s.rows() * 4;
        return new RowEncoder(s, src, true) {
            @Override public long encodedSize() { return size; }

            @Override void encodeRow(long r, float[] row, MemorySegment dst) {
                float[] lg = new float[gpr];
                boolean[] live = new boolean[gpr];
                float lo = Float.POSITIVE_INFINITY, hi = Float.NEGATIVE_INFINITY;
                for (int g = 0; g < gpr; g++) {
                    float amax = Scales.absmax(row, 32 * g, 32);
                    if (amax == 0f) continue;
                    live[g] = true;
                    lg[g] = (float) (Math.log(Scales.scale(amax / 7f, shape, "row", r)) / Math.log(2));
                    lo = Math.min(lo, lg[g]);
                    hi = Math.max(hi, lg[g]);
                }
                short loH = 0, stH = 0;
                if (lo != Float.POSITIVE_INFINITY) {
                    loH = Scales.f16(lo);
                    float loR = Float.float16ToFloat(loH);
                    stH = Scales.f16(Math.max(hi - loR, 0f) / 31f);
                    for (int i = 0; i < 64; i++) {
                        float st = Float.float16ToFloat(stH);
                        if (st > 0f && loR + 31f * st >= hi) break;
                        stH++;   // one f16 ulp up (positive f16 bit patterns are ordered)
                    }
                }
                float loR = Float.float16ToFloat(loH), st = Float.float16ToFloat(stH);
                float[] ladder = new float[TpLadder.RUNGS];
                TpLadder.q4tp(loR, st, ladder);
                byte[] codeBits = new byte[stride];
                long nib = r * gpr * 16L;
                for (int g = 0; g < gpr; g++) {
                    int code = 0;
                    if (live[g] && st > 0f) {
                        int c0 = (int) Math.max(0, Math.min(31, Math.rint((lg[g] - loR) / st)));
                        code = c0;
                        double best = groupError(row, 32 * g, ladder[c0]);
                        for (int c = Math.max(0, c0 - 1); c <= Math.min(31, c0 + 1); c++) {
                            if (c == c0) continue;
                            double e = groupError(row, 32 * g, ladder[c]);
                            if (e < best) { best = e; code = c; }
                        }
                    }
                    float scale = live[g] ? ladder[code] : 0f;
                    for (int b = 0; b < 16; b++) {
                        int q0 = Scales.quantize(row[32 * g + 2 * b], scale, -8, 7) + 8;
                        int q1 = Scales.quantize(row[32 * g + 2 * b + 1], scale, -8, 7) + 8;
                        dst.set(Scales.I8, nib + 16L * g + b, (byte) (q0 | q1 << 4));
                    }
                    putCode(codeBits, g, code);
                }
                dst.set(Scales.I16, params + 4 * r, loH);
                dst.set(Scales.I16, params + 4 * r + 2, stH);
                MemorySegment.copy(codeBits, 0, dst, Scales.I8, codes + r * stride, stride);
            }
        };
    }

    /** Squared error of one group quantized to 4 bits against {@code scale}. */
    private static double groupError(float[] row, int at, float scale) {
        double e = 0;
        for (int i = 0; i < 32; i++) {
            float w = row[at + i];
            float d = w - Scales.quantize(w, scale, -8, 7) * scale;
            e += (double) d * d;
        }
        return e;
    }

    /** Writes a 5-bit code at position g of an LSB-first bit stream. */
    static void putCode(byte[] bits, int g, int code) {
        int bit = g * 5;
        int v = code << (bit & 7);
        bits[bit >>> 3] |= (byte) v;
        if ((bit & 7) > 3) bits[(bit >>> 3) + 1] |= (byte) (v >>> 8);
    }
}
