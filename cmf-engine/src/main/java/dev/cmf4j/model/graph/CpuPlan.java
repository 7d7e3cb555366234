package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Activation;
import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.Collective;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.model.Ffn;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.Plan;

/**
 * A {@link Plan} compiled for the CPU: each plan op becomes one {@link Op} over resolved weights (the mixer and FFN ops
 * run the steps, {@link MixerStep} and {@link FfnStep}), and {@link #run} executes them in the plan's order. One
 * interface call an op per step; the loops inside an op see one concrete type.
 */
final class CpuPlan {

    /** One plan op's CPU implementation; it reads and writes the step's buffers, held by the workspace. */
    interface Op { void run(Workspace ws); }

    final Op[] program;
    /** By layer: the mixer and FFN steps (their per-sequence state and scratch come from them). */
    final MixerStep[] mixers;
    final FfnStep[] ffns;

    /**
     * Resolves every op's weights through {@code l}; the embedding table and the head are the graph's own, already
     * resolved ({@code clusterHead} null for a flat head).
     */
    CpuPlan(Plan plan, Loader l, Backend backend, Matrix embedRows, Matrix head, HierarchicalHead clusterHead,
            Collective collective) {
        ModelSpec spec = plan.spec();
        MatMul mm = backend.matmul();
        int hidden = spec.hidden(), layers = spec.numLayers();
        var ops = plan.ops();
        program = new Op[ops.size()];
        mixers = new MixerStep[layers];
        ffns = new FfnStep[layers];
        boolean perLayerTable = false;
        // layers first, then the embedding, the per-layer table and the head: the order the loader met them before the
        // plan, so a file's first problem is named the same
        for (int i = 0; i < program.length; i++) {
            program[i] = switch (ops.get(i)) {
                case Plan.Embed e -> null;
                case Plan.MtpInput e -> null;
                case Plan.InputRows r -> new InputRows(hidden);
                case Plan.PerLayerTable p -> { perLayerTable = true; yield null; }
                case Plan.Head h -> null;
                case Plan.BeginLayer b -> new BeginLayer(b.layer(), hidden);
                case Plan.Normalize n -> new Normalize(l.normOp(n.norm()), n.from().ordinal(), n.to().ordinal());
                case Plan.Mix m -> new Mix(mixers[m.layer()] = mixer(m, hidden, l, mm, backend, plan), m.layer());
                case Plan.FeedForward f -> new FeedForward(ffns[f.layer()] = ffn(f.ffn(), hidden, l, mm, f.layer(), backend.hostPool()), f.layer());
                case Plan.AllReduce a -> new AllReduce(group(collective, a.ranks()), a.slot().ordinal(), hidden);
                case Plan.AddResidual a -> new AddResidual(a.from().ordinal(), hidden);
                case Plan.PerLayerInput p -> new PerLayerInput(p.layer(), l.linear(p.input().gate(), null, p.dim(), hidden),
                        l.linear(p.input().projection(), null, hidden, p.dim()), l.normOp(p.input().postNorm()), p.input().act(),
                        p.dim(), layers * p.dim(), hidden, mm);
                case Plan.ScaleLayer s -> new ScaleLayer(l.vector(s.scalar(), 1)[0], hidden);
                case Plan.EndLayer e -> new EndLayer(e.layer(), hidden);
                case Plan.FinalNorm f -> new FinalNorm(l.normOp(f.norm()), layers + 1, hidden);
            };
        }
        for (int i = 0; i < program.length; i++) {
            switch (ops.get(i)) {
                case Plan.PerLayerTable p -> program[i] = perLayerTable(p, l, hidden, mm);
                default -> { }
            }
        }
        for (int i = 0; i < program.length; i++) {
            switch (ops.get(i)) {
                case Plan.Embed e -> program[i] = new Embed(embedRows, l.skillMatrices(e.table()), e.scale(), hidden, !perLayerTable);
                case Plan.MtpInput e -> program[i] = new MtpInput(new MtpInputRows(embedRows, e.scale(), l.normOp(e.embeddingNorm()),
                        l.normOp(e.hiddenNorm()), hidden), l.linear(e.projection(), null, hidden, 2 * hidden), hidden, mm);
                case Plan.Head h -> program[i] = new Head(clusterHead, clusterHead == null ? l.overlaid(h.weight(), head, null, null) : null,
                        h.softcap(), h.vocab(), hidden, mm);
                default -> { }
            }
        }
    }

