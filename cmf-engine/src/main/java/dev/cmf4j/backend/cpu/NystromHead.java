package dev.cmf4j.backend.cpu;

/**
 * The far field of one query head of a sealed ({@code --o1}) attention layer: the keys that left the exact window,
 * compressed onto m landmark keys (cortiq's post-hoc Nyström kernel).
 *
 * <pre>
 *   K̃, Q̃  segment means of the prompt's keys and queries (frozen at sealing)
 *   M      regularized pseudo-inverse of Au = exp(s·Q̃K̃ᵀ), (AuᵀAu + λI)⁻¹Auᵀ in float64
 *   T̂[i] = Σ_far exp(s·Q̃_i·k_j)·v_j,   Ẑ[i] = Σ_far exp(s·Q̃_i·k_j)    (each at its own running-max scale)
 *   a query adds F·M·T̂ to the numerator and F·M·Ẑ to the one joint denominator, F = exp(s·q·K̃ᵀ)
 * </pre>
 *
 * exp(q·k) is a PSD kernel, so the unnormalized skeleton is legal: the factors must not be row-softmaxed. When the
 * far denominator of a row comes out negative (M is indefinite) the row drops its far field (the {@code Aggregate}
 * rectifier). Not thread-safe: one head, one thread at a time.
 */
public final class NystromHead {
    /** λ = RIDGE · mean(diag(AuᵀAu)). */
    private static final double RIDGE = 1e-6;
    /** Floor of the joint denominator. */
    public static final float DEN_EPS = 1e-30f;

    private final int d, dv, m;
    private final float scale;
    private final float[] qTilde, kTilde, mu;
    private final float[] tHat, zHat, mMax;
    private long farLength;

    private NystromHead(int d, int dv, int m, float scale, float[] qTilde, float[] kTilde, float[] mu) {
        this.d = d;
        this.dv = dv;
        this.m = m;
        this.scale = scale;
        this.qTilde = qTilde;
        this.kTilde = kTilde;
        this.mu = mu;
        this.tHat = new float[m * dv];
        this.zHat = new float[m];
        this.mMax = new float[m];
        java.util.Arrays.fill(mMax, Float.NEGATIVE_INFINITY);
    }

    /** The landmark count a prompt of {@code p} rows gets under budget {@code budget}: clamp(p/8, 4, budget). */
    public static int landmarks(int p, int budget) { return Math.max(4, Math.min(budget, p / 8)); }

    /**
     * Seals a head from its prompt: rows {@code 0..p-1} of queries ({@code q[qOff + r·qStride ..]}, d floats) and keys
     * ({@code k[kOff + r·kStride ..]}). The far field starts empty.
     *
     * @param budget the landmark budget m (the count is clamp(p/8, 4, m))
     */
    public static NystromHead seal(float[] q, int qOff, int qStride, float[] k, int kOff, int kStride, int p,
                                   int d, int dv, int budget, float scale) {
        int m = landmarks(p, budget);
        if (p < m) throw new IllegalArgumentException("a prompt of " + p + " rows cannot give " + m + " landmarks");
        double[] qm = segmentMeans(q, qOff, qStride, p, d, m), km = segmentMeans(k, kOff, kStride, p, d, m);
        return new NystromHead(d, dv, m, scale, toFloat(qm), toFloat(km), mixing(qm, km, m, d, scale));
    }

