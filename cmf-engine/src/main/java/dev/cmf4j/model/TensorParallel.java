package dev.cmf4j.model;

import dev.cmf4j.format.DType;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The tensor-parallel split of a model over {@code ranks} (Megatron-LM's layout): each rank gets a {@link Shard}, a
 * {@link ModelSpec} of its part with {@link Weights} that cut the file's tensors, and the {@link Plan} that runs it.
 *
 * <ul>
 *   <li>attention: q/k/v column-parallel, a rank keeping whole heads (its query heads and the KV heads they read;
 *       with fewer KV heads than ranks each KV head is kept by the ranks whose query heads read it); o row-parallel
 *       (the columns of the rank's heads), its bias on rank 0 only; per-head sinks cut with the heads;</li>
 *   <li>dense MLP: gate/up column-parallel (a slice of the intermediate rows), down row-parallel (those columns);
 *       a mixture of experts: every expert so, the router whole;</li>
 *   <li>an all-reduce (sum) of M after each mixer and MLP ({@link Plan.AllReduce}), so post norms and residual adds
 *       read the whole output; embeddings, norms, per-layer inputs and layer scalars are whole on every rank;</li>
 *   <li>the head split by vocabulary: rank r computes logits [{@link Shard#vocabFrom}, {@link Shard#vocabTo}), which
 *       the runner gathers.</li>
 * </ul>
 * Refused, naming the part: gated delta nets, bounded anchors, a dense MLP beside an MoE, experts with gate and up
 * fused as halves, a hierarchical head, query heads
 * the ranks do not divide, KV heads that neither divide nor are divided by the ranks, tensors of a dtype the cut does
 * not keep exact (f32, f16, bf16, q8_row and q8_2f are cut as stored). A rank's cut tensors are copied once, when first
 * asked for (row slices of f32/f16/bf16 are views); skills and task masks are not carried over.
 */
public final class TensorParallel {
    private TensorParallel() {}

    /**
     * One rank's part of the model.
     *
     * @param spec      the rank's spec: its heads and KV heads per layer, its intermediate rows, its vocabulary slice as
     *                  {@code vocab} and the cut tensors' names (the embedding and norms are the model's)
     * @param weights   the model's weights with the rank's cut tensors beside them
     * @param vocabFrom first logit of the rank's head slice; the slice is {@code spec.vocab()} wide
     * @param vocab     the whole model's vocabulary
     */
    public record Shard(int rank, int ranks, ModelSpec spec, Weights weights, int vocabFrom, int vocab) {
        public int vocabTo() { return vocabFrom + spec.vocab(); }

        /** The rank's plan: the model's ops over its part, an all-reduce of M after each mixer and feed-forward. */
        public Plan plan() { return Plan.ofRank(spec, ranks); }
    }

    /** Why {@code spec} cannot be split over {@code ranks}, or null when it can (dtypes are checked by {@link #split}). */
    public static String unsupported(ModelSpec spec, int ranks) {
        if (ranks < 1) return ranks + " ranks";
        if (ranks == 1) return null;
        if (spec.headClusters() != null) return "a hierarchical (clustered) head is not split across ranks";
        if (spec.vocab() < ranks) return "a vocabulary of " + spec.vocab() + " over " + ranks + " ranks";
        for (LayerSpec ls : spec.layers()) {
            String where = "layer " + ls.index() + ": ";
            switch (ls.mixer()) {
                case Mixer.GatedDeltaNet g -> { return where + "a gated delta net is not split across ranks (tensor parallelism covers attention and dense MLPs)"; }
                case Mixer.BoundedAttention b -> { return where + "a bounded anchor (swa_sink_v1) is not split across ranks"; }
                case Mixer.Attention a -> {
                    if (a.heads() % ranks != 0)
                        return where + ranks + " ranks do not divide its " + a.heads() + " query heads";
                    if (a.kvHeads() % ranks != 0 && ranks % a.kvHeads() != 0)
                        return where + ranks + " ranks do not divide its " + a.kvHeads() + " KV heads (a rank keeps whole KV heads:"
                                + " use a divisor or a multiple of " + a.kvHeads() + ")";
                }
            }
            switch (ls.ffn()) {
                case Ffn.GatedMlp m -> { }
                case Ffn.Moe m -> {
                    Ffn.Experts ex = m.experts();
                    if (ex.gateUp() != null && !ex.interleaved())
                        return where + "experts whose gate and up are fused as halves are not split across ranks (interleaved or apart are)";
                    if (ex.intermediate() < ranks) return where + "experts of " + ex.intermediate() + " rows over " + ranks + " ranks";
                }
                case Ffn.DenseAndMoe d -> { return where + "a dense MLP beside a mixture of experts (each with its own post norm) is not split across ranks"; }
            }
        }
        return null;
    }

    /**
     * The {@code ranks} shards of {@code spec} over {@code weights}, rank order; a {@link ModelException} saying why when
     * the model cannot be split that way. One rank is the model itself.
     */
    public static List<Shard> split(ModelSpec spec, Weights weights, int ranks) {
        String why = unsupported(spec, ranks);
        if (why != null) throw new ModelException("tensor parallel over " + ranks + " ranks: " + why);
        if (ranks == 1) return List.of(new Shard(0, 1, spec, weights, 0, spec.vocab()));
        List<Shard> out = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) out.add(shard(spec, weights, r, ranks));
        return List.copyOf(out);
    }

    private static Shard shard(ModelSpec spec, Weights weights, int rank, int ranks) {
        Cuts cuts = new Cuts(weights, rank, ranks);
        List<LayerSpec> layers = new ArrayList<>();
        for (LayerSpec ls : spec.layers()) {
            Mixer.Attention a = (Mixer.Attention) ls.mixer();
            Ffn ffn = switch (ls.ffn()) {
                case Ffn.GatedMlp m -> mlp(m, cuts);
                case Ffn.Moe m -> moe(m, cuts);
                case Ffn.DenseAndMoe d -> throw new IllegalStateException("refused by unsupported");
            };
            layers.add(new LayerSpec(ls.index(), attention(a, cuts), ffn, ls.preMixer(), ls.postMixer(),
                    ls.preFfn(), ls.postFfn(), ls.perLayerInput(), ls.layerScalar()));
        }
        int from = part(spec.vocab(), rank, ranks), to = part(spec.vocab(), rank + 1, ranks);
        String head = cuts.rows(spec.head(), from, to - from);
        ModelSpec rankSpec = new ModelSpec(spec.archName(), spec.hidden(), to - from, spec.maxPositions(), spec.embedding(),
                spec.embedScale(), spec.perLayerEmbedding(), layers, spec.finalNorm(), head, spec.finalSoftcap(), null);
        cuts.checkDtypes();
        return new Shard(rank, ranks, rankSpec, cuts, from, spec.vocab());
    }

    /** Where part {@code i} of {@code n} split in {@code parts} starts (the parts differ by at most one). */
    static int part(int n, int i, int parts) { return (int) ((long) n * i / parts); }

    private static Mixer.Attention attention(Mixer.Attention a, Cuts cuts) {
        int ranks = cuts.ranks, rank = cuts.rank, hd = a.headDim();
        int heads = a.heads() / ranks, h0 = rank * heads;
        // a rank's KV heads: its share when the ranks divide them, else the one KV head its query heads read
        int kvHeads = a.kvHeads() % ranks == 0 ? a.kvHeads() / ranks : 1;
        int kv0 = a.kvHeads() % ranks == 0 ? rank * kvHeads : h0 / (a.heads() / a.kvHeads());
        int qPerHead = hd * (a.outputGate() ? 2 : 1);   // with an output gate q_proj emits [q | gate] per head
        return new Mixer.Attention(heads, kvHeads, hd,
                cuts.rows(a.qProj(), (long) h0 * qPerHead, heads * qPerHead),
                a.kProj() == null ? null : cuts.rows(a.kProj(), (long) kv0 * hd, kvHeads * hd),
                a.vProj() == null ? null : cuts.rows(a.vProj(), (long) kv0 * hd, kvHeads * hd),
                cuts.cols(a.oProj(), (long) h0 * hd, heads * hd),
                a.qBias() == null ? null : cuts.rows(a.qBias(), (long) h0 * qPerHead, heads * qPerHead),
                a.kBias() == null ? null : cuts.rows(a.kBias(), (long) kv0 * hd, kvHeads * hd),
                a.vBias() == null ? null : cuts.rows(a.vBias(), (long) kv0 * hd, kvHeads * hd),
                rank == 0 ? a.oBias() : null,   // added once, by rank 0's partial sum
                a.qNorm(), a.kNorm(), a.vNorm(), a.outputGate(), a.scale(), a.softcap(), a.window(),
                a.sinks() == null ? null : cuts.rows(a.sinks(), h0, heads),
                a.rope(), a.kvSource());
    }

    private static Ffn.GatedMlp mlp(Ffn.GatedMlp m, Cuts cuts) {
        Tensor gate = cuts.source.get(m.gate());
        long inter = gate.rank() == 2 ? gate.dim(0) : -1;
        if (inter < 0) throw new ModelException("tensor '" + m.gate() + "' is not a matrix");
        int i0 = part((int) inter, cuts.rank, cuts.ranks), n = part((int) inter, cuts.rank + 1, cuts.ranks) - i0;
        return new Ffn.GatedMlp(cuts.rows(m.gate(), i0, n), cuts.rows(m.up(), i0, n), cuts.cols(m.down(), i0, n), m.glu(),
                m.gateBias() == null ? null : cuts.rows(m.gateBias(), i0, n),
                m.upBias() == null ? null : cuts.rows(m.upBias(), i0, n),
                cuts.rank == 0 ? m.downBias() : null);
    }

    /**
     * Every expert keeps all its experts' rank share of their intermediate rows (the router is whole on every rank): the
     * weighted sum over the chosen experts is linear in their down products, so the ranks' partial sums add up.
     * Each expert's cut is a tensor of its own ({@code %d} in the rank's names), whatever the file's layout.
     */
    private static Ffn.Moe moe(Ffn.Moe m, Cuts cuts) {
        Ffn.Experts ex = m.experts();
        int inter = ex.intermediate(), n0 = part(inter, cuts.rank, cuts.ranks), n = part(inter, cuts.rank + 1, cuts.ranks) - n0;
        int count = ex.count();
        // gate/up (and interleaved gate_up: each unit's pair side by side) cut on their outputs, down on its inputs
        Ffn.ExpertMatrix gate = ex.gate() == null ? null : cuts.experts(ex.gate(), count, true, n0, n);
        Ffn.ExpertMatrix up = ex.up() == null ? null : cuts.experts(ex.up(), count, true, n0, n);
        Ffn.ExpertMatrix gateUp = ex.gateUp() == null ? null : cuts.experts(ex.gateUp(), count, true, 2L * n0, 2 * n);
        Ffn.ExpertMatrix down = cuts.experts(ex.down(), count, false, n0, n);
        Ffn.Experts part = new Ffn.Experts(count, n, gate, up, gateUp, ex.interleaved(), down,
                ex.gateBias() == null ? null : cuts.expertBiases(ex.gateBias(), count, n0, n),
                ex.upBias() == null ? null : cuts.expertBiases(ex.upBias(), count, n0, n),
                ex.gateUpBias() == null ? null : cuts.expertBiases(ex.gateUpBias(), count, 2L * n0, 2 * n),
                cuts.rank == 0 ? ex.downBias() : null);
        return new Ffn.Moe(m.router(), part, m.topK(), m.glu(), m.shared() == null ? null : mlp(m.shared(), cuts), m.sharedGate());
    }

    /**
     * A cut of the [rows, cols] view of a tensor (leading dimensions flattened): rows [r0, r0 + rn) and columns
     * [c0, c0 + cn); a 1-D source stays a vector.
     */
    private record Cut(String source, long r0, long rn, long c0, long cn) {}

    /**
     * The model's weights with a rank's cut tensors beside them, under names of their own ({@code NAME[tp R/N rows A+B]}):
     * each cut made once, when first asked for.
     */
    private static final class Cuts implements Weights {
        final Weights source;
        final int rank, ranks;
        final Map<String, Cut> cuts = new HashMap<>();
        final Map<String, Tensor> made = new ConcurrentHashMap<>();

        Cuts(Weights source, int rank, int ranks) {
            this.source = source;
            this.rank = rank;
            this.ranks = ranks;
        }

        /** Rows [from, from + n) of a matrix, elements [from, from + n) of a vector. */
        String rows(String name, long from, long n) {
            Tensor t = source.get(name);
            return t.rank() == 1 ? add(name, new Cut(name, 0, 1, from, n)) : add(name, new Cut(name, from, n, 0, t.cols()));
        }

        /** Columns [from, from + n) of a matrix. */
        String cols(String name, long from, long n) {
            return add(name, new Cut(name, 0, source.get(name).rows(), from, n));
        }

        private String add(String label, Cut c) {
            String name = label + "[tp " + rank + "/" + ranks + " rows " + c.r0() + "+" + c.rn() + " cols " + c.c0() + "+" + c.cn() + "]";
            cuts.put(name, c);
            return name;
        }

        /**
         * Each expert's cut of one projection, as a tensor a expert: its outputs [from, from + n) ({@code outputs}) or its
         * inputs, whichever dimension of its stored [out, in] or (input-major) [in, out] slab that is.
         */
        Ffn.ExpertMatrix experts(Ffn.ExpertMatrix m, int count, boolean outputs, long from, long n) {
            String pattern = null;
            for (int e = 0; e < count; e++) {
                String src = m.nameOf(e);
                Tensor t = source.get(src);
                long slabRows = m.fused() ? t.rows() / count : t.rows(), r0 = m.fused() ? e * slabRows : 0;
                boolean cutRows = outputs != m.inputMajor();
                Cut c = cutRows ? new Cut(src, r0 + from, n, 0, t.cols()) : new Cut(src, r0, slabRows, from, n);
                if (pattern == null) pattern = expertName(m.name(), "%d");
                cuts.put(expertName(m.name(), Integer.toString(e)), c);
            }
            return new Ffn.ExpertMatrix(pattern, false, m.inputMajor());
        }

        /** Expert {@code e}'s cut of projection {@code name} (its {@code %d} or its fused tensor) on this rank. */
        private String expertName(String name, String e) { return name.replace("%d", "E") + "[tp " + rank + "/" + ranks + " expert " + e + "]"; }

        /** Each expert's bias elements [from, from + n): a row of a fused [experts, width] tensor, or a vector each. */
        Ffn.ExpertMatrix expertBiases(Ffn.ExpertMatrix b, int count, long from, long n) {
            String pattern = null;
            for (int e = 0; e < count; e++) {
                String src = b.nameOf(e);
                Cut c = b.fused() ? new Cut(src, e, 1, from, n) : new Cut(src, 0, 1, from, n);
                if (pattern == null) pattern = expertName(b.name(), "%d");
                cuts.put(expertName(b.name(), Integer.toString(e)), c);
            }
            return new Ffn.ExpertMatrix(pattern, false, false);
        }

        /** Every tensor to be cut exists, has a shape the cut fits and a dtype it keeps exact. */
        void checkDtypes() {
            for (Cut c : cuts.values()) {
                Tensor t = source.get(c.source());
                String why = TensorCut.problem(t, c.r0(), c.rn(), c.c0(), c.cn());
                if (why != null) throw new ModelException("tensor parallel over " + ranks + " ranks: tensor '" + t.name() + "': " + why);
            }
        }

        @Override public Tensor find(String name) {
            Cut c = cuts.get(name);
            if (c == null) return source.find(name);
            return made.computeIfAbsent(name, n -> TensorCut.cut(source.get(c.source()), n, c.r0(), c.rn(), c.c0(), c.cn()));
        }

        @Override public Set<String> names() {
            Set<String> all = new HashSet<>(source.names());
            all.addAll(cuts.keySet());
            return all;
        }

        @Override public void checkIntact() { source.checkIntact(); }
    }

    /**
     * Cuts of stored tensors that keep every weight's value: a block of rows and columns of the tensor's [rows, cols]
     * view (leading dimensions flattened, as every CMF row-wise layout stores it).
     */
    public static final class TensorCut {
        private TensorCut() {}

        /** Why {@code t} cannot be cut to rows [r0, r0 + rn) and columns [c0, c0 + cn), or null. */
        public static String problem(Tensor t, long r0, long rn, long c0, long cn) {
            long rows = t.rows(), cols = t.cols();
            if (r0 < 0 || rn < 1 || r0 + rn > rows || c0 < 0 || cn < 1 || c0 + cn > cols)
                return "rows [" + r0 + ", " + (r0 + rn) + ") and columns [" + c0 + ", " + (c0 + cn) + ") outside its " + rows + "×" + cols;
            return switch (t.dtype()) {
                case F32, F16, BF16 -> null;
                case Q8_ROW, Q8_2F -> t.rank() >= 2 ? null : "a " + t.dtype().label + " vector is not cut";
                default -> t.dtype().label + " weights are not cut (tensor parallelism cuts f32, f16, bf16, q8_row and q8_2f"
                        + " as stored; convert with one of those)";
            };
        }

        /**
         * Rows [r0, r0 + rn) and columns [c0, c0 + cn) of {@code t}'s [rows, cols] view as a tensor called {@code name},
         * in its dtype: [rn, cn], or [cn] from a vector.
         */
        public static Tensor cut(Tensor t, String name, long r0, long rn, long c0, long cn) {
            String why = problem(t, r0, rn, c0, cn);
            if (why != null) throw new ModelException("tensor '" + t.name() + "': " + why);
            long rows = t.rows(), cols = t.cols();
            long[] shape = t.rank() == 1 ? new long[] {cn} : new long[] {rn, cn};
            MemorySegment src = t.data();
            return switch (t.dtype()) {
                case F32, F16, BF16 -> {
                    int es = t.dtype() == DType.F32 ? 4 : 2;
                    if (c0 == 0 && cn == cols) yield new Tensor(name, t.dtype(), shape, src.asSlice(r0 * cols * es, rn * cols * es));
                    MemorySegment dst = Arena.ofAuto().allocate(rn * cn * es, 64);
                    for (long r = 0; r < rn; r++)
                        MemorySegment.copy(src, ((r0 + r) * cols + c0) * es, dst, r * cn * es, cn * es);
                    yield new Tensor(name, t.dtype(), shape, dst);
                }
                case Q8_ROW, Q8_2F -> {
                    // [i8 q: rows·cols][f16 row scale: rows] and, for q8_2f, [f16 column field: cols]
                    boolean colField = t.dtype() == DType.Q8_2F;
                    long size = rn * cn + 2 * rn + (colField ? 2 * cn : 0);
                    MemorySegment dst = Arena.ofAuto().allocate(size, 64);
                    for (long r = 0; r < rn; r++) MemorySegment.copy(src, (r0 + r) * cols + c0, dst, r * cn, cn);
                    MemorySegment.copy(src, rows * cols + 2 * r0, dst, rn * cn, 2 * rn);
                    if (colField) MemorySegment.copy(src, rows * cols + 2 * rows + 2 * c0, dst, rn * cn + 2 * rn, 2 * cn);
                    yield new Tensor(name, t.dtype(), shape, dst);
                }
                default -> throw new IllegalStateException("unreachable: " + t.dtype());
            };
        }
    }
}
