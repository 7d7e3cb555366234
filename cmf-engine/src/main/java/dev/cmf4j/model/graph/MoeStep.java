package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Glu;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.cpu.ResonanceRouter;
import dev.cmf4j.backend.cpu.RmsNorm;
import dev.cmf4j.backend.cpu.Softmax;
import dev.cmf4j.model.Ffn;
import dev.cmf4j.model.ModelException;

import java.util.Arrays;

/**
 * Mixture of experts: route every token (one of the {@link Ffn.Router} kinds), gather the tokens of each
 * expert into a batch so an expert's weights are read once per chunk, run its gated MLP, and add the
 * weighted results in expert order (as transformers' eager loop does). A shared expert, gated by
 * σ(shared_gate·x) when that gate exists, is added on top. Embryo's resonance router picks one expert per token
 * by reconstruction error ({@link ResonanceRouter}) with weight 1.
 */
final class MoeStep implements FfnStep {
    private final MatMul mm;
    private final Ffn.Router routerSpec;
    private final Linear router;
    private final float[] routerScale, perExpertScale;
    private final int hidden, experts, topK, inter;
    private final Matrix[] gate, up, gateUp, down;
    private final float[][] gateBias, upBias, gateUpBias, downBias;
    private final boolean interleaved;
    private final Glu glu;
    private final MlpStep shared;
    private final Linear sharedGate;
    private final float routerEps;
    /** The resonance router, or null for the logit routers. */
    private final ResonanceRouter resonance;

    /** The layer whose task-mask expert bits restrict this router. */
    private final int layer;

    MoeStep(Ffn.Moe m, int hidden, Loader l, MatMul mm, int layer) {
        this.mm = mm;
        this.layer = layer;
        this.hidden = hidden;
        this.routerSpec = m.router();
        Ffn.Experts ex = m.experts();
        this.experts = ex.count();
        this.topK = m.topK();
        this.inter = ex.intermediate();
        if (topK < 1 || topK > experts) throw new ModelException("MoE top-k " + topK + " outside 1.." + experts);
        ResonanceRouter res = null;
        switch (m.router()) {
            case Ffn.Router.Resonance r -> {
                router = null;
                routerScale = perExpertScale = null; routerEps = 0;
                res = resonance(r, l);
            }
            case Ffn.Router.SoftmaxTopK r -> {
                router = l.linear(r.weight(), r.bias(), experts, hidden);
                routerScale = perExpertScale = null; routerEps = 0;
            }
            case Ffn.Router.TopKSoftmax r -> {
                router = l.linear(r.weight(), r.bias(), experts, hidden);
                routerScale = perExpertScale = null; routerEps = 0;
            }
            case Ffn.Router.ScaledSoftmaxTopK r -> {
                router = l.linear(r.proj(), null, experts, hidden);
                float[] sc = l.vector(r.scale(), hidden);
                float k = (float) Math.pow(hidden, -0.5);
                for (int i = 0; i < hidden; i++) sc[i] *= k;
                routerScale = sc;
                perExpertScale = l.vector(r.perExpertScale(), experts);
                routerEps = r.eps();
            }
        }
        this.resonance = res;
        gate = new Matrix[experts]; up = new Matrix[experts]; gateUp = new Matrix[experts]; down = new Matrix[experts];
        gateBias = new float[experts][]; upBias = new float[experts][];
        gateUpBias = new float[experts][]; downBias = new float[experts][];
        for (int e = 0; e < experts; e++) {
            if (ex.gateUp() != null) {
                var gu = ex.gateUp();
                gateUp[e] = l.expert(gu.nameOf(e), gu.fused(), e, experts, 2 * inter, hidden, gu.inputMajor());
            } else {
                gate[e] = l.expert(ex.gate().nameOf(e), ex.gate().fused(), e, experts, inter, hidden, ex.gate().inputMajor());
                up[e] = l.expert(ex.up().nameOf(e), ex.up().fused(), e, experts, inter, hidden, ex.up().inputMajor());
            }
            down[e] = l.expert(ex.down().nameOf(e), ex.down().fused(), e, experts, hidden, inter, ex.down().inputMajor());
            gateBias[e] = bias(l, ex.gateBias(), e, inter);
            upBias[e] = bias(l, ex.upBias(), e, inter);
            gateUpBias[e] = bias(l, ex.gateUpBias(), e, 2 * inter);
            downBias[e] = bias(l, ex.downBias(), e, hidden);
        }
        this.interleaved = ex.interleaved();
        this.glu = m.glu();
        this.shared = m.shared() == null ? null : new MlpStep(m.shared(), hidden, l, mm, -1);
        this.sharedGate = m.sharedGate() == null ? null : l.linear(m.sharedGate(), null, 1, hidden);
    }

