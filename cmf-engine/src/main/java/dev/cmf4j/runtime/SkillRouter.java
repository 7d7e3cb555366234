package dev.cmf4j.runtime;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.State;

import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.List;
import java.util.Map;

/**
 * Routes a prompt to the skill that fits it ("recon-argmin", CMF_FORMAT.md §1.7): φ(x) is the backbone's hidden state
 * after layer {@code phi_layer}, mean-pooled over the prompt; each skill holds an affine subspace (mean μ and an
 * orthonormal basis B of rank r, fitted to its prompts' φ by {@link #fit}); a skill's error is
 * E = ‖r − B·Bᵀ·r‖² / ‖r‖² with r = φ − μ, and the smallest E wins. Calibrated confidence softmax(−E/T) and a
 * novelty score 0.5·σ(z) + 0.25/(1 + 8·margin) + 0.25·(1 − confidence), z = (E − err_mean)/err_std, against the
 * threshold θ: a novel prompt goes to the backbone.
 */
public final class SkillRouter {
    private SkillRouter() {}

    /** A skill's routing subspace; {@code basis} is rank × hidden, row-major, orthonormal rows. */
    public record Descriptor(int phiLayer, float[] mean, float[] basis, int rank, double errMean, double errStd) {
        /** E for {@code phi}: the share of φ − μ's energy outside the subspace (0: inside, 1: orthogonal to it). */
        public double error(float[] phi) {
            int h = mean.length;
            double[] r = new double[h];
            double total = 0;
            for (int i = 0; i < h; i++) { r[i] = phi[i] - mean[i]; total += r[i] * r[i]; }
            if (total == 0) return 0;
            double kept = 0;
            for (int k = 0; k < rank; k++) {
                double c = 0;
                for (int i = 0; i < h; i++) c += basis[k * h + i] * r[i];
                kept += c * c;
            }
            return Math.max(0, total - kept) / total;
        }

        /** The registry's {@code selection} block (mean and basis as base64 little-endian f16). */
        public SkillRecord.Selection selection() {
            return new SkillRecord.Selection("mse_unit", phiLayer, f16(mean), f16(basis), rank, errMean, errStd, null, null, Map.of());
        }

        /** The descriptor a record carries, or null when it has none. */
        public static Descriptor of(SkillRecord r, int hidden) {
            SkillRecord.Selection s = r.selection();
            if (s == null || s.phiLayer() == null || s.rank() == null || s.mean() == null || s.basis() == null) return null;
            float[] mean = s.meanValues(), basis = s.basisValues();
            if (mean.length != hidden || basis.length != (long) s.rank() * hidden)
                throw new IllegalArgumentException("skill '" + r.id() + "': routing subspace of " + mean.length + " / "
                        + basis.length + " values does not fit hidden size " + hidden + " and rank " + s.rank());
            return new Descriptor(s.phiLayer(), mean, basis, s.rank(), s.errMean() == null ? 0 : s.errMean(),
                    s.errStd() == null ? 0 : s.errStd());
        }
    }

    /** One skill's error and calibrated confidence. */
    public record Score(String skill, double error, double confidence) {}

    /**
     * Every routable skill's score (best first), the skill of least E ({@code best}), the winner (null when the prompt
     * is novel or no skill has a descriptor: the backbone) and the novelty score.
     */
    public record Route(List<Score> scores, String best, String winner, double novelty, boolean novel) {}

