package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.cpu.CausalConv1d;
import dev.cmf4j.backend.cpu.GatedDeltaRule;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.Tensor;

/**
 * Gated DeltaNet (Qwen3-Next linear attention):
 * projections → causal conv (with carried conv state) over [q;k;v] → L2-norm q,k and scale q →
 * β = σ(b), g = −exp(A_log)·softplus(a + dt_bias) → gated delta rule per value head (chunked for a prompt,
 * recurrent for one decode token) → gated RMSNorm with z → output projection.
 */
final class DeltaNetStep implements MixerStep {
    private final Mixer.GatedDeltaNet spec;
    private final MatMul mm;
    private final Linear qkvz, ba, qkv, z, b, a, outProj;
    private final float[] conv, convBias, negA, dtBias;
    private final NormOp norm;
    private final int nk, nv, dk, dv, kernel;

    DeltaNetStep(Mixer.GatedDeltaNet g, int hidden, Loader l, MatMul mm) {
        this.spec = g;
        this.mm = mm;
        nk = g.keyHeads(); nv = g.valueHeads(); dk = g.keyDim(); dv = g.valueDim(); kernel = g.convKernel();
        if (nv % nk != 0) throw new ModelException("gated delta net: " + nv + " value heads not a multiple of " + nk + " key heads");
        switch (g.input()) {
            case Mixer.GdnInput.Fused f -> {
                qkvz = l.linear(f.qkvz(), null, 2 * g.qkDim() + 2 * g.vDim(), hidden);
                ba = l.linear(f.ba(), null, 2 * nv, hidden);
                qkv = z = b = a = null;
            }
            case Mixer.GdnInput.Split s -> {
                qkvz = ba = null;
                qkv = l.linear(s.qkv(), null, g.convDim(), hidden);
                z = l.linear(s.z(), null, g.vDim(), hidden);
                b = l.linear(s.b(), null, nv, hidden);
                a = l.linear(s.a(), null, nv, hidden);
            }
        }
        this.conv = convWeights(g, l);
        this.convBias = l.optionalVector(g.convBias(), g.convDim());
        this.negA = negA(g, l);
        this.dtBias = l.vector(g.dtBias(), nv);
        this.norm = l.normOp(g.norm());
        this.outProj = l.linear(g.outProj(), null, hidden, g.vDim());
    }

    /** The causal conv's weights [convDim, kernel], checked against the spec (also the device plan's). */
    static float[] convWeights(Mixer.GatedDeltaNet g, Loader l) {
        Tensor ct = l.tensor(g.conv());
        if (ct.size() != (long) g.convDim() * g.convKernel())
            throw new ModelException("tensor '" + g.conv() + "' has " + ct.size() + " elements, expected "
                    + g.convDim() + "×" + g.convKernel());
        return Loader.decodeAll(ct);
    }

    /** −exp(A_log) per value head: the decay's factor before softplus (also the device plan's). */
    static float[] negA(Mixer.GatedDeltaNet g, Loader l) {
        float[] aLog = l.vector(g.aLog(), g.valueHeads()), out = new float[aLog.length];
        for (int i = 0; i < out.length; i++) out[i] = -(float) Math.exp(aLog[i]);
        return out;
    }

    /** Conv ring and delta-rule state of one layer. */
    static final class DeltaState {
        final float[] conv;     // [convDim, kernel−1]
        final float[] s;        // [valueHeads, dk, dv]
        boolean fresh = true;

        DeltaState(int convDim, int kernel, int nv, int dk, int dv) {
            conv = new float[convDim * (kernel - 1)];
            s = new float[nv * dk * dv];
        }

        void clear() { java.util.Arrays.fill(conv, 0f); java.util.Arrays.fill(s, 0f); fresh = true; }
    }

    @Override public Object newState(int maxContext) { return new DeltaState(spec.convDim(), kernel, nv, dk, dv); }

    static final class Scratch {
        final float[] proj, proj2, mixed, z, b, a, q, k, g, beta, core, window, mem;
        final GatedDeltaRule.Workspace ws;

        Scratch(Mixer.GatedDeltaNet g, int maxChunk) {
            int nv = g.valueHeads();
            proj = new float[maxChunk * (2 * g.qkDim() + 2 * g.vDim())];
            proj2 = new float[maxChunk * 2 * nv];
            mixed = new float[maxChunk * g.convDim()];
            z = new float[maxChunk * g.vDim()];
            b = new float[maxChunk * nv];
            a = new float[maxChunk * nv];
            q = new float[maxChunk * nv * g.keyDim()];
            k = new float[maxChunk * nv * g.keyDim()];
            this.g = new float[maxChunk * nv];
            beta = new float[maxChunk * nv];
            core = new float[maxChunk * g.vDim()];
            window = new float[maxChunk + g.convKernel()];
            mem = new float[g.valueDim()];
            ws = GatedDeltaRule.workspace(g.keyDim(), g.valueDim());
        }
    }

    @Override public Object newScratch(int maxChunk, int maxContext) { return new Scratch(spec, maxChunk); }

