package dev.cmf4j.model.graph;

import dev.cmf4j.backend.cpu.RmsNorm;
import dev.cmf4j.model.Norm;
import dev.cmf4j.model.NormStyle;

/** A resolved RMSNorm: decoded weight (or none), style and epsilon. */
public record NormOp(float[] w, boolean offset, float eps, int dim) {
    static NormOp of(Norm n, Loader loader) {
        if (n == null) return null;
        return new NormOp(loader.norm(n), n.style() == NormStyle.OFFSET, n.eps(), n.dim());
    }

    /** Normalizes {@code rows} consecutive rows of width {@link #dim()} in place. */
    void rows(float[] x, int rows) { RmsNorm.rows(x, rows, dim, w, offset, eps); }

    /** Normalizes rows of {@code src} into {@code dst}. */
    void rows(float[] src, float[] dst, int rows) {
        for (int r = 0; r < rows; r++) RmsNorm.apply(src, r * dim, dst, r * dim, dim, w, offset, eps);
    }

    void apply(float[] x, int xo, float[] out, int oo) { RmsNorm.apply(x, xo, out, oo, dim, w, offset, eps); }
}
