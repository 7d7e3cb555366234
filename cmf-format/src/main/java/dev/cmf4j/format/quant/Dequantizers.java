package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

/** The {@link Dequantizer} of each decodable CMF dtype. */
public final class Dequantizers {
    private Dequantizers() {}

    private static final Dequantizer[] BY_ID = new Dequantizer[DType.values().length];

    static {
        for (Dequantizer d : new Dequantizer[] {
                new F32Dequantizer(), new F16Dequantizer(), new Bf16Dequantizer(), new Q8RowDequantizer(),
                new Q8TwoFieldDequantizer(), new Q4BlockDequantizer(), new Q4TiledDequantizer(), new Q4TpDequantizer(),
                new Q2TpDequantizer(), new VbitDequantizer(), new VbitRoDequantizer(), new Q1Dequantizer(),
                new Q1sDequantizer(), new Q1tDequantizer()}) {
            BY_ID[d.dtype().ordinal()] = d;
        }
    }

    private static final Dequantizer Q2TP_PRISM_AFFINE = new Q2TpDequantizer(true);

    /**
     * The decoder of {@code dtype}.
     *
     * @throws UnsupportedOperationException for reserved dtypes (mix8_4, q4_col) and raw tables
     *         (u8, u32, u64), which carry bytes, not weights
     */
    public static Dequantizer of(DType dtype) {
        Dequantizer d = BY_ID[dtype.ordinal()];
        if (d != null) return d;
        if (dtype.reserved())
            throw new UnsupportedOperationException("dtype " + dtype.label + " (id " + dtype.id
                    + ") is reserved in CMF v2: no writer produces it and it has no defined layout to decode");
        if (dtype.raw())
            throw new UnsupportedOperationException("dtype " + dtype.label + " (id " + dtype.id
                    + ") is a raw table (lookup records), not a weight tensor: read its bytes, do not dequantize it");
        throw new UnsupportedOperationException("no dequantizer for dtype " + dtype.label + " (id " + dtype.id + ")");
    }

    /** Whether {@link #of} has a decoder for {@code dtype}. */
    public static boolean decodable(DType dtype) { return BY_ID[dtype.ordinal()] != null; }

    /** q2tp in the Prism affine variant, {@code (c − 1.0)·s} (PRISM_AFFINE files, listed matrices). */
    public static Dequantizer q2tpPrismAffine() { return Q2TP_PRISM_AFFINE; }
}