    @Override public void forward(float[] in, float[] out, Batch batch, Object scratch, int layer) {
        Scratch s = (Scratch) scratch;
        int tokens = batch.rows();
        int qk = spec.qkDim(), vd = spec.vDim(), convDim = spec.convDim(), rep = nv / nk;

        // 1. projections into mixed [q; k; v] per token, z [v], b and a [nv]
        if (qkvz != null) {
            qkvz.apply(mm, in, tokens, s.proj, batch.overlay);
            ba.apply(mm, in, tokens, s.proj2, batch.overlay);
            int group = 2 * dk + 2 * rep * dv;
            for (int t = 0; t < tokens; t++) {
                int src = t * (2 * qk + 2 * vd), dst = t * convDim;
                for (int h = 0; h < nk; h++) {
                    int gb = src + h * group;
                    System.arraycopy(s.proj, gb, s.mixed, dst + h * dk, dk);
                    System.arraycopy(s.proj, gb + dk, s.mixed, dst + qk + h * dk, dk);
                    System.arraycopy(s.proj, gb + 2 * dk, s.mixed, dst + 2 * qk + h * rep * dv, rep * dv);
                    System.arraycopy(s.proj, gb + 2 * dk + rep * dv, s.z, t * vd + h * rep * dv, rep * dv);
                    int bb = t * 2 * nv + h * 2 * rep;
                    System.arraycopy(s.proj2, bb, s.b, t * nv + h * rep, rep);
                    System.arraycopy(s.proj2, bb + rep, s.a, t * nv + h * rep, rep);
                }
            }
        } else {
            qkv.apply(mm, in, tokens, s.mixed, batch.overlay);
            z.apply(mm, in, tokens, s.z, batch.overlay);
            b.apply(mm, in, tokens, s.b, batch.overlay);
            a.apply(mm, in, tokens, s.a, batch.overlay);
        }
        // 2. causal conv + silu over [q; k; v], each span over its own sequence's carried inputs
        for (int i = 0; i < batch.size(); i++) {
            DeltaState st = (DeltaState) batch.state(i).mixerState(layer);
            CausalConv1d.apply(s.mixed, batch.start[i] * convDim, batch.tokens(i), convDim, conv, convBias, kernel,
                    st.conv, s.window);
        }
        // 3. per value head: L2-normed (and for q scaled) q, k of its key head; β and g
        float qScale = (float) (1.0 / Math.sqrt(dk));
        for (int t = 0; t < tokens; t++) {
            int base = t * convDim;
            for (int h = 0; h < nv; h++) {
                int kh = h / rep;
                l2(s.mixed, base + kh * dk, s.q, (t * nv + h) * dk, dk, qScale);
                l2(s.mixed, base + qk + kh * dk, s.k, (t * nv + h) * dk, dk, 1f);
                int i = t * nv + h;
                s.beta[i] = 1f / (1f + (float) Math.exp(-s.b[i]));
                s.g[i] = negA[h] * softplus(s.a[i] + dtBias[h]);
            }
        }
        // 4. the delta rule per span: recurrent for a single decode token, chunked for a prompt (as transformers)
        for (int i = 0; i < batch.size(); i++) {
            DeltaState st = (DeltaState) batch.state(i).mixerState(layer);
            int n = batch.tokens(i), r0 = batch.start[i];
            int qo = r0 * nv * dk, vo = r0 * convDim, go = r0 * nv, oo = r0 * vd;
            boolean recurrent = n == 1 && !st.fresh;
            for (int h = 0; h < nv; h++) {
                int so = h * dk * dv;
                if (recurrent)
                    GatedDeltaRule.recurrent(n, dk, dv, s.q, nv * dk, qo + h * dk, s.k, qo + h * dk,
                            s.mixed, convDim, vo + 2 * qk + h * dv, s.g, s.beta, nv, go + h, st.s, so, s.core, vd, oo + h * dv, s.mem);
                else
                    GatedDeltaRule.chunked(n, dk, dv, s.q, nv * dk, qo + h * dk, s.k, qo + h * dk,
                            s.mixed, convDim, vo + 2 * qk + h * dv, s.g, s.beta, nv, go + h, st.s, so, s.core, vd, oo + h * dv, s.ws);
            }
            st.fresh = false;
        }
        // 5. gated RMSNorm per value head: w·x̂·silu(z), then out_proj
        for (int r = 0; r < tokens * nv; r++) {
            norm.apply(s.core, r * dv, s.core, r * dv);
            for (int c = 0; c < dv; c++) {
                float zz = s.z[r * dv + c];
                s.core[r * dv + c] *= zz / (1f + (float) Math.exp(-zz));
            }
        }
        outProj.apply(mm, s.core, tokens, out, batch.overlay);
    }

    private static float softplus(float x) { return x > 20f ? x : (float) Math.log1p(Math.exp(x)); }

    /** dst = src / sqrt(Σ src² + 1e-6) · scale (FLA's l2norm). */
    private static void l2(float[] src, int so, float[] dst, int d0, int n, float scale) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double) src[so + i] * src[so + i];
        float inv = (float) (1.0 / Math.sqrt((float) ss + 1e-6f));
        for (int i = 0; i < n; i++) dst[d0 + i] = src[so + i] * inv * scale;
    }

    /** The recurrent state is updated in place and cannot be rolled back: the session must reset. */
    @Override public boolean abandon(Object state) { return false; }

    @Override public void reset(Object state) { ((DeltaState) state).clear(); }

    /** A copy of the recurrent state: a position in the middle of the step that follows is not recoverable from it. */
    @Override public Object mark(Object state, int upcoming) {
        DeltaState d = (DeltaState) state;
        DeltaState copy = new DeltaState(spec.convDim(), kernel, nv, dk, dv);
        System.arraycopy(d.conv, 0, copy.conv, 0, d.conv.length);
        System.arraycopy(d.s, 0, copy.s, 0, d.s.length);
        copy.fresh = d.fresh;
        return copy;
    }

    @Override public boolean rewindsExactly() { return false; }

    @Override public void rewind(Object state, Object mark, int markPosition, int position) {
        DeltaState d = (DeltaState) state, m = (DeltaState) mark;
        System.arraycopy(m.conv, 0, d.conv, 0, d.conv.length);
        System.arraycopy(m.s, 0, d.s, 0, d.s.length);
        d.fresh = m.fresh;
    }
}
