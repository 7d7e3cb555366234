package dev.cmf4j.backend.cpu.kernel;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static dev.cmf4j.backend.cpu.kernel.Simd.LE;

/**
 * q4_block decode with int8 activations and products in 16-bit lanes, over a row-interleaved copy
 * of the weights made once at load (llama.cpp's Q4_0x8 repack is the same idea; its dots use
 * {@code vpmaddubsw}, which the Vector API does not expose, so ours multiply a vector of shorts at a
 * time). T = {@link #TILE} = the short lanes of the preferred vector: 16 (AVX2), 32 (AVX-512).
 *
 * <p><b>Repacked layout</b> ({@link #repack}): rows in tiles of T; per tile and 32-column group
 * 20·T bytes: 8 vectors of T shorts, vector j lane l = bytes 2j, 2j+1 of the group of tile row
 * {@link #laneRow}(l) (its nibbles are elements 4j..4j+3), then the T rows' scales as f32 (rows
 * 0..T/2−1, then T/2..T−1). Lanes are ordered 0, T/2, 1, T/2+1, … so that the int32 halves of a
 * short vector are the first half of the rows (low shorts) and the second (high shorts). Rows past
 * the tensor: scale 0. Tiles are stored in blocks of 128 rows, each block panel by panel.
 *
 * <p><b>Activation</b> ({@link #prepare}), per 32-column group g: {@code d_g = absmax/127} (f32),
 * {@code qx_c = round(x_c / d_g)} (Math.round of {@code x_c · (1/d_g)}, clamped to ±127; 0 when the
 * group is all zero), as Q8_0 quantizes activations. Each qx_c is stored broadcast over T shorts
 * so the products read it as a memory operand; before them, −8·Σ_c qx_c broadcast.
 *
 * <p><b>Dot</b>: per row and group, the exact integer {@code Σ (q − 8)·qx} is accumulated in
 * wrapping 16-bit lanes: {@code q·qx} products (nibble q unsigned, 4 shifts/ANDs per 4 nibbles)
 * added to −8·Σqx. The true value is within ±32·8·127 = ±32512, so the wrapped sum is exact. Then
 * per row, in this order: {@code acc = fma((float) sum, scale_g · d_g, acc)} over the groups of a
 * panel of {@value #PANEL} groups (so the panel's broadcast activation stays in L1), and
 * {@code y += acc} per panel (the first panel: {@code y = acc}, or {@code y + acc} with add).
 * {@link #dotRowsScalar} is the scalar twin doing the same f32 operations in the same order from the
 * stored q4_block payload; it and the vector form agree bit for bit.
 *
 * <p>Compared with the float-activation kernel ({@link Q4}) the only difference is the activation
 * rounding: |y − y_exact| ≤ ½ Σ_c |w_c|·d_g(c) plus f32 rounding (tested in Q4Int8Test).
 */
final class Q4Int8 {
    private Q4Int8() {}

    /** True when this kernel can run: 256- or 512-bit vectors and not forced scalar. */
    static final boolean USABLE = Simd.VECTOR && (Simd.L == 8 || Simd.L == 16);
    static final VectorSpecies<Short> SHORTS = VectorSpecies.of(short.class, Simd.F.vectorShape());
    static final VectorSpecies<Integer> INTS = Simd.I;
    static final VectorSpecies<Float> FLOATS = Simd.F;

    /** Rows per tile: the short lanes of a vector (16 on AVX2, 32 on AVX-512). */
    static final int TILE = 2 * Simd.L;
    private static final int HALF = TILE / 2;
    /** Bytes per tile and group: 8 vectors of nibbles (2·TILE bytes each), TILE f32 scales. */
    static final int TG_BYTES = 8 * 2 * TILE + 4 * TILE;
    /** Shorts of prepared activation per group: the −8·Σqx vector, then 32 columns × TILE lanes. */
    static final int XS_PER_GROUP = TILE + 32 * TILE;
    /** Groups per panel: 512 columns (AVX2) or 256 (AVX-512), about 17 KB of broadcast activation, L1-resident. */
    static final int PANEL = 256 / TILE;
    /** Tiles per block: the repacked copy is contiguous per block of 128 rows, which decode chunks are multiples of. */
    static final int BLOCK_TILES = 128 / TILE;

    /** Tile row held by short lane l: 0, T/2, 1, T/2 + 1, … */
    static int laneRow(int l) {
        return (l & 1) == 0 ? l >> 1 : HALF + (l >> 1);
    }

    /**
     * The repacked copy of one stored tensor, on the heap (int indices let C2 hoist the bounds checks
     * out of the loop, which it did not do for long offsets into a memory segment): the nibble
     * vectors of tile-group i at {@code nibbles[8·TILE·i ..]}, its scales at {@code scales[TILE·i ..]}.
     */
    record Packed(short[] nibbles, float[] scales, int tiles, int gpr) {}

