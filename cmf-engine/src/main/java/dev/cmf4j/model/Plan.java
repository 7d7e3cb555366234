package dev.cmf4j.model;

import java.util.ArrayList;
import java.util.List;

/**
 * The forward pass of a {@link ModelSpec} as a list of ops, built once and read top to bottom: the embedding, each
 * layer's norms, mixer, feed-forward, residual adds and extras, the final norm and the head. It names tensors and
 * spec parts, never a device: each executor resolves the weights it needs and runs (the CPU's
 * {@code model.graph.Graph}) or lowers (a device's {@code backend.DecoderPlan}) the ops in order. A spec whose parts
 * do not fit together fails here, naming the layer.
 *
 * <p>Ops read and write three row buffers ({@link Slot}) of [rows, hidden]: the residual stream {@code X}, a
 * stage's normed input {@code H}, and a stage's output {@code M}. A layer reads
 * <pre>
 *   BeginLayer l
 *   Normalize X → H (preMixer); Mix H → M; [Normalize M (postMixer)]; AddResidual M
 *   Normalize X → H (preFfn); FeedForward H, X → M; [Normalize M (postFfn)]; AddResidual M
 *   [PerLayerInput]; [ScaleLayer]
 *   EndLayer l
 * </pre>
 */
public final class Plan {

    /** The row buffers ops read and write: X the residual stream, H a stage's normed input, M a stage's output. */
    public enum Slot { X, H, M }

    /** One step of the forward pass. */
    public sealed interface Op permits Embed, MtpInput, InputRows, PerLayerTable, BeginLayer, Normalize, Mix, FeedForward, AllReduce,
            AddResidual, PerLayerInput, ScaleLayer, EndLayer, FinalNorm, Head {}

    /** X = table[ids] · scale (scale 1 = none); {@code table} is [vocab, hidden]. */
    public record Embed(String table, float scale) implements Op {}

    /**
     * An MTP head's input in place of the embedding: X = projection · [embeddingNorm(table[ids] · scale);
     * hiddenNorm(the model's hidden rows)], the hidden rows handed to the step beside the ids ({@link MtpSpec}).
     */
    public record MtpInput(String table, float scale, Norm embeddingNorm, Norm hiddenNorm, String projection) implements Op {}

    /**
     * X = the rows handed to the step ({@link LayerSplit}: a pipeline stage after the first starts from the previous
     * stage's last layer output, [rows, hidden], in place of the embedding).
     */
    public record InputRows(int hidden) implements Op {}

    /**
     * Gemma4's per-layer inputs of every layer, from the embedded X and the token ids:
     * pli = (norm(proj(X) · projScale) + table[id] · tableScale) · combineScale.
     */
    public record PerLayerTable(ModelSpec.PerLayerEmbedding embedding, int layers) implements Op {}

    /** Layer {@code layer} starts: the residual stream X as the layer receives it (task masks may keep rows of it). */
    public record BeginLayer(int layer) implements Op {}

    /** {@code to} = norm({@code from}); in place when they are the same slot. {@code role} names it in listings. */
    public record Normalize(Slot from, Slot to, Norm norm, String role) implements Op {}

    /**
     * M = mixer(H) over each sequence's state of layer {@code layer}: attention (full, sliding, KV shared with an
     * earlier layer), gated delta net or bounded anchor, as {@code mixer}'s type says.
     *
     * @param sealed the sealed memory of this full-attention layer ({@code --o1}), or null for exact attention
     */
    public record Mix(int layer, Mixer mixer, AttentionMemory.Sealed sealed) implements Op {}

    /** M = ffn(H) (some routers also read the residual X): a gated MLP, an MoE or both, as {@code ffn}'s type says. */
    public record FeedForward(int layer, Ffn ffn) implements Op {}

    /**
     * {@code slot} = its sum over the {@code ranks} ranks of a tensor-parallel group ({@link TensorParallel}): each rank
     * holds the partial output of a row-parallel product (o over its heads, down over its intermediate rows), and every
     * rank gets the same sum, before any post norm or residual add reads it.
     */
    public record AllReduce(Slot slot, int ranks) implements Op {}

