package dev.cmf4j.backend.cpu;

import java.util.Arrays;

/**
 * Embryo's resonance router: expert e is a centre μ_e, {@code rank} orthonormal directions u_e and a bias b_e, and
 * the token y goes to the expert that reconstructs it best:
 * <pre>
 *   r_e = y − μ_e;   err_e = ‖r_e‖² − Σ_i (r_e·u_ei)²;   score_e = b_e − err_e   (−∞ when err_e > shell_e)
 *   winner = the first maximum (an exact tie goes to the lower expert id), weight exactly 1
 * </pre>
 * A grown expert carries a finite shell and cannot win outside it; trunk experts have shell +∞. Sums run in double:
 * errors are differences of squares of magnitude ~100 and the winner must not hang on their rounding.
 */
public final class ResonanceRouter {
    private final int experts, rank, dim;
    private final float[] mu, u, bias, shell;

    /**
     * @param mu    [experts, dim] centres
     * @param u     [experts, rank, dim] orthonormal directions (may be null when rank is 0)
     * @param bias  [experts]
     * @param shell [experts] error bounds of grown experts (+∞ for trunk experts), or null when none has one
     */
    public ResonanceRouter(int experts, int rank, int dim, float[] mu, float[] u, float[] bias, float[] shell) {
        if (experts < 1 || rank < 0 || dim < 1) throw new IllegalArgumentException("resonance router of " + experts + " experts, rank " + rank);
        if (mu.length != experts * dim || bias.length != experts || (rank > 0 && (u == null || u.length != experts * rank * dim))
                || (shell != null && shell.length != experts))
            throw new IllegalArgumentException("resonance descriptors do not match " + experts + " experts × rank " + rank + " × " + dim);
        this.experts = experts;
        this.rank = rank;
        this.dim = dim;
        this.mu = mu.clone();
        this.u = rank == 0 ? new float[0] : u.clone();
        this.bias = bias.clone();
        if (shell == null) {
            this.shell = new float[experts];
            Arrays.fill(this.shell, Float.POSITIVE_INFINITY);
        } else {
            this.shell = shell.clone();
        }
    }

    public int experts() { return experts; }

    /** Reconstruction error of every expert for y = x[xo, xo + dim): err[e]. */
    public void errors(float[] x, int xo, double[] err, double[] residual) {
        for (int e = 0; e < experts; e++) {
            double sq = 0;
            for (int j = 0; j < dim; j++) {
                double r = (double) x[xo + j] - mu[e * dim + j];
                residual[j] = r;
                sq += r * r;
            }
            for (int i = 0; i < rank; i++) {
                double p = 0;
                int uo = (e * rank + i) * dim;
                for (int j = 0; j < dim; j++) p += residual[j] * u[uo + j];
                sq -= p * p;
            }
            err[e] = sq;
        }
    }

    /** score[e] = bias − err, −∞ outside a shell; {@code shells} false ignores every shell. */
    public void scores(double[] err, double[] score, boolean shells) {
        for (int e = 0; e < experts; e++)
            score[e] = shells && err[e] > shell[e] ? Double.NEGATIVE_INFINITY : bias[e] - err[e];
    }

    /** The first maximum of {@code score}; -1 when every expert is outside its shell. */
    public static int winner(double[] score) {
        int best = -1;
        for (int e = 0; e < score.length; e++)
            if (score[e] != Double.NEGATIVE_INFINITY && (best < 0 || score[e] > score[best])) best = e;
        return best;
    }

    /** The winning expert of y = x[xo, xo + dim) (shells applied); {@code err}, {@code score}, {@code residual} are scratch. */
    public int route(float[] x, int xo, double[] err, double[] score, double[] residual) {
        errors(x, xo, err, residual);
        scores(err, score, true);
        int w = winner(score);
        if (w < 0) throw new IllegalStateException("every expert is outside its shell: no expert can take the token");
        return w;
    }
}
