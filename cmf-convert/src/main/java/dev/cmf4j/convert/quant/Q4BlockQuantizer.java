package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.MemorySegment;

/**
 * q4_block: 32-element groups over the flattened tensor (last group zero-padded); per group
 * {@code s = f16(absmax/7)}, {@code q = rint(w/s)} clamped to [−8, 7] (ties to even), stored as
 * the nibble q+8; layout {@code [16 B nibbles per group][f16 s per group]}. Work unit: a group.
 *
 * <p>{@link #ggmlQ4_0()} uses ggml's Q4_0 rule instead, {@code s = f16(m / −8)} with {@code m} the group's element of
 * largest magnitude (its sign kept, so s may be negative): the same 4-bit grid, so a GGUF Q4_0 tensor, dequantized,
 * is re-encoded to exactly its own values.
 */
public final class Q4BlockQuantizer implements Quantizer {
    private final boolean ggmlRule;

    public Q4BlockQuantizer() { this(false); }

    private Q4BlockQuantizer(boolean ggmlRule) { this.ggmlRule = ggmlRule; }

    /** q4_block with ggml's Q4_0 scale rule: lossless for values that came from Q4_0 blocks. */
    public static Q4BlockQuantizer ggmlQ4_0() { return new Q4BlockQuantizer(true); }
    @Override public DType dtype() { return DType.Q4_BLOCK; }

    @Override public boolean supports(long[] shape) { return true; }

    @Override public long encodedSize(long[] shape) {
        TensorShape s = TensorShape.of(dtype(), shape);
        return s.mul(groups(s), 18);
    }

    private static long groups(TensorShape s) { return s.elements() / 32 + (s.elements() % 32 == 0 ? 0 : 1); }

    @Override public TensorEncoder begin(FloatSource src, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        long groups = groups(s);
        long scales = groups * 16;
        return new TensorEncoder(s, src) {
            @Override public long encodedSize() { return groups * 18; }

            @Override public long units() { return groups; }

            @Override public long unitElements() { return 32; }

            @Override protected void encodeUnits(long start, long count, MemorySegment dst) {
                float[] g = new float[32];
                for (long gi = start; gi < start + count; gi++) {
                    long e0 = gi * 32;
                    int len = (int) Math.min(32, shape.elements() - e0);
                    src.read(e0, g, 0, len);
                    java.util.Arrays.fill(g, len, 32, 0f);
                    Scales.requireFinite(g, 0, len, e0, shape);
                    float scale = ggmlRule ? ggmlScale(g, gi) : Scales.scale(Scales.absmax(g, 0, 32) / 7f, shape, "group", gi);
                    for (int b = 0; b < 16; b++) {
                        int lo = Scales.quantize(g[2 * b], scale, -8, 7) + 8;
                        int hi = Scales.quantize(g[2 * b + 1], scale, -8, 7) + 8;
                        dst.set(Scales.I8, gi * 16 + b, (byte) (lo | hi << 4));
                    }
                    dst.set(Scales.I16, scales + 2 * gi, Scales.f16(scale));
                }
            }

            private float ggmlScale(float[] g, long gi) {
                float max = 0, amax = 0;
                for (float v : g) if (Math.abs(v) > amax) { amax = Math.abs(v); max = v; }
                float s = Scales.scale(amax / 8f, shape, "group", gi);
                return max > 0 ? -s : s;
            }
        };
    }
}