    int experts() { return experts; }

    /** Whether a logit router picks the experts (task-mask expert bits apply); false for the resonance router. */
    boolean routesByLogits() { return resonance == null; }

    private ResonanceRouter resonance(Ffn.Router.Resonance r, Loader l) {
        float[][] d = descriptors(r, l, experts, hidden);
        return new ResonanceRouter(experts, r.rank(), hidden, d[0], d[1], d[2], null);
    }

    /** {mu [E, hidden], u [E, rank, hidden], bias [E]}: the descriptors of every expert, stacked or per expert, decoded once. */
    static float[][] descriptors(Ffn.Router.Resonance r, Loader l, int experts, int hidden) {
        int k = r.rank();
        float[] mu = new float[experts * hidden], u = new float[experts * k * hidden], bias = new float[experts];
        if (r.stacked()) {
            mu = l.vector(r.mu(), experts * hidden);
            if (k > 0) u = l.vector(r.u(), experts * k * hidden);
            bias = l.vector(r.bias(), experts);
        } else {
            for (int e = 0; e < experts; e++) {
                System.arraycopy(l.vector(r.nameOf(r.mu(), e), hidden), 0, mu, e * hidden, hidden);
                if (k > 0) System.arraycopy(l.vector(r.nameOf(r.u(), e), k * hidden), 0, u, e * k * hidden, k * hidden);
                bias[e] = l.vector(r.nameOf(r.bias(), e), 1)[0];
            }
        }
        return new float[][] {mu, u, bias};
    }

    private float[] bias(Loader l, Ffn.ExpertMatrix b, int e, int n) {
        if (b == null) return null;
        return b.fused() ? l.row(b.name(), e, experts, n) : l.vector(b.nameOf(e), n);
    }

    static final class Scratch {
        final float[] routed, logits, weights, xg, h2, h, y, sharedOut, sharedGate, probs;
        final double[] err, score, residual;
        final int[] idx, count, tokenOf, slotOf, pick;
        final Object sharedScratch;

        Scratch(int maxChunk, int hidden, int experts, int topK, int inter, MlpStep shared) {
            routed = new float[maxChunk * hidden];
            logits = new float[maxChunk * experts];
            probs = new float[experts];
            err = new double[experts];
            score = new double[experts];
            residual = new double[hidden];
            weights = new float[maxChunk * topK];
            idx = new int[maxChunk * topK];
            count = new int[experts];
            pick = new int[topK];
            tokenOf = new int[maxChunk * topK];
            slotOf = new int[maxChunk * topK];
            xg = new float[maxChunk * hidden];
            h2 = new float[maxChunk * 2 * inter];
            h = new float[maxChunk * 2 * inter];
            y = new float[maxChunk * hidden];
            sharedOut = shared == null ? null : new float[maxChunk * hidden];
            sharedGate = shared == null ? null : new float[maxChunk];
            sharedScratch = shared == null ? null : shared.newScratch(maxChunk);
        }
    }

    @Override public Object newScratch(int maxChunk) {
        return new Scratch(maxChunk, hidden, experts, topK, inter, shared);
    }

    @Override public void forward(float[] normed, float[] residual, float[] out, int tokens, Object scratch, RowOverlay ro) {
        run(normed, normed, out, tokens, (Scratch) scratch, ro);
    }

    /** Routes on {@code routerIn}, runs the experts on {@code expertIn}. */
    void run(float[] routerIn, float[] expertIn, float[] out, int tokens, Scratch s, RowOverlay ro) {
        route(routerIn, tokens, s, ro);
        Arrays.fill(out, 0, tokens * hidden, 0f);
        int[] idx = s.idx;
        for (int e = 0; e < experts; e++) {
            // gather the tokens routed to e
            int n = 0;
            for (int t = 0; t < tokens; t++)
                for (int j = 0; j < topK; j++)
                    if (idx[t * topK + j] == e) {
                        System.arraycopy(expertIn, t * hidden, s.xg, n * hidden, hidden);
                        s.tokenOf[n] = t;
                        s.slotOf[n] = t * topK + j;
                        n++;
                    }
            if (n == 0) continue;
            expert(e, n, s);
            for (int r = 0; r < n; r++) {
                float w = s.weights[s.slotOf[r]];
                int t = s.tokenOf[r];
                for (int i = 0; i < hidden; i++) out[t * hidden + i] += s.y[r * hidden + i] * w;
            }
        }
        if (shared != null) {
            shared.forward(expertIn, null, s.sharedOut, tokens, s.sharedScratch, ro);
            if (sharedGate != null) sharedGate.apply(mm, expertIn, tokens, s.sharedGate, ro);
            for (int t = 0; t < tokens; t++) {
                float g = sharedGate == null ? 1f : 1f / (1f + (float) Math.exp(-s.sharedGate[t]));
                for (int i = 0; i < hidden; i++) out[t * hidden + i] += g * s.sharedOut[t * hidden + i];
            }
        }
    }

