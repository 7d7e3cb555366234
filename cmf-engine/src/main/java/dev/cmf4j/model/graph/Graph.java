package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.model.Ffn;
import dev.cmf4j.model.LayerSpec;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.Tensor;
import dev.cmf4j.model.Weights;

/**
 * The one forward pass of every architecture. It executes a {@link ModelSpec}: the same short list of
 * steps for every model, each step skipped when the spec has no such part.
 *
 * <pre>
 *   x = embed(ids) · embedScale                      (+ per-layer inputs, Gemma4)
 *   for each layer:
 *       x += postMixer(mixer(preMixer(x)))           attention or gated delta net
 *       x += postFfn(ffn(preFfn(x), x))              dense MLP, MoE, or both
 *       x += postPli(proj(act(gate(x)) · pli[l]))    Gemma4 per-layer input
 *       x *= layerScalar                             Gemma4
 *   logits = softcap(head(finalNorm(x)))
 * </pre>
 *
 * A Graph holds only immutable resolved weights and may be shared by many sessions; each session owns a
 * {@link State}. Built once per model file (cheap: nothing is copied but small vectors).
 */
public final class Graph {

    /** Receives the residual stream: index 0 = embeddings, l+1 = after layer l, L+1 = after the final norm. */
    @FunctionalInterface
    public interface HiddenObserver { void accept(int index, float[] x, int tokens, int hidden); }

    private final ModelSpec spec;
    private final MatMul mm;
    private final int hidden, vocab, layers;
    private final Tensor embedding;
    private final Matrix embedRows;
    private final MixerStep[] mixers;
    private final FfnStep[] ffns;
    private final NormOp[] preMixer, postMixer, preFfn, postFfn;
    private final float[] layerScalar;
    private final Linear[] pliGate, pliProj;
    private final NormOp[] pliNorm;
    private final dev.cmf4j.model.Activation[] pliAct;
    private final NormOp finalNorm;
    private final Matrix head;
    // per-layer embeddings (Gemma4)
    private final Tensor pleTable;
    private final Matrix pleRows;
    private final Linear pleProjection;
    private final NormOp pleNorm;
    private final int pleDim;
    /** The device's whole-forward replacement of the steps above, or null (the CPU steps run). */
    private final DeviceForward device;

    public Graph(ModelSpec spec, Weights weights, MatMul mm) {
        this.spec = spec;
        this.mm = mm;
        this.hidden = spec.hidden();
        this.vocab = spec.vocab();
        this.layers = spec.numLayers();
        Loader l = new Loader(weights);
        this.embedding = l.tensor(spec.embedding());
        if (embedding.rank() != 2 || embedding.cols() != hidden)
            throw new ModelException("embedding '" + spec.embedding() + "' has shape "
                    + java.util.Arrays.toString(embedding.shape()) + ", expected [vocab, " + hidden + "]");
        this.embedRows = l.whole(embedding);
        this.finalNorm = NormOp.of(spec.finalNorm(), l);
        this.head = l.matrix(spec.head(), vocab, hidden);
        for (int i = 0; i < layers; i++)
            if (spec.layer(i).mixer() instanceof Mixer.Attention a && a.sharesKv()) {
                int src = a.kvSource();
                if (src >= i || !(spec.layer(src).mixer() instanceof Mixer.Attention sa) || sa.sharesKv()
                        || sa.kvDim() != a.kvDim() || sa.window() != a.window())
                    throw new ModelException("layer " + i + " shares the K/V of layer " + src + ", which is not an earlier"
                            + " attention layer of the same shape and window");
            }
        DeviceForward dev = null;
        if (mm instanceof DeviceForward.Provider p) {
            String why = DecoderPlan.unsupported(spec);
            if (why == null) dev = p.denseForward(DecoderPlan.of(spec, l, embedRows, head, finalNorm));
            else p.cpuGraph(spec, why);
        }
        this.device = dev;
        mixers = new MixerStep[layers];
        ffns = new FfnStep[layers];
        preMixer = new NormOp[layers]; postMixer = new NormOp[layers];
        preFfn = new NormOp[layers]; postFfn = new NormOp[layers];
        layerScalar = new float[layers];
        pliGate = new Linear[layers]; pliProj = new Linear[layers]; pliNorm = new NormOp[layers];
        pliAct = new dev.cmf4j.model.Activation[layers];
        var ple = spec.perLayerEmbedding();
        this.pleDim = ple == null ? 0 : ple.dim();
        // a device forward runs the whole model: the CPU steps (their decoded biases and norms, a second copy of
        // every expert bias on an MoE) would never run, so they are not built (the arrays stay empty)
        for (int i = 0; dev == null && i < layers; i++) {
            LayerSpec ls = spec.layer(i);
            mixers[i] = mixerStep(ls.mixer(), l);
            ffns[i] = ffnStep(ls.ffn(), l);
            preMixer[i] = NormOp.of(ls.preMixer(), l);
            postMixer[i] = NormOp.of(ls.postMixer(), l);
            preFfn[i] = NormOp.of(ls.preFfn(), l);
            postFfn[i] = NormOp.of(ls.postFfn(), l);
            layerScalar[i] = ls.layerScalar() == null ? 1f : l.vector(ls.layerScalar(), 1)[0];
            if (ls.perLayerInput() != null) {
                if (ple == null) throw new ModelException("layer " + i + " has per-layer inputs but the model has no per-layer embedding");
                pliGate[i] = l.linear(ls.perLayerInput().gate(), null, pleDim, hidden);
                pliProj[i] = l.linear(ls.perLayerInput().projection(), null, hidden, pleDim);
                pliNorm[i] = NormOp.of(ls.perLayerInput().postNorm(), l);
                pliAct[i] = ls.perLayerInput().act();
            }
        }
        if (ple != null) {   // never on a device forward (DecoderPlan.unsupported)
            this.pleTable = l.tensor(ple.table());
            if (pleTable.cols() != (long) layers * pleDim)
                throw new ModelException("per-layer table '" + ple.table() + "' has width " + pleTable.cols()
                        + ", expected " + layers + "×" + pleDim);
            this.pleRows = l.whole(pleTable);
            this.pleProjection = l.linear(ple.modelProjection(), null, layers * pleDim, hidden);
            this.pleNorm = NormOp.of(ple.projectionNorm(), l);
        } else {
            this.pleTable = null; this.pleRows = null; this.pleProjection = null; this.pleNorm = null;
        }
    }

