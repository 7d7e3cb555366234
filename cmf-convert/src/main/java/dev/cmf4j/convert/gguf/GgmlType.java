package dev.cmf4j.convert.gguf;

/**
 * ggml tensor types as GGUF stores them: id, elements per block and bytes per block. Only the types
 * {@link #decodable()} can be converted (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K … Q6_K, IQ4_NL, IQ4_XS,
 * MXFP4); the others are known so that an error can name them.
 */
public enum GgmlType {
    F32(0, 1, 4), F16(1, 1, 2), Q4_0(2, 32, 18), Q4_1(3, 32, 20), Q5_0(6, 32, 22), Q5_1(7, 32, 24),
    Q8_0(8, 32, 34), Q8_1(9, 32, 36), Q2_K(10, 256, 84), Q3_K(11, 256, 110), Q4_K(12, 256, 144),
    Q5_K(13, 256, 176), Q6_K(14, 256, 210), Q8_K(15, 256, 292), IQ2_XXS(16, 256, 66), IQ2_XS(17, 256, 74),
    IQ3_XXS(18, 256, 98), IQ1_S(19, 256, 50), IQ4_NL(20, 32, 18), IQ3_S(21, 256, 110), IQ2_S(22, 256, 82),
    IQ4_XS(23, 256, 136), I8(24, 1, 1), I16(25, 1, 2), I32(26, 1, 4), I64(27, 1, 8), F64(28, 1, 8),
    IQ1_M(29, 256, 56), BF16(30, 1, 2), TQ1_0(34, 256, 54), TQ2_0(35, 256, 66), MXFP4(39, 32, 17);

    public final int id;
    /** Elements per block. */
    public final int blockSize;
    /** Bytes per block. */
    public final int blockBytes;

    GgmlType(int id, int blockSize, int blockBytes) {
        this.id = id;
        this.blockSize = blockSize;
        this.blockBytes = blockBytes;
    }

    public static GgmlType ofId(int id) {
        for (GgmlType t : values()) if (t.id == id) return t;
        return null;
    }

    /** Types this converter dequantizes. */
    public boolean decodable() {
        return switch (this) {
            case F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 -> true;
            default -> false;
        };
    }
}
