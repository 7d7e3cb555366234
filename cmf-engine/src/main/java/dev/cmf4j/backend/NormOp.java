package dev.cmf4j.backend;

import dev.cmf4j.backend.cpu.RmsNorm;

/**
 * A resolved RMSNorm: its decoded weight (or none), whether the weight is stored as an offset from 1, epsilon and
 * width.
 */
public record NormOp(float[] w, boolean offset, float eps, int dim) {

    /** Normalizes {@code rows} consecutive rows of width {@link #dim()} in place. */
    public void rows(float[] x, int rows) { RmsNorm.rows(x, rows, dim, w, offset, eps); }

    /** Normalizes rows of {@code src} into {@code dst}. */
    public void rows(float[] src, float[] dst, int rows) {
        for (int r = 0; r < rows; r++) RmsNorm.apply(src, r * dim, dst, r * dim, dim, w, offset, eps);
    }

    public void apply(float[] x, int xo, float[] out, int oo) { RmsNorm.apply(x, xo, out, oo, dim, w, offset, eps); }
}