    /** The device forward this graph routes through, or null when its own CPU steps run. */
    public DeviceForward device() { return device; }

    private MixerStep mixerStep(Mixer m, Loader l) {
        return switch (m) {
            case Mixer.Attention a -> new AttentionStep(a, hidden, l, mm);
            case Mixer.GatedDeltaNet g -> new DeltaNetStep(g, hidden, l, mm);
        };
    }

    private FfnStep ffnStep(Ffn f, Loader l) {
        return switch (f) {
            case Ffn.GatedMlp m -> new MlpStep(m, hidden, l, mm);
            case Ffn.Moe m -> new MoeStep(m, hidden, l, mm);
            case Ffn.DenseAndMoe d -> new DenseAndMoeStep(d, hidden, l, mm);
        };
    }

    public ModelSpec spec() { return spec; }

    public int hidden() { return hidden; }

    public int vocab() { return vocab; }

    public int numLayers() { return layers; }

    MixerStep mixer(int l) { return mixers[l]; }

    FfnStep ffn(int l) { return ffns[l]; }

    int perLayerDim() { return pleDim; }

    int perLayerWidth() { return layers * pleDim; }

    /** A fresh session state for chunks of up to {@code maxChunk} tokens and {@code maxContext} positions. */
    public State newState(int maxChunk, int maxContext) {
        if (maxChunk < 1) throw new IllegalArgumentException("maxChunk must be >= 1");
        return new State(this, maxChunk, Math.min(maxContext, spec.maxPositions()));
    }

