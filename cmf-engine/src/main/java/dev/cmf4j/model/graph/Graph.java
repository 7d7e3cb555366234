package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.LayerSpec;
import dev.cmf4j.model.LowRankAdapter;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.Plan;
import dev.cmf4j.model.Tensor;
import dev.cmf4j.model.Weights;

/**
 * The one forward pass of every architecture. It runs a {@link ModelSpec}'s {@link Plan}, the op list read top to
 * bottom, each op absent when the spec has no such part:
 *
 * <pre>
 *   x = embed(ids) · embedScale                      (+ per-layer inputs, Gemma4)
 *   for each layer:
 *       x += postMixer(mixer(preMixer(x)))           attention, gated delta net or bounded anchor
 *       x += postFfn(ffn(preFfn(x), x))              dense MLP, MoE, or both
 *       x += postPli(proj(act(gate(x)) · pli[l]))    Gemma4 per-layer input
 *       x *= layerScalar                             Gemma4
 *   logits = softcap(head(finalNorm(x)))
 * </pre>
 *
 * On the CPU the plan's ops run as {@link CpuPlan}'s implementations; a device that runs whole models gets the same
 * plan lowered to a {@link DecoderPlan}. A Graph holds only immutable resolved weights and may be shared by many sessions; each session owns a
 * {@link State}. Built once per model file (cheap: nothing is copied but small vectors).
 */
public final class Graph {

    /** Receives the residual stream: index 0 = embeddings, l+1 = after layer l, L+1 = after the final norm. */
    @FunctionalInterface
    public interface HiddenObserver { void accept(int index, float[] x, int tokens, int hidden); }

    /** Receives a step's rows of the last layer's output (the residual stream before the final norm), [tokens, hidden]. */
    @FunctionalInterface
    public interface LastLayerRows { void accept(float[] x, int tokens, int hidden); }

    /**
     * An observer passing only the last layer's rows to {@code sink} (an MTP head's input): the one kind a device forward
     * that {@link DeviceForward#handsBackHidden hands them back} serves too.
     */
    public HiddenObserver lastLayer(LastLayerRows sink) { return new LastLayerObserver(layers, sink); }

    private record LastLayerObserver(int layers, LastLayerRows sink) implements HiddenObserver {
        @Override public void accept(int index, float[] x, int tokens, int hidden) { if (index == layers) sink.accept(x, tokens, hidden); }
    }

    /**
     * Why a {@link #lastLayer} observer cannot see this graph's steps, or null when it can (the CPU graph, or a device
     * forward that copies the rows back with the logits).
     */
    public String lastLayerProblem() {
        return device == null || device.handsBackHidden() ? null
                : "this model runs whole on a device whose forward does not hand back the hidden rows it reads";
    }

