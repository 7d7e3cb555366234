package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * A {@link DecoderPlan}'s weights on the device, as the resident kernels read them: every matrix resident in its
 * stored dtype (through {@link CudaMatMul}, which owns the matrices), a folded RMSNorm's weight multiplied into the
 * column scales of the products that read its output, the small vectors (biases, norms, rope frequencies, sinks)
 * and the experts' address tables, which this object owns. Uploaded once when the model opens; owner thread only.
 */
final class ResidentWeights {
    private static final long NULL = 0L;

    /** A resident [rows, cols] matrix: its device planes (weights, f32 row scales, f32 column field; 0 = none). */
    record W(DType dtype, int rows, int cols, long weights, long rowScales, long colField) {}

    /**
     * One layer's device pointers (0 = absent; gate/up/down null on an MoE layer; k and v null on a layer that reads
     * another's keys and values, whose kNorm is then that layer's; pliGate/pliProj null without a per-layer input).
     */
    record LayerWeights(W q, W k, W v, W o, W gate, W up, W down, boolean attnFolded, boolean ffnFolded, long attnNorm, long ffnNorm, long qNorm, long kNorm,
                                long qBias, long kBias, long vBias, long oBias, long invFreq,
                                long sinks, long postAttnNorm, long postFfnNorm, MoeWeights moe, long vNorm,
                                W pliGate, W pliProj, long pliNorm, long postMlpNorm, long preMoeNorm, long postMoeNorm,
                                DeltaNetWeights dn) {
        /** The layer's products; null where absent. */
        List<W> products() {
            List<W> all = new ArrayList<>(java.util.Arrays.asList(q, k, v, o, gate, up, down, pliGate, pliProj));
            if (dn != null) all.addAll(java.util.Arrays.asList(dn.qkvz(), dn.ba(), dn.qkv(), dn.z(), dn.b(), dn.a()));
            if (moe != null && moe.shared() != null) all.addAll(java.util.Arrays.asList(moe.shared().gate(), moe.shared().up(),
                    moe.shared().down(), moe.shared().gateProj()));
            return all;
        }
    }

    /** A gated delta net's device pointers (its output projection is the layer's o; input projections null where absent). */
    record DeltaNetWeights(W qkvz, W ba, W qkv, W z, W b, W a, long conv, long convBias, long negA, long dtBias, long norm) {}

    /** A shared expert's products (gateProj null without its gate). */
    record SharedWeights(W gate, W up, W down, W gateProj) {}

    /**
     * An MoE layer on the device: the router, and per projection a table of every expert's three device addresses
     * (weights, f32 row scales, f32 column scales; 0 = none) which the expert kernels index by the routed ids.
     */
    record MoeWeights(W router, long routerBias, int gateKind, int downKind, Table gate, Table up, Table down,
                              long gateBias, long upBias, long downBias, long routerNorm, long expertScale, SharedWeights shared) {}

    /** Every expert's {weights, row scales, column scales} device addresses, the stored outputs, the layout. */
    record Table(long w, long rs, long cf, int outs, boolean inputMajor) {}

    private final CudaMatMul mm;
    final W embed, head;
    /** An MTP head's fc [hidden, 2·hidden] (its steps start from the host's input rows), or null. */
    final W mtpFc;
    /** Gemma4's per-layer embedding table and model projection (null without), the projection norm's weight. */
    final W pleTable, pleProj;
    final long pleNorm;
    /** The final norm is folded into the head (else it runs as its own kernel); its weight on the device when not. */
    final boolean headFolded;
    final long finalNorm;
    final LayerWeights[] layers;
    /** Embryo's hierarchical head's cluster matrix, or null. */
    final W clusters;
    /** Every product the GEMMs may take besides the head: the layers' and the per-layer embedding's projection. */
    final List<W> products;
    /** The most rows and columns of any of them (a gated q, a delta net's fused projections: wider than the plan's dims). */
    final long widestProductRows, widestProductCols;
    /**
     * Whether the head and every layer product are int8 ({@link #smallBatch(W)}): then a batched step of few enough
     * rows may take the small-batch kernels, which read each weight once as int8, not the GEMMs.
     */
    final boolean int8Products;
    /** Every resident product and how it was made; every vector's device address by its array: what skills replace. */
    final java.util.Map<W, OverlayWeights.Source> sources = new java.util.HashMap<>();
    final java.util.Map<float[], Long> vectorAt = new java.util.IdentityHashMap<>();
    private final java.util.Map<NormOp, Long> normScales = new java.util.IdentityHashMap<>();   // a folded norm's weight on the device
    private final List<Long> vectors = new ArrayList<>();

