package dev.cmf4j.format.quant;

import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/** Every Vector API kernel gives exactly the bits of its plain scalar twin (random data, odd lengths and offsets). */
class KernelTwinTest {
    private final Random rnd = new Random(11);

    private MemorySegment bytes(int n) {
        byte[] b = new byte[n];
        rnd.nextBytes(b);
        return MemorySegment.ofArray(b);
    }

    private float scale() {
        // any finite f16 value, including subnormals and negatives
        int h;
        do h = rnd.nextInt(1 << 16); while ((h & 0x7C00) == 0x7C00);
        return Float.float16ToFloat((short) h);
    }

    @Test void q8() {
        for (int trial = 0; trial < 300; trial++) {
            int n = rnd.nextInt(200), at = rnd.nextInt(9), off = rnd.nextInt(5);
            MemorySegment d = bytes(at + n);
            float s = scale();
            float[] a = new float[off + n], b = new float[off + n];
            VectorKernels.q8(d, at, n, s, a, off);
            Kernels.q8Scalar(d, at, n, s, b, off);
            assertThat(bits(a)).containsExactly(bits(b));
        }
    }

    @Test void q8Col() {
        for (int trial = 0; trial < 300; trial++) {
            int n = rnd.nextInt(200), at = rnd.nextInt(9), off = rnd.nextInt(5);
            MemorySegment d = bytes(at + n);
            float s = scale();
            float[] col = new float[n];
            for (int i = 0; i < n; i++) col[i] = scale();
            float[] a = new float[off + n], b = new float[off + n];
            VectorKernels.q8Col(d, at, n, s, col, a, off);
            Kernels.q8ColScalar(d, at, n, s, col, b, off);
            assertThat(bits(a)).containsExactly(bits(b));
        }
    }

    @Test void q4Group() {
        for (int trial = 0; trial < 500; trial++) {
            int at = rnd.nextInt(9), off = rnd.nextInt(5);
            MemorySegment d = bytes(at + 16);
            float s = scale();
            float[] a = new float[off + 32], b = new float[off + 32];
            VectorKernels.q4Group(d, at, s, a, off);
            Kernels.q4GroupScalar(d, at, s, b, off);
            assertThat(bits(a)).containsExactly(bits(b));
        }
    }

    @Test void bf16() {
        for (int trial = 0; trial < 300; trial++) {
            int n = rnd.nextInt(200), at = rnd.nextInt(9), off = rnd.nextInt(5);
            MemorySegment d = bytes(at + 2 * n);
            float[] a = new float[off + n], b = new float[off + n];
            VectorKernels.bf16(d, at, n, a, off);
            Kernels.bf16Scalar(d, at, n, b, off);
            assertThat(bits(a)).containsExactly(bits(b));
        }
    }

    @Test void fastPathIsTheOneInUseWhereTheCpuAllowsIt() {
        System.out.println("dequant kernels: " + (Kernels.SIMD ? "Vector API (256-bit)" : "scalar"));
        if (VectorKernels.usable() && !"false".equals(System.getProperty("cmf.simd"))) assertThat(Kernels.SIMD).isTrue();
    }

    private static int[] bits(float[] f) {
        int[] b = new int[f.length];
        for (int i = 0; i < f.length; i++) b[i] = Float.floatToRawIntBits(f[i]);
        return b;
    }
}
