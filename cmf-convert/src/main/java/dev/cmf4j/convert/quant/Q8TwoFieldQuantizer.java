package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * q8_2f, the two-field int8: {@code w ≈ q[r,c] · s[r] · col[c]}, layout
 * {@code [i8 q: rows·cols][f16 s: rows][f16 col: cols]}.
 *
 * <p>How the column field is chosen (docs/QUANTIZATION.md has the measurements). With col fixed,
 * every row is plain int8: {@code s[r] = f16(max_c |w/col| / 127)}, {@code q = rint(w/col/s)}
 * clamped to ±127. The rounding error of element (r, c) is uniform over one step
 * {@code s[r]·col[c]}, so a good field makes the steps small where weights are small without
 * forcing the row scales up. Several candidate fields are built from column statistics, every
 * candidate is quantized for real, and the one with the least total squared error wins:
 * <ul>
 *   <li>column RMS (what the reference converter uses), √(RMS·absmax), column absmax, and all
 *       ones (plain per-row int8);</li>
 *   <li>each of the first three "tightened": with the row scales it implies held fixed,
 *       {@code col[c]} shrinks to {@code max_r |w[r,c]| / s[r]}, the smallest value that still
 *       clips nothing. That shrinks every column step and can only shrink the row scales after it,
 *       so the ideal error never grows; it typically drops 10–30%.</li>
 * </ul>
 * Because the RMS field itself is a candidate and the choice is by measured error, the result is
 * never worse than the RMS rule. Cost: four read passes over the source before encoding (column
 * statistics, candidate row scales, tightening, measurement), with {@code O(rows + cols)} memory.
 */
public final class Q8TwoFieldQuantizer implements Quantizer {
    /** Names of the candidate fields, in the order they are tried (ties keep the earlier one). */
    public static final List<String> CANDIDATES = List.of(
            "rms", "sqrt(rms*absmax)", "absmax", "ones", "rms+tight", "sqrt(rms*absmax)+tight", "absmax+tight");

    @Override public DType dtype() { return DType.Q8_2F; }

    @Override public boolean supports(long[] shape) { return true; }

    @Override public long encodedSize(long[] shape) {
        TensorShape s = TensorShape.of(dtype(), shape);
        return s.add(s.add(s.elements(), s.mul(s.rows(), 2)), s.mul(s.cols(), 2));
    }

    /** The encoder with the best column field; {@link Encoder#chosen()} says which candidate won. */
    @Override public Encoder begin(FloatSource src, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        return new Encoder(s, src, encodedSize(dims));
    }

    public static final class Encoder extends RowEncoder {
        private final long size;
        private final float[] col;
        private final int chosen;
        private final double[] candidateSse;

        Encoder(TensorShape s, FloatSource src, long size) {
            super(s, src, true);
            this.size = size;
            int cols = (int) s.cols();
            long rows = s.rows();
            float[] row = new float[cols];

            // Pass 1: column statistics.
            double[] sumsq = new double[cols];
            float[] amax = new float[cols];
            for (long r = 0; r < rows; r++) {
                read(r, row);
                Scales.requireFinite(row, 0, cols, r * cols, shape);     // once; later passes read the same values
                for (int c = 0; c < cols; c++) {
                    float w = row[c];
                    sumsq[c] += (double) w * w;
                    amax[c] = Math.max(amax[c], Math.abs(w));
                }
            }
            float[] rms = new float[cols], geo = new float[cols], ones = new float[cols];
            for (int c = 0; c < cols; c++) {
                rms[c] = (float) Math.sqrt(sumsq[c] / Math.max(1, rows));
                geo[c] = (float) Math.sqrt((double) rms[c] * amax[c]);
                ones[c] = 1f;
            }
            List<float[]> fields = new ArrayList<>(List.of(field(rms), field(geo), field(amax), field(ones)));

            // Pass 2: the ideal row scales each of the first three fields implies (cap rows·3 floats).
            int tightened = 3;
            float[][] rowScale = new float[tightened][Scales.toIntSize(rows, s, "the row-scale table")];
            for (long r = 0; r < rows; r++) {
                read(r, row);
                for (int k = 0; k < tightened; k++) rowScale[k][(int) r] = maxRatio(row, fields.get(k));
            }
            // Pass 3: tighten — the smallest column value that clips nothing under those row scales.
            float[][] tight = new float[tightened][cols];
            for (long r = 0; r < rows; r++) {
                read(r, row);
                for (int k = 0; k < tightened; k++) {
                    float sr = rowScale[k][(int) r];
                    if (sr == 0f) continue;
                    float[] t = tight[k];
                    for (int c = 0; c < cols; c++) t[c] = Math.max(t[c], Math.abs(row[c]) / sr);
                }
            }
            for (int k = 0; k < tightened; k++) fields.add(field(tight[k]));

            // Pass 4: quantize with every candidate, keep the least squared error.
            candidateSse = new double[fields.size()];
            float[] q = new float[cols], err = new float[cols];
            for (long r = 0; r < rows; r++) {
                read(r, row);
                for (int k = 0; k < fields.size(); k++) candidateSse[k] += quantizeRow(r, row, fields.get(k), q, err);
            }
            int best = 0;
            for (int k = 1; k < fields.size(); k++) if (candidateSse[k] < candidateSse[best]) best = k;
            chosen = best;
            col = fields.get(best);
        }