    /** Fills s.idx / s.weights with each token's experts and weights. */
    private void route(float[] in, int tokens, Scratch s, RowOverlay ro) {
        if (resonance != null) {
            for (int t = 0; t < tokens; t++) {
                s.idx[t] = resonance.route(in, t * hidden, s.err, s.score, s.residual);
                s.weights[t] = 1f;
            }
            return;
        }
        float[] src = in;
        if (routerScale != null) {
            for (int t = 0; t < tokens; t++) {
                RmsNorm.apply(in, t * hidden, s.routed, t * hidden, hidden, null, false, routerEps);
                for (int i = 0; i < hidden; i++) s.routed[t * hidden + i] *= routerScale[i];
            }
            src = s.routed;
        }
        router.apply(mm, src, tokens, s.logits, ro);
        int[] pick = s.pick;
        for (int t = 0; t < tokens; t++) {
            float[] p = s.probs;
            System.arraycopy(s.logits, t * experts, p, 0, experts);
            TaskMask tm = ro == null || !ro.anyTask ? null : ro.mask(t);
            if (tm != null && tm.expertOff[layer] != null)   // experts the row's task keeps out: never picked, weight 0
                for (int e = 0; e < experts; e++) if (tm.expertOff[layer][e]) p[e] = Float.NEGATIVE_INFINITY;
            int o = t * topK;
            switch (routerSpec) {
                case Ffn.Router.Resonance r -> throw new IllegalStateException("routed above");
                case Ffn.Router.SoftmaxTopK r -> {
                    Softmax.apply(p, 0, experts);
                    Softmax.topK(p, experts, topK, pick);
                    float sum = 0f;
                    for (int j = 0; j < topK; j++) sum += p[pick[j]];
                    for (int j = 0; j < topK; j++) {
                        s.idx[o + j] = pick[j];
                        s.weights[o + j] = r.normTopK() ? p[pick[j]] / sum : p[pick[j]];
                    }
                }
                case Ffn.Router.TopKSoftmax r -> {
                    Softmax.topK(p, experts, topK, pick);
                    for (int j = 0; j < topK; j++) { s.idx[o + j] = pick[j]; s.weights[o + j] = p[pick[j]]; }
                    Softmax.apply(s.weights, o, topK);
                }
                case Ffn.Router.ScaledSoftmaxTopK r -> {
                    Softmax.apply(p, 0, experts);
                    Softmax.topK(p, experts, topK, pick);
                    float sum = 0f;
                    for (int j = 0; j < topK; j++) sum += p[pick[j]];
                    for (int j = 0; j < topK; j++) {
                        s.idx[o + j] = pick[j];
                        s.weights[o + j] = p[pick[j]] / sum * perExpertScale[pick[j]];
                    }
                }
            }
        }
    }

    /** y[0, n) = expert e's MLP over xg[0, n). */
    private void expert(int e, int n, Scratch s) {
        if (gateUp[e] != null) {
            mm.apply(gateUp[e], s.xg, n, s.h2);
            float[] b = gateUpBias[e];
            int w2 = 2 * inter;
            for (int r = 0; r < n; r++) {
                int base = r * w2;
                if (b != null) for (int i = 0; i < w2; i++) s.h2[base + i] += b[i];
                for (int i = 0; i < inter; i++) {
                    float g = interleaved ? s.h2[base + 2 * i] : s.h2[base + i];
                    float u = interleaved ? s.h2[base + 2 * i + 1] : s.h2[base + inter + i];
                    s.h[r * inter + i] = glu.apply(g, u);
                }
            }
        } else {
            mm.apply(gate[e], s.xg, n, s.h);
            mm.apply(up[e], s.xg, n, s.h2);
            float[] gb = gateBias[e], ub = upBias[e];
            for (int r = 0; r < n; r++)
                for (int i = 0; i < inter; i++) {
                    int k = r * inter + i;
                    s.h[k] = glu.apply(gb == null ? s.h[k] : s.h[k] + gb[i], ub == null ? s.h2[k] : s.h2[k] + ub[i]);
                }
        }
        mm.apply(down[e], s.h, n, s.y);
        float[] db = downBias[e];
        if (db != null) for (int r = 0; r < n; r++) for (int i = 0; i < hidden; i++) s.y[r * hidden + i] += db[i];
    }
}