    /** X += {@code from}. */
    public record AddResidual(Slot from) implements Op {}

    /** Gemma4: X += norm(proj(act(gate(X)) · pli[layer])); the per-layer input width is {@code dim}. */
    public record PerLayerInput(int layer, LayerSpec.PerLayerInput input, int dim) implements Op {}

    /** Gemma4: X *= the 1-element tensor {@code scalar}. */
    public record ScaleLayer(int layer, String scalar) implements Op {}

    /** Layer {@code layer} is done: X is its output. */
    public record EndLayer(int layer) implements Op {}

    /** X = norm(X) before the head. */
    public record FinalNorm(Norm norm) implements Op {}

    /**
     * Logits of the rows asked for = softcap(head · X) (softcap 0 = none); a hierarchical head ({@code clusters}
     * non-null) gives log-probabilities.
     */
    public record Head(String weight, int vocab, ModelSpec.HeadClusters clusters, float softcap) implements Op {}

    private final ModelSpec spec;
    private final AttentionMemory memory;
    private final List<Op> ops;
    private final boolean[] sealed;
    private final int ranks;
    private final boolean runsHead;

    private Plan(ModelSpec spec, AttentionMemory memory, List<Op> ops, boolean[] sealed, int ranks) {
        this(spec, memory, ops, sealed, ranks, true);
    }

    private Plan(ModelSpec spec, AttentionMemory memory, List<Op> ops, boolean[] sealed, int ranks, boolean runsHead) {
        this.spec = spec;
        this.memory = memory;
        this.ops = List.copyOf(ops);
        this.sealed = sealed;
        this.ranks = ranks;
        this.runsHead = runsHead;
    }

    /** The plan of {@code spec} with exact attention. */
    public static Plan of(ModelSpec spec) { return of(spec, AttentionMemory.EXACT); }

    /**
     * The plan of {@code spec} whose full-attention layers keep keys and values as {@code memory} says; a
     * {@link ModelException} when the spec's parts do not fit together or the memory cannot apply.
     */
    public static Plan of(ModelSpec spec, AttentionMemory memory) {
        check(spec);
        boolean[] sealed = sealedLayers(spec, memory);
        List<Op> ops = new ArrayList<>();
        var ple = spec.perLayerEmbedding();
        ops.add(new Embed(spec.embedding(), spec.embedScale()));
        if (ple != null) ops.add(new PerLayerTable(ple, spec.numLayers()));
        addLayersAndHead(spec, memory, sealed, ops, 1);
        return new Plan(spec, memory, ops, sealed, 1);
    }

    /**
     * The plan of one rank of a tensor-parallel group of {@code ranks}: {@code rankSpec} is the rank's part of the model
     * ({@link TensorParallel#split}: its heads, intermediate rows and vocabulary slice), and an {@link AllReduce} of M
     * follows each mixer and feed-forward, so the post norms and residual adds read the whole sum (exact attention).
     */
    public static Plan ofRank(ModelSpec rankSpec, int ranks) {
        if (ranks < 1) throw new IllegalArgumentException("ranks " + ranks);
        check(rankSpec);
        List<Op> ops = new ArrayList<>();
        var ple = rankSpec.perLayerEmbedding();
        ops.add(new Embed(rankSpec.embedding(), rankSpec.embedScale()));
        if (ple != null) ops.add(new PerLayerTable(ple, rankSpec.numLayers()));
        boolean[] sealed = new boolean[rankSpec.numLayers()];
        addLayersAndHead(rankSpec, AttentionMemory.EXACT, sealed, ops, ranks);
        return new Plan(rankSpec, AttentionMemory.EXACT, ops, sealed, ranks);
    }