    /** Uploads every weight of {@code model}. */
    ResidentWeights(CudaMatMul mm, DecoderPlan model) {
        this.mm = mm;
        // a later pipeline stage starts from the rows handed in, and one before the last never runs the head: neither is uploaded
        embed = model.inputRows() ? null : upload(model.embedding(), null);
        headFolded = model.headClusters() == null && foldsNorm(model.head());   // a clustered head's products share the normed rows
        head = model.runsHead() ? upload(model.head(), headFolded ? model.finalNorm() : null) : null;
        finalNorm = headFolded ? NULL : vector(model.finalNorm().w());
        mtpFc = upload(model.mtpProjection(), null);
        var ple = model.perLayerEmbedding();
        pleTable = ple == null ? null : upload(ple.table(), null);
        pleProj = ple == null ? null : upload(ple.projection(), null);
        pleNorm = ple == null ? NULL : vector(ple.projectionNorm().w());
        layers = new LayerWeights[model.layers().size()];
        for (int i = 0; i < layers.length; i++) {
            DecoderPlan.Layer l = model.layers().get(i);
            NormOp qn = l.qNorm(), kn = l.kNorm();
            boolean dense = l.gate() != null;
            boolean shared = l.sharesKv();
            if (shared) kn = model.layers().get(l.kvSource()).kNorm();   // the keys it reads were normed by their layer
            var dn = l.deltaNet();
            boolean af = dn == null && l.anchor() == null && foldsNorm(l.q()) && (shared || foldsNorm(l.k()) && foldsNorm(l.v()));
            var pi = l.perLayerInput();
            boolean ff = dense && foldsNorm(l.gate()) && foldsNorm(l.up());
            NormOp an = af ? l.attnNorm() : null, fn = ff ? l.ffnNorm() : null;
            layers[i] = new LayerWeights(upload(l.q(), an), shared ? null : upload(l.k(), an), shared ? null : upload(l.v(), an),
                    upload(dn != null ? dn.outProj() : l.o(), null),
                    dense ? upload(l.gate(), fn) : null, dense ? upload(l.up(), fn) : null, dense ? upload(l.down(), null) : null,
                    af, ff, af ? NULL : vector(l.attnNorm().w()), ff ? NULL : vector(l.ffnNorm().w()),
                    qn == null ? NULL : vector(qn.w()),
                    kn == null ? NULL : shared ? layers[l.kvSource()].kNorm() : vector(kn.w()), vector(l.qBias()), vector(l.kBias()), vector(l.vBias()),
                    vector(l.oBias()), l.rope() == null ? NULL : vector(l.rope().rotaryDim() == 0 ? new float[1] : l.rope().invFreq()),
                    vector(l.sinks()), l.postAttnNorm() == null ? NULL : vector(l.postAttnNorm().w()),
                    l.postFfnNorm() == null ? NULL : vector(l.postFfnNorm().w()), l.moe() == null ? null : uploadMoe(l.moe()),
                    l.vNorm() == null ? NULL : vector(l.vNorm().w()),
                    pi == null ? null : upload(pi.gate(), null), pi == null ? null : upload(pi.projection(), null),
                    pi == null ? NULL : vector(pi.postNorm().w()), l.postMlpNorm() == null ? NULL : vector(l.postMlpNorm().w()),
                    l.preMoeNorm() == null ? NULL : vector(l.preMoeNorm().w()), l.postMoeNorm() == null ? NULL : vector(l.postMoeNorm().w()),
                    dn == null ? null : new DeltaNetWeights(upload(dn.qkvz(), null), upload(dn.ba(), null), upload(dn.qkv(), null),
                            upload(dn.z(), null), upload(dn.b(), null), upload(dn.a(), null), vector(dn.conv()), vector(dn.convBias()),
                            vector(dn.negA()), vector(dn.dtBias()), dn.norm() == null ? NULL : vector(dn.norm().w())));
        }
        clusters = model.headClusters() == null ? null : upload(model.headClusters().clusters(), null);
        List<W> all = new ArrayList<>();
        for (LayerWeights l : layers) for (W w : l.products()) if (w != null) all.add(w);   // (a delta net's o is its out_proj)
        if (pleProj != null) all.add(pleProj);
        if (clusters != null) all.add(clusters);
        this.products = List.copyOf(all);
        long rows = 0, cols = 0;
        for (W w : products) { rows = Math.max(rows, w.rows()); cols = Math.max(cols, w.cols()); }
        this.widestProductRows = rows;
        this.widestProductCols = cols;
        boolean int8 = head == null || smallBatch(head);
        for (W w : products) int8 &= smallBatch(w);
        this.int8Products = int8;
    }

