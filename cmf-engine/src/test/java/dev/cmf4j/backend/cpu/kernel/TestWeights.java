package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Random;

/**
 * Test encoders: write a float matrix in each CMF layout (CMF_FORMAT.md §2) with simple
 * absmax quantizers. Independent of cmf-convert so the kernel tests stand alone; the exact rounding
 * does not matter here because the kernels are compared with the scalar reference reading the
 * very same bytes.
 */
final class TestWeights {
    private TestWeights() {}

    private static final ValueLayout.OfShort HALF = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    static float[] randomMatrix(Random rnd, int rows, int cols) {
        float[] w = new float[rows * cols];
        for (int i = 0; i < w.length; i++) w[i] = (float) rnd.nextGaussian() * 0.05f;
        // a few outlier columns, like real checkpoints (what q8_2f's column field is for)
        for (int k = 0; k < Math.max(1, cols / 50); k++) {
            int c = rnd.nextInt(cols);
            for (int r = 0; r < rows; r++) w[r * cols + c] *= 8f;
        }
        return w;
    }

    static float[] randomVector(Random rnd, int n) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) rnd.nextGaussian();
        return x;
    }

    static MemorySegment encode(DType dtype, float[] w, int rows, int cols) {
        MemorySegment m = Arena.ofAuto().allocate(WeightMatrix.byteSize(dtype, rows, cols), 64);
        long n = (long) rows * cols;
        switch (dtype) {
            case F32 -> { for (int i = 0; i < n; i++) m.set(F32, 4L * i, w[i]); }
            case F16 -> { for (int i = 0; i < n; i++) m.set(HALF, 2L * i, Float.floatToFloat16(w[i])); }
            case BF16 -> { for (int i = 0; i < n; i++) m.set(HALF, 2L * i, bf16(w[i])); }
            case Q8_ROW, Q8_2F -> {
                float[] col = new float[cols];
                for (int c = 0; c < cols; c++) {
                    float a = 0;
                    for (int r = 0; r < rows; r++) a = Math.max(a, Math.abs(w[r * cols + c]));
                    col[c] = dtype == DType.Q8_2F ? half(Math.max(a, 1e-6f) * 10f) : 1f;   // per-input-channel field
                    if (dtype == DType.Q8_2F) m.set(HALF, n + 2L * rows + 2L * c, Float.floatToFloat16(col[c]));
                }
                for (int r = 0; r < rows; r++) {
                    float a = 0;
                    for (int c = 0; c < cols; c++) a = Math.max(a, Math.abs(w[r * cols + c] / col[c]));
                    float s = half(Math.max(a, 1e-8f) / 127f);
                    m.set(HALF, n + 2L * r, Float.floatToFloat16(s));
                    for (int c = 0; c < cols; c++)
                        m.set(ValueLayout.JAVA_BYTE, (long) r * cols + c, (byte) clamp(Math.round(w[r * cols + c] / col[c] / s), -127, 127));
                }
            }
            case Q4_BLOCK -> {
                long groups = (n + 31) / 32;
                long scales = groups * 16;                       // nibble plane, then the scale plane
                for (long g = 0; g < groups; g++) {
                    float a = 0;
                    for (int j = 0; j < 32; j++) { long i = g * 32 + j; if (i < n) a = Math.max(a, Math.abs(w[(int) i])); }
                    float s = half(Math.max(a, 1e-8f) / 7f);
                    m.set(HALF, scales + 2 * g, Float.floatToFloat16(s));
                    for (int j = 0; j < 32; j++) {
                        long i = g * 32 + j;
                        int q = i < n ? clamp(Math.round(w[(int) i] / s) + 8, 0, 15) : 0;
                        setNibble(m, g * 16 + j / 2, j % 2, q);
                    }
                }
            }
            case Q4TP -> {
                int gpr = (cols + 31) / 32;
                long plane = (long) rows * gpr * 16;
                int codeBytes = (gpr * 5 + 7) / 8;
                for (int r = 0; r < rows; r++) {
                    float[] gs = new float[gpr];
                    float lmin = Float.MAX_VALUE, lmax = -Float.MAX_VALUE;
                    for (int g = 0; g < gpr; g++) {
                        float a = 0;
                        for (int j = 0; j < 32 && g * 32 + j < cols; j++) a = Math.max(a, Math.abs(w[r * cols + g * 32 + j]));
                        gs[g] = Math.max(a, 1e-8f) / 7f;
                        float l = (float) (Math.log(gs[g]) / Math.log(2));
                        lmin = Math.min(lmin, l);
                        lmax = Math.max(lmax, l);
                    }
                    float lo = half(lmin), step = half(Math.max((lmax - lo) / 31f, 1e-3f));
                    m.set(HALF, plane + 4L * r, Float.floatToFloat16(lo));
                    m.set(HALF, plane + 4L * r + 2, Float.floatToFloat16(step));
                    float[] ladder = ReferenceKernels.q4tpLadder(lo, step);
                    long codes = plane + 4L * rows + (long) r * codeBytes;
                    for (int g = 0; g < gpr; g++) {
                        float l = (float) (Math.log(gs[g]) / Math.log(2));
                        int code = clamp(Math.round((l - lo) / step), 0, 31);
                        for (int k = 0; k < 5; k++) {
                            int bit = g * 5 + k;
                            if (((code >>> k) & 1) != 0) {
                                byte b = m.get(ValueLayout.JAVA_BYTE, codes + bit / 8);
                                m.set(ValueLayout.JAVA_BYTE, codes + bit / 8, (byte) (b | (1 << (bit % 8))));
                            }
                        }
                        float s = ladder[code];
                        for (int j = 0; j < 32; j++) {
                            int c = g * 32 + j;
                            int q = c < cols ? clamp(Math.round(w[r * cols + c] / s) + 8, 0, 15) : 0;
                            setNibble(m, ((long) r * gpr + g) * 16 + j / 2, j % 2, q);
                        }
                    }
                }
            }
            default -> throw new IllegalArgumentException(dtype.label);
        }
        return m;
    }

    private static void setNibble(MemorySegment m, long at, int high, int q) {
        int b = m.get(ValueLayout.JAVA_BYTE, at) & 0xFF;
        b = high == 0 ? (b & 0xF0) | q : (b & 0x0F) | (q << 4);
        m.set(ValueLayout.JAVA_BYTE, at, (byte) b);
    }

    static short bf16(float f) {
        int b = Float.floatToRawIntBits(f);
        b += 0x7FFF + ((b >>> 16) & 1);                    // round to nearest even
        return (short) (b >>> 16);
    }

    static float half(float f) {
        return Float.float16ToFloat(Float.floatToFloat16(f));
    }

    private static int clamp(int v, int lo, int hi) {
        return Math.max(lo, Math.min(hi, v));
    }
}