    /**
     * The row-interleaved copy of a stored [storedRows, cols] q4_block tensor (cols % 32 == 0), or
     * null when it would not fit Java arrays or the heap (the matrix then decodes with float activations).
     */
    static Packed repack(MemorySegment data, long storedRows, int cols) {
        int gpr = cols / 32;
        long tiles = (storedRows + TILE - 1) / TILE;
        if (tiles * gpr * 8 * TILE > Integer.MAX_VALUE - 64) return null;
        long scalesOff = storedRows * gpr * 16;
        short[] q;
        float[] sc;
        try {
            q = new short[(int) (tiles * gpr * 8 * TILE)];
            sc = new float[(int) (tiles * gpr * TILE)];
        } catch (OutOfMemoryError e) {
            return null;
        }
        ValueLayout.OfShort sh = Simd.HALF;
        for (int t = 0; t < tiles; t++) {
            for (int l = 0; l < TILE; l++) {
                long row = (long) t * TILE + laneRow(l);
                boolean real = row < storedRows;
                for (int g = 0; g < gpr; g++) {
                    int i = index((int) tiles, gpr, t, g);
                    long src = (row * gpr + g) * 16;
                    for (int j = 0; j < 8; j++) q[(8 * i + j) * TILE + l] = real ? data.get(sh, src + 2L * j) : (short) 0x8888;
                    sc[i * TILE + laneRow(l)] = real ? Simd.f16(data, scalesOff + 2 * (row * gpr + g)) : 0f;
                }
            }
        }
        return new Packed(q, sc, (int) tiles, gpr);
    }

    /**
     * Index of tile t, group g in the repacked copy: blocks of {@value #BLOCK_TILES} tiles, each
     * block panel by panel, each panel tile by tile; so a block (a decode chunk's unit) is one run.
     */
    static int index(int tiles, int gpr, int t, int g) {
        int b = t / BLOCK_TILES;
        int tb = Math.min(BLOCK_TILES, tiles - b * BLOCK_TILES);
        int p0 = g - g % PANEL, pw = Math.min(PANEL, gpr - p0);
        return b * BLOCK_TILES * gpr + p0 * tb + (t - b * BLOCK_TILES) * pw + (g - p0);
    }

    /** Shorts {@link #prepare} writes for {@code gpr} groups. */
    static int preparedShorts(int gpr) {
        return gpr * XS_PER_GROUP;
    }

    /** Quantizes x[xOff..xOff+32·gpr): d_g to d[dOff + g], the broadcast shorts to xs[xsOff..]. */
    static void prepare(float[] x, int xOff, int gpr, float[] d, int dOff, short[] xs, int xsOff) {
        short[] q = new short[32];
        for (int g = 0; g < gpr; g++) {
            int c0 = xOff + 32 * g;
            float amax = 0f;
            for (int k = 0; k < 32; k++) amax = Math.max(amax, Math.abs(x[c0 + k]));
            float dg = amax / 127f;
            float id = dg != 0f ? 1f / dg : 0f;
            int sum = 0;
            for (int k = 0; k < 32; k++) {
                int v = Math.max(-127, Math.min(127, Math.round(x[c0 + k] * id)));
                q[k] = (short) v;
                sum += v;
            }
            d[dOff + g] = dg;
            int o = xsOff + g * XS_PER_GROUP;
            if (USABLE) {
                ShortVector.broadcast(SHORTS, (short) (-8 * sum)).intoArray(xs, o);
                for (int k = 0; k < 32; k++) ShortVector.broadcast(SHORTS, q[k]).intoArray(xs, o + TILE + TILE * k);
            } else {
                java.util.Arrays.fill(xs, o, o + TILE, (short) (-8 * sum));
                for (int k = 0; k < 32; k++) java.util.Arrays.fill(xs, o + TILE + TILE * k, o + 2 * TILE + TILE * k, q[k]);
            }
        }
    }

    /**
     * y[yo + r − r0] = (add ? y : 0) + stored row r · x for stored rows r in [r0, r1), from the
     * repacked copy {@code p}; d/xs as {@link #prepare} wrote them.
     */
    static void dotRows(Packed p, long r0, long r1, float[] d, int dOff, short[] xs, int xsOff,
                        float[] y, int yo, boolean add) {
        float[] part = new float[TILE];
        int t1 = (int) ((r1 + TILE - 1) / TILE);
        for (int b0 = (int) (r0 / TILE); b0 < t1; ) {
            int b1 = Math.min(t1, (b0 / BLOCK_TILES + 1) * BLOCK_TILES);
            blockRows(p, b0, b1, r0, r1, d, dOff, xs, xsOff, y, yo, add, part);
            b0 = b1;
        }
    }

