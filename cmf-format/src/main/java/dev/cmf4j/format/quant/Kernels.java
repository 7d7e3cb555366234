package dev.cmf4j.format.quant;

import java.lang.foreign.MemorySegment;

/**
 * The inner loops the dequantizers share, each in two forms: a plain scalar loop (the reference,
 * always available) and a Vector API twin ({@link VectorKernels}) that must produce the same bits
 * (KernelTwinTest checks them against each other). The vector form is used when the
 * {@code jdk.incubator.vector} module is present, the CPU has 256-bit vectors, and the system
 * property {@code cmf.simd} is not {@code false}. Both forms compute every element with the same
 * f32 operations in the same order, so the choice never changes a decoded value.
 */
final class Kernels {
    private Kernels() {}

    static final boolean SIMD = simdWanted();

    private static boolean simdWanted() {
        if (!Boolean.parseBoolean(System.getProperty("cmf.simd", "true"))) return false;
        if (ModuleLayer.boot().findModule("jdk.incubator.vector").isEmpty()) return false;
        try {
            return VectorKernels.usable();
        } catch (Throwable e) {       // a JVM without a working Vector API: stay scalar
            return false;
        }
    }

    /** {@code out[off+i] = (float) q[at+i] · scale} for i < n (q int8). */
    static void q8(MemorySegment d, long at, int n, float scale, float[] out, int off) {
        if (SIMD) VectorKernels.q8(d, at, n, scale, out, off);
        else q8Scalar(d, at, n, scale, out, off);
    }

    static void q8Scalar(MemorySegment d, long at, int n, float scale, float[] out, int off) {
        for (int i = 0; i < n; i++) out[off + i] = d.get(Le.I8, at + i) * scale;
    }

    /** {@code out[off+i] = (q[at+i] · scale) · col[i]} for i < n. */
    static void q8Col(MemorySegment d, long at, int n, float scale, float[] col, float[] out, int off) {
        if (SIMD) VectorKernels.q8Col(d, at, n, scale, col, out, off);
        else q8ColScalar(d, at, n, scale, col, out, off);
    }

    static void q8ColScalar(MemorySegment d, long at, int n, float scale, float[] col, float[] out, int off) {
        for (int i = 0; i < n; i++) out[off + i] = d.get(Le.I8, at + i) * scale * col[i];
    }

    /** One 32-weight q4 group: 16 bytes at {@code at}, element 2k low nibble, 2k+1 high; {@code (q − 8) · scale}. */
    static void q4Group(MemorySegment d, long at, float scale, float[] out, int off) {
        if (SIMD) VectorKernels.q4Group(d, at, scale, out, off);
        else q4GroupScalar(d, at, scale, out, off);
    }

    static void q4GroupScalar(MemorySegment d, long at, float scale, float[] out, int off) {
        for (int b = 0; b < 16; b++) {
            int v = d.get(Le.I8, at + b);
            out[off + 2 * b] = ((v & 0x0F) - 8) * scale;
            out[off + 2 * b + 1] = (((v >> 4) & 0x0F) - 8) * scale;
        }
    }

    /** bf16 → f32 for n elements: {@code bits << 16}. */
    static void bf16(MemorySegment d, long at, int n, float[] out, int off) {
        if (SIMD) VectorKernels.bf16(d, at, n, out, off);
        else bf16Scalar(d, at, n, out, off);
    }

    static void bf16Scalar(MemorySegment d, long at, int n, float[] out, int off) {
        for (int i = 0; i < n; i++) out[off + i] = Float.intBitsToFloat(d.get(Le.I16, at + 2L * i) << 16);
    }
}