    /**
     * Runs {@code tokens} ids (from {@code ids[off]}) at the state's position and advances it.
     *
     * @param logits   receives [tokens, vocab] logits when {@code allLogits}, else the last token's [vocab];
     *                 may be null to skip the head
     * @param observer optional; sees the residual stream after every stage
     */
    public void forward(State st, int[] ids, int off, int tokens, float[] logits, boolean allLogits,
                        HiddenObserver observer) {
        if (st.graph != this) throw new IllegalArgumentException("state belongs to another graph");
        if (tokens < 1 || tokens > st.maxChunk)
            throw new IllegalArgumentException("chunk of " + tokens + " tokens outside 1.." + st.maxChunk);
        if (st.closed) throw new IllegalStateException("this session is closed");
        if (st.broken)
            throw new IllegalStateException("this session's state was lost when an earlier step failed; reset it");
        if (st.position + tokens > st.maxContext)
            throw new IllegalStateException("context limit " + st.maxContext + " exceeded");
        for (int t = 0; t < tokens; t++) {
            int id = ids[off + t];
            if (id < 0 || id >= embedding.rows())
                throw new IllegalArgumentException("token id " + id + " outside the vocabulary [0, " + embedding.rows() + ")");
        }
        if (device != null) {
            if (observer != null)
                throw new UnsupportedOperationException("hidden-state observers need the CPU graph; this model runs on the device");
            device.forward(st.deviceState, ids, off, tokens, st.position, logits, allLogits);
            st.position += tokens;
            return;
        }
        int pos0 = st.position;
        float[] x = st.x, h = st.h, m = st.m;
        try {
            embed(ids, off, tokens, x);
            if (pleTable != null) perLayerInputs(ids, off, tokens, x, st);
            if (observer != null) observer.accept(0, x, tokens, hidden);
            int n = tokens * hidden;
            for (int l = 0; l < layers; l++) {
                // mixer
                preMixer[l].rows(x, h, tokens);
                mixers[l].forward(h, m, tokens, pos0, st, l);
                if (postMixer[l] != null) postMixer[l].rows(m, tokens);
                for (int i = 0; i < n; i++) x[i] += m[i];
                // feed-forward
                preFfn[l].rows(x, h, tokens);
                ffns[l].forward(h, x, m, tokens, st.ffnScratch[l]);
                if (postFfn[l] != null) postFfn[l].rows(m, tokens);
                for (int i = 0; i < n; i++) x[i] += m[i];
                // per-layer input, layer scalar
                if (pliGate[l] != null) perLayerInput(l, tokens, x, st);
                if (layerScalar[l] != 1f) for (int i = 0; i < n; i++) x[i] *= layerScalar[l];
                if (observer != null) observer.accept(l + 1, x, tokens, hidden);
            }
            finalNorm.rows(x, tokens);
            if (observer != null) observer.accept(layers + 1, x, tokens, hidden);
            if (logits != null) head(x, tokens, logits, allLogits, h);
        } catch (RuntimeException | Error e) {
            for (int l = 0; l < layers; l++) if (!mixers[l].abandon(st.mixerState[l])) st.broken = true;
            throw e;
        }
        for (int l = 0; l < layers; l++) mixers[l].commit(st.mixerState[l]);
        st.position += tokens;
    }

    private void embed(int[] ids, int off, int tokens, float[] x) {
        float scale = spec.embedScale();
        for (int t = 0; t < tokens; t++) {
            embedRows.decodeRow(ids[off + t], x, t * hidden);
            if (scale != 1f) for (int i = 0; i < hidden; i++) x[t * hidden + i] *= scale;
        }
    }

    /** pli = (norm(W·x_emb · projScale) + table[id] · tableScale) · combineScale, per layer slice. */
    private void perLayerInputs(int[] ids, int off, int tokens, float[] x, State st) {
        var ple = spec.perLayerEmbedding();
        int width = layers * pleDim;
        pleProjection.apply(mm, x, tokens, st.pli);
        for (int i = 0; i < tokens * width; i++) st.pli[i] *= ple.projectionScale();
        pleNorm.rows(st.pli, tokens * layers);
        for (int t = 0; t < tokens; t++) {
            int id = ids[off + t];
            if (id >= pleTable.rows())
                throw new IllegalArgumentException("token id " + id + " outside the per-layer table [0, " + pleTable.rows() + ")");
            pleRows.decodeRow(id, st.pliTmp, t * width);
        }
        for (int i = 0; i < tokens * width; i++)
            st.pli[i] = (st.pli[i] + st.pliTmp[i] * ple.tableScale()) * ple.combineScale();
    }

    /** x += norm(proj(act(gate(x)) · pli[l])). */
    private void perLayerInput(int l, int tokens, float[] x, State st) {
        float[] g = st.pliTmp2, p = st.m;
        pliGate[l].apply(mm, x, tokens, g);
        int width = layers * pleDim;
        for (int t = 0; t < tokens; t++)
            for (int i = 0; i < pleDim; i++) {
                int gi = t * pleDim + i;
                g[gi] = pliAct[l].apply(g[gi]) * st.pli[t * width + l * pleDim + i];
            }
        pliProj[l].apply(mm, g, tokens, p);
        if (pliNorm[l] != null) pliNorm[l].rows(p, tokens);
        for (int i = 0; i < tokens * hidden; i++) x[i] += p[i];
    }

    /** Logits of every token of x, or of its last; {@code free} is a chunk-sized scratch the layers are done with. */
    private void head(float[] x, int tokens, float[] logits, boolean all, float[] free) {
        if (all || tokens == 1) {
            mm.apply(head, x, all ? tokens : 1, logits);
        } else {
            System.arraycopy(x, (tokens - 1) * hidden, free, 0, hidden);   // the last row, without a new array per call
            mm.apply(head, free, 1, logits);
        }
        float cap = spec.finalSoftcap();
        if (cap > 0f) {
            int n = (all ? tokens : 1) * vocab;
            for (int i = 0; i < n; i++) logits[i] = (float) Math.tanh(logits[i] / cap) * cap;
        }
    }
}