    /** Tiles [t0, t1) of one block, panel by panel. */
    private static void blockRows(Packed p, int t0, int t1, long r0, long r1, float[] d, int dOff,
                                  short[] xs, int xsOff, float[] y, int yo, boolean add, float[] part) {
        ShortVector m15 = ShortVector.broadcast(SHORTS, (short) 15);
        short[] q = p.nibbles;
        float[] sc = p.scales;
        int gpr = p.gpr;
        for (int p0 = 0; p0 < gpr; p0 += PANEL) {
            int p1 = Math.min(gpr, p0 + PANEL);
            boolean first = p0 == 0;
            for (int t = t0; t < t1; t++) {
                FloatVector lo = FloatVector.zero(FLOATS), hi = lo;
                int i0 = index(p.tiles, gpr, t, p0);
                int qi = 8 * TILE * i0, si = TILE * i0;
                int xi = xsOff + p0 * XS_PER_GROUP;
                for (int g = p0; g < p1; g++, qi += 8 * TILE, si += TILE, xi += XS_PER_GROUP) {
                    ShortVector acc = ShortVector.fromArray(SHORTS, xs, xi);
                    for (int j = 0; j < 8; j++) {
                        ShortVector v = ShortVector.fromArray(SHORTS, q, qi + TILE * j);
                        int xj = xi + TILE + 4 * TILE * j;
                        ShortVector m0 = v.and(m15).mul(ShortVector.fromArray(SHORTS, xs, xj));
                        ShortVector m1 = v.lanewise(VectorOperators.LSHR, 4).and(m15).mul(ShortVector.fromArray(SHORTS, xs, xj + TILE));
                        ShortVector m2 = v.lanewise(VectorOperators.LSHR, 8).and(m15).mul(ShortVector.fromArray(SHORTS, xs, xj + 2 * TILE));
                        ShortVector m3 = v.lanewise(VectorOperators.LSHR, 12).mul(ShortVector.fromArray(SHORTS, xs, xj + 3 * TILE));
                        acc = acc.add(m0.add(m1).add(m2.add(m3)));
                    }
                    IntVector iv = acc.reinterpretAsInts();
                    FloatVector fl = (FloatVector) iv.lanewise(VectorOperators.LSHL, 16).lanewise(VectorOperators.ASHR, 16)
                            .convert(VectorOperators.I2F, 0);
                    FloatVector fh = (FloatVector) iv.lanewise(VectorOperators.ASHR, 16).convert(VectorOperators.I2F, 0);
                    FloatVector dg = FloatVector.broadcast(FLOATS, d[dOff + g]);
                    lo = fl.fma(FloatVector.fromArray(FLOATS, sc, si).mul(dg), lo);
                    hi = fh.fma(FloatVector.fromArray(FLOATS, sc, si + HALF).mul(dg), hi);
                }
                long tr = (long) t * TILE;
                if (tr >= r0 && tr + TILE <= r1) {
                    int yr = yo + (int) (tr - r0);
                    if (first && !add) {
                        lo.intoArray(y, yr);
                        hi.intoArray(y, yr + HALF);
                    } else {
                        FloatVector.fromArray(FLOATS, y, yr).add(lo).intoArray(y, yr);
                        FloatVector.fromArray(FLOATS, y, yr + HALF).add(hi).intoArray(y, yr + HALF);
                    }
                } else {                                     // a tile cut by [r0, r1): only its rows inside
                    lo.intoArray(part, 0);
                    hi.intoArray(part, HALF);
                    for (int i = 0; i < TILE; i++) {
                        long r = tr + i;
                        if (r < r0 || r >= r1) continue;
                        int yr = yo + (int) (r - r0);
                        y[yr] = first && !add ? part[i] : y[yr] + part[i];
                    }
                }
            }
        }
    }

    /**
     * The scalar twin of {@link #dotRows}, reading the stored q4_block payload ({@code data}, a
     * [storedRows, 32·gpr] tensor) instead of the repacked copy: the same integer sums and the
     * same f32 operations in the same order.
     */
    static void dotRowsScalar(MemorySegment data, long storedRows, int gpr, long r0, long r1, float[] d, int dOff,
                              short[] xs, int xsOff, float[] y, int yo, boolean add) {
        long scalesOff = storedRows * gpr * 16;
        for (long r = r0; r < r1; r++) {
            int yr = yo + (int) (r - r0);
            for (int p0 = 0; p0 < gpr; p0 += PANEL) {
                float acc = 0f;
                for (int g = p0; g < Math.min(gpr, p0 + PANEL); g++) {
                    int x0 = xsOff + g * XS_PER_GROUP;
                    short sum = xs[x0];
                    long nib = (r * gpr + g) * 16;
                    for (int k = 0; k < 32; k++) {
                        int b = data.get(ValueLayout.JAVA_BYTE, nib + k / 2) & 0xFF;
                        int q = (k & 1) == 0 ? b & 15 : b >>> 4;
                        sum += (short) (q * xs[x0 + TILE + TILE * k]);
                    }
                    float s = Simd.f16(data, scalesOff + 2 * (r * gpr + g)) * d[dOff + g];
                    acc = Math.fma((float) sum, s, acc);
                }
                y[yr] = p0 == 0 && !add ? acc : y[yr] + acc;
            }
        }
    }
}
