package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;


/**
 * q4_block: groups of 32 over the FLATTENED tensor, two planes: {@code [nibbles: 16 B per
 * group][f16 scale per group]} (4.5 bits per weight); w = (q − 8)·s. When cols is a multiple of 32
 * (every real matrix) row r is groups r·cols/32 .. — contiguous nibbles and contiguous scales — and
 * the vector path runs (see {@link Q4}); otherwise groups straddle rows and a scalar path computes
 * each weight's group from its flat index.
 *
 * <p>Decode reads 16 + 2 bytes per 32 weights: the row's f16 scales are widened into a small
 * array, then {@link Q4#dotRow} runs over the row's nibbles.
 */
final class Q4BlockMatrix extends WeightMatrix {
    /** Decode with int8 activations over a row-interleaved copy ({@link Q4Int8}); {@code -Dcmf.q4.int8=false} keeps float activations. */
    static final boolean INT8_DEFAULT = Boolean.parseBoolean(System.getProperty("cmf.q4.int8", "true"));

    private final boolean aligned;
    private final int gpr;
    private final long scalesOff;
    /** The {@link Q4Int8} copy of the whole stored tensor, or null for the float-activation path. */
    private final Q4Int8.Packed packed;

    Q4BlockMatrix(MemorySegment data, long storedRows, int cols, long row0, int rows) {
        this(data, storedRows, cols, row0, rows, INT8_DEFAULT);
    }

    /** {@code int8}: decode through {@link Q4Int8} where it can run (cols % 32 == 0, 256-bit vectors). */
    Q4BlockMatrix(MemorySegment data, long storedRows, int cols, long row0, int rows, boolean int8) {
        this(data, storedRows, cols, row0, rows,
                int8 && cols % 32 == 0 && Q4Int8.USABLE ? Q4Int8.repack(data, storedRows, cols) : null, true);
    }

    private Q4BlockMatrix(MemorySegment data, long storedRows, int cols, long row0, int rows, Q4Int8.Packed packed, boolean unused) {
        super(data, storedRows, cols, row0, rows, DType.Q4_BLOCK);
        this.aligned = cols % 32 == 0;
        this.gpr = cols / 32;
        this.scalesOff = (storedRows * cols + 31) / 32 * 16;
        this.packed = packed;
    }

    @Override WeightMatrix window(long firstRow, int n) { return new Q4BlockMatrix(data, storedRows, cols, firstRow, n, packed, true); }

    @Override public DType dtype() { return DType.Q4_BLOCK; }

    /** True when decode runs on int8 activations ({@link Q4Int8}). */
    boolean int8() { return packed != null; }

    @Override int preparedLength() {
        if (packed != null) return gpr;
        return aligned && Simd.VECTOR ? Q4.preparedLength(gpr) : 0;
    }

    @Override int preparedShorts() { return packed != null ? Q4Int8.preparedShorts(gpr) : 0; }

    @Override int rowAlignment() { return packed != null ? Q4Int8.TILE * Q4Int8.BLOCK_TILES : 1; }

    @Override
    void prepare(float[] x, int xOff, float[] dst, int dOff) {
        Q4.prepare(x, xOff, cols, gpr, dst, dOff);
    }

    @Override
    void prepare(float[] x, int xOff, float[] dst, int dOff, short[] sdst, int sOff) {
        if (packed != null) Q4Int8.prepare(x, xOff, gpr, dst, dOff, sdst, sOff);
        else prepare(x, xOff, dst, dOff);
    }

    @Override
    void dotRows(float[] xp, int xo, short[] xs, int xso, int r0, int r1, float[] y, int yo, boolean add) {
        if (packed != null) Q4Int8.dotRows(packed, row0 + r0, row0 + r1, xp, xo, xs, xso, y, yo + r0, add);
        else dotRows(xp, xo, r0, r1, y, yo, add);
    }

    @Override
    void dotRows(float[] xp, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        if (!aligned || !Simd.VECTOR) { dotRowsScalar(xp, xo, r0, r1, y, yo, add); return; }
        MemorySegment m = data;
        float[] sc = new float[Q4.scaleLength(gpr)];         // the row's scales (one small array per chunk)
        for (int r = r0; r < r1; r++) {
            long g0 = (row0 + r) * gpr;
            Q4.f16Scales(m, scalesOff + 2 * g0, gpr, sc);
            float s = Q4.dotRow(m, g0 * 16, gpr, sc, xp, xo);
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    /** The weight at flat index i. */
    private float weight(long i) {
        long g = i >>> 5;
        int j = (int) (i & 31);
        int b = data.get(ValueLayout.JAVA_BYTE, g * 16 + (j >> 1));
        int q = (j & 1) == 0 ? b & 15 : (b >>> 4) & 15;
        return (q - 8) * Simd.f16(data, scalesOff + 2 * g);
    }

    /** Any shape: each weight's group from its flat index (groups may straddle rows). */
    private void dotRowsScalar(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        for (int r = r0; r < r1; r++) {
            float s = 0f;
            long i = (row0 + r) * cols;
            for (int c = 0; c < cols; c++, i++) s += weight(i) * x[xo + c];
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    @Override boolean groupPermuted() { return aligned && Simd.VECTOR; }

    @Override
    void unpack(int r0, int nr, int k0, int nk, float[] dst, int dOff, int ld) {
        MemorySegment m = data;
        boolean permuted = groupPermuted();
        for (int i = 0; i < nr; i++) {
            int d = dOff + i * ld;
            long flat = (row0 + r0 + i) * cols + k0;
            if (permuted) {
                long g = flat >>> 5;
                for (int j = 0; j < nk; j += 32, g++)
                    Q4.unpackGroupPermuted(m, g * 16, Simd.f16(m, scalesOff + 2 * g), dst, d + j);
            } else if (aligned) {
                long g = flat >>> 5;
                for (int j = 0; j < nk; j += 32, g++)
                    Q4.unpackGroup(m, g * 16, Simd.f16(m, scalesOff + 2 * g), dst, d + j, Math.min(32, nk - j));
            } else {
                for (int j = 0; j < nk; j++, flat++) dst[d + j] = weight(flat);
            }
        }
    }
}
