package dev.cmf4j.backend.cpu;

import java.util.Arrays;

/**
 * The gated delta rule of one head, state S[dk, dv]:
 * <pre>
 *   S ← S·exp(g);  δ = β·(v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀq
 * </pre>
 * {@link #recurrent} applies it token by token (decode); {@link #chunked} computes the same for a block of
 * tokens with the WY-style chunk form transformers uses for prompts (chunk 64), so a prompt through this
 * engine rounds like a prompt through transformers. q and k arrive L2-normalized, q already scaled.
 */
public final class GatedDeltaRule {
    private GatedDeltaRule() {}

    /** transformers' chunk length for the chunked rule. */
    public static final int CHUNK = 64;

    /**
     * Token by token.
     *
     * @param q,k    [tokens, stride] with this head at qo/ko (dk floats)
     * @param v      [tokens, vStride] with this head at vo (dv floats)
     * @param g,beta [tokens, gStride] with this head at go
     * @param s      state, dk·dv floats at so (row = key dim)
     * @param out    [tokens, oStride] with this head at oo
     */
    public static void recurrent(int tokens, int dk, int dv, float[] q, int qk, int qo, float[] k, int ko,
                                 float[] v, int vStride, int vo, float[] g, float[] beta, int gStride, int go,
                                 float[] s, int so, float[] out, int oStride, int oo, float[] scratch) {
        float[] mem = scratch;
        for (int t = 0; t < tokens; t++) {
            float decay = (float) Math.exp(g[t * gStride + go]);
            float b = beta[t * gStride + go];
            int qb = t * qk + qo, kb = t * qk + ko, vb = t * vStride + vo;
            for (int i = 0; i < dk * dv; i++) s[so + i] *= decay;
            Arrays.fill(mem, 0, dv, 0f);
            for (int a = 0; a < dk; a++) VectorMath.axpy(k[kb + a], s, so + a * dv, mem, 0, dv);
            for (int c = 0; c < dv; c++) mem[c] = (v[vb + c] - mem[c]) * b;
            for (int a = 0; a < dk; a++) VectorMath.axpy(k[kb + a], mem, 0, s, so + a * dv, dv);
            int ob = t * oStride + oo;
            Arrays.fill(out, ob, ob + dv, 0f);
            for (int a = 0; a < dk; a++) VectorMath.axpy(q[qb + a], s, so + a * dv, out, ob, dv);
        }
    }