    /** Runs the program over the step the workspace was set up for ({@link Workspace#begin}). */
    void run(Workspace ws) {
        for (Op op : program) op.run(ws);
    }

    private static Collective group(Collective c, int ranks) {
        if (c == null || c.ranks() != ranks)
            throw new IllegalArgumentException("the plan sums over " + ranks + " ranks; the graph's collective is "
                    + (c == null ? "missing" : "one of " + c.ranks()));
        return c;
    }

    private static MixerStep mixer(Plan.Mix m, int hidden, Loader l, MatMul mm, Backend backend, Plan plan) {
        return switch (m.mixer()) {
            case Mixer.Attention a -> new AttentionStep(a, hidden, l, mm, backend.hostPool(), m.sealed(), plan.memory().kv());
            case Mixer.GatedDeltaNet g -> new DeltaNetStep(g, hidden, l, mm);
            case Mixer.BoundedAttention b -> new BoundedAnchorStep(b, hidden, l, mm);
        };
    }

    private static FfnStep ffn(Ffn f, int hidden, Loader l, MatMul mm, int layer, dev.cmf4j.backend.cpu.kernel.WorkerPool pool) {
        return switch (f) {
            case Ffn.GatedMlp m -> new MlpStep(m, hidden, l, mm, layer, pool);
            case Ffn.Moe m -> new MoeStep(m, hidden, l, mm, layer);
            case Ffn.DenseAndMoe d -> new DenseAndMoeStep(d, hidden, l, mm, layer);
        };
    }

    private static PerLayerTable perLayerTable(Plan.PerLayerTable p, Loader l, int hidden, MatMul mm) {
        var ple = p.embedding();
        Matrix table = l.perLayerTable(ple, p.layers());
        int width = p.layers() * ple.dim();
        return new PerLayerTable(table, l.linear(ple.modelProjection(), null, width, hidden), l.normOp(ple.projectionNorm()),
                ple.projectionScale(), ple.tableScale(), ple.combineScale(), p.layers(), width, hidden, mm);
    }

    /** x = table[id] · scale, a skill's own table for its rows; observes index 0 unless a per-layer table follows. */
    private record Embed(Matrix table, Matrix[] skillTables, float scale, int hidden, boolean observes) implements Op {
        @Override public void run(Workspace ws) {
            int rows = ws.rows;
            float[] x = ws.x;
            int[] ids = ws.ids, skill = ws.batch.overlay.skill;
            for (int t = 0; t < rows; t++) {
                Matrix m = skillTables != null && skill[t] != 0 && skillTables[skill[t]] != null ? skillTables[skill[t]] : table;
                m.decodeRow(ids[t], x, t * hidden);
                if (scale != 1f) for (int i = 0; i < hidden; i++) x[t * hidden + i] *= scale;
            }
            if (observes && ws.observer != null) ws.observer.accept(0, x, rows, hidden);
        }
    }

    /** x = projection · the MTP input rows of {@code ws}'s ids and its {@link Workspace#hiddenIn} rows; observes index 0. */
    private record MtpInput(MtpInputRows rows, Linear projection, int hidden, MatMul mm) implements Op {
        @Override public void run(Workspace ws) {
            if (ws.hiddenIn == null) throw new IllegalStateException("an MTP head's step needs the model's hidden rows (Graph.forwardMtp)");
            rows.make(ws.ids, 0, ws.rows, ws.hiddenIn, ws.hiddenInOff, ws.mtpCat);
            projection.apply(mm, ws.mtpCat, ws.rows, ws.x, ws.batch.overlay);
            if (ws.observer != null) ws.observer.accept(0, ws.x, ws.rows, hidden);
        }
    }