    /** φ: the backbone's hidden state after layer {@code phiLayer} (0-based), mean-pooled over {@code ids}. */
    public static float[] phi(Graph g, int[] ids, int phiLayer) {
        if (phiLayer < 0 || phiLayer >= g.numLayers())
            throw new IllegalArgumentException("phi_layer " + phiLayer + " outside 0.." + (g.numLayers() - 1));
        if (ids.length == 0) throw new IllegalArgumentException("empty prompt");
        int chunk = Math.min(ids.length, Session.DEFAULT_CHUNK), hidden = g.hidden();
        State st = g.newState(chunk, ids.length);
        double[] sum = new double[hidden];
        try {
            for (int p = 0; p < ids.length; p += chunk)
                g.forward(st, ids, p, Math.min(chunk, ids.length - p), null, false, (index, x, tokens, h) -> {
                    if (index != phiLayer + 1) return;
                    for (int t = 0; t < tokens; t++) for (int i = 0; i < h; i++) sum[i] += x[t * h + i];
                });
        } finally {
            st.close();
        }
        float[] out = new float[hidden];
        for (int i = 0; i < hidden; i++) out[i] = (float) (sum[i] / ids.length);
        return out;
    }

    /**
     * The subspace of {@code prompts}' φ: their mean and the top {@code rank} principal directions (at most the number
     * of prompts − 1), with the mean and spread of the prompts' own E.
     */
    public static Descriptor fit(Graph g, List<int[]> prompts, int phiLayer, int rank) {
        if (prompts.size() < 2) throw new IllegalArgumentException("a routing subspace needs at least 2 prompts, got " + prompts.size());
        if (rank < 1) throw new IllegalArgumentException("rank must be >= 1");
        int n = prompts.size(), h = g.hidden();
        float[][] phis = new float[n][];
        for (int i = 0; i < n; i++) phis[i] = phi(g, prompts.get(i), phiLayer);
        float[] mean = new float[h];
        for (float[] p : phis) for (int i = 0; i < h; i++) mean[i] += p[i] / n;
        double[][] x = new double[n][h];
        for (int j = 0; j < n; j++) for (int i = 0; i < h; i++) x[j][i] = phis[j][i] - mean[i];
        // principal directions from the n × n Gram matrix: b = Xᵀv / √λ
        double[][] gram = new double[n][n];
        for (int a = 0; a < n; a++)
            for (int b = a; b < n; b++) {
                double s = 0;
                for (int i = 0; i < h; i++) s += x[a][i] * x[b][i];
                gram[a][b] = gram[b][a] = s;
            }
        double[][] vec = new double[n][n];
        double[] val = jacobi(gram, vec);
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) order[i] = i;
        java.util.Arrays.sort(order, Comparator.comparingDouble(i -> -val[i]));
        double top = Math.max(val[order[0]], 0);
        int r = 0;
        while (r < Math.min(rank, n - 1) && val[order[r]] > 1e-9 * top && val[order[r]] > 0) r++;
        float[] basis = new float[r * h];
        for (int k = 0; k < r; k++) {
            int e = order[k];
            double norm = Math.sqrt(val[e]);
            for (int i = 0; i < h; i++) {
                double s = 0;
                for (int j = 0; j < n; j++) s += x[j][i] * vec[j][e];
                basis[k * h + i] = (float) (s / norm);
            }
        }
        Descriptor d = new Descriptor(phiLayer, mean, basis, r, 0, 0);
        double m = 0, v = 0;
        for (float[] p : phis) m += d.error(p) / n;
        for (float[] p : phis) v += Math.pow(d.error(p) - m, 2) / n;
        return new Descriptor(phiLayer, mean, basis, r, m, Math.sqrt(v));
    }

    /**
     * Routes {@code ids} among the {@code skills} that carry a descriptor: each one's E, confidence softmax(−E/T), the
     * winner, and whether the prompt is novel (then the winner is null: the backbone).
     *
     * @param routing the header's {@code routing} block ({@code temperature}, {@code novelty_theta}); may be null
     */
    public static Route route(Graph g, int[] ids, List<SkillRecord> skills, JsonNode routing) {
        double temperature = routing == null ? 0.1 : routing.path("temperature").asDouble(0.1);
        double theta = routing == null ? 0.5 : routing.path("novelty_theta").asDouble(0.5);
        if (!(temperature > 0)) throw new IllegalArgumentException("routing temperature must be > 0, got " + temperature);
        List<String> names = new ArrayList<>();
        List<Descriptor> ds = new ArrayList<>();
        for (SkillRecord s : skills) {
            Descriptor d = Descriptor.of(s, g.hidden());
            if (d != null && g.skillProblem(s.id()) == null) { names.add(s.id()); ds.add(d); }
        }
        if (ds.isEmpty()) return new Route(List.of(), null, null, 1.0, true);
        java.util.Map<Integer, float[]> phis = new java.util.HashMap<>();
        double[] e = new double[ds.size()];
        for (int i = 0; i < ds.size(); i++) e[i] = ds.get(i).error(phis.computeIfAbsent(ds.get(i).phiLayer(), l -> phi(g, ids, l)));
        double min = java.util.Arrays.stream(e).min().orElse(0), z = 0;
        double[] w = new double[e.length];
        for (int i = 0; i < e.length; i++) { w[i] = Math.exp(-(e[i] - min) / temperature); z += w[i]; }
        List<Score> scores = new ArrayList<>();
        for (int i = 0; i < e.length; i++) scores.add(new Score(names.get(i), e[i], w[i] / z));
        scores.sort(Comparator.comparingDouble(Score::error));
        Score best = scores.getFirst();
        Descriptor bd = ds.get(names.indexOf(best.skill()));
        double margin = scores.size() > 1 ? scores.get(1).error() - best.error() : 1.0;
        double zScore = bd.errStd() > 0 ? (best.error() - bd.errMean()) / bd.errStd() : (best.error() > bd.errMean() ? 10 : -10);
        double novelty = 0.5 / (1 + Math.exp(-zScore)) + 0.25 / (1 + 8 * margin) + 0.25 * (1 - best.confidence());
        boolean novel = novelty > theta;
        return new Route(List.copyOf(scores), best.skill(), novel ? null : best.skill(), novelty, novel);
    }

    private static String f16(float[] v) {
        byte[] b = new byte[2 * v.length];
        for (int i = 0; i < v.length; i++) {
            short s = Float.floatToFloat16(v[i]);
            b[2 * i] = (byte) s;
            b[2 * i + 1] = (byte) (s >> 8);
        }
        return Base64.getEncoder().encodeToString(b);
    }

    /** Eigenvalues of the symmetric {@code a} (destroyed) by cyclic Jacobi rotations; eigenvectors in {@code v}'s columns. */
    private static double[] jacobi(double[][] a, double[][] v) {
        int n = a.length;
        for (int i = 0; i < n; i++) { java.util.Arrays.fill(v[i], 0); v[i][i] = 1; }
        for (int sweep = 0; sweep < 100; sweep++) {
            double off = 0;
            for (int p = 0; p < n; p++) for (int q = p + 1; q < n; q++) off += a[p][q] * a[p][q];
            if (off < 1e-30) break;
            for (int p = 0; p < n; p++)
                for (int q = p + 1; q < n; q++) {
                    if (Math.abs(a[p][q]) < 1e-300) continue;
                    double theta = (a[q][q] - a[p][p]) / (2 * a[p][q]);
                    double t = Math.signum(theta) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
                    if (theta == 0) t = 1;
                    double c = 1 / Math.sqrt(t * t + 1), s = t * c;
                    for (int k = 0; k < n; k++) {
                        double akp = a[k][p], akq = a[k][q];
                        a[k][p] = c * akp - s * akq;
                        a[k][q] = s * akp + c * akq;
                    }
                    for (int k = 0; k < n; k++) {
                        double apk = a[p][k], aqk = a[q][k];
                        a[p][k] = c * apk - s * aqk;
                        a[q][k] = s * apk + c * aqk;
                    }
                    for (int k = 0; k < n; k++) {
                        double vkp = v[k][p], vkq = v[k][q];
                        v[k][p] = c * vkp - s * vkq;
                        v[k][q] = s * vkp + c * vkq;
                    }
                }
        }
        double[] d = new double[n];
        for (int i = 0; i < n; i++) d[i] = a[i][i];
        return d;
    }
}
