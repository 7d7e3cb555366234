package dev.cmf4j.runtime;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.State;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Routes a prompt to the skill that fits it ("recon-argmin", CMF_FORMAT.md §1.7), as the reference runtime's legacy
 * (v1 record) router does. φ(x) is the backbone's hidden state after layer {@code phi_layer}, mean-pooled over the
 * prompt, and scaled to unit length for metric {@code mse_unit}. Each skill holds an affine subspace (mean μ and an
 * orthonormal basis B of rank r); its raw error is ‖r − B·Bᵀ·r‖², r = φ − μ, and the least raw error wins.
 * E = raw / ‖φ‖² (so E = raw for {@code mse_unit}, at most (1 + ‖μ‖)² ≤ 4). With the header's {@code routing} calibration
 * (temperature T, novelty threshold θ): confidence softmax(−raw/T), novelty 0.5·σ(z) + 0.25/(1 + 8·margin) +
 * 0.25·(1 − confidence), z = (raw − err_mean)/err_std of the winner, margin = 1/(1 + raw₁) − 1/(1 + raw₂); a prompt
 * whose novelty exceeds θ goes to the backbone. Without one: no confidence, and a prompt whose least E exceeds
 * {@link #FALLBACK_TAU} is novel. {@link #calibrate} fits T and θ on the skills' held-out φ ({@link #fit} keeps the
 * last fifth of a skill's prompts out of its subspace for that).
 */
public final class SkillRouter {
    private SkillRouter() {}

    /** The novelty cut on the least E when the file carries no calibration (the reference's {@code CMF_OOD_TAU} default). */
    public static final double FALLBACK_TAU = 0.30;
    /** The target false-novel rate of in-scope held-out prompts θ is fitted to by default (the reference's). */
    public static final double DEFAULT_TARGET_FPR = 0.05;
    private static final double W_ENERGY = 0.5, W_MARGIN = 0.25, W_CONF = 0.25, MARGIN_K = 8;

    /**
     * A skill's routing subspace; {@code basis} is rank × hidden, row-major, orthonormal rows; {@code holdout} holds
     * the held-out φ (unit length for {@code mse_unit}) that calibration reads, n × hidden, or is empty.
     */
    public record Descriptor(String metric, int phiLayer, float[] mean, float[] basis, int rank, Double errMean,
                             Double errStd, float[] holdout) {
        public Descriptor {
            if (!metric.equals("mse") && !metric.equals("mse_unit"))
                throw new IllegalArgumentException("unknown routing metric '" + metric + "' (mse or mse_unit)");
            if (holdout == null) holdout = new float[0];
        }

        boolean unit() { return metric.equals("mse_unit"); }

        /** φ as this descriptor compares it: scaled to unit length for {@code mse_unit}. */
        float[] prepare(float[] phi) { return unit() ? unitCopy(phi) : phi; }

        /** The raw squared reconstruction error of {@code phi} (already {@link #prepare prepared}). */
        public double rawError(float[] phi) {
            int h = mean.length;
            double total = 0;
            double[] r = new double[h];
            for (int i = 0; i < h; i++) { r[i] = phi[i] - mean[i]; total += r[i] * r[i]; }
            double kept = 0;
            for (int k = 0; k < rank; k++) {
                double c = 0;
                for (int i = 0; i < h; i++) c += basis[k * h + i] * r[i];
                kept += c * c;
            }
            return Math.max(0, total - kept);
        }

        /** This skill's row for {@code phi} (raw, not yet prepared). */
        Row row(String skill, float[] phi) {
            float[] p = prepare(phi);
            double norm = 0;
            for (float v : p) norm += (double) v * v;
            double raw = rawError(p);
            return new Row(skill, raw, raw / Math.max(norm, 1e-12), errMean, errStd);
        }

        /** The number of held-out φ. */
        public int holdoutCount() { return holdout.length / mean.length; }

        /** The registry's {@code selection} block (mean, basis and held-out φ as base64 little-endian f16). */
        public SkillRecord.Selection selection() {
            int n = holdoutCount();
            return new SkillRecord.Selection(metric, phiLayer, f16(mean), f16(basis), rank, errMean, errStd,
                    n == 0 ? null : TextNode.valueOf(f16(holdout)), n == 0 ? null : n, Map.of());
        }

        /** The descriptor a record carries, or null when it has none. */
        public static Descriptor of(SkillRecord r, int hidden) {
            SkillRecord.Selection s = r.selection();
            if (s == null || s.phiLayer() == null || s.rank() == null || s.mean() == null || s.basis() == null) return null;
            float[] mean = s.meanValues(), basis = s.basisValues();
            if (mean.length != hidden || basis.length != (long) s.rank() * hidden)
                throw new IllegalArgumentException("skill '" + r.id() + "': routing subspace of " + mean.length + " / "
                        + basis.length + " values does not fit hidden size " + hidden + " and rank " + s.rank());
            float[] hold = new float[0];
            if (s.holdout() != null && s.holdout().isTextual() && s.holdoutN() != null) {
                hold = fromF16(r.id(), s.holdout().asText());
                if (hold.length != (long) s.holdoutN() * hidden)
                    throw new IllegalArgumentException("skill '" + r.id() + "': " + hold.length + " held-out values are not "
                            + s.holdoutN() + " × hidden size " + hidden);
            }
            try {
                return new Descriptor(s.metric() == null ? "mse_unit" : s.metric(), s.phiLayer(), mean, basis, s.rank(),
                        s.errMean(), s.errStd(), hold);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("skill '" + r.id() + "': " + e.getMessage());
            }
        }
    }

    /** One skill's errors for a φ: raw squared, and E = raw/‖φ‖²; with the skill's spread of its own raw errors. */
    public record Row(String skill, double raw, double error, Double errMean, Double errStd) {}

    /** The header's {@code routing} block. */
    public record Calibration(double temperature, double noveltyTheta, int samples, double targetFpr) {
        /** The block of a header, or null when it has none (or it lacks a temperature or θ). */
        public static Calibration of(JsonNode routing) {
            if (routing == null || !routing.isObject() || !routing.path("temperature").isNumber()
                    || !routing.path("novelty_theta").isNumber()) return null;
            return new Calibration(routing.path("temperature").asDouble(), routing.path("novelty_theta").asDouble(),
                    routing.path("samples").asInt(0), routing.path("target_fpr").asDouble(DEFAULT_TARGET_FPR));
        }

        public ObjectNode toJson() {
            ObjectNode o = JsonNodeFactory.instance.objectNode();
            o.put("temperature", temperature).put("novelty_theta", noveltyTheta).put("samples", samples).put("target_fpr", targetFpr);
            return o;
        }
    }

    /** One skill's E and its calibrated confidence (0 without a calibration). */
    public record Score(String skill, double error, double raw, double confidence) {}

    /**
     * Every routable skill's score (best first), the skill of least error ({@code best}), the winner (null when the
     * prompt is novel or no skill has a descriptor: the backbone), the novelty score (NaN without a calibration) and
     * whether the file is calibrated.
     */
    public record Route(List<Score> scores, String best, String winner, double novelty, boolean novel, boolean calibrated) {
        /** The blend weights softmax(−raw/T) by skill (the calibrated confidences). */
        public Map<String, Double> weights() {
            if (!calibrated) throw new IllegalStateException("blend weights need the file's routing calibration");
            Map<String, Double> w = new java.util.LinkedHashMap<>();
            for (Score s : scores) w.put(s.skill(), s.confidence());
            return w;
        }
    }

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

    /** How many of {@code n} prompts {@link #fit} holds out: a fifth, at least 1, leaving at least 2 to fit. */
    public static int holdoutCount(int n) { return Math.clamp(n / 5, 1, Math.max(n - 2, 1)); }

    /**
     * The {@code mse_unit} subspace of {@code prompts}' unit φ (the reference's recipe): the last
     * {@link #holdoutCount} prompts are held out (carried in the descriptor for {@link #calibrate}); on the rest, their
     * mean and top {@code rank} principal directions (at most their number − 1), and the mean and spread of their raw
     * errors against the descriptor as stored (f16).
     */
    public static Descriptor fit(Graph g, List<int[]> prompts, int phiLayer, int rank) {
        if (prompts.size() < 3)
            throw new IllegalArgumentException("a routing subspace needs at least 3 prompts (one is held out for calibration), got "
                    + prompts.size());
        if (rank < 1) throw new IllegalArgumentException("rank must be >= 1");
        int n = prompts.size(), h = g.hidden(), hold = holdoutCount(n), nt = n - hold;
        float[][] phis = new float[n][];
        for (int i = 0; i < n; i++) phis[i] = unitCopy(phi(g, prompts.get(i), phiLayer));
        float[] mean = new float[h];
        for (int j = 0; j < nt; j++) for (int i = 0; i < h; i++) mean[i] += phis[j][i] / nt;
        double[][] x = new double[nt][h];
        for (int j = 0; j < nt; j++) for (int i = 0; i < h; i++) x[j][i] = phis[j][i] - mean[i];
        // principal directions from the nt × nt Gram matrix: b = Xᵀv / √λ
        double[][] gram = new double[nt][nt];
        for (int a = 0; a < nt; a++)
            for (int b = a; b < nt; b++) {
                double s = 0;
                for (int i = 0; i < h; i++) s += x[a][i] * x[b][i];
                gram[a][b] = gram[b][a] = s;
            }
        double[][] vec = new double[nt][nt];
        double[] val = jacobi(gram, vec);
        Integer[] order = new Integer[nt];
        for (int i = 0; i < nt; i++) order[i] = i;
        Arrays.sort(order, Comparator.comparingDouble(i -> -val[i]));
        double top = Math.max(val[order[0]], 0);
        int r = 0;
        while (r < Math.min(rank, nt - 1) && val[order[r]] > 1e-9 * top && val[order[r]] > 0) r++;
        float[] basis = new float[r * h];
        for (int k = 0; k < r; k++) {
            int e = order[k];
            double norm = Math.sqrt(val[e]);
            for (int i = 0; i < h; i++) {
                double s = 0;
                for (int j = 0; j < nt; j++) s += x[j][i] * vec[j][e];
                basis[k * h + i] = (float) (s / norm);
            }
        }
        float[] heldOut = new float[hold * h];
        for (int j = 0; j < hold; j++) System.arraycopy(phis[nt + j], 0, heldOut, j * h, h);
        Descriptor stored = new Descriptor("mse_unit", phiLayer, f16Round(mean), f16Round(basis), r, null, null, null);
        double m = 0, v = 0;
        for (int j = 0; j < nt; j++) m += stored.rawError(phis[j]) / nt;
        for (int j = 0; j < nt; j++) v += Math.pow(stored.rawError(phis[j]) - m, 2) / nt;
        return new Descriptor("mse_unit", phiLayer, mean, basis, r, m, Math.max(Math.sqrt(v), 1e-4), heldOut);
    }

    /**
     * Routes {@code ids} among the {@code skills} that carry a descriptor and can run on {@code g}.
     *
     * @param routing the header's {@code routing} block; may be null (uncalibrated: E against {@link #FALLBACK_TAU})
     */
    public static Route route(Graph g, int[] ids, List<SkillRecord> skills, JsonNode routing) {
        List<Row> rows = new ArrayList<>();
        Map<Integer, float[]> phis = new HashMap<>();
        for (SkillRecord s : skills) {
            Descriptor d = Descriptor.of(s, g.hidden());
            if (d == null || g.skillProblem(s.id()) != null) continue;
            rows.add(d.row(s.id(), phis.computeIfAbsent(d.phiLayer(), l -> phi(g, ids, l))));
        }
        return decide(rows, Calibration.of(routing), FALLBACK_TAU);
    }

    /** The decision for one φ's rows: the reference's recipe (the class comment); {@code c} null: uncalibrated. */
    public static Route decide(List<Row> rows, Calibration c, double fallbackTau) {
        if (rows.isEmpty()) return new Route(List.of(), null, null, 1.0, true, c != null);
        List<Row> sorted = new ArrayList<>(rows);
        sorted.sort(Comparator.comparingDouble(Row::raw));
        Row top = sorted.getFirst();
        if (c == null) {
            List<Score> scores = sorted.stream().map(r -> new Score(r.skill(), r.error(), r.raw(), 0)).toList();
            boolean novel = top.error() > fallbackTau;
            return new Route(scores, top.skill(), novel ? null : top.skill(), Double.NaN, novel, false);
        }
        double t = Math.max(c.temperature(), 1e-3), z = 0;
        double[] w = new double[sorted.size()];
        for (int i = 0; i < w.length; i++) { w[i] = Math.exp(-(sorted.get(i).raw() - top.raw()) / t); z += w[i]; }
        List<Score> scores = new ArrayList<>();
        for (int i = 0; i < w.length; i++) scores.add(new Score(sorted.get(i).skill(), sorted.get(i).error(), sorted.get(i).raw(), w[i] / z));
        double confidence = scores.getFirst().confidence();
        double margin = sorted.size() > 1 ? 1 / (1 + top.raw()) - 1 / (1 + sorted.get(1).raw()) : 1 / (1 + top.raw());
        double em = top.errMean() == null ? 0 : top.errMean(), es = Math.max(top.errStd() == null ? 1 : top.errStd(), 1e-4);
        double novelty = W_ENERGY * sigmoid((top.raw() - em) / es) + W_MARGIN / (1 + margin * MARGIN_K) + W_CONF * (1 - confidence);
        boolean novel = novelty > c.noveltyTheta();
        return new Route(List.copyOf(scores), top.skill(), novel ? null : top.skill(), novelty, novel, true);
    }

    /**
     * Fits the header's calibration on the skills' held-out φ (the reference's {@code calibrate}): T on a geometric
     * grid (1e-3 to 1e6, steps of ×1.15) minimising the negative log-likelihood of each sample's own skill under
     * softmax(−raw/T) over the skills sharing its {@code phi_layer}; then θ the (1 − {@code targetFpr}) quantile of
     * those samples' novelty (+1e-4, at most 0.999), so about {@code targetFpr} of in-scope prompts read as novel.
     * Null when no skill carries held-out φ.
     */
    public static Calibration calibrate(List<SkillRecord> skills, int hidden, double targetFpr) {
        if (!(targetFpr >= 0 && targetFpr <= 1)) throw new IllegalArgumentException("target fpr must lie in [0, 1], got " + targetFpr);
        List<String> ids = new ArrayList<>();
        List<Descriptor> ds = new ArrayList<>();
        for (SkillRecord s : skills) {
            Descriptor d = Descriptor.of(s, hidden);
            if (d != null) { ids.add(s.id()); ds.add(d); }
        }
        List<List<Row>> samples = new ArrayList<>();
        List<Integer> own = new ArrayList<>();
        for (int si = 0; si < ds.size(); si++) {
            Descriptor d = ds.get(si);
            for (int k = 0; k < d.holdoutCount(); k++) {
                float[] phi = Arrays.copyOfRange(d.holdout(), k * hidden, (k + 1) * hidden);
                List<Row> rows = new ArrayList<>();
                for (int j = 0; j < ds.size(); j++) {
                    if (j == si) own.add(rows.size());
                    if (ds.get(j).phiLayer() == d.phiLayer()) rows.add(ds.get(j).row(ids.get(j), phi));
                }
                samples.add(rows);
            }
        }
        if (samples.isEmpty()) return null;
        double bestT = 1, bestNll = Double.POSITIVE_INFINITY;
        for (double t = 1e-3; t <= 1e6; t *= 1.15) {
            double nll = 0;
            for (int i = 0; i < samples.size(); i++) {
                List<Row> rows = samples.get(i);
                double min = rows.stream().mapToDouble(Row::raw).min().orElse(0), z = 0;
                for (Row r : rows) z += Math.exp(-(r.raw() - min) / t);
                nll -= Math.log(Math.max(Math.exp(-(rows.get(own.get(i)).raw() - min) / t) / z, 1e-9));
            }
            if (nll < bestNll) { bestNll = nll; bestT = t; }
        }
        Calibration cal = new Calibration(bestT, 0.5, samples.size(), targetFpr);
        double[] nov = samples.stream().mapToDouble(rows -> decide(rows, cal, 1.0).novelty()).filter(Double::isFinite).sorted().toArray();
        double theta = nov.length == 0 ? 0.5
                : Math.min(nov[(int) Math.min(Math.round((nov.length - 1) * (1 - targetFpr)), nov.length - 1)] + 1e-4, 0.999);
        return new Calibration(bestT, theta, samples.size(), targetFpr);
    }

    private static double sigmoid(double x) { return 1 / (1 + Math.exp(-x)); }

    static float[] unitCopy(float[] v) {
        double n = 0;
        for (float x : v) n += (double) x * x;
        n = Math.sqrt(n);
        if (n == 0) return v.clone();
        float[] out = new float[v.length];
        for (int i = 0; i < v.length; i++) out[i] = (float) (v[i] / n);
        return out;
    }

    private static float[] f16Round(float[] v) {
        float[] out = new float[v.length];
        for (int i = 0; i < v.length; i++) out[i] = Float.float16ToFloat(Float.floatToFloat16(v[i]));
        return out;
    }

    private static float[] fromF16(String skill, String b64) {
        byte[] b;
        try {
            b = Base64.getDecoder().decode(b64);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("skill '" + skill + "': held-out φ are not base64 f16 data: " + e.getMessage());
        }
        float[] out = new float[b.length / 2];
        for (int i = 0; i < out.length; i++) out[i] = Float.float16ToFloat((short) ((b[2 * i] & 0xFF) | (b[2 * i + 1] & 0xFF) << 8));
        return out;
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
        for (int i = 0; i < n; i++) { Arrays.fill(v[i], 0); v[i][i] = 1; }
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