    /** x = the rows handed to the step ({@link Workspace#hiddenIn}: the previous pipeline stage's last layer); observes index 0. */
    private record InputRows(int hidden) implements Op {
        @Override public void run(Workspace ws) {
            if (ws.hiddenIn == null) throw new IllegalStateException("a pipeline stage's step needs the rows handed to it (Graph.forwardRows)");
            System.arraycopy(ws.hiddenIn, ws.hiddenInOff, ws.x, 0, ws.rows * hidden);
            if (ws.observer != null) ws.observer.accept(0, ws.x, ws.rows, hidden);
        }
    }

    /** pli = (norm(W·x_emb · projScale) + table[id] · tableScale) · combineScale, per layer slice; observes index 0. */
    private record PerLayerTable(Matrix table, Linear projection, NormOp norm, float projectionScale, float tableScale,
                                 float combineScale, int layers, int width, int hidden, MatMul mm) implements Op {
        @Override public void run(Workspace ws) {
            int tokens = ws.rows;
            float[] x = ws.x, pli = ws.pli, tmp = ws.pliTmp;
            projection.apply(mm, x, tokens, pli, ws.batch.overlay);
            for (int i = 0; i < tokens * width; i++) pli[i] *= projectionScale;
            norm.rows(pli, tokens * layers);
            for (int t = 0; t < tokens; t++) {
                int id = ws.ids[t];
                if (id >= table.rows())
                    throw new IllegalArgumentException("token id " + id + " outside the per-layer table [0, " + table.rows() + ")");
                table.decodeRow(id, tmp, t * width);
            }
            for (int i = 0; i < tokens * width; i++) pli[i] = (pli[i] + tmp[i] * tableScale) * combineScale;
            if (ws.observer != null) ws.observer.accept(0, x, tokens, hidden);
        }
    }

    /** Saves the residual rows whose task turns this layer off (they pass through it unchanged). */
    private record BeginLayer(int layer, int hidden) implements Op {
        @Override public void run(Workspace ws) {
            RowOverlay ro = ws.batch.overlay;
            ws.kept = 0;
            if (!ro.anyTask) return;
            int n = 0;
            for (int r = 0; r < ws.rows; r++) {
                TaskMask tm = ro.mask(r);
                if (tm != null && tm.layerOff[layer]) ro.skipRows[n++] = r;
            }
            if (n == 0) return;
            if (ro.skipped.length < n * hidden) ro.skipped = new float[n * hidden];
            for (int i = 0; i < n; i++) System.arraycopy(ws.x, ro.skipRows[i] * hidden, ro.skipped, i * hidden, hidden);
            ws.kept = n;
        }
    }

    /** to = norm(from), in place when they are one slot. */
    private record Normalize(NormOp norm, int from, int to) implements Op {
        @Override public void run(Workspace ws) {
            if (from == to) norm.rows(ws.slots[from], ws.rows);
            else norm.rows(ws.slots[from], ws.slots[to], ws.rows);
        }
    }

    /** m = mixer(h), each span over its own sequence's state of the layer. */
    private record Mix(MixerStep step, int layer) implements Op {
        @Override public void run(Workspace ws) { step.forward(ws.h, ws.m, ws.batch, ws.mixerScratch[layer], layer); }
    }

    /** m = ffn(h), the residual x beside it for the routers that read it. */
    private record FeedForward(FfnStep step, int layer) implements Op {
        @Override public void run(Workspace ws) { step.forward(ws.h, ws.x, ws.m, ws.rows, ws.ffnScratch[layer], ws.batch.overlay); }
    }