    /**
     * The plan of one stage of a pipeline split by layers ({@link LayerSplit}): {@code stageSpec} holds the stage's
     * layers (numbered from 0); the first stage embeds the ids, a later one starts from the rows handed to it
     * ({@link InputRows}); every stage ends with the final norm and head, which only the last one runs ({@code last}:
     * the others hand their last layer's rows on, {@link #runsHead} false). Exact attention.
     */
    public static Plan ofStage(ModelSpec stageSpec, boolean first, boolean last) {
        check(stageSpec);
        if (stageSpec.perLayerEmbedding() != null) throw new ModelException("a pipeline stage with per-layer inputs is not supported");
        List<Op> ops = new ArrayList<>();
        ops.add(first ? new Embed(stageSpec.embedding(), stageSpec.embedScale()) : new InputRows(stageSpec.hidden()));
        boolean[] sealed = new boolean[stageSpec.numLayers()];
        addLayersAndHead(stageSpec, AttentionMemory.EXACT, sealed, ops, 1);
        return new Plan(stageSpec, AttentionMemory.EXACT, ops, sealed, 1, last);
    }

    /** False for a pipeline stage before the last ({@link #ofStage}): its steps are never asked for logits. */
    public boolean runsHead() { return runsHead; }

    /** Whether the plan starts from rows handed to it ({@link InputRows}: a later pipeline stage's). */
    public boolean takesInputRows() { return ops.getFirst() instanceof InputRows; }

    /**
     * The plan of an MTP head: its input from the embedded token and the model's hidden state, then its layer, final
     * norm and head as any model's (exact attention).
     */
    public static Plan ofMtp(MtpSpec mtp) {
        ModelSpec spec = mtp.body();
        check(spec);
        if (spec.perLayerEmbedding() != null) throw new ModelException("an MTP head with per-layer inputs is not supported");
        boolean[] sealed = new boolean[spec.numLayers()];
        List<Op> ops = new ArrayList<>();
        ops.add(new MtpInput(spec.embedding(), spec.embedScale(), mtp.embeddingNorm(), mtp.hiddenNorm(), mtp.projection()));
        addLayersAndHead(spec, AttentionMemory.EXACT, sealed, ops, 1);
        return new Plan(spec, AttentionMemory.EXACT, ops, sealed, 1);
    }

    private static void addLayersAndHead(ModelSpec spec, AttentionMemory memory, boolean[] sealed, List<Op> ops, int ranks) {
        var ple = spec.perLayerEmbedding();
        for (LayerSpec ls : spec.layers()) {
            int l = ls.index();
            ops.add(new BeginLayer(l));
            ops.add(new Normalize(Slot.X, Slot.H, ls.preMixer(), "pre-mixer"));
            ops.add(new Mix(l, ls.mixer(), sealed[l] ? memory.sealed() : null));
            if (ranks > 1) ops.add(new AllReduce(Slot.M, ranks));
            if (ls.postMixer() != null) ops.add(new Normalize(Slot.M, Slot.M, ls.postMixer(), "post-mixer"));
            ops.add(new AddResidual(Slot.M));
            ops.add(new Normalize(Slot.X, Slot.H, ls.preFfn(), "pre-ffn"));
            ops.add(new FeedForward(l, ls.ffn()));
            if (ranks > 1) ops.add(new AllReduce(Slot.M, ranks));
            if (ls.postFfn() != null) ops.add(new Normalize(Slot.M, Slot.M, ls.postFfn(), "post-ffn"));
            ops.add(new AddResidual(Slot.M));
            if (ls.perLayerInput() != null) ops.add(new PerLayerInput(l, ls.perLayerInput(), ple.dim()));
            if (ls.layerScalar() != null) ops.add(new ScaleLayer(l, ls.layerScalar()));
            ops.add(new EndLayer(l));
        }
        ops.add(new FinalNorm(spec.finalNorm()));
        ops.add(new Head(spec.head(), spec.vocab(), spec.headClusters(), spec.finalSoftcap()));
    }