    /** Whether the small-batch kernels (resident_mmvq.cu) can take {@code w}'s products of several rows: int8, cols % 4 = 0. */
    static boolean smallBatch(W w) { return kind(w.dtype()) == 3 && w.cols() % 4 == 0; }

    /**
     * The element kind the resident kernels read {@code d} as: 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row, q8_2f), 4 q4_block,
     * 5 q4tp (the 4-bit payloads as stored: CudaMatMul.uploadQ4; products, embedding gather and prefill widening only).
     */
    static int kind(DType d) {
        return switch (d) {
            case F32 -> 0;
            case BF16 -> 1;
            case F16 -> 2;
            case Q8_ROW, Q8_2F -> 3;
            case Q4_BLOCK -> 4;
            case Q4TP -> 5;
            default -> throw new IllegalArgumentException("no resident kernel for " + d.label);
        };
    }

    /** Whether {@code d} is a 4-bit dtype (kinds 4, 5), whose scales lie in its own planes: no row or column scales. */
    static boolean q4(DType d) { return d == DType.Q4_BLOCK || d == DType.Q4TP; }

    /** Whether the resident kernels take {@code w}: a whole, output-major matrix of a dtype they read. */
    static boolean supports(Matrix w) {
        return !w.inputMajor() && w.firstRow() == 0 && w.rows() == w.storedRows() && w.rows() > 0 && switch (w.dtype()) {
            case F32, BF16, F16, Q8_ROW, Q8_2F, Q4_BLOCK, Q4TP -> true;
            default -> false;
        };
    }

    /**
     * Whether the expert kernels take {@code w}: of a dtype they read, output- or input-major (ra_expert_row /
     * ra_expert_col in resident_arch.cu; gate and up of one layer in one layout, checked below); a row window of
     * a fused tensor is fine. The 4-bit dtypes output-major only (ra_expert_row through q4.cuh), and a q4_block row
     * window only where it starts on a group (its groups run over the flattened tensor; the table points into its
     * planes at the window's first row: {@link #expertTable}).
     */
    static boolean supportsExpert(Matrix w) {
        return w.rows() > 0 && switch (w.dtype()) {
            case F32, BF16, F16, Q8_ROW, Q8_2F -> true;
            case Q4TP -> !w.inputMajor();
            case Q4_BLOCK -> !w.inputMajor() && w.firstRow() * w.cols() % 32 == 0;
            default -> false;
        };
    }

