package dev.cmf4j.backend.cpu;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.nio.file.Path;

/**
 * A Nyström kernel golden ({@code fixtures/o1/nystrom_golden.json}: one head's q, k, v, the prefill length p and the
 * float64 outputs with and without sinks) replayed through the float32 streaming kernel: the prompt seals the head,
 * then each decode row enters the window first and attends to sinks, window and far field under one denominator.
 * Only the decode rows p..t−1 are compared (the prompt runs exact in a runtime).
 */
public final class NystromGolden {
    /** The golden README's bounds over the decode rows. */
    public static final double MAX_TOL = 1e-3, MEAN_TOL = 1e-4;

    private final int d, dv, m, w, t, p, sink;
    private final float[] q, k, v;
    private final double[] out, outSink0;

    private NystromGolden(JsonNode j) {
        d = need(j, "d"); dv = need(j, "dv"); m = need(j, "m"); w = need(j, "w"); t = need(j, "t"); p = need(j, "p");
        sink = need(j, "sink");
        if (d < 1 || dv < 1 || m < 4 || w < 1 || sink < 0 || p < 1 || t <= p)
            throw new IllegalArgumentException("golden sizes out of range: d " + d + ", dv " + dv + ", m " + m + ", w " + w
                    + ", t " + t + ", p " + p + ", sink " + sink);
        if (p <= w + sink) throw new IllegalArgumentException("golden prompt p=" + p + " does not pass the window and sinks");
        q = floats(j, "q", t, d);
        k = floats(j, "k", t, d);
        v = floats(j, "v", t, dv);
        out = doubles(j, "out", t, dv);
        outSink0 = doubles(j, "out_sink0", t, dv);
    }

    public static NystromGolden load(Path file) throws IOException {
        return new NystromGolden(new ObjectMapper().readTree(file.toFile()));
    }

    /** Max and mean |Δ| of one output set over the decode rows. */
    public record Error(String set, double max, double mean) {
        public boolean ok() { return max < MAX_TOL && mean < MEAN_TOL; }
    }

    /** Both output sets through this class's float32 kernel: {@code out} (the file's sinks) and {@code out_sink0}. */
    public Error[] check() { return check(NystromGolden::run); }

    /** Both output sets through {@code kernel} (a device's streaming kernel, say). */
    public Error[] check(Kernel kernel) {
        return new Error[] {compare("out", kernel.run(this, sink), out), compare("out_sink0", kernel.run(this, 0), outSink0)};
    }

    /** A streaming implementation: the outputs of a golden's decode rows p..t−1, [t−p, dv], with {@code sinks} sinks. */
    @FunctionalInterface
    public interface Kernel {
        float[] run(NystromGolden golden, int sinks);
    }

    public int d() { return d; }
    public int dv() { return dv; }
    /** The landmark budget. */
    public int m() { return m; }
    /** The exact window. */
    public int w() { return w; }
    /** Rows (prompt and decode). */
    public int t() { return t; }
    /** The prompt's rows. */
    public int p() { return p; }
    /** Queries [t, d], keys [t, d], values [t, dv] (float32; the arrays themselves: do not change them). */
    public float[] q() { return q; }
    public float[] k() { return k; }
    public float[] v() { return v; }

    public String describe() {
        return "d " + d + ", dv " + dv + ", m " + m + ", w " + w + ", t " + t + ", p " + p + ", sink " + sink;
    }

    /** The streaming kernel's output of rows p..t−1, [t−p, dv]. */
    private float[] run(int sinks) {
        float scale = (float) (1 / Math.sqrt(d));
        NystromHead head = NystromHead.seal(q, 0, d, k, 0, d, p, d, dv, m, scale);
        float[] ringK = new float[w * d], ringV = new float[w * dv];
        // replay the prompt's post-sink keys into the ring ({filled, oldest}), evicting into the far field
        int[] ring = {0, 0};
        for (int j = sinks; j < p; j++) advance(head, ringK, ringV, ring, j);
        float[] res = new float[(t - p) * dv], scores = new float[sinks + w];
        NystromHead.Row row = new NystromHead.Row();
        for (int r = p; r < t; r++) {
            advance(head, ringK, ringV, ring, r);   // the token is in its own window
            int n = ring[0];
            float max = Float.NEGATIVE_INFINITY;
            for (int s = 0; s < sinks; s++) max = Math.max(max, scores[s] = VectorMath.dot(q, r * d, k, s * d, d) * scale);
            for (int s = 0; s < n; s++) max = Math.max(max, scores[sinks + s] = VectorMath.dot(q, r * d, ringK, s * d, d) * scale);
            int oo = (r - p) * dv;
            float den = head.far(q, r * d, max, row, res, oo);
            for (int s = 0; s < sinks + n; s++) {
                float e = (float) Math.exp(scores[s] - row.shift);
                den += e;
                if (s < sinks) VectorMath.axpy(e, v, s * dv, res, oo, dv);
                else VectorMath.axpy(e, ringV, (s - sinks) * dv, res, oo, dv);
            }
            float inv = 1f / Math.max(den, NystromHead.DEN_EPS);
            for (int c = 0; c < dv; c++) res[oo + c] *= inv;
        }
        return res;
    }

    /** Row j's key and value into the ring ({filled, oldest}); a full ring first hands its oldest key to the far field. */
    private void advance(NystromHead head, float[] ringK, float[] ringV, int[] ring, int j) {
        int slot;
        if (ring[0] == w) {
            slot = ring[1];
            head.absorb(ringK, slot * d, ringV, slot * dv);
            ring[1] = (ring[1] + 1) % w;
        } else {
            slot = ring[0]++;
        }
        System.arraycopy(k, j * d, ringK, slot * d, d);
        System.arraycopy(v, j * dv, ringV, slot * dv, dv);
    }

    private Error compare(String set, float[] got, double[] want) {
        double max = 0, sum = 0;
        int n = (t - p) * dv;
        for (int i = 0; i < n; i++) {
            double e = Math.abs(got[i] - want[p * dv + i]);
            if (Double.isNaN(e)) e = Double.POSITIVE_INFINITY;
            max = Math.max(max, e);
            sum += e;
        }
        return new Error(set, max, sum / n);
    }

    private static int need(JsonNode j, String key) {
        JsonNode n = j.get(key);
        if (n == null || !n.canConvertToInt()) throw new IllegalArgumentException("golden field '" + key + "' missing or not an integer");
        return n.intValue();
    }

    private static float[] floats(JsonNode j, String key, int rows, int cols) {
        double[] x = doubles(j, key, rows, cols);
        float[] f = new float[x.length];
        for (int i = 0; i < x.length; i++) f[i] = (float) x[i];
        return f;
    }

    private static double[] doubles(JsonNode j, String key, int rows, int cols) {
        JsonNode a = j.get(key);
        if (a == null || !a.isArray() || a.size() != rows)
            throw new IllegalArgumentException("golden field '" + key + "' must be " + rows + " rows");
        double[] out = new double[rows * cols];
        for (int r = 0; r < rows; r++) {
            JsonNode row = a.get(r);
            if (!row.isArray() || row.size() != cols)
                throw new IllegalArgumentException("golden field '" + key + "' row " + r + " must hold " + cols + " numbers");
            for (int c = 0; c < cols; c++) out[r * cols + c] = row.get(c).asDouble();
        }
        return out;
    }
}