    /** The parts every executor relies on fitting together: norms present, KV sources, per-layer inputs, MoE top-k. */
    private static void check(ModelSpec spec) {
        if (spec.numLayers() == 0) throw new ModelException("the model has no layers");
        if (spec.finalNorm() == null) throw new ModelException("the model has no final norm");
        for (int i = 0; i < spec.numLayers(); i++) {
            LayerSpec ls = spec.layer(i);
            if (ls.index() != i) throw new ModelException("layer " + i + " is numbered " + ls.index());
            if (ls.preMixer() == null || ls.preFfn() == null)
                throw new ModelException("layer " + i + " has no " + (ls.preMixer() == null ? "pre-mixer" : "pre-FFN") + " norm");
            if (ls.mixer() instanceof Mixer.Attention a && a.sharesKv()) {
                int src = a.kvSource();
                if (src >= i || !(spec.layer(src).mixer() instanceof Mixer.Attention sa) || sa.sharesKv()
                        || sa.kvDim() != a.kvDim() || sa.window() != a.window())
                    throw new ModelException("layer " + i + " shares the K/V of layer " + src + ", which is not an earlier"
                            + " attention layer of the same shape and window");
            }
            if (ls.perLayerInput() != null && spec.perLayerEmbedding() == null)
                throw new ModelException("layer " + i + " has per-layer inputs but the model has no per-layer embedding");
            checkMoe(i, ls.ffn());
        }
    }

    private static void checkMoe(int layer, Ffn f) {
        switch (f) {
            case Ffn.GatedMlp m -> { }
            case Ffn.Moe m -> {
                int n = m.experts().count();
                if (m.topK() < 1 || m.topK() > n)
                    throw new ModelException("layer " + layer + ": MoE top-k " + m.topK() + " outside 1.." + n);
            }
            case Ffn.DenseAndMoe d -> checkMoe(layer, d.moe());
        }
    }

    /**
     * Which layers the memory seals: the selected full-attention layers (sliding layers keep their own ring, linear
     * ones their own state). Refused: a natively bounded file, a soft-capped or KV-sharing layer, an explicit index
     * that is not a full-attention layer.
     */
    private static boolean[] sealedLayers(ModelSpec spec, AttentionMemory memory) {
        int n = spec.numLayers();
        boolean[] out = new boolean[n];
        AttentionMemory.Sealed o1 = memory.sealed();
        if (o1 == null) return out;
        boolean[] asked = o1.flags(n);
        boolean explicit = !o1.layers().trim().equalsIgnoreCase("all")
                && !o1.layers().trim().toLowerCase(java.util.Locale.ROOT).startsWith("deep");
        for (int i = 0; i < n; i++) {
            Mixer m = spec.layer(i).mixer();
            if (m instanceof Mixer.BoundedAttention)
                throw new ModelException("--o1 does not apply: this file's attention is natively bounded (swa_sink_v1, layer " + i + ")");
            if (!asked[i]) continue;
            if (!(m instanceof Mixer.Attention a) || a.sliding()) {
                if (explicit) throw new ModelException("--o1 names layer " + i + ", which is not a full-attention layer");
                continue;
            }
            if (a.softcap() > 0f) throw new ModelException("--o1 cannot seal soft-capped attention (layer " + i + ", cap " + a.softcap() + ")");
            boolean source = false;
            for (int j = 0; j < n; j++)
                source |= spec.layer(j).mixer() instanceof Mixer.Attention b && b.kvSource() == i;
            if (a.sharesKv() || source)
                throw new ModelException("--o1 cannot seal layer " + i + ": it shares its K/V with another layer");
            out[i] = true;
        }
        return out;
    }

    /** The ops, in the order they run. */
    public List<Op> ops() { return ops; }

    /** The spec the plan was built from. */
    public ModelSpec spec() { return spec; }

    /** How attention keeps its keys and values. */
    public AttentionMemory memory() { return memory; }

    /** The ranks of the tensor-parallel group this plan is one rank of; 1 for a whole model. */
    public int ranks() { return ranks; }

    /** By layer: whether the memory seals it (a fresh copy). */
    public boolean[] sealedLayers() { return sealed.clone(); }