    private final ModelSpec spec;
    /** The op list every executor runs. */
    private final Plan plan;
    private final int hidden, vocab, layers;
    private final Tensor embedding;
    /** Embryo's hierarchical head, or null for a flat head. */
    private final HierarchicalHead clusterHead;
    /** Gemma4's per-layer input width, 0 when none. */
    private final int pleDim;
    /** The device's whole-forward replacement of the CPU plan, or null (the CPU plan runs). */
    private final DeviceForward device;
    /** The plan's CPU implementation, or null when the device runs the model whole. */
    private final CpuPlan cpu;
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
    /** An MTP head a device runs: the host makes its input rows (what its fc reads); null otherwise. */
    private final MtpInputRows mtpRows;

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
        // Plan.of checks that the spec's parts fit together and the memory applies
        this(Plan.of(spec, memory), weights, backend, adapters);
    }

    /**
     * The graph of a model's MTP head ({@link dev.cmf4j.model.MtpSpec}): it runs on the CPU (its steps take the model's
     * hidden rows, {@link #forwardMtp}), its one layer's state per sequence as any graph's.
     */
    public static Graph ofMtp(dev.cmf4j.model.MtpSpec mtp, Weights weights, Backend backend) {
        return new Graph(Plan.ofMtp(mtp), weights, backend, java.util.List.of(), null);
    }

    /**
     * The graph of one rank of a tensor-parallel split ({@link dev.cmf4j.model.TensorParallel}): its part of the model,
     * whose all-reduces go through {@code collective} (the rank's end of the group). Its logits are the rank's vocabulary
     * slice; {@link TensorParallelGraph} runs the ranks together and gathers them.
     */
    public static Graph ofRank(dev.cmf4j.model.TensorParallel.Shard shard, Backend backend, dev.cmf4j.backend.Collective collective) {
        if (collective.rank() != shard.rank() || collective.ranks() != shard.ranks())
            throw new IllegalArgumentException("rank " + shard.rank() + " of " + shard.ranks() + " given the collective of rank "
                    + collective.rank() + " of " + collective.ranks());
        return new Graph(shard.plan(), shard.weights(), backend, java.util.List.of(), collective);
    }

    /**
     * The graph of one stage of a pipeline split by layers ({@link dev.cmf4j.model.LayerSplit}): its layers; the first
     * stage embeds ids ({@link #forward(State, int[], int, int, float[], boolean, HiddenObserver)}), a later one starts
     * from the rows handed to it ({@link #forwardRows}); only the last one's head runs. {@link LayerSplitGraph} runs them.
     */
    public static Graph ofStage(dev.cmf4j.model.LayerSplit.Stage stage, Backend backend) {
        return new Graph(stage.plan(), stage.weights(), backend, java.util.List.of(), null);
    }

    private Graph(Plan plan, Weights weights, Backend backend, java.util.List<LowRankAdapter> adapters) {
        this(plan, weights, backend, adapters, null);
    }

    private Graph(Plan plan, Weights weights, Backend backend, java.util.List<LowRankAdapter> adapters,
                  dev.cmf4j.backend.Collective collective) {
        ModelSpec spec = plan.spec();
        AttentionMemory memory = plan.memory();
        this.spec = spec;
        this.memory = memory;
        this.plan = plan;
        this.weights = weights;
        this.hidden = spec.hidden();
        this.vocab = spec.vocab();
        this.layers = spec.numLayers();
        Loader l = new Loader(weights, adapters);
        this.embedding = l.embedding(spec.embedding(), hidden);
        Matrix embedRows = l.whole(embedding);
        Matrix head = l.matrix(spec.head(), vocab, hidden);
        var hc = spec.headClusters();
        this.clusterHead = hc == null ? null
                : new HierarchicalHead(head, l.matrix(hc.weight(), hc.count(), hidden), hc.count(), vocab, hidden);
        DeviceForward dev = null;
        if (backend.runsWholeModels()) {
            // a rank's plan runs whole only on a device that is a rank of a group of as many (its all-reduces there)
            String why = plan.ranks() == backend.tensorRanks() ? DecoderPlans.unsupported(plan)
                    : plan.ranks() == 1 ? "a whole model on a device that is one rank of a tensor-parallel group of " + backend.tensorRanks()
                    : "one rank of a tensor-parallel split over " + plan.ranks() + " on a device of " + (backend.tensorRanks() == 1
                            ? "no group" : "a group of " + backend.tensorRanks()) + " (the all-reduces run on the host)";
            var o1 = memory.sealed();
            var sealing = o1 == null ? null : new dev.cmf4j.backend.SealedLayers(plan.sealedLayers(), o1.landmarks(), o1.window(), o1.sinks());
            if (why == null) {
                DecoderPlan dp = DecoderPlans.of(plan, l, embedRows, head);
                dev = backend.deviceForward(dp, memory.kv(), sealing);
                // the device switches skills per row over the plan's own matrices and biases; it says which it cannot run
                if (dev != null && !l.skills.isEmpty()) l.skillProblems.putAll(dev.skills(DecoderPlans.skills(plan, l, dp)));
                String noAdapters = dev == null || adapters.isEmpty() ? null : dev.adapters(DecoderPlans.adapters(l, dp));
                if (noAdapters != null)
                    throw new ModelException("un-merged LoRA adapters: " + noAdapters + " (merge the adapter as a skill with"
                            + " `cmf skill add --lora`, or use --device cpu)");
            } else {
                backend.hostGraph(plan.ops().getFirst() instanceof Plan.MtpInput ? spec.archName() + " MTP head" : spec.archName(), why);
            }
        }
        this.device = dev;
        Plan.MtpInput mtpIn = plan.ops().getFirst() instanceof Plan.MtpInput m ? m : null;
        if (dev != null && mtpIn != null && !dev.runsMtpHeads())
            throw new IllegalStateException("the device took an MTP head's plan it cannot run");
        this.mtpRows = dev == null || mtpIn == null ? null
                : new MtpInputRows(embedRows, mtpIn.scale(), l.normOp(mtpIn.embeddingNorm()), l.normOp(mtpIn.hiddenNorm()), hidden);
        this.pleDim = spec.perLayerEmbedding() == null ? 0 : spec.perLayerEmbedding().dim();
        // a device forward runs the whole model: the CPU ops (their decoded biases and norms, a second copy of every
        // expert bias on an MoE) would never run, so they are not built
        this.cpu = dev == null ? new CpuPlan(plan, l, backend, embedRows, head, clusterHead, collective) : null;
        // skills: the embedding and a flat head switch per row too (CpuPlan's ops); anything a skill replaces that no
        // op took up makes that skill refuse to run rather than run half-applied
        this.skills = l.skills;
        this.adapters = adapters.stream().map(LowRankAdapter::name).toList();
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
            FfnStep ffn = cpu.ffns[l];
            if (t.ffnOff[l] != null) {
                MlpStep mlp = ffn instanceof MlpStep m ? m : ffn instanceof DenseAndMoeStep d ? d.mlp : null;
                if (mlp == null || mlp.intermediate != g.ffnWidth())
                    return "layer " + l + "'s FFN bits (" + g.ffnWidth() + " neurons) do not fit its feed-forward"
                            + (mlp == null ? " (no dense MLP)" : " of " + mlp.intermediate + " neurons");
            }
            if (t.headsOff[l] != null && !(cpu.mixers[l] instanceof AttentionStep a && a.spec().heads() == g.heads()))
                return "layer " + l + "'s head bits (" + g.heads() + " heads) do not fit its mixer";
            if (t.expertOff[l] != null) {
                MoeStep moe = ffn instanceof MoeStep m ? m : ffn instanceof DenseAndMoeStep d ? d.moe : null;
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
        boolean[] sealed = plan.sealedLayers();
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
            if (sealed[i]) b.append(" sealed ").append(memory.sealed());   // the plan's, so a device graph's hash has it too
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

    public ModelSpec spec() { return spec; }

    /** The op list this graph runs. */
    public Plan plan() { return plan; }

    public int hidden() { return hidden; }

    public int vocab() { return vocab; }

    public int numLayers() { return layers; }

    /** Layer l's CPU mixer and FFN steps; null when a device runs the model whole. */
    MixerStep mixer(int l) { return cpu == null ? null : cpu.mixers[l]; }

    FfnStep ffn(int l) { return cpu == null ? null : cpu.ffns[l]; }

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
     * An MTP head's step ({@link #ofMtp}): as {@link #forward(State, int[], int, int, float[], boolean, HiddenObserver)},
     * row t's input made from token {@code ids[off + t]} and the model's hidden row {@code hidden[hiddenOff + t·hidden,
     * + hidden)} (its last layer's output for the position before that token).
     */
    public void forwardMtp(State st, int[] ids, int off, int tokens, float[] hiddenRows, int hiddenOff, float[] logits,
                           boolean allLogits, HiddenObserver observer) {
        if (!(plan.ops().getFirst() instanceof Plan.MtpInput)) throw new IllegalStateException("this graph is not an MTP head's");
        if (hiddenOff < 0 || (long) hiddenOff + (long) tokens * hidden > hiddenRows.length)
            throw new IllegalArgumentException(tokens + " hidden rows from " + hiddenOff + " outside a buffer of " + hiddenRows.length);
        if (st.graph != this) throw new IllegalArgumentException("state belongs to another graph");
        if (device != null) {
            deviceMtp(st, ids, off, tokens, hiddenRows, hiddenOff, logits, allLogits, observer);
            return;
        }
        Workspace ws = st.soloWorkspace();
        ws.hiddenIn = hiddenRows;
        ws.hiddenInOff = hiddenOff;
        try {
            forward(st, ids, off, tokens, logits, allLogits, observer);
        } finally {
            ws.hiddenIn = null;
        }
    }

    /**
     * A later pipeline stage's step ({@link dev.cmf4j.model.LayerSplit}, {@link Plan#takesInputRows}): as {@link
     * #forward(State, int[], int, int, float[], boolean, HiddenObserver)}, x made from {@code rows[rowsOff, + tokens·
     * hidden)} (the previous stage's last layer) instead of the embedding.
     */
    public void forwardRows(State st, float[] rows, int rowsOff, int tokens, float[] logits, boolean allLogits, HiddenObserver observer) {
        if (!plan.takesInputRows()) throw new IllegalStateException("this graph is not a later pipeline stage's");
        if (rowsOff < 0 || (long) rowsOff + (long) tokens * hidden > rows.length)
            throw new IllegalArgumentException(tokens + " rows from " + rowsOff + " outside a buffer of " + rows.length);
        if (st.graph != this) throw new IllegalArgumentException("state belongs to another graph");
        int[] noIds = new int[tokens];   // the stage reads no ids
        if (device == null) {
            Workspace ws = st.soloWorkspace();
            ws.hiddenIn = rows;
            ws.hiddenInOff = rowsOff;
            try {
                forward(st, noIds, 0, tokens, logits, allLogits, observer);
            } finally {
                ws.hiddenIn = null;
            }
            return;
        }
        if (tokens < 1 || tokens > st.maxChunk)
            throw new IllegalArgumentException("chunk of " + tokens + " tokens outside 1.." + st.maxChunk);
        Batch batch = st.soloBatch().add(st, noIds, 0, tokens, logits == null ? Batch.Logits.NONE : allLogits ? Batch.Logits.ALL : Batch.Logits.LAST);
        Workspace ws = st.soloWorkspace();
        check(batch, ws, logits);
        batch.resolve();
        if (!st.overlay.isBackbone()) throw new IllegalArgumentException("a pipeline stage runs on the backbone only");
        float[] out = deviceRows(batch, ws, observer);
        float[] in = rowsOff == 0 ? rows : java.util.Arrays.copyOfRange(rows, rowsOff, rowsOff + tokens * hidden);
        try {
            device.forwardRows(st.deviceState, tokens, st.position, in, logits, allLogits, out);
        } catch (RuntimeException | Error e) {
            breakRecurrent(batch);
            throw e;
        }
        st.position += tokens;
        if (out != null) ((LastLayerObserver) observer).sink().accept(out, tokens, hidden);
    }

    /**
     * An MTP head's catch-up rows (as {@link #forwardMtp}: token {@code ids[off + t]} with hidden row t, no logits back)
     * and then {@code k} greedy drafts (each the argmax of the head's logits, no penalties) chained on the device, into
     * {@code drafts}; the state ends {@code tokens + k − 1} positions on (the draft rows, which the caller takes back).
     * False, with nothing run, where the head runs on the host graph or its device does not chain drafts (then the caller
     * drafts row by row).
     */
    public boolean draftMtpGreedy(State st, int[] ids, int off, int tokens, float[] hiddenRows, int hiddenOff, int k, int[] drafts) {
        if (!(plan.ops().getFirst() instanceof Plan.MtpInput)) throw new IllegalStateException("this graph is not an MTP head's");
        if (!draftsMtpGreedily()) return false;
        if (hiddenOff < 0 || (long) hiddenOff + (long) tokens * hidden > hiddenRows.length)
            throw new IllegalArgumentException(tokens + " hidden rows from " + hiddenOff + " outside a buffer of " + hiddenRows.length);
        if (st.graph != this) throw new IllegalArgumentException("state belongs to another graph");
        if (tokens < 1 || tokens > st.maxChunk)
            throw new IllegalArgumentException("chunk of " + tokens + " tokens outside 1.." + st.maxChunk);
        if (k < 1 || drafts.length < k || st.position + tokens + k - 1 > st.maxContext)
            throw new IllegalArgumentException(k + " drafts after " + tokens + " rows at " + st.position + ": outside the context of "
                    + st.maxContext + " or a buffer of " + drafts.length);
        Batch batch = st.soloBatch().add(st, ids, off, tokens, Batch.Logits.NONE);
        Workspace ws = st.soloWorkspace();
        check(batch, ws);
        batch.resolve();
        if (!st.overlay.isBackbone()) throw new IllegalArgumentException("an MTP head runs on the backbone only");
        float[] in = ws.mtpRows(tokens * 2 * hidden);
        mtpRows.make(ids, off, tokens, hiddenRows, hiddenOff, in);
        try {
            device.forwardMtpGreedy(st.deviceState, tokens, st.position, in, mtpRows.embeddingNorm(), mtpRows.hiddenNorm(),
                    mtpRows.scale(), k, drafts);
        } catch (RuntimeException | Error e) {
            breakRecurrent(batch);
            throw e;
        }
        st.position += tokens + k - 1;
        return true;
    }

    /** Whether {@link #draftMtpGreedy} chains this MTP head's greedy drafts on its device. */
    public boolean draftsMtpGreedily() {
        return device != null && mtpRows != null && device.draftsMtpGreedily() && mtpRows.embeddingNorm().w() != null
                && mtpRows.hiddenNorm().w() != null;
    }

    /** An MTP head's step on the device: its input rows made here, the fc, layer, norm and head there. */
    private void deviceMtp(State st, int[] ids, int off, int tokens, float[] hiddenRows, int hiddenOff, float[] logits,
                           boolean allLogits, HiddenObserver observer) {
        if (tokens < 1 || tokens > st.maxChunk)
            throw new IllegalArgumentException("chunk of " + tokens + " tokens outside 1.." + st.maxChunk);
        Batch batch = st.soloBatch().add(st, ids, off, tokens, logits == null ? Batch.Logits.NONE : allLogits ? Batch.Logits.ALL : Batch.Logits.LAST);
        Workspace ws = st.soloWorkspace();
        check(batch, ws, logits);
        batch.resolve();
        if (!st.overlay.isBackbone()) throw new IllegalArgumentException("an MTP head runs on the backbone only");
        float[] rows = deviceRows(batch, ws, observer);
        float[] in = ws.mtpRows(tokens * 2 * hidden);
        mtpRows.make(ids, off, tokens, hiddenRows, hiddenOff, in);
        try {
            device.forwardMtp(st.deviceState, tokens, st.position, in, logits, allLogits, rows);
        } catch (RuntimeException | Error e) {
            breakRecurrent(batch);
            throw e;
        }
        st.position += tokens;
        if (rows != null) ((LastLayerObserver) observer).sink().accept(rows, tokens, hidden);
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
            float[] rows = deviceRows(batch, ws, observer);
            deviceForward(batch, logits, rows);
            if (rows != null) ((LastLayerObserver) observer).sink().accept(rows, batch.rows(), hidden);
            return;
        }
        ws.begin(batch, logits, observer);
        try {
            cpu.run(ws);
        } catch (RuntimeException | Error e) {
            for (int i = 0; i < batch.size(); i++) {
                State st = batch.state(i);
                for (int l = 0; l < layers; l++) if (!cpu.mixers[l].abandon(st.mixerState[l])) st.broken = true;
            }
            if (e instanceof InternalError fault) throw weightsFault(fault);
            throw e;
        } finally {
            ws.end();
        }
        for (int i = 0; i < batch.size(); i++) {
            State st = batch.state(i);
            for (int l = 0; l < layers; l++) cpu.mixers[l].commit(st.mixerState[l]);
            st.position += batch.tokens(i);
        }
    }

    /**
     * Where a device step puts its last-layer rows for {@code observer}, or null when none is asked for; only a
     * {@link #lastLayer} observer on a device that hands the rows back (they come back with the logits).
     */
    private float[] deviceRows(Batch batch, Workspace ws, HiddenObserver observer) {
        if (observer == null) return null;
        if (!(observer instanceof LastLayerObserver))
            throw new UnsupportedOperationException("observers of every layer's hidden states need the CPU graph; this model runs on the device");
        if (lastLayerProblem() != null) throw new UnsupportedOperationException(lastLayerProblem());
        return ws.hiddenRows(batch.rows() * hidden);
    }

    /**
     * A memory fault reading the weights (the JVM's answer to a read of a mapped page past the end of a truncated
     * file) as a typed error, so this step's requests fail and the JVM and the caller's loop go on.
     */
    private RuntimeException weightsFault(InternalError fault) {
        weights.checkIntact();   // throws the file's own error, naming it, when it was truncated
        return new ModelException("a memory fault while reading the weights: " + fault.getMessage(), fault);
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
    public void forwardArgmax(Batch batch, Workspace ws, int[] ids) { forwardArgmax(batch, ws, ids, null); }

    /** As {@link #forwardArgmax(Batch, Workspace, int[])}, {@code observer} seeing the step as in {@link #forward(Batch, Workspace, float[], HiddenObserver)}. */
    public void forwardArgmax(Batch batch, Workspace ws, int[] ids, HiddenObserver observer) {
        if (ids.length < batch.logitRows())
            throw new IllegalArgumentException("ids buffer holds " + ids.length + " rows, the batch asks for " + batch.logitRows());
        if (device == null || batch.size() == 1) {   // a session's own step goes to its own forward, as forward does
            float[] logits = ws.logits(batch.logitRows() * vocab);
            forward(batch, ws, logits, observer);
            for (int r = 0; r < batch.logitRows(); r++) ids[r] = dev.cmf4j.backend.cpu.VectorMath.argmax(logits, r * vocab, vocab);
            return;
        }
        check(batch, ws);
        batch.resolve();
        float[] rows = deviceRows(batch, ws, observer);
        try {
            gateHeads(batch);
            device.forwardArgmax(spans(batch), ids, vocab, rows);
        } catch (RuntimeException | Error e) {
            breakRecurrent(batch);
            throw e;
        }
        for (int i = 0; i < batch.size(); i++) batch.state(i).position += batch.tokens(i);
        if (rows != null) ((LastLayerObserver) observer).sink().accept(rows, batch.rows(), hidden);
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

    private void deviceForward(Batch batch, float[] logits, float[] hiddenRows) {
        try {
            gateHeads(batch);
            // a session's own step (a decode token, a prompt chunk): no span list per token; a skill's, an
            // adapter's or a mask's rows go as spans
            Overlay solo = batch.span(0).sequence().overlay;
            if (batch.size() == 1 && solo.isBackbone()) {
                Batch.Span s = batch.span(0);
                State st = s.sequence();
                device.forward(st.deviceState, s.ids(), s.off(), s.tokens(), st.position, s.logitRows() == 0 ? null : logits,
                        s.logitRows() > 1, hiddenRows);
                st.position += s.tokens();
                return;
            }
            device.forward(spans(batch), logits, vocab, hiddenRows);
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
}
