package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.OpResult;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * The device's products one dtype and shape at a time against the CPU's on random inputs (llama.cpp's test-backend-ops):
 * each weight is written in its CMF layout (f32, bf16, f16, q8_row, q8_2f), and the device's y = W·x is compared with the
 * CPU engine's kernels on the same {@link Matrix} and with a float64 sum over the dtype's own row decoder. The error is the
 * largest difference over the float64 reference's largest magnitude; the bound is 2e-6·√cols (f32 sums in another order).
 */
final class VulkanOpCheck {
    private VulkanOpCheck() {}

    static final DType[] DTYPES = {DType.F32, DType.BF16, DType.F16, DType.Q8_ROW, DType.Q8_2F};
    private static final ValueLayout.OfShort U16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /**
     * {rows, cols, tokens}: odd widths (the shader's one-element path), a tile of 8 tokens and one more, a row count
     * over the 64-invocation workgroup and a wide one; not quick: larger products.
     */
    static final int[][] QUICK = {{13, 64, 1}, {9, 30, 3}, {70, 256, 9}, {5, 7, 17}};
    static final int[][] FULL = {{1000, 2048, 8}, {4096, 4096, 1}, {300, 1000, 33}};

    static List<OpResult> run(VulkanMatMul device, boolean quick) {
        List<OpResult> out = new ArrayList<>();
        MatMul cpu = CpuBackend.newMatMul();
        SplittableRandom r = new SplittableRandom(24);
        List<int[]> shapes = new ArrayList<>(List.of(QUICK));
        if (!quick) shapes.addAll(List.of(FULL));
        for (DType dt : DTYPES)
            for (int[] s : shapes) out.addAll(product(device, cpu, r, dt, s[0], s[1], s[2]));
        return out;
    }

    /** One product of {@code dt} [rows, cols] over {@code tokens} rows, against the CPU kernels and the float64 sum. */
    static List<OpResult> product(MatMul device, MatMul cpu, SplittableRandom r, DType dt, int rows, int cols, int tokens) {
        Matrix w = Matrix.of("w", dt, randomPayload(r, dt, rows, cols), rows, cols);
        float[] x = new float[tokens * cols];
        for (int i = 0; i < x.length; i++) x[i] = (float) r.nextGaussian();
        float[] got = new float[tokens * rows], cpuY = new float[tokens * rows];
        device.apply(w, x, tokens, got);
        cpu.apply(w, x, tokens, cpuY);
        double[] want = reference(w, x, tokens);
        String shape = rows + "x" + cols + ", " + tokens + " tokens";
        double bound = 2e-6 * Math.sqrt(cols);
        return List.of(new OpResult("matvec_" + dt.label + " vs float64", shape, error(got, want), bound),
                new OpResult("matvec_" + dt.label + " vs cpu", shape, error(got, cpuY, want), bound));
    }

    /** y = W·x in float64 over the dtype's row decoder (what the file means, independent of any kernel). */
    static double[] reference(Matrix w, float[] x, int tokens) {
        int rows = w.outDim(), cols = w.inDim();
        double[] y = new double[tokens * rows];
        float[] row = new float[cols];
        for (int o = 0; o < rows; o++) {
            w.decodeRow(o, row, 0);
            for (int t = 0; t < tokens; t++) {
                double s = 0;
                for (int c = 0; c < cols; c++) s += (double) row[c] * x[t * cols + c];
                y[t * rows + o] = s;
            }
        }
        return y;
    }

    /** max |got − want| / max |want|. */
    static double error(float[] got, double[] want) {
        double d = 0, m = 1e-30;
        for (int i = 0; i < want.length; i++) {
            d = Math.max(d, Math.abs(got[i] - want[i]));
            m = Math.max(m, Math.abs(want[i]));
        }
        return Double.isNaN(d) ? Double.POSITIVE_INFINITY : d / m;
    }

    /** max |got − cpu| over the reference's largest magnitude. */
    static double error(float[] got, float[] cpu, double[] want) {
        double d = 0, m = 1e-30;
        for (int i = 0; i < want.length; i++) {
            d = Math.max(d, Math.abs(got[i] - cpu[i]));
            m = Math.max(m, Math.abs(want[i]));
        }
        return Double.isNaN(d) ? Double.POSITIVE_INFINITY : d / m;
    }

    /** A random [rows, cols] tensor in {@code dt}'s CMF layout (q8: int8 plane, f16 row scales, q8_2f then f16 column scales). */
    static MemorySegment randomPayload(SplittableRandom r, DType dt, int rows, int cols) {
        long n = (long) rows * cols;
        return switch (dt) {
            case F32 -> {
                MemorySegment s = MemorySegment.ofArray(new byte[(int) (4 * n)]);
                for (long i = 0; i < n; i++) s.set(F32, 4 * i, (float) (0.5 * r.nextGaussian()));
                yield s;
            }
            case BF16, F16 -> {
                MemorySegment s = MemorySegment.ofArray(new byte[(int) (2 * n)]);
                for (long i = 0; i < n; i++) {
                    float v = (float) (0.5 * r.nextGaussian());
                    s.set(U16, 2 * i, dt == DType.F16 ? Float.floatToFloat16(v) : (short) (Float.floatToRawIntBits(v) >>> 16));
                }
                yield s;
            }
            case Q8_ROW, Q8_2F -> {
                boolean cf = dt == DType.Q8_2F;
                MemorySegment s = MemorySegment.ofArray(new byte[(int) (n + 2L * rows + (cf ? 2L * cols : 0))]);
                for (long i = 0; i < n; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) (r.nextInt(255) - 127));
                for (int i = 0; i < rows; i++) s.set(U16, n + 2L * i, Float.floatToFloat16((float) (0.001 + 0.01 * r.nextDouble())));
                if (cf) for (int c = 0; c < cols; c++) s.set(U16, n + 2L * rows + 2L * c, Float.floatToFloat16((float) (0.5 + r.nextDouble())));
                yield s;
            }
            default -> throw new IllegalArgumentException(dt.label + ": no Vulkan product");
        };
    }
}