    /** slot = its sum over the ranks of the tensor-parallel group (every rank's partial product). */
    private record AllReduce(Collective collective, int slot, int hidden) implements Op {
        @Override public void run(Workspace ws) { collective.allReduceSum(ws.slots[slot], 0, ws.rows * hidden); }
    }

    /** x += from. */
    private record AddResidual(int from, int hidden) implements Op {
        @Override public void run(Workspace ws) {
            float[] x = ws.x, m = ws.slots[from];
            int n = ws.rows * hidden;
            for (int i = 0; i < n; i++) x[i] += m[i];
        }
    }

    /** x += norm(proj(act(gate(x)) · pli[layer])). */
    private record PerLayerInput(int layer, Linear gate, Linear projection, NormOp norm, Activation act, int dim, int width,
                                 int hidden, MatMul mm) implements Op {
        @Override public void run(Workspace ws) {
            int tokens = ws.rows;
            float[] x = ws.x, g = ws.pliTmp2, p = ws.m, pli = ws.pli;
            RowOverlay ro = ws.batch.overlay;
            gate.apply(mm, x, tokens, g, ro);
            for (int t = 0; t < tokens; t++)
                for (int i = 0; i < dim; i++) {
                    int gi = t * dim + i;
                    g[gi] = act.apply(g[gi]) * pli[t * width + layer * dim + i];
                }
            projection.apply(mm, g, tokens, p, ro);
            if (norm != null) norm.rows(p, tokens);
            for (int i = 0; i < tokens * hidden; i++) x[i] += p[i];
        }
    }

    /** x *= scalar (a scalar of 1 costs nothing). */
    private record ScaleLayer(float scalar, int hidden) implements Op {
        @Override public void run(Workspace ws) {
            if (scalar == 1f) return;
            float[] x = ws.x;
            int n = ws.rows * hidden;
            for (int i = 0; i < n; i++) x[i] *= scalar;
        }
    }

    /** Puts back the rows a task kept out of the layer; observes index layer + 1. */
    private record EndLayer(int layer, int hidden) implements Op {
        @Override public void run(Workspace ws) {
            RowOverlay ro = ws.batch.overlay;
            for (int i = 0; i < ws.kept; i++) System.arraycopy(ro.skipped, i * hidden, ws.x, ro.skipRows[i] * hidden, hidden);
            ws.kept = 0;
            if (ws.observer != null) ws.observer.accept(layer + 1, ws.x, ws.rows, hidden);
        }
    }

    /** x = norm(x); observes index {@code index} (layers + 1). */
    private record FinalNorm(NormOp norm, int index, int hidden) implements Op {
        @Override public void run(Workspace ws) {
            norm.rows(ws.x, ws.rows);
            if (ws.observer != null) ws.observer.accept(index, ws.x, ws.rows, hidden);
        }
    }

    /**
     * The logits rows the spans ask for, in span order; h (the layers are done with it) gathers them unless they are
     * all of x (one span asking for all), which the head then reads in place.
     */
    private record Head(HierarchicalHead clusters, Linear product, float softcap, int vocab, int hidden, MatMul mm) implements Op {
        @Override public void run(Workspace ws) {
            Batch batch = ws.batch;
            int want = batch.logitRows();
            if (want == 0) return;
            float[] x = ws.x, in = x, logits = ws.logitsOut;
            if (want != batch.rows()) {
                in = ws.h;
                for (int i = 0, r = 0, o = 0; i < batch.size(); i++) {
                    Batch.Span s = batch.span(i);
                    int n = s.logitRows();
                    System.arraycopy(x, (r + s.tokens() - n) * hidden, in, o * hidden, n * hidden);
                    r += s.tokens();
                    o += n;
                }
            }
            if (clusters != null) clusters.apply(mm, batch, in, logits, ws.headScratch);
            else product.apply(mm, in, want, logits, batch.logitOverlay);
            if (softcap > 0f) {
                int n = want * vocab;
                for (int i = 0; i < n; i++) logits[i] = (float) Math.tanh(logits[i] / softcap) * softcap;
            }
        }
    }
}