    /**
     * The chunked form over {@code tokens} tokens (any count; the last chunk is zero-padded). Same
     * arguments as {@link #recurrent}; {@code ws} is a workspace from {@link #workspace(int, int)}.
     */
    public static void chunked(int tokens, int dk, int dv, float[] q, int qk, int qo, float[] k, int ko,
                               float[] v, int vStride, int vo, float[] g, float[] beta, int gStride, int go,
                               float[] s, int so, float[] out, int oStride, int oo, Workspace ws) {
        final int C = CHUNK;
        for (int c0 = 0; c0 < tokens; c0 += C) {
            int n = Math.min(C, tokens - c0);
            float[] qc = ws.q, kc = ws.k, kb = ws.kBeta, vb = ws.vBeta, gc = ws.g, attn = ws.attn, decay = ws.decay;
            Arrays.fill(qc, 0f); Arrays.fill(kc, 0f); Arrays.fill(kb, 0f); Arrays.fill(vb, 0f); Arrays.fill(gc, 0f);
            for (int i = 0; i < n; i++) {
                int t = c0 + i;
                float bt = beta[t * gStride + go];
                for (int a = 0; a < dk; a++) {
                    qc[i * dk + a] = q[t * qk + qo + a];
                    kc[i * dk + a] = k[t * qk + ko + a];
                    kb[i * dk + a] = kc[i * dk + a] * bt;
                }
                for (int c = 0; c < dv; c++) vb[i * dv + c] = v[t * vStride + vo + c] * bt;
                gc[i] = g[t * gStride + go];
            }
            // cumulative log decay inside the chunk (padding rows add 0)
            for (int i = 1; i < C; i++) gc[i] += gc[i - 1];
            for (int i = 0; i < C; i++)
                for (int j = 0; j < C; j++) decay[i * C + j] = j <= i ? (float) Math.exp(gc[i] - gc[j]) : 0f;
            // attn = −(k_β kᵀ ∘ decay), strictly lower triangular
            for (int i = 0; i < C; i++)
                for (int j = 0; j < C; j++)
                    attn[i * C + j] = j < i ? -(VectorMath.dot(kb, i * dk, kc, j * dk, dk) * decay[i * C + j]) : 0f;
            // forward substitution: row i += Σ_m row_i[m]·row_m (rows m < i already final), then + I
            float[] row = ws.row;
            for (int i = 1; i < C; i++) {
                System.arraycopy(attn, i * C, row, 0, i);
                for (int j = 0; j < i; j++) {
                    float acc = row[j];
                    for (int m = 0; m < i; m++) acc += row[m] * attn[m * C + j];
                    attn[i * C + j] = acc;
                }
            }
            for (int i = 0; i < C; i++) attn[i * C + i] = 1f;
            // u = attn·v_β ; w = attn·(k_β ∘ exp(g))
            float[] u = ws.u, w = ws.w;
            Arrays.fill(u, 0f); Arrays.fill(w, 0f);
            for (int i = 0; i < C; i++)
                for (int j = 0; j <= i; j++) {
                    float a = attn[i * C + j];
                    VectorMath.axpy(a, vb, j * dv, u, i * dv, dv);
                    float eg = (float) Math.exp(gc[j]);
                    for (int x = 0; x < dk; x++) w[i * dk + x] += a * (kb[j * dk + x] * eg);
                }
            // v_new = u − w·S
            float[] vNew = ws.vNew;
            for (int i = 0; i < C; i++) {
                System.arraycopy(u, i * dv, vNew, i * dv, dv);
                for (int a = 0; a < dk; a++) VectorMath.axpy(-w[i * dk + a], s, so + a * dv, vNew, i * dv, dv);
            }
            // out = (q ∘ exp(g))·S + (q kᵀ ∘ decay)·v_new
            for (int i = 0; i < n; i++) {
                int ob = (c0 + i) * oStride + oo;
                Arrays.fill(out, ob, ob + dv, 0f);
                float eg = (float) Math.exp(gc[i]);
                for (int a = 0; a < dk; a++) VectorMath.axpy(qc[i * dk + a] * eg, s, so + a * dv, out, ob, dv);
                for (int j = 0; j <= i; j++) {
                    float a = VectorMath.dot(qc, i * dk, kc, j * dk, dk) * decay[i * C + j];
                    VectorMath.axpy(a, vNew, j * dv, out, ob, dv);
                }
            }
            // S = S·exp(g_last) + Σ_i k_i·exp(g_last − g_i) ⊗ v_new_i
            float gl = gc[C - 1];
            float el = (float) Math.exp(gl);
            for (int i = 0; i < dk * dv; i++) s[so + i] *= el;
            for (int i = 0; i < C; i++) {
                float e = (float) Math.exp(gl - gc[i]);
                for (int a = 0; a < dk; a++) VectorMath.axpy(kc[i * dk + a] * e, vNew, i * dv, s, so + a * dv, dv);
            }
        }
    }

    /** Scratch for {@link #chunked}. */
    public static Workspace workspace(int dk, int dv) { return new Workspace(dk, dv); }

    public static final class Workspace {
        final float[] q, k, kBeta, vBeta, g, attn, decay, row, u, w, vNew;

        Workspace(int dk, int dv) {
            int C = CHUNK;
            q = new float[C * dk]; k = new float[C * dk]; kBeta = new float[C * dk]; vBeta = new float[C * dv];
            g = new float[C]; attn = new float[C * C]; decay = new float[C * C]; row = new float[C];
            u = new float[C * dv]; w = new float[C * dk]; vNew = new float[C * dv];
        }
    }
}