    /** Why the experts of {@code model} cannot run resident, or null: gate and up of one kernel kind, down of one. */
    static String unsupportedExperts(DecoderPlan model) {
        for (DecoderPlan.Layer l : model.layers()) {
            if (l.moe() == null) continue;
            List<Matrix> gateUp = new ArrayList<>(l.moe().gate());
            if (l.moe().up() != null) gateUp.addAll(l.moe().up());
            for (List<Matrix> group : List.of(gateUp, l.moe().down()))
                for (Matrix m : group) {
                    if (!supportsExpert(m))
                        return m.name() + " is " + (q4(m.dtype()) && m.inputMajor() ? "an input-major " : "") + m.dtype().label
                                + (q4(m.dtype()) && !m.inputMajor() ? " (a row window off its groups)" : "")
                                + ", which the expert kernels do not read" + (q4(m.dtype()) ? " (4-bit experts: output-major only)" : "");
                    if (kind(m.dtype()) != kind(group.get(0).dtype()) || m.inputMajor() != group.get(0).inputMajor())
                        return m.name() + ": experts of mixed dtypes or layouts";
                }
        }
        return null;
    }

    /** Uploads an MoE layer: the router like any matrix, the experts (each resident once) as address tables. */
    private MoeWeights uploadMoe(DecoderPlan.Moe moe) {
        Table g = expertTable(moe.gate()), d = expertTable(moe.down());
        Table u = moe.up() == null ? g : expertTable(moe.up());   // fused gate/up: the kernel reads both from one table
        long gb = vector(moe.gateBias());
        return new MoeWeights(upload(moe.router(), null), vector(moe.routerBias()), kind(moe.gate().get(0).dtype()),
                kind(moe.down().get(0).dtype()), g, u, d, gb, moe.up() == null ? gb : vector(moe.upBias()), vector(moe.downBias()),
                moe.routerNorm() == null ? NULL : vector(moe.routerNorm().w()), vector(moe.expertScale()),
                moe.shared() == null ? null : new SharedWeights(upload(moe.shared().gate(), null), upload(moe.shared().up(), null),
                        upload(moe.shared().down(), null), upload(moe.shared().gateProj(), null)));
    }

    /**
     * The experts' device addresses; a row window points into its fused tensor (rows are inputs when input-major), a
     * 4-bit one into each of its planes at its first row.
     */
    private Table expertTable(List<Matrix> experts) {
        long[][] t = new long[3][experts.size()];
        for (int e = 0; e < experts.size(); e++) {
            long[] at = expertAddresses(experts.get(e), mm.resident(experts.get(e)));
            for (int i = 0; i < 3; i++) t[i][e] = at[i];
        }
        Matrix m0 = experts.get(0);
        return new Table(table(t[0]), table(t[1]), table(t[2]), m0.outDim(), m0.inputMajor());
    }

    /** One expert's {weights, row scales, column scales} addresses (0 = none), {@code d} its stored tensor's device copy. */
    static long[] expertAddresses(Matrix m, CudaMatMul.DeviceMatrix d) {
        long row0 = m.firstRow();
        if (m.dtype() == DType.Q4_BLOCK) {   // nibbles and f16 scales of groups over the flattened tensor (row0·cols % 32 = 0)
            long first = row0 * m.cols();
            return new long[] {d.weights() + first / 2, d.rowScales() + first / 32 * 2, NULL};
        }
        if (m.dtype() == DType.Q4TP) {       // per row: 16 nibble bytes a group, 2 f32 rungs, the codes
            long gpr = (m.cols() + 31) / 32;
            return new long[] {d.weights() + row0 * gpr * 16, d.rowScales() + 8 * row0,
                    d.colField() + row0 * dev.cmf4j.format.quant.TpLadder.codeStride(gpr)};
        }
        long elem = switch (m.dtype()) { case F32 -> 4; case BF16, F16 -> 2; default -> 1; };
        return new long[] {d.weights() + row0 * m.cols() * elem,
                d.rowScales() == NULL ? NULL : d.rowScales() + 4 * row0,   // widened to f32 at upload
                d.colField()};
    }

