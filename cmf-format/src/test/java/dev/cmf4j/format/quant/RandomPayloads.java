package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.util.Random;

/**
 * Structurally valid payloads with random contents for any decodable dtype and shape (cols % 32
 * == 0 where the dtype needs it). Scales are drawn as finite f16 values so decoded floats are
 * comparable; widths, offsets and overlays are consistent.
 */
final class RandomPayloads {
    private RandomPayloads() {}

    static byte[] of(DType t, long[] shape, Random rnd) {
        TensorShape s = TensorShape.of(t, shape);
        int rows = (int) s.rows(), cols = (int) s.cols(), n = rows * cols, gpr = cols / 32;
        Bytes b = new Bytes();
        switch (t) {
            case F32 -> { for (int i = 0; i < n; i++) b.f32((float) rnd.nextGaussian()); }
            case F16, BF16 -> { for (int i = 0; i < n; i++) b.u16(scaleBits(rnd)); }
            case Q8_ROW -> { bytes(b, rnd, n); scales(b, rnd, rows); }
            case Q8_2F -> { bytes(b, rnd, n); scales(b, rnd, rows); scales(b, rnd, cols); }
            case Q4_BLOCK -> { int g = (n + 31) / 32; bytes(b, rnd, 16 * g); scales(b, rnd, g); }
            case Q4_TILED -> { for (int g = 0; g < rows * gpr; g++) { scales(b, rnd, 1); bytes(b, rnd, 16); } }
            case Q4TP, Q2TP -> {
                bytes(b, rnd, rows * gpr * (t == DType.Q4TP ? 16 : 8));
                for (int r = 0; r < rows; r++) b.f16(-8f + 4f * rnd.nextFloat(), 0.3f * rnd.nextFloat());
                bytes(b, rnd, (int) (rows * TpLadder.codeStride(gpr)));
            }
            case VBIT, VBIT_RO -> {
                int[] allowed = {3, 4, 5, 6, 8};
                int[] w = new int[rows];
                for (int r = 0; r < rows; r++) { w[r] = allowed[rnd.nextInt(5)]; b.u8(w[r]); }
                scales(b, rnd, rows * gpr);
                if (t == DType.VBIT_RO) {
                    long off = 0;
                    b.u32(0);
                    for (int r = 0; r < rows; r++) b.u32(off += (cols * w[r] + 7) / 8);
                }
                for (int r = 0; r < rows; r++) bytes(b, rnd, (cols * w[r] + 7) / 8);
            }
            case Q1 -> { for (int g = 0; g < rows * gpr; g++) { scales(b, rnd, 1); bytes(b, rnd, 4); } }
            case Q1S -> {
                for (int g = 0; g < rows * gpr; g++) { scales(b, rnd, 1); bytes(b, rnd, 4); }
                int count = 1 + rnd.nextInt(Math.max(1, n / 10));
                int[] idx = rnd.ints(0, n).distinct().limit(count).sorted().toArray();
                if (rnd.nextBoolean())      // also unsorted overlays: the decoder must not rely on order
                    for (int i = idx.length - 1; i > 0; i--) { int j = rnd.nextInt(i + 1), x = idx[i]; idx[i] = idx[j]; idx[j] = x; }
                b.u32(idx.length);
                for (int i : idx) { b.u32(i); scales(b, rnd, 1); }
            }
            case Q1T -> {
                for (int g = 0; g < rows * gpr; g++) { scales(b, rnd, 1); for (int j = 0; j < 7; j++) b.u8(rnd.nextInt(243)); }
                int[] per = new int[rows];
                long total = 0;
                b.u32(0);
                for (int r = 0; r < rows; r++) { per[r] = rnd.nextInt(4); b.u32(total += per[r]); }
                for (int r = 0; r < rows; r++) for (int e = 0; e < per[r]; e++) { b.u16(rnd.nextInt(cols)); scales(b, rnd, 1); }
            }
            default -> throw new IllegalArgumentException("no random payload for " + t);
        }
        return b.array();
    }

    private static void bytes(Bytes b, Random rnd, int n) { for (int i = 0; i < n; i++) b.u8(rnd.nextInt(256)); }

    private static void scales(Bytes b, Random rnd, int n) { for (int i = 0; i < n; i++) b.u16(scaleBits(rnd)); }

    /** A random finite f16 (either sign, exponent spread over the normal and subnormal range). */
    private static int scaleBits(Random rnd) {
        int bits;
        do bits = rnd.nextInt(1 << 16); while ((bits & 0x7C00) == 0x7C00);
        return bits;
    }
}
