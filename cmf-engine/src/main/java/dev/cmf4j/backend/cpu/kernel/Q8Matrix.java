package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
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
 * q8_row and q8_2f: {@code [i8 q: rows·cols][f16 row_scale: rows]} and, for q8_2f, a trailing
 * {@code [f16 col_field: cols]}; w = q·row[r] (·col[c]).
 *
 * <p>Decode: the column field is folded into the activation once per call (x'[c] = col[c]·x[c]),
 * so each row is a plain dot of int8 weights with floats, scaled once by the row scale at the end
 * (see {@link #dotRows} for the inner loop). An int8-activation variant with integer accumulation
 * was measured slower on AVX2 (docs/CPU_KERNELS.md).
 */
final class Q8Matrix extends WeightMatrix {
    private final boolean twoField;
    private final long scalesOff;
    /** The column field widened once at construction (cols floats; null for q8_row). */
    private final float[] colField;

    Q8Matrix(MemorySegment data, long storedRows, int cols, long row0, int rows, boolean twoField) {
        super(data, storedRows, cols, row0, rows, twoField ? DType.Q8_2F : DType.Q8_ROW);
        this.twoField = twoField;
        this.scalesOff = storedRows * cols;
        if (twoField) {
            colField = new float[cols];
            long off = scalesOff + 2L * storedRows;
            for (int c = 0; c < cols; c++) colField[c] = Simd.f16(data, off + 2L * c);
        } else {
            colField = null;
        }
    }

    private Q8Matrix(Q8Matrix whole, long row0, int rows) {
        super(whole.data, whole.storedRows, whole.cols, row0, rows, whole.dtype());
        this.twoField = whole.twoField;
        this.scalesOff = whole.scalesOff;
        this.colField = whole.colField;
    }

    @Override WeightMatrix window(long firstRow, int n) { return new Q8Matrix(this, firstRow, n); }

    @Override public DType dtype() { return twoField ? DType.Q8_2F : DType.Q8_ROW; }

    /** Bytes per decode block: one load of L int lanes. */
    private static final int BLOCK = 4 * L;
    private static final float[] POW256 = {1f, 0x1p-8f, 0x1p-16f, 1f};

    /**
     * Decode layout of the activation (x' = col ⊙ x for q8_2f, x for q8_row): per block of 4L
     * columns, for byte k = 0..3 the L lanes' elements 4i+k times 256^−k; then the tail columns
     * (cols % 4L) as they are; then Σx' over the blocks.
     */
    @Override int preparedLength() { return Simd.VECTOR ? cols + 1 : 0; }

    @Override
    boolean samePreparation(WeightMatrix o) {
        return super.samePreparation(o) && ((Q8Matrix) o).colField == colField;   // q8_2f: only the same tensor's field
    }

    @Override
    void prepare(float[] x, int xOff, float[] dst, int dOff) {
        float[] col = colField;
        int n = cols, full = n - n % BLOCK;
        float sum = 0f;
        for (int b = 0; b < full; b += BLOCK)
            for (int i = 0; i < L; i++)
                for (int k = 0; k < 4; k++) {
                    int c = b + 4 * i + k;
                    float v = col == null ? x[xOff + c] : x[xOff + c] * col[c];
                    dst[dOff + b + k * L + i] = v * POW256[k];
                    sum += v;
                }
        for (int c = full; c < n; c++) dst[dOff + c] = col == null ? x[xOff + c] : x[xOff + c] * col[c];
        dst[dOff + n] = sum;
    }

    /**
     * Decode. Bound: memory bandwidth; the loop must outrun it. The weights are read as int lanes
     * (4 bytes each) and flipped to offset binary (q + 128, one XOR per 4L bytes); byte k of a lane
     * is then {@code v & (255 << 8k)} = (q+128)·256^k, exact as a float, so against the activation
     * pre-scaled by 256^−k each weight costs an AND, a convert and an FMA — no shuffles (the
     * sign-extending byte→int widening runs on one port and capped this loop at ~60% of the
     * speed). Σ(q+128)·x' − 128·Σx' = Σq·x'.
     */
    @Override
    void dotRows(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        if (!Simd.VECTOR) { dotRowsScalar(x, xo, r0, r1, y, yo, add); return; }
        if (warm || r1 - r0 < 2) { dotRowsVector(x, xo, r0, r1, y, yo, add); return; }
        // Cold JVM: the Vector API runs interpreted or in C1 (every op a boxed fallback) until C2 has compiled this
        // loop. Meanwhile the rows go through its lane-exact twin, which C1 compiles at once, and one row of a call
        // through the vector loop (so it gets profiled and compiled) while those rows' time stays within the twin's
        // (the first one, which carries the Vector API's one-time set-up, aside), or after 16 calls without one. The
        // same bits either way, so which one runs may depend on timing.
        int since = callsSinceProbe++;
        if (probes > 0 && probeNanos > twinNanos && since < 16) {
            long t0 = System.nanoTime();
            dotRowsLanes(x, xo, r0, r1, y, yo, add);
            twinNanos += System.nanoTime() - t0;
            return;
        }
        callsSinceProbe = 0;
        long t0 = System.nanoTime();
        dotRowsVector(x, xo, r0, r0 + 1, y, yo, add);
        long t1 = System.nanoTime();
        dotRowsLanes(x, xo, r0 + 1, r1, y, yo, add);
        long t2 = System.nanoTime();
        if (probes++ > 0) probeNanos += t1 - t0;
        twinNanos += t2 - t1;
        if (2 * (t1 - t0) * (r1 - r0 - 1) < t2 - t1) warm = true;   // the vector row under half a twin row: compiled
    }

    /** False until the vector {@link #dotRows} has been seen running faster than its twin ({@code -Dcmf.q8.coldTwin=false}: always true). */
    private static volatile boolean warm = !Boolean.parseBoolean(System.getProperty("cmf.q8.coldTwin", "true"));
    /** While cold: the vector rows run so far and their time (the first one's left out), the twin's time, calls since the last (racy: they only space the probes). */
    private static int probes, callsSinceProbe;
    private static long probeNanos, twinNanos;

    void dotRowsVector(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        int n = cols, full = n - n % BLOCK, pairs = full - full % (2 * BLOCK);
        float sumx = x[xo + n];
        float[] acc = new float[L];
        IntVector flip = IntVector.broadcast(Simd.I, 0x80808080), b0 = IntVector.broadcast(Simd.I, 0xFF),
                b1 = IntVector.broadcast(Simd.I, 0xFF00), b2 = IntVector.broadcast(Simd.I, 0xFF0000);
        for (int r = r0; r < r1; r++) {
            long sr = row0 + r;
            long base = sr * n;
            FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0;
            int c = 0;
            for (; c < pairs; c += 2 * BLOCK) {              // two blocks per step: four independent chains
                long o = base + c;
                int xb = xo + c;
                IntVector v = IntVector.fromMemorySegment(Simd.I, m, o, LE).lanewise(VectorOperators.XOR, flip);
                IntVector u = IntVector.fromMemorySegment(Simd.I, m, o + BLOCK, LE).lanewise(VectorOperators.XOR, flip);
                a0 = cvt(v.and(b0)).fma(FloatVector.fromArray(F, x, xb), a0);
                a1 = cvt(v.and(b1)).fma(FloatVector.fromArray(F, x, xb + L), a1);
                a2 = cvt(v.and(b2)).fma(FloatVector.fromArray(F, x, xb + 2 * L), a2);
                a3 = cvt(v.lanewise(VectorOperators.LSHR, 24)).fma(FloatVector.fromArray(F, x, xb + 3 * L), a3);
                a0 = cvt(u.and(b0)).fma(FloatVector.fromArray(F, x, xb + BLOCK), a0);
                a1 = cvt(u.and(b1)).fma(FloatVector.fromArray(F, x, xb + BLOCK + L), a1);
                a2 = cvt(u.and(b2)).fma(FloatVector.fromArray(F, x, xb + BLOCK + 2 * L), a2);
                a3 = cvt(u.lanewise(VectorOperators.LSHR, 24)).fma(FloatVector.fromArray(F, x, xb + BLOCK + 3 * L), a3);
            }
            if (c < full) {
                IntVector v = IntVector.fromMemorySegment(Simd.I, m, base + c, LE).lanewise(VectorOperators.XOR, flip);
                int xb = xo + c;
                a0 = cvt(v.and(b0)).fma(FloatVector.fromArray(F, x, xb), a0);
                a1 = cvt(v.and(b1)).fma(FloatVector.fromArray(F, x, xb + L), a1);
                a2 = cvt(v.and(b2)).fma(FloatVector.fromArray(F, x, xb + 2 * L), a2);
                a3 = cvt(v.lanewise(VectorOperators.LSHR, 24)).fma(FloatVector.fromArray(F, x, xb + 3 * L), a3);
                c += BLOCK;
            }
            a0.add(a1).add(a2.add(a3)).intoArray(acc, 0);
            float s = Simd.laneSum(acc, 0) - 128f * sumx;
            for (; c < n; c++) s += m.get(ValueLayout.JAVA_BYTE, base + c) * x[xo + c];
            s *= Simd.f16(m, scalesOff + 2L * sr);
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    /**
     * Several tokens (a step's decode rows, a draft's verification), on AVX-512: pairs of tokens against pairs of rows.
     * Each weight vector is converted once for both tokens and each activation vector loaded once for both rows (those
     * loads, mostly split across two cache lines as a heap array is not 64-byte aligned, bound the one-row loop more
     * than the conversions do); each (row, token) keeps its own four chains, added in the order {@link #dotRows} adds
     * them (the same blocks into the same chain, block after block), and its lanes are summed the same way, so every
     * token's result has the bits of its own single-token call. An odd token goes through {@link #dotRows}, an odd row
     * through the one-row pair loop. With 16 vector registers (AVX2) the 16 chains do not fit (and one row with two
     * tokens spilled its masks and ran slower than two single-token passes): each token takes its own pass there.
     */
    @Override
    void dotRowsTokens(float[] x, int xo, int xStride, short[] xs, int xsOff, int xsStride, int tokens, int r0, int r1,
                       float[] y, int yo, int yStride, boolean add) {
        if (!Simd.VECTOR || !TOKEN_PAIRS || tokens == 1) {
            super.dotRowsTokens(x, xo, xStride, xs, xsOff, xsStride, tokens, r0, r1, y, yo, yStride, add);
            return;
        }
        if (!pairsWarm) { coldTokens(x, xo, xStride, xs, xsOff, xsStride, tokens, r0, r1, y, yo, yStride, add); return; }
        pairRows(x, xo, xStride, tokens, r0, r1, y, yo, yStride, add);
    }

    /**
     * Several tokens while the pair loops are cold (interpreted, each one sixteen boxed chains: a 3-token prompt of
     * llama-1b took 0.4 s longer through them): token by token through {@link #dotRows}, the bits each token's own
     * product has either way. Once dotRows runs compiled, one row pair of every 64th call goes through the pair
     * loop, so it gets compiled, and is timed against the single-token rows of its first two tokens.
     */
    private void coldTokens(float[] x, int xo, int xStride, short[] xs, int xsOff, int xsStride, int tokens, int r0, int r1,
                            float[] y, int yo, int yStride, boolean add) {
        if (!warm || r1 - r0 < 4 || (pairProbes++ & 63) != 0) {
            super.dotRowsTokens(x, xo, xStride, xs, xsOff, xsStride, tokens, r0, r1, y, yo, yStride, add);
            return;
        }
        long t0 = System.nanoTime();
        pairRows(x, xo, xStride, 2, r0, r0 + 2, y, yo, yStride, add);
        long t1 = System.nanoTime();
        for (int t = 0; t < 2; t++) dotRows(x, xo + t * xStride, r0 + 2, r1, y, yo + t * yStride, add);
        long t2 = System.nanoTime();
        for (int t = 2; t < tokens; t++) dotRows(x, xo + t * xStride, r0, r1, y, yo + t * yStride, add);
        if ((t1 - t0) * (r1 - r0 - 2) < 2 * (t2 - t1)) pairsWarm = true;   // a (row, token) cheaper in the pair loop
    }

    /** False until the pair loops have been seen beating single-token rows (always true with {@code -Dcmf.q8.coldTwin=false}). */
    private static volatile boolean pairsWarm = !Boolean.parseBoolean(System.getProperty("cmf.q8.coldTwin", "true"));
    /** Cold several-token calls so far (racy: it only spaces the probes). */
    private static int pairProbes;

    /** Tokens in pairs against pairs of rows (an odd token through {@link #dotRows}, an odd row through the one-row loop). */
    void pairRows(float[] x, int xo, int xStride, int tokens, int r0, int r1, float[] y, int yo, int yStride, boolean add) {
        float[] acc = new float[4 * L];
        int t = 0;
        for (; t + 2 <= tokens; t += 2) {
            int xa = xo + t * xStride, xb = xa + xStride, ya = yo + t * yStride, yb = ya + yStride;
            int r = r0;
            for (; r + 2 <= r1; r += 2) {
                twoRowsTwoTokens(x, xa, xb, r, acc);
                finishRow(acc, 0, x, xa, r, y, ya, add);
                finishRow(acc, L, x, xb, r, y, yb, add);
                finishRow(acc, 2 * L, x, xa, r + 1, y, ya, add);
                finishRow(acc, 3 * L, x, xb, r + 1, y, yb, add);
            }
            if (r < r1) {
                oneRowTwoTokens(x, xa, xb, r, acc);
                finishRow(acc, 0, x, xa, r, y, ya, add);
                finishRow(acc, L, x, xb, r, y, yb, add);
            }
        }
        if (t < tokens) dotRows(x, xo + t * xStride, r0, r1, y, yo + t * yStride, add);
    }

    /** Token pairs where 32 vector registers hold their 16 chains (AVX-512); {@code -Dcmf.q8.tokenPairs} forces it (tests). */
    private static final boolean TOKEN_PAIRS = Boolean.parseBoolean(System.getProperty("cmf.q8.tokenPairs", String.valueOf(L == 16)));

    /** {@link #dotRows}' masks, read from an array: C2 keeps them in registers then, where it re-broadcast constants in the loop. */
    private static final int[] MASKS = {0x80808080, 0xFF, 0xFF00, 0xFF0000};

    /**
     * Rows r and r+1 against the tokens at {@code xa} and {@code xb}, over the whole blocks of columns: each (row, token)'s
     * four chains added as {@link #dotRows} adds them, into acc at 0 (r, a), L (r, b), 2L (r+1, a), 3L (r+1, b).
     */
    private void twoRowsTwoTokens(float[] x, int xa, int xb, int r, float[] acc) {
        MemorySegment m = data;
        int n = cols, full = n - n % BLOCK;
        int[] k = MASKS;
        IntVector flip = IntVector.broadcast(Simd.I, k[0]), b0 = IntVector.broadcast(Simd.I, k[1]),
                b1 = IntVector.broadcast(Simd.I, k[2]), b2 = IntVector.broadcast(Simd.I, k[3]);
        long base = (row0 + r) * n, base2 = base + n;
        FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0,
                d0 = a0, d1 = a0, d2 = a0, d3 = a0, e0 = a0, e1 = a0, e2 = a0, e3 = a0;
        for (int c = 0; c < full; c += BLOCK) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, base + c, LE).lanewise(VectorOperators.XOR, flip);
            IntVector u = IntVector.fromMemorySegment(Simd.I, m, base2 + c, LE).lanewise(VectorOperators.XOR, flip);
            int p = xa + c, q = xb + c;
            FloatVector w = cvt(v.and(b0)), z = cvt(u.and(b0));
            FloatVector xp = FloatVector.fromArray(F, x, p), xq = FloatVector.fromArray(F, x, q);
            a0 = w.fma(xp, a0);
            c0 = w.fma(xq, c0);
            d0 = z.fma(xp, d0);
            e0 = z.fma(xq, e0);
            w = cvt(v.and(b1));
            z = cvt(u.and(b1));
            xp = FloatVector.fromArray(F, x, p + L);
            xq = FloatVector.fromArray(F, x, q + L);
            a1 = w.fma(xp, a1);
            c1 = w.fma(xq, c1);
            d1 = z.fma(xp, d1);
            e1 = z.fma(xq, e1);
            w = cvt(v.and(b2));
            z = cvt(u.and(b2));
            xp = FloatVector.fromArray(F, x, p + 2 * L);
            xq = FloatVector.fromArray(F, x, q + 2 * L);
            a2 = w.fma(xp, a2);
            c2 = w.fma(xq, c2);
            d2 = z.fma(xp, d2);
            e2 = z.fma(xq, e2);
            w = cvt(v.lanewise(VectorOperators.LSHR, 24));
            z = cvt(u.lanewise(VectorOperators.LSHR, 24));
            xp = FloatVector.fromArray(F, x, p + 3 * L);
            xq = FloatVector.fromArray(F, x, q + 3 * L);
            a3 = w.fma(xp, a3);
            c3 = w.fma(xq, c3);
            d3 = z.fma(xp, d3);
            e3 = z.fma(xq, e3);
        }
        a0.add(a1).add(a2.add(a3)).intoArray(acc, 0);
        c0.add(c1).add(c2.add(c3)).intoArray(acc, L);
        d0.add(d1).add(d2.add(d3)).intoArray(acc, 2 * L);
        e0.add(e1).add(e2.add(e3)).intoArray(acc, 3 * L);
    }

    /** Row r against the tokens at {@code xa} and {@code xb}: their chains' sums into acc at 0 and L. */
    private void oneRowTwoTokens(float[] x, int xa, int xb, int r, float[] acc) {
        MemorySegment m = data;
        int n = cols, full = n - n % BLOCK;
        int[] k = MASKS;
        IntVector flip = IntVector.broadcast(Simd.I, k[0]), b0 = IntVector.broadcast(Simd.I, k[1]),
                b1 = IntVector.broadcast(Simd.I, k[2]), b2 = IntVector.broadcast(Simd.I, k[3]);
        long base = (row0 + r) * n;
        FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0;
        for (int c = 0; c < full; c += BLOCK) {
            IntVector v = IntVector.fromMemorySegment(Simd.I, m, base + c, LE).lanewise(VectorOperators.XOR, flip);
            int p = xa + c, q = xb + c;
            FloatVector w = cvt(v.and(b0));
            a0 = w.fma(FloatVector.fromArray(F, x, p), a0);
            c0 = w.fma(FloatVector.fromArray(F, x, q), c0);
            w = cvt(v.and(b1));
            a1 = w.fma(FloatVector.fromArray(F, x, p + L), a1);
            c1 = w.fma(FloatVector.fromArray(F, x, q + L), c1);
            w = cvt(v.and(b2));
            a2 = w.fma(FloatVector.fromArray(F, x, p + 2 * L), a2);
            c2 = w.fma(FloatVector.fromArray(F, x, q + 2 * L), c2);
            w = cvt(v.lanewise(VectorOperators.LSHR, 24));
            a3 = w.fma(FloatVector.fromArray(F, x, p + 3 * L), a3);
            c3 = w.fma(FloatVector.fromArray(F, x, q + 3 * L), c3);
        }
        a0.add(a1).add(a2.add(a3)).intoArray(acc, 0);
        c0.add(c1).add(c2.add(c3)).intoArray(acc, L);
    }

    /** The end of {@link #dotRows}' row r from its chains' sum at acc[i..i+L): lane sum, −128·Σx', tail columns, row scale. */
    private void finishRow(float[] acc, int i, float[] x, int xo, int r, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        int n = cols;
        long sr = row0 + r, base = sr * n;
        float s = Simd.laneSum(acc, i) - 128f * x[xo + n];
        for (int c = n - n % BLOCK; c < n; c++) s += m.get(ValueLayout.JAVA_BYTE, base + c) * x[xo + c];
        s *= Simd.f16(m, scalesOff + 2L * sr);
        y[yo + r] = add ? y[yo + r] + s : s;
    }

    /**
     * The one kernel helper that takes a vector ({@code KernelVectorBoundaryTest}): dotRowsVector's parse reaches all its
     * calls before C2's node budget ends, and with the conversion written out that compile decoded 10-15 % slower
     * (docs/CPU_KERNELS.md, "C2's node budget").
     */
    private static FloatVector cvt(IntVector v) {
        return (FloatVector) v.convert(VectorOperators.I2F, 0);
    }

    /**
     * The vector {@link #dotRows}' scalar twin, bit for bit: each of its 4·L float chains (lane i of chain k: byte k of
     * int lane i, (q+128)·256^k as {@code v & (255 << 8k)} gives it, or {@code v >>> 24} for k = 3, times the prepared
     * x at {@code c + k·L + i}) an fma chain over the whole blocks in order from +0, the chains added (a0 + a1) + (a2 +
     * a3) per lane, the lanes by {@link Simd#laneSum}, then −128·Σx', the tail columns and the row scale as there. No
     * vector types: the interpreter and C1 run it at scalar speed, where the Vector API's fallback boxes every op.
     */
    void dotRowsLanes(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        int n = cols, full = n - n % BLOCK, lanes = L;
        float sumx = x[xo + n];
        byte[] row = new byte[n];
        float[] acc = new float[lanes];
        for (int r = r0; r < r1; r++) {
            long sr = row0 + r;
            MemorySegment.copy(m, ValueLayout.JAVA_BYTE, sr * n, row, 0, n);
            for (int i = 0; i < lanes; i++) {
                float a0 = 0f, a1 = 0f, a2 = 0f, a3 = 0f;
                for (int c = 0; c < full; c += BLOCK) {
                    int p = c + 4 * i, xb = xo + c + i;
                    a0 = Math.fma((float) ((row[p] ^ 0x80) & 0xFF), x[xb], a0);
                    a1 = Math.fma((float) (((row[p + 1] ^ 0x80) & 0xFF) << 8), x[xb + lanes], a1);
                    a2 = Math.fma((float) (((row[p + 2] ^ 0x80) & 0xFF) << 16), x[xb + 2 * lanes], a2);
                    a3 = Math.fma((float) ((row[p + 3] ^ 0x80) & 0xFF), x[xb + 3 * lanes], a3);
                }
                acc[i] = (a0 + a1) + (a2 + a3);
            }
            float s = Simd.laneSum(acc, 0) - 128f * sumx;
            for (int c = full; c < n; c++) s += row[c] * x[xo + c];
            s *= Simd.f16(m, scalesOff + 2L * sr);
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    /** Machines without usable vectors: plain loops over the unprepared activation. */
    private void dotRowsScalar(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        for (int r = r0; r < r1; r++) {
            long sr = row0 + r, base = sr * cols;
            float s = 0f;
            for (int c = 0; c < cols; c++) {
                float xv = colField == null ? x[xo + c] : x[xo + c] * colField[c];
                s += m.get(ValueLayout.JAVA_BYTE, base + c) * xv;
            }
            s *= Simd.f16(m, scalesOff + 2L * sr);
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    @Override
    void unpack(int r0, int nr, int k0, int nk, float[] dst, int dOff, int ld) {
        MemorySegment m = data;
        float[] col = colField;
        int vec = Simd.VECTOR ? nk - nk % L : 0;
        for (int i = 0; i < nr; i++) {
            long sr = row0 + r0 + i;
            long base = sr * cols + k0;
            float rs = Simd.f16(m, scalesOff + 2L * sr);
            int d = dOff + i * ld;
            int j = 0;
            // one inlined load for both layouts: with a copy per branch C2 boxed q8_2f's at 256 bits
            for (; j < vec; j += L) {
                FloatVector v = ((FloatVector) ByteVector.fromMemorySegment(Simd.B, m, base + j, LE).convertShape(VectorOperators.B2F, F, 0)).mul(rs);
                if (col != null) v = v.mul(FloatVector.fromArray(F, col, k0 + j));
                v.intoArray(dst, d + j);
            }
            if (col != null) for (; j < nk; j++) dst[d + j] = m.get(ValueLayout.JAVA_BYTE, base + j) * rs * col[k0 + j];
            else for (; j < nk; j++) dst[d + j] = m.get(ValueLayout.JAVA_BYTE, base + j) * rs;
        }
    }
}