    private long table(long[] addresses) {
        long d = mm.toDevice(MemorySegment.ofArray(addresses));
        vectors.add(d);
        return d;
    }

    /**
     * Whether the RMSNorm before a product of {@code m} is folded into it: q8_2f (its per-column scales are read
     * anyway) and bf16/f16, whose decode kernels stage x' = column scales ⊙ x once per block in shared memory, so
     * a column-scale vector (the norm's weight) costs them nothing per weight and saves the norm's launch (bf16
     * llama-8b: 64 RMSNorm launches, ~13% of a profiled token). int8 q8_row, f32 and the 4-bit dtypes (whose kernels take
     * no column scales) keep the norm as its own kernel.
     */
    private static boolean foldsNorm(Matrix m) {
        return m.dtype() == DType.Q8_2F || m.dtype() == DType.BF16 || m.dtype() == DType.F16;
    }

    /**
     * The matmul's resident copy of {@code m} (shared with its products: a tied head is uploaded once). When the
     * product reads the output of {@code norm}, the norm's weight (w or 1+w) is folded into the column scales
     * — W·(w ⊙ x̂) = (W·diag(w))·x̂ — so the kernel applies only the norm's 1/rms (r_inv_rms).
     */
    private W upload(Matrix m, NormOp norm) {
        W w = upload(m, norm, vectors);
        if (w != null) sources.put(w, new OverlayWeights.Source(m, norm));
        return w;
    }

    /** As above; a vector made for it (folded q8_2f column scales) goes into {@code owned}. */
    W upload(Matrix m, NormOp norm, List<Long> owned) {
        if (m == null) return null;
        boolean fold = norm != null && norm.w() != null;
        if (fold && norm.w().length != m.inDim())
            throw new IllegalStateException(m.name() + ": the norm folded into it has " + norm.w().length + " weights for its "
                    + m.inDim() + " columns");
        CudaMatMul.DeviceMatrix d = mm.resident(m);
        long cf = d.colField();
        if (fold && m.dtype() != DType.Q8_2F) {
            // no column scales of its own: the norm's weight alone, one vector for all its products (q, k and v then
            // share their prefill parts: r_split3 sees one column-scale vector)
            cf = normScales.computeIfAbsent(norm, n -> vector(normWeight(n)));
        } else if (fold) {
            float[] f = columnScales(m), w = normWeight(norm);
            for (int c = 0; c < f.length; c++) f[c] *= w[c];
            cf = vector(f, owned);
        }
        return new W(m.dtype(), m.outDim(), m.inDim(), d.weights(), d.rowScales(), cf);
    }

    /** The weight a norm multiplies x̂ by: w, or 1 + w (gemma's offset norm). */
    static float[] normWeight(NormOp norm) {
        float[] w = norm.w(), f = new float[w.length];
        for (int c = 0; c < f.length; c++) f[c] = norm.offset() ? 1f + w[c] : w[c];
        return f;
    }

    /** A matrix's per-column scales as stored (q8_2f's f16 plane), or ones. */
    static float[] columnScales(Matrix m) {
        float[] f = new float[m.inDim()];
        if (m.dtype() == DType.Q8_2F) {
            long off = m.storedRows() * m.cols() + 2 * m.storedRows();
            for (int c = 0; c < f.length; c++) f[c] = Float.float16ToFloat(m.data().get(ArgPack.U16_LE, off + 2L * c));
        } else {
            java.util.Arrays.fill(f, 1f);
        }
        return f;
    }

    long vector(float[] v) {
        long d = vector(v, vectors);
        if (d != NULL) vectorAt.put(v, d);
        return d;
    }

    long vector(float[] v, List<Long> owned) {
        if (v == null) return NULL;
        long d = mm.toDevice(MemorySegment.ofArray(v));
        owned.add(d);
        return d;
    }

    /** Frees the vectors and tables (the matrices belong to the matmul). */
    void free(CudaDriver cu) {
        for (long d : vectors) cu.memFree(d);
        vectors.clear();
    }
}
