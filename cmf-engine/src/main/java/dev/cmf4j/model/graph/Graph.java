package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Activation;
import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.Ffn;
import dev.cmf4j.model.LayerSpec;
import dev.cmf4j.model.LowRankAdapter;
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
    private final Backend backend;
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
    private final dev.cmf4j.backend.Activation[] pliAct;
    private final NormOp finalNorm;
    private final Matrix head;
    /** Embryo's hierarchical head over {@link #head}, or null for a flat head. */
    private final HierarchicalHead clusterHead;
    // per-layer embeddings (Gemma4)
    private final Tensor pleTable;
    private final Matrix pleRows;
    private final Linear pleProjection;
    private final NormOp pleNorm;
    private final int pleDim;
    /** The device's whole-forward replacement of the steps above, or null (the CPU steps run). */
    private final DeviceForward device;
    /** The head as a product that skills may replace (a flat head), or null (a clustered head, a device forward). */
    private final Linear headProduct;
    /** By skill slot: the skill's embedding table, or null where it keeps the backbone's (null when no skill has one). */
    private final Matrix[] skillEmbed;
    /** The file's skills and the un-merged adapters, by slot − 1; skill id → why it cannot run here. */
    private final java.util.List<String> skills, adapters;
    private final java.util.Map<String, String> skillProblems;
    /** Asked what went wrong after a memory fault reading them. */
    private final Weights weights;
    /** The file's task masks by name and, by slot, resolved (null: none, or all ones); name → why it cannot apply. */
    private final java.util.List<String> tasks;
    private final TaskMask[] taskMasks;
    private final java.util.Map<String, String> taskProblems;

    /** How attention keeps its keys and values ({@code --o1} sealed layers, {@code --kv}). */
    private final AttentionMemory memory;

    /**
     * @param backend the device; the caller closes it after the graph's last use
     */
    public Graph(ModelSpec spec, Weights weights, Backend backend) { this(spec, weights, backend, java.util.List.of()); }

    /**
     * @param adapters un-merged LoRA adapters the sequences may ask for ({@link #overlay}); each target must be a
     *                 weight product of the model
     */
    public Graph(ModelSpec spec, Weights weights, Backend backend, java.util.List<LowRankAdapter> adapters) {
        this(spec, weights, backend, adapters, AttentionMemory.EXACT);
    }

    /**
     * @param memory sealed layers and the KV cache's type (a device that cannot run them whole runs the CPU steps;
     *               {@code --kv q8} is refused by a whole-model device)
     */
    public Graph(ModelSpec spec, Weights weights, Backend backend, java.util.List<LowRankAdapter> adapters,
                 AttentionMemory memory) {
        this.spec = spec;
        this.memory = memory;
        boolean[] sealedLayers = sealedLayers(spec, memory);
        this.weights = weights;
        this.backend = backend;
        this.mm = backend.matmul();
        this.hidden = spec.hidden();
        this.vocab = spec.vocab();
        this.layers = spec.numLayers();
        Loader l = new Loader(weights, adapters);
        this.embedding = l.tensor(spec.embedding());
        if (embedding.rank() != 2 || embedding.cols() != hidden)
            throw new ModelException("embedding '" + spec.embedding() + "' has shape "
                    + java.util.Arrays.toString(embedding.shape()) + ", expected [vocab, " + hidden + "]");
        this.embedRows = l.whole(embedding);
        this.finalNorm = l.normOp(spec.finalNorm());
        this.head = l.matrix(spec.head(), vocab, hidden);
        var hc = spec.headClusters();
        this.clusterHead = hc == null ? null
                : new HierarchicalHead(head, l.matrix(hc.weight(), hc.count(), hidden), hc.count(), vocab, hidden);
        for (int i = 0; i < layers; i++)
            if (spec.layer(i).mixer() instanceof Mixer.Attention a && a.sharesKv()) {
                int src = a.kvSource();
                if (src >= i || !(spec.layer(src).mixer() instanceof Mixer.Attention sa) || sa.sharesKv()
                        || sa.kvDim() != a.kvDim() || sa.window() != a.window())
                    throw new ModelException("layer " + i + " shares the K/V of layer " + src + ", which is not an earlier"
                            + " attention layer of the same shape and window");
            }
        DeviceForward dev = null;
        if (backend.runsWholeModels()) {
            String why = DecoderPlans.unsupported(spec);
            var o1 = memory.sealed();
            var sealing = o1 == null ? null : new dev.cmf4j.backend.SealedLayers(sealedLayers, o1.landmarks(), o1.window(), o1.sinks());
            if (why == null) {
                DecoderPlan plan = DecoderPlans.of(spec, l, embedRows, head, finalNorm);
                dev = backend.deviceForward(plan, memory.kv(), sealing);
                // the device switches skills per row over the plan's own matrices and biases; it says which it cannot run
                if (dev != null && !l.skills.isEmpty()) l.skillProblems.putAll(dev.skills(DecoderPlans.skills(spec, l, plan)));
                String noAdapters = dev == null || adapters.isEmpty() ? null : dev.adapters(DecoderPlans.adapters(l, plan));
                if (noAdapters != null)
                    throw new ModelException("un-merged LoRA adapters: " + noAdapters + " (merge the adapter as a skill with"
                            + " `cmf skill add --lora`, or use --device cpu)");
            } else {
                backend.hostGraph(spec.archName(), why);
            }
        }
        this.device = dev;
        mixers = new MixerStep[layers];
        ffns = new FfnStep[layers];
        preMixer = new NormOp[layers]; postMixer = new NormOp[layers];
        preFfn = new NormOp[layers]; postFfn = new NormOp[layers];
        layerScalar = new float[layers];
        pliGate = new Linear[layers]; pliProj = new Linear[layers]; pliNorm = new NormOp[layers];
        pliAct = new dev.cmf4j.backend.Activation[layers];
        var ple = spec.perLayerEmbedding();
        this.pleDim = ple == null ? 0 : ple.dim();
        // a device forward runs the whole model: the CPU steps (their decoded biases and norms, a second copy of
        // every expert bias on an MoE) would never run, so they are not built (the arrays stay empty)
        for (int i = 0; dev == null && i < layers; i++) {
            LayerSpec ls = spec.layer(i);
            mixers[i] = mixerStep(ls.mixer(), l, sealedLayers[i] ? memory.sealed() : null);
            ffns[i] = ffnStep(ls.ffn(), l, i);
            preMixer[i] = l.normOp(ls.preMixer());
            postMixer[i] = l.normOp(ls.postMixer());
            preFfn[i] = l.normOp(ls.preFfn());
            postFfn[i] = l.normOp(ls.postFfn());
            layerScalar[i] = ls.layerScalar() == null ? 1f : l.vector(ls.layerScalar(), 1)[0];
            if (ls.perLayerInput() != null) {
                if (ple == null) throw new ModelException("layer " + i + " has per-layer inputs but the model has no per-layer embedding");
                pliGate[i] = l.linear(ls.perLayerInput().gate(), null, pleDim, hidden);
                pliProj[i] = l.linear(ls.perLayerInput().projection(), null, hidden, pleDim);
                pliNorm[i] = l.normOp(ls.perLayerInput().postNorm());
                pliAct[i] = ls.perLayerInput().act();
            }
        }
        if (ple != null && dev == null) {   // a device forward has its own (DecoderPlans.of)
            this.pleTable = l.tensor(ple.table());
            if (pleTable.cols() != (long) layers * pleDim)
                throw new ModelException("per-layer table '" + ple.table() + "' has width " + pleTable.cols()
                        + ", expected " + layers + "×" + pleDim);
            this.pleRows = l.whole(pleTable);
            this.pleProjection = l.linear(ple.modelProjection(), null, layers * pleDim, hidden);
            this.pleNorm = l.normOp(ple.projectionNorm());
        } else {
            this.pleTable = null; this.pleRows = null; this.pleProjection = null; this.pleNorm = null;
        }
        // skills: the embedding and a flat head switch per row too; anything a skill replaces that no step took up
        // makes that skill refuse to run rather than run half-applied
        this.skills = l.skills;
        this.adapters = adapters.stream().map(LowRankAdapter::name).toList();
        if (dev == null) {
            this.skillEmbed = l.skillMatrices(spec.embedding());
            this.headProduct = clusterHead == null ? l.overlaid(spec.head(), head, null, null) : null;
        } else {
            this.skillEmbed = null;
            this.headProduct = null;
        }
        l.checkOverlaysUsed();
        this.skillProblems = java.util.Map.copyOf(l.skillProblems);
        // task masks: resolved once; an all-ones mask resolves to nothing and costs nothing
        var masks = weights.masks();
        this.tasks = masks == null ? java.util.List.of() : masks.masks().stream().map(m -> m.name()).toList();
        this.taskMasks = new TaskMask[tasks.size() + 1];
        var problems = new java.util.LinkedHashMap<String, String>();
        for (int i = 0; i < tasks.size(); i++) {
            try {
                taskMasks[i + 1] = TaskMask.of(masks.masks().get(i), layers);
                String why = dev == null ? fits(taskMasks[i + 1], masks.masks().get(i).geometry()) : null;
                if (why != null) problems.put(tasks.get(i), why);
            } catch (IllegalArgumentException e) {
                problems.put(tasks.get(i), e.getMessage());
            }
        }
        if (dev != null && !tasks.isEmpty()) {   // the device applies the masks per row; it says which it cannot
            var ms = new java.util.ArrayList<dev.cmf4j.backend.DeviceTasks.Mask>();
            for (int i = 0; i < tasks.size(); i++) {
                TaskMask t = taskMasks[i + 1];
                var g = masks.masks().get(i).geometry();
                ms.add(t == null ? null : new dev.cmf4j.backend.DeviceTasks.Mask(t.layerOff, t.ffnOff, t.headsOff, t.expertOff,
                        g.heads(), g.ffnWidth(), g.experts()));
            }
            dev.tasks(new dev.cmf4j.backend.DeviceTasks(tasks, ms)).forEach(problems::putIfAbsent);
        }
        this.taskProblems = java.util.Map.copyOf(problems);
        if (new java.util.HashSet<>(this.adapters).size() != this.adapters.size())
            throw new ModelException("two adapters share a name: " + this.adapters);
    }

    /** Why mask {@code t} cannot be applied to this graph's steps, or null when it fits. */
    private String fits(TaskMask t, dev.cmf4j.format.Masks.Geometry g) {
        if (t == null) return null;
        for (int l = 0; l < layers; l++) {
            if (t.ffnOff[l] != null) {
                MlpStep mlp = ffns[l] instanceof MlpStep m ? m : ffns[l] instanceof DenseAndMoeStep d ? d.mlp : null;
                if (mlp == null || mlp.intermediate != g.ffnWidth())
                    return "layer " + l + "'s FFN bits (" + g.ffnWidth() + " neurons) do not fit its feed-forward"
                            + (mlp == null ? " (no dense MLP)" : " of " + mlp.intermediate + " neurons");
            }
            if (t.headsOff[l] != null && !(mixers[l] instanceof AttentionStep a && a.spec().heads() == g.heads()))
                return "layer " + l + "'s head bits (" + g.heads() + " heads) do not fit its mixer";
            if (t.expertOff[l] != null) {
                MoeStep moe = ffns[l] instanceof MoeStep m ? m : ffns[l] instanceof DenseAndMoeStep d ? d.moe : null;
                if (moe == null || moe.experts() != g.experts() || !moe.routesByLogits())
                    return "layer " + l + "'s expert bits do not fit its feed-forward (no logit-routed MoE of " + g.experts() + " experts)";
            }
        }
        return null;
    }

    /** The file's task masks by name, in slot order (slot i + 1). */
    public java.util.List<String> tasks() { return tasks; }

    /**
     * {@code o} with task mask {@code task} (null or "none": no mask); a clear {@link IllegalArgumentException} for a
     * name the file does not have or a mask this graph cannot apply.
     */
    public Overlay withTask(Overlay o, String task) {
        if (task == null || task.equals("none")) return o.withTask(0, null);
        int t = tasks.indexOf(task) + 1;
        if (t == 0)
            throw new IllegalArgumentException("unknown task '" + task + "'; " + (tasks.isEmpty()
                    ? "the file has no task masks" : "the file's masks: " + String.join(", ", tasks)));
        String why = taskProblems.get(task);
        if (why != null) throw new IllegalArgumentException("task '" + task + "' cannot be applied: " + why);
        return o.withTask(t, task);
    }

    /** The skill ids of the file, in slot order (slot i + 1). */
    public java.util.List<String> skills() { return skills; }

    /** The un-merged adapters' names, in slot order (slot i + 1). */
    public java.util.List<String> adapters() { return adapters; }

    /** Why skill {@code id} cannot run on this graph, or null when it can. */
    public String skillProblem(String id) {
        return skillProblems.get(id);
    }

    /**
     * The overlay of skill {@code skill} (null or "none": the backbone) and un-merged adapter {@code adapter} (null:
     * none) at {@code scale}; a clear {@link IllegalArgumentException} for a name the model does not have or a skill
     * it cannot run.
     */
    public Overlay overlay(String skill, String adapter, float scale) {
        int s = 0, a = 0;
        if (skill != null && !skill.equals("none")) {
            s = skills.indexOf(skill) + 1;
            if (s == 0)
                throw new IllegalArgumentException("unknown skill '" + skill + "'; " + (skills.isEmpty()
                        ? "the file has no skills" : "the file has: " + String.join(", ", skills)));
            String why = skillProblem(skill);
            if (why != null) throw new IllegalArgumentException("skill '" + skill + "' cannot run: " + why);
        }
        if (adapter != null) {
            a = adapters.indexOf(adapter) + 1;
            if (a == 0)
                throw new IllegalArgumentException("unknown LoRA adapter '" + adapter + "'; " + (adapters.isEmpty()
                        ? "none was loaded" : "loaded: " + String.join(", ", adapters)));
        }
        return new Overlay(s, s == 0 ? null : skill, a, a == 0 ? null : adapter, a == 0 ? 0f : scale, 0, null);
    }

    /** Throws when {@code o} was not made by this graph's {@link #overlay} (slots out of range, a skill it cannot run). */
    public void checkOverlay(Overlay o) {
        if (o.skill() > skills.size() || o.adapter() > adapters.size()
                || (o.skill() > 0 && !skills.get(o.skill() - 1).equals(o.skillId()))
                || (o.adapter() > 0 && !adapters.get(o.adapter() - 1).equals(o.adapterName())))
            throw new IllegalArgumentException("overlay " + o + " does not belong to this model");
        if (o.task() > tasks.size() || (o.task() > 0 && !tasks.get(o.task() - 1).equals(o.taskName())))
            throw new IllegalArgumentException("overlay " + o + " does not belong to this model");
        if (o.task() > 0) withTask(o, o.taskName());   // throws when the mask cannot apply here
        if (o.skill() > 0 && skillProblem(o.skillId()) != null)
            throw new IllegalArgumentException("skill '" + o.skillId() + "' cannot run: " + skillProblem(o.skillId()));
    }

    /** The device forward this graph routes through, or null when its own CPU steps run. */
    public DeviceForward device() { return device; }

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
        boolean explicit = !o1.layers().trim().equalsIgnoreCase("all") && !o1.layers().trim().toLowerCase(java.util.Locale.ROOT).startsWith("deep");
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

    private static String describe(AttentionMemory m) {
        String o1 = m.sealed() == null ? "" : "--o1 " + m.sealed().layers();
        String kv = m.kv() == KvType.F32 ? "" : "--kv " + m.kv().label();
        return o1.isEmpty() ? kv : kv.isEmpty() ? o1 : o1 + " with " + kv;
    }

    /** Sealed layers and the KV cache type this graph runs with. */
    public AttentionMemory memory() { return memory; }

    private long operatorHash;

    /**
     * What a state snapshot must come from: a hash of the layer layout (mixer kinds and sizes), the attention memory
     * (sealed layers and their parameters, KV type), the weights' {@link Weights#variant() variant} (a blend) and the
     * embedding table's first and last MB. A snapshot made on another model, with other {@code --o1}/{@code --kv}
     * settings or through another blend, does not match.
     */
    public long operatorHash() {
        if (operatorHash != 0) return operatorHash;
        StringBuilder b = new StringBuilder("cmf-state-ops/1 ").append(spec.archName()).append(' ').append(hidden).append(' ').append(vocab);
        for (int i = 0; i < layers; i++) {
            b.append('|').append(i).append(':');
            switch (spec.layer(i).mixer()) {
                case Mixer.Attention a -> b.append("attn ").append(a.heads()).append('/').append(a.kvHeads()).append('/').append(a.headDim())
                        .append(" w").append(a.window()).append(" src").append(a.kvSource());
                case Mixer.BoundedAttention a -> b.append("bounded ").append(a.heads()).append('/').append(a.kvHeads()).append('/')
                        .append(a.headDim()).append(" w").append(a.window()).append(" s").append(a.sinks());
                case Mixer.GatedDeltaNet g -> b.append("gdn ").append(g.keyHeads()).append('/').append(g.valueHeads()).append('/')
                        .append(g.keyDim()).append('/').append(g.valueDim()).append(" k").append(g.convKernel());
            }
            if (mixers[i] instanceof AttentionStep st && st.sealed() != null) b.append(" sealed ").append(st.sealed());
        }
        b.append("|kv ").append(memory.kv().label());
        if (!weights.variant().isEmpty()) b.append('|').append(weights.variant());
        long h = dev.cmf4j.format.Hash64.of(b.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8));
        java.lang.foreign.MemorySegment e = embedding.data();
        long mb = Math.min(e.byteSize(), 1 << 20);
        h = h * 31 + dev.cmf4j.format.Hash64.of(e.asSlice(0, mb));
        h = h * 31 + dev.cmf4j.format.Hash64.of(e.asSlice(e.byteSize() - mb, mb));
        return operatorHash = h == 0 ? 1 : h;
    }

    private MixerStep mixerStep(Mixer m, Loader l, AttentionMemory.Sealed sealed) {
        return switch (m) {
            case Mixer.Attention a -> new AttentionStep(a, hidden, l, mm, backend.hostPool(), sealed, memory.kv());
            case Mixer.GatedDeltaNet g -> new DeltaNetStep(g, hidden, l, mm);
            case Mixer.BoundedAttention b -> new BoundedAnchorStep(b, hidden, l, mm);
        };
    }

    private FfnStep ffnStep(Ffn f, Loader l, int layer) {
        return switch (f) {
            case Ffn.GatedMlp m -> new MlpStep(m, hidden, l, mm, layer);
            case Ffn.Moe m -> new MoeStep(m, hidden, l, mm, layer);
            case Ffn.DenseAndMoe d -> new DenseAndMoeStep(d, hidden, l, mm, layer);
        };
    }

    public ModelSpec spec() { return spec; }

    public int hidden() { return hidden; }

    public int vocab() { return vocab; }

    public int numLayers() { return layers; }

    MixerStep mixer(int l) { return mixers[l]; }

    FfnStep ffn(int l) { return ffns[l]; }

    int perLayerDim() { return pleDim; }

    HierarchicalHead clusterHead() { return clusterHead; }

    int perLayerWidth() { return layers * pleDim; }

    /** A fresh sequence state for chunks of up to {@code maxChunk} tokens (when run alone) and {@code maxContext} positions. */
    public State newState(int maxChunk, int maxContext) {
        if (maxChunk < 1) throw new IllegalArgumentException("maxChunk must be >= 1");
        return new State(this, maxChunk, Math.min(maxContext, spec.maxPositions()));
    }

    /**
     * The scratch of steps of up to {@code maxRows} rows; {@code maxContext} sizes the attention's first score
     * buffers (they grow when a longer sequence comes).
     */
    public Workspace newWorkspace(int maxRows, int maxContext) {
        if (maxRows < 1) throw new IllegalArgumentException("maxRows must be >= 1");
        return new Workspace(this, maxRows, Math.min(maxContext, spec.maxPositions()));
    }

    /**
     * Runs {@code tokens} ids (from {@code ids[off]}) of one sequence at its position and advances it: a batch of one
     * span in the state's own workspace.
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
        Batch.Logits want = logits == null ? Batch.Logits.NONE : allLogits ? Batch.Logits.ALL : Batch.Logits.LAST;
        forward(st.soloBatch().add(st, ids, off, tokens, want), st.soloWorkspace(), logits, observer);
    }

    /**
     * Runs one step of {@code batch}: every span's tokens at its sequence's position, token-wise work over all rows
     * at once, attention and recurrent state per span. Advances every sequence; fills {@code logits} with the rows
     * the spans ask for, in span order ([batch.logitRows(), vocab]; may be null when none are asked for).
     * Everything is checked before anything runs: a bad span fails the step with no sequence changed. When a
     * step fails midway, every span's K/V of the step is dropped (a recurrent state that cannot roll back marks its
     * sequence broken).
     */
    public void forward(Batch batch, Workspace ws, float[] logits, HiddenObserver observer) {
        check(batch, ws, logits);
        batch.resolve();
        batch.overlay.masks = taskMasks;
        if (device != null) {
            if (observer != null)
                throw new UnsupportedOperationException("hidden-state observers need the CPU graph; this model runs on the device");
            deviceForward(batch, logits);
            return;
        }
        int rows = batch.rows();
        float[] x = ws.x, h = ws.h, m = ws.m;
        for (int i = 0, r = 0; i < batch.size(); i++) {
            Batch.Span s = batch.span(i);
            System.arraycopy(s.ids(), s.off(), ws.ids, r, s.tokens());
            r += s.tokens();
        }
        try {
            embed(ws.ids, rows, x, batch.overlay);
            if (pleTable != null) perLayerInputs(ws.ids, rows, x, ws, batch.overlay);
            if (observer != null) observer.accept(0, x, rows, hidden);
            int n = rows * hidden;
            for (int l = 0; l < layers; l++) {
                int kept = batch.overlay.anyTask ? keepRowsOfSkippedLayer(batch.overlay, l, x, rows) : 0;
                // mixer
                preMixer[l].rows(x, h, rows);
                mixers[l].forward(h, m, batch, ws.mixerScratch[l], l);
                if (postMixer[l] != null) postMixer[l].rows(m, rows);
                for (int i = 0; i < n; i++) x[i] += m[i];
                // feed-forward
                preFfn[l].rows(x, h, rows);
                ffns[l].forward(h, x, m, rows, ws.ffnScratch[l], batch.overlay);
                if (postFfn[l] != null) postFfn[l].rows(m, rows);
                for (int i = 0; i < n; i++) x[i] += m[i];
                // per-layer input, layer scalar
                if (pliGate[l] != null) perLayerInput(l, rows, x, ws, batch.overlay);
                if (layerScalar[l] != 1f) for (int i = 0; i < n; i++) x[i] *= layerScalar[l];
                if (kept > 0) restoreRowsOfSkippedLayer(batch.overlay, kept, x);
                if (observer != null) observer.accept(l + 1, x, rows, hidden);
            }
            finalNorm.rows(x, rows);
            if (observer != null) observer.accept(layers + 1, x, rows, hidden);
            if (batch.logitRows() > 0) head(batch, x, logits, h, ws);
        } catch (RuntimeException | Error e) {
            for (int i = 0; i < batch.size(); i++) {
                State st = batch.state(i);
                for (int l = 0; l < layers; l++) if (!mixers[l].abandon(st.mixerState[l])) st.broken = true;
            }
            if (e instanceof InternalError fault) throw weightsFault(fault);
            throw e;
        }
        for (int i = 0; i < batch.size(); i++) {
            State st = batch.state(i);
            for (int l = 0; l < layers; l++) mixers[l].commit(st.mixerState[l]);
            st.position += batch.tokens(i);
        }
    }

    /**
     * A memory fault reading the weights (the JVM's answer to a read of a mapped page past the end of a truncated
     * file) as a typed error, so this step's requests fail and the JVM and the caller's loop go on.
     */
    private RuntimeException weightsFault(InternalError fault) {
        weights.checkIntact();   // throws the file's own error, naming it, when it was truncated
        return new ModelException("a memory fault while reading the weights: " + fault.getMessage(), fault);
    }

    /**
     * Saves the residual rows whose task turns layer {@code l} off (they pass through it unchanged, as if its o and down
     * projections were 0); returns how many.
     */
    private int keepRowsOfSkippedLayer(RowOverlay ro, int l, float[] x, int rows) {
        int n = 0;
        for (int r = 0; r < rows; r++) {
            TaskMask tm = ro.mask(r);
            if (tm != null && tm.layerOff[l]) ro.skipRows[n++] = r;
        }
        if (n == 0) return 0;
        if (ro.skipped.length < n * hidden) ro.skipped = new float[n * hidden];
        for (int i = 0; i < n; i++) System.arraycopy(x, ro.skipRows[i] * hidden, ro.skipped, i * hidden, hidden);
        return n;
    }

    private void restoreRowsOfSkippedLayer(RowOverlay ro, int n, float[] x) {
        for (int i = 0; i < n; i++) System.arraycopy(ro.skipped, i * hidden, x, ro.skipRows[i] * hidden, hidden);
    }

    private void check(Batch batch, Workspace ws, float[] logits) {
        if (batch.logitRows() > 0 && (logits == null || logits.length < (long) batch.logitRows() * vocab))
            throw new IllegalArgumentException("logits buffer holds " + (logits == null ? 0 : logits.length / vocab)
                    + " rows, the batch asks for " + batch.logitRows());
        check(batch, ws);
    }

    private void check(Batch batch, Workspace ws) {
        if (ws.graph != this) throw new IllegalArgumentException("workspace belongs to another graph");
        if (batch.size() == 0) throw new IllegalArgumentException("empty batch");
        if (batch.rows() > ws.maxRows)
            throw new IllegalArgumentException("batch of " + batch.rows() + " rows exceeds the workspace's " + ws.maxRows);
        for (int i = 0; i < batch.size(); i++) {
            Batch.Span s = batch.span(i);
            State st = s.sequence();
            String which = batch.size() == 1 ? "" : "span " + i + ": ";
            if (st.graph != this) throw new IllegalArgumentException(which + "state belongs to another graph");
            if (st.closed) throw new IllegalStateException(which + "this session is closed");
            if (st.broken)
                throw new IllegalStateException(which + "this session's state was lost when an earlier step failed; reset it");
            if (st.position + s.tokens() > st.maxContext)
                throw new IllegalStateException(which + "context limit " + st.maxContext + " exceeded");
            if (device != null && s.tokens() > st.maxChunk)
                throw new IllegalArgumentException(which + "chunk of " + s.tokens() + " tokens outside 1.." + st.maxChunk);
            for (int t = 0; t < s.tokens(); t++) {
                int id = s.ids()[s.off() + t];
                if (id < 0 || id >= embedding.rows())
                    throw new IllegalArgumentException(which + "token id " + id + " outside the vocabulary [0, " + embedding.rows() + ")");
            }
        }
    }

    /** The spans as the device forward takes them; positions advance once it is done. */
    /**
     * As {@link #forward(Batch, Workspace, float[], HiddenObserver)}, each logit row reduced to its argmax (the lower id
     * among equal maxima, as greedy sampling picks): {@code ids[i]} for logit row i. A device picks there and returns
     * only the ids (one int a row instead of the vocabulary's floats).
     */
    public void forwardArgmax(Batch batch, Workspace ws, int[] ids) {
        if (ids.length < batch.logitRows())
            throw new IllegalArgumentException("ids buffer holds " + ids.length + " rows, the batch asks for " + batch.logitRows());
        if (device == null || batch.size() == 1) {   // a session's own step goes to its own forward, as forward does
            float[] logits = ws.logits(batch.logitRows() * vocab);
            forward(batch, ws, logits, null);
            for (int r = 0; r < batch.logitRows(); r++) ids[r] = dev.cmf4j.backend.cpu.VectorMath.argmax(logits, r * vocab, vocab);
            return;
        }
        check(batch, ws);
        batch.resolve();
        try {
            gateHeads(batch);
            device.forwardArgmax(spans(batch), ids, vocab);
        } catch (RuntimeException | Error e) {
            breakRecurrent(batch);
            throw e;
        }
        for (int i = 0; i < batch.size(); i++) batch.state(i).position += batch.tokens(i);
    }

    /** Hands each span's head gate to the device (a hierarchical head only). */
    private void gateHeads(Batch batch) {
        if (clusterHead == null) return;
        for (int i = 0; i < batch.size(); i++) device.gateHead(batch.state(i).deviceState, batch.state(i).headGate);
    }

    private static java.util.List<DeviceForward.Span> spans(Batch batch) {
        var spans = new java.util.ArrayList<DeviceForward.Span>(batch.size());
        for (int i = 0; i < batch.size(); i++) {
            Batch.Span s = batch.span(i);
            spans.add(new DeviceForward.Span(s.sequence().deviceState, s.ids(), s.off(), s.tokens(), s.sequence().position,
                    s.logitRows(), s.sequence().overlay.skill(), s.sequence().overlay.adapter(), s.sequence().overlay.adapterScale(),
                    s.sequence().overlay.task()));
        }
        return spans;
    }

    private void deviceForward(Batch batch, float[] logits) {
        try {
            gateHeads(batch);
            // a session's own step (a decode token, a prompt chunk): no span list per token; a skill's, an
            // adapter's or a mask's rows go as spans
            Overlay solo = batch.span(0).sequence().overlay;
            if (batch.size() == 1 && solo.isBackbone()) {
                Batch.Span s = batch.span(0);
                State st = s.sequence();
                device.forward(st.deviceState, s.ids(), s.off(), s.tokens(), st.position, s.logitRows() == 0 ? null : logits,
                        s.logitRows() > 1);
                st.position += s.tokens();
                return;
            }
            device.forward(spans(batch), logits, vocab);
        } catch (RuntimeException | Error e) {
            breakRecurrent(batch);
            throw e;
        }
        for (int i = 0; i < batch.size(); i++) batch.state(i).position += batch.tokens(i);
    }

    /** After a failed device step: a recurrent layer's state may have moved on (it cannot roll back), so its sequences must reset. */
    private void breakRecurrent(Batch batch) {
        boolean recurrent = memory.sealed() != null;   // a sealed step moves keys into the far sums: it cannot roll back either
        for (LayerSpec ls : spec.layers()) recurrent |= ls.mixer() instanceof Mixer.GatedDeltaNet || ls.mixer() instanceof Mixer.BoundedAttention;
        if (recurrent) for (int i = 0; i < batch.size(); i++) batch.state(i).broken = true;
    }

    private void embed(int[] ids, int tokens, float[] x, RowOverlay ro) {
        float scale = spec.embedScale();
        for (int t = 0; t < tokens; t++) {
            Matrix table = skillEmbed != null && ro.skill[t] != 0 && skillEmbed[ro.skill[t]] != null ? skillEmbed[ro.skill[t]] : embedRows;
            table.decodeRow(ids[t], x, t * hidden);
            if (scale != 1f) for (int i = 0; i < hidden; i++) x[t * hidden + i] *= scale;
        }
    }

    /** pli = (norm(W·x_emb · projScale) + table[id] · tableScale) · combineScale, per layer slice. */
    private void perLayerInputs(int[] ids, int tokens, float[] x, Workspace st, RowOverlay ro) {
        var ple = spec.perLayerEmbedding();
        int width = layers * pleDim;
        pleProjection.apply(mm, x, tokens, st.pli, ro);
        for (int i = 0; i < tokens * width; i++) st.pli[i] *= ple.projectionScale();
        pleNorm.rows(st.pli, tokens * layers);
        for (int t = 0; t < tokens; t++) {
            int id = ids[t];
            if (id >= pleTable.rows())
                throw new IllegalArgumentException("token id " + id + " outside the per-layer table [0, " + pleTable.rows() + ")");
            pleRows.decodeRow(id, st.pliTmp, t * width);
        }
        for (int i = 0; i < tokens * width; i++)
            st.pli[i] = (st.pli[i] + st.pliTmp[i] * ple.tableScale()) * ple.combineScale();
    }

    /** x += norm(proj(act(gate(x)) · pli[l])). */
    private void perLayerInput(int l, int tokens, float[] x, Workspace st, RowOverlay ro) {
        float[] g = st.pliTmp2, p = st.m;
        pliGate[l].apply(mm, x, tokens, g, ro);
        int width = layers * pleDim;
        for (int t = 0; t < tokens; t++)
            for (int i = 0; i < pleDim; i++) {
                int gi = t * pleDim + i;
                g[gi] = pliAct[l].apply(g[gi]) * st.pli[t * width + l * pleDim + i];
            }
        pliProj[l].apply(mm, g, tokens, p, ro);
        if (pliNorm[l] != null) pliNorm[l].rows(p, tokens);
        for (int i = 0; i < tokens * hidden; i++) x[i] += p[i];
    }

    /**
     * The logits rows the spans ask for, in span order; {@code free} is a rows-sized scratch the layers are done
     * with. When the rows wanted are all of x (one span asking for all) the head reads x in place.
     */
    private void head(Batch batch, float[] x, float[] logits, float[] free, Workspace ws) {
        int want = batch.logitRows();
        float[] in = x;
        if (want != batch.rows()) {
            in = free;
            for (int i = 0, r = 0, o = 0; i < batch.size(); i++) {
                Batch.Span s = batch.span(i);
                int n = s.logitRows();
                System.arraycopy(x, (r + s.tokens() - n) * hidden, free, o * hidden, n * hidden);
                r += s.tokens();
                o += n;
            }
        }
        if (clusterHead != null) clusterHead.apply(mm, batch, in, logits, ws.headScratch);
        else headProduct.apply(mm, in, want, logits, batch.logitOverlay);
        float cap = spec.finalSoftcap();
        if (cap > 0f) {
            int n = want * vocab;
            for (int i = 0; i < n; i++) logits[i] = (float) Math.tanh(logits[i] / cap) * cap;
        }
    }
}
