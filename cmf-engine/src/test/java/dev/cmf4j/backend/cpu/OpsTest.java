package dev.cmf4j.backend.cpu;

import dev.cmf4j.backend.Matrix;
import dev.cmf4j.format.DType;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/** Each CPU operator against a plain double-precision reference written from its definition. */
class OpsTest {
    static final Random R = new Random(7);

    static float[] rand(int n) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) R.nextGaussian();
        return x;
    }

    static double maxDiff(float[] a, double[] b) {
        double m = 0;
        for (int i = 0; i < b.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
        return m;
    }

    @Test void dotAndAxpy() {
        for (int n : new int[] {1, 7, 8, 31, 64, 257}) {
            float[] a = rand(n + 3), b = rand(n + 5);
            assertThat((double) VectorMath.dot(a, 3, b, 5, n)).isCloseTo(VectorMath.dotScalar(a, 3, b, 5, n), org.assertj.core.data.Offset.offset(1e-4 * n));
            float[] y = rand(n);
            double[] want = new double[n];
            for (int i = 0; i < n; i++) want[i] = y[i] + 0.5 * a[i];
            VectorMath.axpy(0.5f, a, 0, y, 0, n);
            assertThat(maxDiff(y, want)).isLessThan(1e-5);
        }
    }

    /** The vector argmax is the scalar rule's first largest: random rows, ties, the last element, NaNs, ±0. */
    /** The int8 KV kernels against their scalar sums, at lengths around the 8-lane width. */
    @Test void dotAndAxpyOverBytes() {
        for (int n : new int[] {1, 7, 8, 9, 32, 64, 67}) {
            float[] a = rand(n + 3);
            byte[] x = new byte[n + 5];
            for (int i = 0; i < x.length; i++) x[i] = (byte) (R.nextInt(255) - 127);
            double want = 0;
            for (int i = 0; i < n; i++) want += a[3 + i] * (double) x[5 + i];
            assertThat((double) VectorMath.dotBytes(a, 3, x, 5, n)).isCloseTo(want, org.assertj.core.data.Offset.offset(1e-3 * n));
            float[] y = rand(n + 2), y0 = y.clone();
            VectorMath.axpyBytes(0.25f, x, 5, y, 2, n);
            for (int i = 0; i < n; i++) assertThat(y[2 + i]).isCloseTo(y0[2 + i] + 0.25f * x[5 + i], org.assertj.core.data.Offset.offset(1e-4f));
            assertThat(y[0]).isEqualTo(y0[0]);
        }
    }

    @Test void argmaxIsTheFirstLargest() {
        java.util.Random r = new java.util.Random(3);
        for (int n : new int[] {1, 5, 16, 17, 100, 1000, 4099}) {
            for (int trial = 0; trial < 20; trial++) {
                float[] x = new float[n + 9];
                for (int i = 0; i < x.length; i++) x[i] = trial % 4 == 0 ? r.nextInt(3) : (float) r.nextGaussian();   // ties
                if (trial == 5) x[4 + n - 1] = 99f;
                if (trial == 6 && n > 2) x[4 + n / 2] = Float.NaN;
                if (trial == 7) { x[4] = Float.NaN; }
                if (trial == 8) { java.util.Arrays.fill(x, 0f); x[4 + n / 2] = -0f; }
                assertThat(VectorMath.argmax(x, 4, n)).as("n " + n + " trial " + trial).isEqualTo(VectorMath.argmaxScalar(x, 4, n));
            }
        }
    }

    static Matrix f32Matrix(float[] w, int rows, int cols, Arena arena) {
        MemorySegment seg = arena.allocate(4L * w.length, 64);
        MemorySegment.copy(w, 0, seg, ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 0, w.length);
        return Matrix.of("w", DType.F32, seg, rows, cols);
    }

    static Matrix bf16Matrix(float[] w, int rows, int cols, Arena arena) {
        MemorySegment seg = arena.allocate(2L * w.length, 64);
        for (int i = 0; i < w.length; i++) {
            short b = (short) (Float.floatToIntBits(w[i]) >>> 16);
            seg.set(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 2L * i, b);
            w[i] = Float.intBitsToFloat((b & 0xFFFF) << 16);
        }
        return Matrix.of("w", DType.BF16, seg, rows, cols);
    }

    @Test void matmulEveryLayout() {
        try (Arena arena = Arena.ofConfined()) {
            int rows = 37, cols = 45, tokens = 5;
            for (boolean bf16 : new boolean[] {false, true}) {
                float[] w = rand(rows * cols);
                Matrix m = bf16 ? bf16Matrix(w, rows, cols, arena) : f32Matrix(w, rows, cols, arena);
                CpuMatMul mm = new CpuMatMul();
                // [out, in]: a 10-row slice starting at row 4
                Matrix s = m.slice(4, 10, false);
                float[] x = rand(tokens * cols), y = new float[tokens * 10];
                mm.apply(s, x, tokens, y);
                double[] want = new double[tokens * 10];
                for (int t = 0; t < tokens; t++)
                    for (int o = 0; o < 10; o++)
                        for (int i = 0; i < cols; i++) want[t * 10 + o] += (double) w[(4 + o) * cols + i] * x[t * cols + i];
                assertThat(maxDiff(y, want)).as("out-major bf16=" + bf16).isLessThan(1e-4);
                // [in, out]: x·W over rows 2..2+12
                Matrix im = m.slice(2, 12, true);
                float[] x2 = rand(tokens * 12), y2 = new float[tokens * cols];
                mm.apply(im, x2, tokens, y2);
                double[] want2 = new double[tokens * cols];
                for (int t = 0; t < tokens; t++)
                    for (int i = 0; i < 12; i++)
                        for (int o = 0; o < cols; o++) want2[t * cols + o] += (double) x2[t * 12 + i] * w[(2 + i) * cols + o];
                assertThat(maxDiff(y2, want2)).as("input-major bf16=" + bf16).isLessThan(1e-4);
                float[] y3 = new float[tokens * 10];
                CpuMatMul.reference(s, x, tokens, y3);
                assertThat(maxDiff(y3, want)).isLessThan(1e-5);
            }
        }
    }

    @Test void rmsNormBothStyles() {
        float[] x = rand(33), w = rand(33);
        double ms = 0;
        for (float v : x) ms += v * (double) v;
        double inv = 1 / Math.sqrt(ms / 33 + 1e-6);
        double[] plain = new double[33], offset = new double[33], none = new double[33];
        for (int i = 0; i < 33; i++) {
            plain[i] = x[i] * inv * w[i];
            offset[i] = x[i] * inv * (1 + w[i]);
            none[i] = x[i] * inv;
        }
        float[] out = new float[33];
        RmsNorm.apply(x, 0, out, 0, 33, w, false, 1e-6f);
        assertThat(maxDiff(out, plain)).isLessThan(1e-5);
        RmsNorm.apply(x, 0, out, 0, 33, w, true, 1e-6f);
        assertThat(maxDiff(out, offset)).isLessThan(1e-5);
        RmsNorm.apply(x, 0, out, 0, 33, null, false, 1e-6f);
        assertThat(maxDiff(out, none)).isLessThan(1e-5);
    }

    @Test void rotaryRotatesPairsAndKeepsTheRest() {
        int hd = 16, rot = 8, pos = 13;
        float[] inv = {1f, 0.5f, 0.1f, 0f};
        float[] x = rand(2 * hd), orig = x.clone();
        float[] cos = new float[4], sin = new float[4];
        Rotary.table(pos, inv, 1.25f, cos, sin);
        Rotary.apply(x, 0, 2, hd, rot, cos, sin);
        for (int h = 0; h < 2; h++) {
            int b = h * hd;
            for (int i = 0; i < 4; i++) {
                double a = pos * (double) inv[i], c = Math.cos(a) * 1.25, s = Math.sin(a) * 1.25;
                assertThat((double) x[b + i]).isCloseTo(orig[b + i] * c - orig[b + i + 4] * s, org.assertj.core.data.Offset.offset(1e-5));
                assertThat((double) x[b + i + 4]).isCloseTo(orig[b + i + 4] * c + orig[b + i] * s, org.assertj.core.data.Offset.offset(1e-5));
            }
            for (int i = rot; i < hd; i++) assertThat(x[b + i]).isEqualTo(orig[b + i]);
        }
    }

    @Test void attentionMatchesNaiveWithWindowSinkAndSoftcap() {
        int hd = 8, kvDim = 16, n = 20, window = 5;
        KvCache c = new KvCache(kvDim, window, 100);
        float[][] keys = new float[n][], vals = new float[n][];
        // 15 committed positions (ring keeps 5), then a pending chunk of 5
        for (int p = 0; p < n; p++) { keys[p] = rand(kvDim); vals[p] = rand(kvDim); }
        for (int p = 0; p < 15; p++) {
            c.beginChunk(p, 1);
            System.arraycopy(keys[p], 0, c.pendingKeys(), 0, kvDim);
            System.arraycopy(vals[p], 0, c.pendingValues(), 0, kvDim);
            c.commit();
        }
        c.beginChunk(15, 5);
        for (int i = 0; i < 5; i++) {
            System.arraycopy(keys[15 + i], 0, c.pendingKeys(), i * kvDim, kvDim);
            System.arraycopy(vals[15 + i], 0, c.pendingValues(), i * kvDim, kvDim);
        }
        float[] q = rand(hd);
        float scale = 0.3f, cap = 2f, sink = 0.7f;
        for (int p = 15; p < 20; p++) {
            int from = p - window + 1;
            float[] out = new float[hd];
            AttentionKernel.attend(q, 0, hd, c, hd, from, p, scale, cap, sink, new float[16], out, 0);
            double[] s = new double[p - from + 1];
            double max = sink, sum = 0;
            for (int j = from; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += q[i] * (double) keys[j][hd + i];
                s[j - from] = Math.tanh(d * scale / cap) * cap;
                max = Math.max(max, s[j - from]);
            }
            for (int j = 0; j < s.length; j++) sum += Math.exp(s[j] - max);
            sum += Math.exp(sink - max);
            double[] want = new double[hd];
            for (int j = from; j <= p; j++)
                for (int i = 0; i < hd; i++) want[i] += Math.exp(s[j - from] - max) / sum * vals[j][hd + i];
            assertThat(maxDiff(out, want)).as("position " + p).isLessThan(1e-5);
        }
        assertThat(c.capacity()).isEqualTo(window);
    }

    @Test void causalConvCarriesItsState() {
        int ch = 3, k = 4, T = 9;
        float[] w = rand(ch * k), x = rand(T * ch);
        double[] want = new double[T * ch];
        for (int t = 0; t < T; t++)
            for (int c = 0; c < ch; c++) {
                double s = 0;
                for (int j = 0; j < k; j++) {
                    int src = t - (k - 1) + j;
                    if (src >= 0) s += w[c * k + j] * (double) x[src * ch + c];
                }
                want[t * ch + c] = s / (1 + Math.exp(-s));
            }
        // in pieces of 2, 1, 4, 2 tokens
        float[] state = new float[ch * (k - 1)], win = new float[16], got = new float[T * ch];
        int p = 0;
        for (int len : new int[] {2, 1, 4, 2}) {
            float[] piece = java.util.Arrays.copyOfRange(x, p * ch, (p + len) * ch);
            CausalConv1d.apply(piece, 0, len, ch, w, null, k, state, win);
            System.arraycopy(piece, 0, got, p * ch, len * ch);
            p += len;
        }
        assertThat(maxDiff(got, want)).isLessThan(1e-5);
    }

    /** The delta rule straight from its definition, in double. */
    static double[] naiveDelta(int T, int dk, int dv, float[] q, float[] k, float[] v, float[] g, float[] b, double[] s) {
        double[] out = new double[T * dv];
        for (int t = 0; t < T; t++) {
            double decay = Math.exp(g[t]);
            for (int i = 0; i < dk * dv; i++) s[i] *= decay;
            double[] mem = new double[dv];
            for (int a = 0; a < dk; a++) for (int c = 0; c < dv; c++) mem[c] += s[a * dv + c] * k[t * dk + a];
            for (int a = 0; a < dk; a++)
                for (int c = 0; c < dv; c++) s[a * dv + c] += k[t * dk + a] * (v[t * dv + c] - mem[c]) * b[t];
            for (int a = 0; a < dk; a++) for (int c = 0; c < dv; c++) out[t * dv + c] += s[a * dv + c] * q[t * dk + a];
        }
        return out;
    }

    @Test void gatedDeltaRuleChunkedEqualsRecurrentEqualsDefinition() {
        int dk = 8, dv = 6;
        for (int T : new int[] {1, 5, 64, 100, 130}) {
            float[] q = rand(T * dk), k = rand(T * dk), v = rand(T * dv), g = new float[T], b = new float[T];
            for (int t = 0; t < T; t++) {
                normalize(q, t * dk, dk, (float) (1 / Math.sqrt(dk)));
                normalize(k, t * dk, dk, 1f);
                g[t] = (float) -Math.abs(R.nextGaussian() * 0.3);
                b[t] = (float) (1 / (1 + Math.exp(-R.nextGaussian())));
            }
            float[] s0 = rand(dk * dv);
            double[] sRef = new double[dk * dv];
            for (int i = 0; i < sRef.length; i++) sRef[i] = s0[i];
            double[] want = naiveDelta(T, dk, dv, q, k, v, g, b, sRef);
            float[] sRec = s0.clone(), sChunk = s0.clone(), oRec = new float[T * dv], oChunk = new float[T * dv];
            GatedDeltaRule.recurrent(T, dk, dv, q, dk, 0, k, 0, v, dv, 0, g, b, 1, 0, sRec, 0, oRec, dv, 0, new float[dv]);
            GatedDeltaRule.chunked(T, dk, dv, q, dk, 0, k, 0, v, dv, 0, g, b, 1, 0, sChunk, 0, oChunk, dv, 0,
                    GatedDeltaRule.workspace(dk, dv));
            assertThat(maxDiff(oRec, want)).as("recurrent T=" + T).isLessThan(1e-4);
            assertThat(maxDiff(oChunk, want)).as("chunked T=" + T).isLessThan(1e-3);
            assertThat(maxDiff(sChunk, sRef)).as("chunked state T=" + T).isLessThan(1e-3);
        }
    }

    static void normalize(float[] x, int o, int n, float scale) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += x[o + i] * (double) x[o + i];
        for (int i = 0; i < n; i++) x[o + i] = (float) (x[o + i] / Math.sqrt(ss + 1e-6) * scale);
    }

    @Test void softmaxAndTopK() {
        float[] x = {1f, 3f, 3f, 2f};
        int[] idx = new int[3];
        Softmax.topK(x, 4, 3, idx);
        assertThat(idx).containsExactly(1, 2, 3);
        Softmax.apply(x, 0, 4);
        double sum = 0;
        for (float v : x) sum += v;
        assertThat(sum).isCloseTo(1.0, org.assertj.core.data.Offset.offset(1e-6));
        assertThat((double) x[1] / x[0]).isCloseTo(Math.exp(2), org.assertj.core.data.Offset.offset(1e-4));
    }
}