        private void read(long r, float[] row) { src.read(r * row.length, row, 0, row.length); }

        /** A column statistic made storable: f16-rounded; an all-zero column gets 1 (any value decodes it). */
        private float[] field(float[] x) {
            float[] f = new float[x.length];
            for (int c = 0; c < x.length; c++) f[c] = x[c] == 0f ? 1f : Scales.scale(x[c], shape, "column", c);
            return f;
        }

        /** The candidate that won: an index into {@link #CANDIDATES}. */
        public int chosen() { return chosen; }

        /** Total squared error of each candidate (same order as {@link #CANDIDATES}). */
        public double[] candidateSse() { return candidateSse.clone(); }

        @Override public long encodedSize() { return size; }

        @Override int scratchRows() { return 2; }

        @Override void encodeRow(long r, float[] row, MemorySegment dst) { encodeRow(r, row, new float[2][row.length], dst); }

        @Override void encodeRow(long r, float[] row, float[][] scratch, MemorySegment dst) {
            long rowScales = shape.elements();
            float[] q = scratch[0], err = scratch[1];
            float s = quantizeRowScale(r, row, col);
            quantize(row, col, s, q, err);
            long qAt = r * row.length;
            for (int c = 0; c < row.length; c++) dst.set(Scales.I8, qAt + c, (byte) q[c]);
            dst.set(Scales.I16, rowScales + 2 * r, Scales.f16(s));
            if (r == 0) {
                // Row 0's encoder also writes the column field (it is the same for every row).
                long colAt = rowScales + 2 * shape.rows();
                for (int c = 0; c < col.length; c++) dst.set(Scales.I16, colAt + 2L * c, Scales.f16(col[c]));
            }
        }

        /** The f16 row scale for {@code row} under field {@code f}: {@code f16(max |w/f| / 127)}. */
        private float quantizeRowScale(long r, float[] row, float[] f) {
            return Scales.scale(maxRatio(row, f) / 127f, shape, "row", r);
        }

        /**
         * Quantizes one row against field {@code f} into {@code q} (codes as floats) and returns its
         * squared error as the reader will decode it ({@code (q·s)·col}, f32).
         */
        private double quantizeRow(long r, float[] row, float[] f, float[] q, float[] err) {
            quantize(row, f, quantizeRowScale(r, row, f), q, err);
            // Four partial sums: a dependency chain of one double add per element would be the bottleneck.
            double a = 0, b = 0, c = 0, d = 0;
            int n = row.length, i = 0;
            for (; i + 3 < n; i += 4) {
                a += (double) err[i] * err[i];
                b += (double) err[i + 1] * err[i + 1];
                c += (double) err[i + 2] * err[i + 2];
                d += (double) err[i + 3] * err[i + 3];
            }
            for (; i < n; i++) a += (double) err[i] * err[i];
            return (a + b) + (c + d);
        }
    }

    /** {@code max_c |w[c] / f[c]|}: a plain loop the JIT vectorizes (division, abs, max). */
    static float maxRatio(float[] row, float[] f) {
        float m = 0f;
        for (int c = 0; c < row.length; c++) m = Math.max(m, Math.abs(row[c] / f[c]));
        return m;
    }

    /**
     * {@code q[c] = clamp(rint(w[c]/f[c]/s), ±127)} and {@code err[c] = w[c] − (q[c]·s)·f[c]}; all
     * zero codes when {@code s == 0}. Round-half-even by the 1.5·2^23 trick, exact for |x| < 2^22
     * (here |x| ≤ 127·(1+2^-11), or anything beyond clamps the same), so the loop stays plain
     * float arithmetic the JIT vectorizes.
     */
    static void quantize(float[] row, float[] f, float s, float[] q, float[] err) {
        final float magic = 0x1.8p23f;
        if (s == 0f) {
            for (int c = 0; c < row.length; c++) { q[c] = 0f; err[c] = row[c]; }
            return;
        }
        for (int c = 0; c < row.length; c++) {
            float x = row[c] / f[c] / s;
            float k = Math.max(-127f, Math.min(127f, (x + magic) - magic));
            q[c] = k;
            err[c] = row[c] - k * s * f[c];
        }
    }
}