    /** The layer ops of {@code layer}, from its {@link BeginLayer} to its {@link EndLayer} included. */
    public List<Op> layer(int layer) {
        int from = -1;
        for (int i = 0; i < ops.size(); i++) {
            if (ops.get(i) instanceof BeginLayer b && b.layer() == layer) from = i;
            if (ops.get(i) instanceof EndLayer e && e.layer() == layer) return ops.subList(from, i + 1);
        }
        throw new IndexOutOfBoundsException("layer " + layer + " of " + spec.numLayers());
    }

    /** One op a line, as it runs: {@code x = embed(model.embed_tokens.weight) · 1.0}, {@code h = norm(x) pre-mixer ...}. */
    @Override public String toString() {
        StringBuilder b = new StringBuilder();
        for (Op op : ops) b.append(line(op)).append('\n');
        return b.toString();
    }

    /** A line of {@link #toString()}. */
    public static String line(Op op) {
        return switch (op) {
            case Embed e -> "x = " + e.table() + "[ids]" + (e.scale() == 1f ? "" : " · " + e.scale());
            case MtpInput e -> "x = " + e.projection() + "([norm(" + e.table() + "[ids]" + (e.scale() == 1f ? "" : " · " + e.scale())
                    + ") " + e.embeddingNorm().weight() + "; norm(hidden) " + e.hiddenNorm().weight() + "])";
            case InputRows r -> "x = the rows handed in [rows, " + r.hidden() + "] (the previous stage's last layer)";
            case PerLayerTable p -> "pli = per-layer inputs(" + p.embedding().table() + ", " + p.embedding().modelProjection()
                    + "(x)) [" + p.layers() + "×" + p.embedding().dim() + "]";
            case BeginLayer l -> "layer " + l.layer() + " {";
            case Normalize n -> "  " + lower(n.to()) + " = norm(" + lower(n.from()) + ") " + n.role()
                    + (n.norm().weight() == null ? "" : " " + n.norm().weight());
            case Mix m -> "  m = " + mixerName(m) + "(h)";
            case FeedForward f -> "  m = " + switch (f.ffn()) {
                case Ffn.GatedMlp g -> "mlp";
                case Ffn.Moe g -> "moe(" + g.experts().count() + " experts, top " + g.topK() + (g.shared() == null ? "" : ", shared") + ")";
                case Ffn.DenseAndMoe d -> "mlp + moe(" + d.moe().experts().count() + " experts, top " + d.moe().topK() + ")";
            } + "(h)";
            case AllReduce a -> "  " + lower(a.slot()) + " = all-reduce sum(" + lower(a.slot()) + ") over " + a.ranks() + " ranks";
            case AddResidual a -> "  x += " + lower(a.from());
            case PerLayerInput p -> "  x += norm(" + p.input().projection() + "(act(" + p.input().gate() + "(x)) · pli[" + p.layer() + "]))";
            case ScaleLayer s -> "  x *= " + s.scalar();
            case EndLayer l -> "}";
            case FinalNorm f -> "x = norm(x) final" + (f.norm().weight() == null ? "" : " " + f.norm().weight());
            case Head h -> "logits = " + (h.softcap() > 0f ? "softcap(" : "") + h.weight() + "(x)"
                    + (h.clusters() == null ? "" : " clustered in " + h.clusters().count()) + (h.softcap() > 0f ? ", " + h.softcap() + ")" : "");
        };
    }

    private static String mixerName(Mix m) {
        return switch (m.mixer()) {
            case Mixer.Attention a -> (m.sealed() != null ? "sealed attention" : a.sliding() ? "sliding attention(" + a.window() + ")"
                    : "attention") + (a.sharesKv() ? " over layer " + a.kvSource() + "'s K/V" : "");
            case Mixer.GatedDeltaNet g -> "gated delta net";
            case Mixer.BoundedAttention b -> "bounded anchor(" + b.sinks() + " sinks, window " + b.window() + ")";
        };
    }

    private static String lower(Slot s) { return s.name().toLowerCase(java.util.Locale.ROOT); }
}
