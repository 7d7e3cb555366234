package dev.cmf4j.backend.vulkan;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The products' push constants, uint32 in the order matvec.comp and matvec_decode.comp declare them: sixteen (the last
 * three: a chained product's wait and signal, see VulkanResidentForward), then five only the gated-MLP pipeline reads
 * (up's rows and scales, the down product's column scales, the activation: {@link #gluWords}).
 */
final class MatvecPush {
    private MatvecPush() {}

    static final int BYTES = 84;
    static final int ROW_SCALES = 1, COL_SCALES = 2;
    /**
     * matvec_decode.comp's folded operators: the RMSNorm of x (its 1/rms, with a weight in P, or 1 + weight), a bias in
     * P, the GLU act(x)·P (the activation in the eps word), the result added to y.
     */
    static final int NORM = 4, NORM_WEIGHT = 8, NORM_OFFSET = 16, BIAS = 32, GLU = 64, ADD = 128;
    /** The gated-MLP pipeline: the result times the down product's column scales. */
    static final int DOWN_SCALES = 256;

    static void write(MemorySegment s, int rows, int cols, int tokens, long row0, long yOff, int yStride, long rsOff, long cfOff, int flags) {
        write(s, rows, cols, tokens, row0, yOff, yStride, rsOff, cfOff, flags, 0, 0, 0);
    }

    /** With the folded operators' words: P's first float of the norm weight or up values, eps bits or activation, bias. */
    static void write(MemorySegment s, int rows, int cols, int tokens, long row0, long yOff, int yStride, long rsOff, long cfOff, int flags,
                      int pOff, int epsOrAct, int biasOff) {
        write(s, rows, cols, tokens, row0, yOff, yStride, rsOff, cfOff, flags, pOff, epsOrAct, biasOff, 0, 0, 0, 0);
    }

    /**
     * With a chained product's words: {@code wait} 1 + the counter whose {@code waitFor} workgroups it waits for after its
     * first weight loads, {@code signal} 1 + the counter its workgroups count themselves into when done (0: none),
     * {@code spins} the polls before a wait gives up (0: the shader's own limit).
     */
    static void write(MemorySegment s, int rows, int cols, int tokens, long row0, long yOff, int yStride, long rsOff, long cfOff, int flags,
                      int pOff, int epsOrAct, int biasOff, int spins, int wait, long waitFor, int signal) {
        int[] v = {rows, cols, tokens, Math.toIntExact(row0), Math.toIntExact(yOff), yStride, Math.toIntExact(rsOff), Math.toIntExact(cfOff), flags,
                pOff, epsOrAct, biasOff, spins, wait, Math.toIntExact(waitFor), signal};
        for (int i = 0; i < v.length; i++) s.setAtIndex(ValueLayout.JAVA_INT, i, v[i]);
    }

    /**
     * The gated-MLP pipeline's words after {@link #write}'s (which describe gate): up's first row in its buffer, its row
     * and column scales' word offsets, the down product's column scales' (flags {@link #DOWN_SCALES}), the activation.
     */
    static void gluWords(MemorySegment s, long uRow0, long uRsOff, long uCfOff, long dCfOff, int act) {
        int[] v = {Math.toIntExact(uRow0), Math.toIntExact(uRsOff), Math.toIntExact(uCfOff), Math.toIntExact(dCfOff), act};
        for (int i = 0; i < v.length; i++) s.setAtIndex(ValueLayout.JAVA_INT, 16 + i, v[i]);
    }
}