    /**
     * M = (AuᵀAu + λI)⁻¹Auᵀ of Au = exp(s·Q̃K̃ᵀ) from the landmarks' float64 segment means Q̃, K̃ [m, d], in float64,
     * rounded to float once: what {@link #seal} builds, for a device that takes the means from its own memory.
     */
    public static float[] mixing(double[] qm, double[] km, int m, int d, float scale) {
        double[] au = new double[m * m];
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
                double s = 0;
                for (int c = 0; c < d; c++) s += qm[i * d + c] * km[j * d + c];
                au[i * m + j] = Math.exp(s * scale);
            }
        return toFloat(ridgePinv(au, m));
    }

    public int landmarkCount() { return m; }

    /** Keys absorbed into the far field so far. */
    public long farLength() { return farLength; }

    /** Floats this head holds (landmarks, M, accumulators), for memory accounting. */
    public long floats() { return (long) qTilde.length + kTilde.length + mu.length + tHat.length + zHat.length + mMax.length; }

    /**
     * Absorbs a key that leaves the exact window: T̂[i] += e·v, Ẑ[i] += e with e = exp(s·Q̃_i·k − max_i), rescaling
     * landmark i's sums when its running max grows.
     */
    public void absorb(float[] k, int ko, float[] v, int vo) {
        for (int i = 0; i < m; i++) {
            float l = VectorMath.dot(qTilde, i * d, k, ko, d) * scale;
            if (l > mMax[i]) {
                float r = (float) Math.exp(mMax[i] - l);   // 0 on the first key (max −∞)
                zHat[i] *= r;
                for (int c = i * dv, e = c + dv; c < e; c++) tHat[c] *= r;
                mMax[i] = l;
            }
            float e = (float) Math.exp(l - mMax[i]);
            zHat[i] += e;
            VectorMath.axpy(e, v, vo, tHat, i * dv, dv);
        }
        farLength++;
    }

    /**
     * The far side of one query's row, at a scale shared with its near keys: from the near logits' maximum
     * {@code nearMax} it chooses the joint shift, writes the far numerator into {@code out[oo..oo+dv)} (zeros when
     * there is no far field or the row drops it) and returns the far denominator; {@link Row#shift} is the joint
     * shift every near weight must use, exp(ℓ − shift).
     */
    public float far(float[] q, int qo, float nearMax, Row row, float[] out, int oo) {
        java.util.Arrays.fill(out, oo, oo + dv, 0f);
        row.shift = nearMax;
        if (farLength == 0) return 0f;
        float[] fh = row.f(m), u = row.u(m);
        float f = Float.NEGATIVE_INFINITY;
        for (int a = 0; a < m; a++) {
            fh[a] = VectorMath.dot(q, qo, kTilde, a * d, d) * scale;
            f = Math.max(f, fh[a]);
        }
        for (int a = 0; a < m; a++) fh[a] = (float) Math.exp(fh[a] - f);
        float shift = nearMax;
        for (int b = 0; b < m; b++) {
            float s = 0f;
            for (int a = 0; a < m; a++) s += fh[a] * mu[a * m + b];
            u[b] = s;
            shift = Math.max(shift, f + mMax[b]);
        }
        float den = 0f;
        for (int b = 0; b < m; b++) {
            u[b] *= (float) Math.exp(f + mMax[b] - shift);
            den += u[b] * zHat[b];
        }
        row.shift = shift;
        if (!(den >= 0f)) return 0f;   // Aggregate rectifier: an unusable far estimate is dropped for this row
        for (int b = 0; b < m; b++) VectorMath.axpy(u[b], tHat, b * dv, out, oo, dv);
        return den;
    }

    /** Writes the head (sizes, landmarks, M, far sums) for a state snapshot. */
    public void writeTo(java.io.DataOutput out) throws java.io.IOException {
        out.writeInt(d);
        out.writeInt(dv);
        out.writeInt(m);
        out.writeFloat(scale);
        out.writeLong(farLength);
        for (float[] a : new float[][] {qTilde, kTilde, mu, tHat, zHat, mMax}) BinaryArrays.writeFloats(out, a, 0, a.length);
    }

    /** A head as {@link #writeTo} wrote it; its widths must be {@code d} and {@code dv}. */
    public static NystromHead readFrom(java.io.DataInput in, int d, int dv) throws java.io.IOException {
        int rd = in.readInt(), rdv = in.readInt(), m = in.readInt();
        float scale = in.readFloat();
        if (rd != d || rdv != dv || m < 4 || m > 4096)
            throw new java.io.IOException("state snapshot: a sealed head of width " + rd + "/" + rdv + " with " + m
                    + " landmarks, this layer's heads are " + d + "/" + dv);
        long far = in.readLong();
        float[] q = new float[m * d], k = new float[m * d], mu = new float[m * m];
        BinaryArrays.readFloats(in, q, 0, q.length);
        BinaryArrays.readFloats(in, k, 0, k.length);
        BinaryArrays.readFloats(in, mu, 0, mu.length);
        NystromHead h = new NystromHead(d, dv, m, scale, q, k, mu);
        BinaryArrays.readFloats(in, h.tHat, 0, h.tHat.length);
        BinaryArrays.readFloats(in, h.zHat, 0, h.zHat.length);
        BinaryArrays.readFloats(in, h.mMax, 0, h.mMax.length);
        h.farLength = far;
        return h;
    }

    /** A row's scratch (landmark scores, mixing weights) and the joint shift {@link #far} chose; one per thread. */
    public static final class Row {
        public float shift;
        private float[] f = new float[0], u = new float[0];

        float[] f(int n) { return f.length >= n ? f : (f = new float[n]); }

        float[] u(int n) { return u.length >= n ? u : (u = new float[n]); }
    }

    /** Means of {@code m} contiguous segments [i·p/m, (i+1)·p/m) of p rows (float64 sums). */
    private static double[] segmentMeans(float[] x, int off, int stride, int p, int d, int m) {
        double[] out = new double[m * d];
        for (int i = 0; i < m; i++) {
            int lo = (int) ((long) i * p / m), hi = (int) ((long) (i + 1) * p / m);
            for (int j = lo; j < hi; j++)
                for (int c = 0; c < d; c++) out[i * d + c] += x[off + j * stride + c];
            for (int c = 0; c < d; c++) out[i * d + c] /= (hi - lo);
        }
        return out;
    }

    /**
     * (AᵀA + λI)⁻¹Aᵀ of a square matrix by Cholesky, λ = 1e-6·mean(diag(AᵀA)); λ grows tenfold while the
     * factorization fails (the reference's jitter fallback), then a scaled identity.
     */
    static double[] ridgePinv(double[] a, int n) {
        double[] ata = new double[n * n];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int k = 0; k < n; k++) s += a[k * n + i] * a[k * n + j];
                ata[i * n + j] = s;
            }
        double meanDiag = 0;
        for (int i = 0; i < n; i++) meanDiag += ata[i * n + i];
        meanDiag = Math.max(meanDiag / n, Double.MIN_NORMAL);
        double lambda = RIDGE * meanDiag;
        for (int attempt = 0; attempt < 12; attempt++, lambda *= 10) {
            double[] g = ata.clone();
            for (int i = 0; i < n; i++) g[i * n + i] += lambda;
            if (!cholesky(g, n)) continue;
            double[] out = new double[n * n], x = new double[n];
            for (int j = 0; j < n; j++) {   // G·X = Aᵀ column by column: column j of Aᵀ is row j of A
                for (int i = 0; i < n; i++) {
                    double s = a[j * n + i];
                    for (int k = 0; k < i; k++) s -= g[i * n + k] * x[k];
                    x[i] = s / g[i * n + i];
                }
                for (int i = n - 1; i >= 0; i--) {
                    double s = x[i];
                    for (int k = i + 1; k < n; k++) s -= g[k * n + i] * x[k];
                    x[i] = s / g[i * n + i];
                }
                for (int i = 0; i < n; i++) out[i * n + j] = x[i];
            }
            return out;
        }
        double[] id = new double[n * n];
        for (int i = 0; i < n; i++) id[i * n + i] = 1 / meanDiag;
        return id;
    }

    /** In-place lower Cholesky factor of a symmetric matrix; false when a pivot is not positive. */
    private static boolean cholesky(double[] g, int n) {
        for (int i = 0; i < n; i++)
            for (int j = 0; j <= i; j++) {
                double s = g[i * n + j];
                for (int k = 0; k < j; k++) s -= g[i * n + k] * g[j * n + k];
                if (i == j) {
                    if (!(s > 0) || !Double.isFinite(s)) return false;
                    g[i * n + i] = Math.sqrt(s);
                } else {
                    g[i * n + j] = s / g[j * n + j];
                }
            }
        return true;
    }

    private static float[] toFloat(double[] x) {
        float[] f = new float[x.length];
        for (int i = 0; i < x.length; i++) f[i] = (float) x[i];
        return f;
    }
}
