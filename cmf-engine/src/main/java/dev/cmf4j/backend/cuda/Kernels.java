package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.KvType;

import java.util.ArrayList;
import java.util.List;

/**
 * The signatures of the resident forward's kernels ({@link #FILES}: the weight products, attention, the cuBLAS
 * prefill's splits and epilogues, the architecture kernels, Embryo's, small-batch int8 products, sealed layers), one per kernel:
 * the parameter lists are copied from the C declarations and checked against them by {@code KernelSignatureTest}.
 * Families instantiated per weight dtype ({@code _f32}, {@code _bf16}, {@code _f16}, {@code _q8}) or per size share
 * one parameter list.
 */
final class Kernels {
    private Kernels() {}

    static final String RESIDENT_CU = "resident.cu", ATTN_CU = "resident_attn.cu", GEMM_CU = "resident_gemm.cu",
            ARCH_CU = "resident_arch.cu", EMBRYO_CU = "resident_embryo.cu", MMVQ_CU = "resident_mmvq.cu", O1_CU = "resident_o1.cu";
    /** Every kernel file of the resident forward, one module each, over common.cuh and resident.cuh. */
    static final List<String> FILES = List.of(RESIDENT_CU, ATTN_CU, GEMM_CU, ARCH_CU, EMBRYO_CU, MMVQ_CU, O1_CU);
    /** The weight dtypes of the per-dtype families, in the order {@code ResidentWeights.kind} numbers them. */
    static final String[] KINDS = {"f32", "bf16", "f16", "q8"};
    /**
     * The 4-bit dtypes, kinds 4 and 5 after {@link #KINDS}: resident.cu's products and embedding gather and
     * resident_arch.cu's expert kernels (output-major) read them as stored (q4.cuh); Embryo's head rows do not.
     */
    static final String[] Q4_KINDS = {"q4_block", "q4tp"};

    private static final String MATVEC = "const void* w, const float* rs, const float* cf, const float* bias, const float* x,"
            + " float* y, int rows, int cols, int accumulate, int normed, float eps";
    private static final String MATVEC3 = "const void* w0, const float* rs0, const float* cf0, const float* b0, float* y0, int rows0,"
            + " const void* w1, const float* rs1, const float* cf1, const float* b1, float* y1, int rows1,"
            + " const void* w2, const float* rs2, const float* cf2, const float* b2, float* y2, int rows2,"
            + " const float* x, int cols, int normed, float eps";
    private static final String GLU = "const void* wg, const float* rsg, const float* cfg, const void* wu, const float* rsu,"
            + " const float* cfu, const float* x, float* y, int rows, int cols, int normed, float eps";
    private static final String EMBED = "const void* w, const float* rs, const float* cf, const int* ids, float* x, int cols, float scale";
    private static final String ATTN_DECODE_TAIL = "const float* qw, const float* kw, int qNorm, int kNorm, float eps, int offset,"
            + " const float* invFreq, int rotaryDim, float ropeScale, float* pm, float* pl, float* pacc, int heads, int kvHeads,"
            + " int hd, float scale, const int* pos, int splits, int window, float* out, int* done, const float* sinks";
    // kch, vch: a chunk's own keys and values as f32, which the q8 instances read instead of the cache (resident_attn.cu)
    private static final String PREFILL_TAIL = " float* out, int T, int heads, int kvHeads, int hd, float scale,"
            + " const int* pos, int window, const float* sinks, const float* kch, const float* vch, int chunk";
    private static final String MOE_GLU = "const unsigned long long* gw, const unsigned long long* grs, const unsigned long long* gcf,"
            + " int gouts, int gim, const unsigned long long* uw, const unsigned long long* urs, const unsigned long long* ucf,"
            + " int uouts, int uim, const float* gb, const float* ub, const int* idx, const float* x, float* h, int rows, int cols,"
            + " int topK, int layout, int act, float alpha, float limit";
    private static final String MOE_DOWN = "const unsigned long long* dw, const unsigned long long* drs, const unsigned long long* dcf,"
            + " int douts, int dim, const float* db, const int* idx, const float* wts, const float* h, float* y, int rows, int cols,"
            + " int topK, int accumulate";

    static KernelSignature matvec(String kind) { return KernelSignature.of(RESIDENT_CU, "r_matvec_" + kind, MATVEC); }

    static KernelSignature matvec3(String kind) { return KernelSignature.of(RESIDENT_CU, "r_matvec3_" + kind, MATVEC3); }

    static KernelSignature glu(String kind) { return KernelSignature.of(RESIDENT_CU, "r_glu_" + kind, GLU); }

    /**
     * The small-batch products' instances ({@code resident_mmvq.cu}): the rows of x a block takes, and the weight rows
     * a block takes (8, or 16 for the {@code _r16} instances).
     */
    static final int[] SMALL_BATCH_ROWS = {4, 8}, SMALL_BATCH_BLOCK_ROWS = {8, 16};

    private static String smallName(String family, int nt, int rb) { return "rq_" + family + "_q8_" + nt + (rb == 8 ? "" : "_r" + rb); }

    /** r_matvec_q8 over T rows of x, each weight read once per {@code nt} rows, {@code rb} weight rows a block. */
    static KernelSignature smallMatvec(int nt, int rb) { return KernelSignature.of(MMVQ_CU, smallName("matvec", nt, rb), MATVEC + ", int T"); }

    /** r_matvec3_q8 likewise. */
    static KernelSignature smallMatvec3(int nt, int rb) { return KernelSignature.of(MMVQ_CU, smallName("matvec3", nt, rb), MATVEC3 + ", int T"); }

    /** r_glu_q8 likewise. */
    static KernelSignature smallGlu(int nt, int rb) { return KernelSignature.of(MMVQ_CU, smallName("glu", nt, rb), GLU + ", int T"); }

    static KernelSignature embed(String kind) { return KernelSignature.of(RESIDENT_CU, "r_embed_" + kind, EMBED); }

    /** r_widen_q4_block / r_widen_q4tp: a 4-bit matrix as f32 rows for the prefill's cuBLAS products. */
    static KernelSignature widenQ4(String kind) {
        return KernelSignature.of(RESIDENT_CU, "r_widen_" + kind, "const void* w, const float* rs, const float* cf, float* out, int rows, int cols");
    }

    static KernelSignature moeGlu(String kind) { return KernelSignature.of(ARCH_CU, "ra_moe_glu_" + kind, MOE_GLU); }

    static KernelSignature moeDown(String kind) { return KernelSignature.of(ARCH_CU, "ra_moe_down_" + kind, MOE_DOWN); }

    /** The C element type of a KV cache of this type in the kernels' parameters, and the suffix of their names. */
    private static String kvElement(KvType kv) {
        return switch (kv) {
            case F32 -> "float";
            case F16 -> "r_u16";
            case Q8 -> "r_i8";
        };
    }

    private static String kvSuffix(KvType kv) {
        return switch (kv) {
            case F32 -> "";
            case F16 -> "_h";
            case Q8 -> "_q";
        };
    }

    static KernelSignature prefill(int headDim, KvType kv) {
        String e = kvElement(kv);
        return KernelSignature.of(ATTN_CU, "r_attn_prefill" + kvSuffix(kv) + "_" + headDim,
                "const float* q, const " + e + "* kc, const " + e + "* vc," + PREFILL_TAIL);
    }

    /**
     * The head-dimension buckets with a tensor-core prefill kernel for this cache type: 32, 64, 128 (q8: 32, 64; its
     * 128 spills registers, so q8 caches of head dim 65..128 take the f32 tiles).
     */
    static int prefillTensorCoreBuckets(KvType kv) { return kv == KvType.Q8 ? 2 : ResidentLowering.PREFILL_TC_BUCKETS; }

    static KernelSignature prefillTensorCores(int headDim, KvType kv) {
        String e = kvElement(kv);
        return KernelSignature.of(ATTN_CU, "r_attn_prefill_tc" + kvSuffix(kv) + "_" + headDim,
                "const float* q, const " + e + "* kc, const " + e + "* vc," + PREFILL_TAIL);
    }

    static KernelSignature qkRopeAppend(KvType kv) {
        String e = kvElement(kv);
        return KernelSignature.of(ATTN_CU, "r_qk_rope_append" + kvSuffix(kv),
                "float* q, const float* k, const float* v, " + e + "* kc, " + e + "* vc, const float* qw, const float* kw, int qNorm,"
                        + " int kNorm, float eps, int offset, const float* invFreq, int rotaryDim, float ropeScale, int heads,"
                        + " int kvHeads, int hd, const int* pos, float* kch, int window, int chunk");
    }

    static KernelSignature attnPartial(KvType kv) {
        String e = kvElement(kv);
        return KernelSignature.of(ATTN_CU, "r_attn_partial" + kvSuffix(kv),
                "const float* q, const float* k, const float* v, " + e + "* kc, " + e + "* vc, " + ATTN_DECODE_TAIL + ", int chunk");
    }

    /** r_attn_chunk: a few-row chunk's attention split over the keys as decode rows' (f32 and f16 caches; null for q8). */
    static KernelSignature attnChunk(KvType kv) {
        if (kv == KvType.Q8) return null;
        String e = kvElement(kv);
        return KernelSignature.of(ATTN_CU, "r_attn_chunk" + kvSuffix(kv),
                "const float* q, const " + e + "* kc, const " + e + "* vc, float* pm, float* pl, float* pacc, int heads, int kvHeads,"
                        + " int hd, float scale, const int* pos, int splits, int window, float* out, int* done, const float* sinks, int chunk");
    }

    static KernelSignature attnRows(KvType kv) {
        String e = kvElement(kv);
        return KernelSignature.of(ATTN_CU, "r_attn_rows" + kvSuffix(kv),
                "const float* q, const float* k, const float* v, " + e + "* const* kcs, " + e + "* const* vcs, " + ATTN_DECODE_TAIL
                        + ", const int* chunks");
    }

    static KernelSignature gluSplit(int n) {
        return KernelSignature.of(GEMM_CU, "r_glu_split_" + n, "const float* Cg, const float* Cu, const float* rsg,"
                + " const float* rsu, const float* tsg, const float* tsu, float step, int partsIn, int rows, int T, const float* cf,"
                + " r_u16* out, int f16, int parts, float* ts");
    }

    /** The KV cache element types the resident kernels keep (each cache-touching kernel has one instance per type). */
    static final List<KvType> KV_TYPES = List.of(KvType.F32, KvType.F16, KvType.Q8);
    static final KernelSignature SPLIT = KernelSignature.of(GEMM_CU, "r_split",
            "const float* x, const float* cf, int normed, float eps, r_u16* out, int T, int cols, int f16, int parts, float* ts");
    static final KernelSignature SPLIT3 = KernelSignature.of(GEMM_CU, "r_split3",
            "const float* x, int normed, float eps, int T, int cols, int f16, int parts, int n, const float* cf0, r_u16* out0,"
                    + " float* ts0, const float* cf1, r_u16* out1, float* ts1, const float* cf2, r_u16* out2, float* ts2");
    static final KernelSignature I8_WIDEN = KernelSignature.of(GEMM_CU, "r_i8_widen",
            "const signed char* w, r_u16* out, long long n, int f16");
    static final KernelSignature GEMM_OUT = KernelSignature.of(GEMM_CU, "r_gemm_out",
            "const float* C, const float* rs, const float* bias, float* y, int rows, int T, int parts, int accumulate,"
                    + " const float* ts, float step");
    static final KernelSignature GEMM_OUT3 = KernelSignature.of(GEMM_CU, "r_gemm_out3",
            "const float* C0, const float* rs0, const float* b0, float* y0, int rows0, const float* ts0, const float* C1,"
                    + " const float* rs1, const float* b1, float* y1, int rows1, const float* ts1, const float* C2, const float* rs2,"
                    + " const float* b2, float* y2, int rows2, const float* ts2, int T, int parts, float step");
    static final KernelSignature RESIDUAL_SPLIT3 = KernelSignature.of(GEMM_CU, "r_residual_split3",
            "const float* C, const float* rs, const float* bias, float* y, int rows, int T, int partsIn, const float* tsIn,"
                    + " float stepIn, int normed, float eps, int f16, int parts, int n, const float* cf0, r_u16* out0, float* ts0,"
                    + " const float* cf1, r_u16* out1, float* ts1, const float* cf2, r_u16* out2, float* ts2");
    static final KernelSignature GLU_OUT = KernelSignature.of(GEMM_CU, "r_glu_out",
            "const float* Cg, const float* Cu, const float* rsg, const float* rsu, float* y, int rows, int T, int parts,"
                    + " const float* tsg, const float* tsu, float step");
    static final KernelSignature RMSNORM = KernelSignature.of(ARCH_CU, "ra_rmsnorm",
            "const float* x, const float* w, float* y, int dim, float eps, int offset, int accumulate");
    static final KernelSignature GLU_ACT = KernelSignature.of(ARCH_CU, "ra_glu_act", "const float* g, const float* u, float* y, int n, int act");
    static final KernelSignature MOE_ROUTE = KernelSignature.of(ARCH_CU, "ra_moe_route",
            "const float* logits, int* idx, float* wts, int experts, int topK, int normTopK, int topKFirst");

    /** The signature of the kernel called {@code name} (tests launch single kernels by name). */
    static KernelSignature named(String name) {
        for (KernelSignature k : all()) if (k.name().equals(name)) return k;
        throw new IllegalArgumentException("no kernel signature named " + name);
    }

    static final KernelSignature ARGMAX_ROWS = KernelSignature.of(ARCH_CU, "ra_argmax_rows", "const float* logits, int* ids, int vocab");
    static final KernelSignature PLE_COMBINE = KernelSignature.of(ARCH_CU, "ra_ple_combine",
            "float* pli, const float* tab, const float* w, int dim, float eps, int offset, float projScale, float combineScale");
    static final KernelSignature PLI_GATE = KernelSignature.of(ARCH_CU, "ra_pli_gate",
            "float* g, const float* pli, int n, int dim, int width, int layer, int act");
    static final KernelSignature SCALE_CAP = KernelSignature.of(ARCH_CU, "ra_scale_cap", "float* x, int n, float scale, float cap");
    static final KernelSignature EXPERT_SCALE = KernelSignature.of(ARCH_CU, "ra_expert_scale",
            "const int* idx, float* wts, const float* scale, int n");
    static final KernelSignature GDN_UNFUSE = KernelSignature.of(ARCH_CU, "ra_gdn_unfuse",
            "const float* qkvz, const float* ba, float* mixed, float* z, float* b, float* a, int nk, int nv, int dk, int dv");
    static final KernelSignature GDN_CONV = KernelSignature.of(ARCH_CU, "ra_gdn_conv",
            "float* x, const float* w, const float* bias, float* state, int tokens, int channels, int kernel, const int* pos");
    static final KernelSignature GDN_GATES = KernelSignature.of(ARCH_CU, "ra_gdn_gates",
            "const float* mixed, const float* b, const float* a, const float* negA, const float* dtBias, float* q, float* k,"
                    + " float* g, float* beta, int nk, int nv, int dk, int convDim");
    static final KernelSignature GDN_RULE = KernelSignature.of(ARCH_CU, "ra_gdn_rule",
            "const float* q, const float* k, const float* mixed, const float* g, const float* beta, float* S, float* out,"
                    + " int tokens, int nv, int dk, int dv, int convDim, int vOff, const int* pos");
    static final KernelSignature GDN_NORM = KernelSignature.of(ARCH_CU, "ra_gdn_norm",
            "float* core, const float* z, const float* w, int dv, float eps, int offset");
    static final KernelSignature SPLIT_GATE = KernelSignature.of(ARCH_CU, "ra_split_gate", "const float* qg, float* q, float* gate, int n, int hd");
    static final KernelSignature SIGMOID_MUL = KernelSignature.of(ARCH_CU, "ra_sigmoid_mul", "float* y, const float* gate, int n");
    static final KernelSignature GATED_ADD = KernelSignature.of(ARCH_CU, "ra_gated_add",
            "float* y, const float* src, const float* gateLogit, int hidden, int n");

    // ---- Embryo (resident_embryo.cu) ----
    static final KernelSignature ANCHOR_ATTEND = KernelSignature.of(EMBRYO_CU, "re_anchor_attend",
            "const float* q, const float* k, const float* v, const float* ringK, const float* ringV, const float* sinkK,"
                    + " const float* sinkV, const float* cosT, const float* sinT, float* out, int heads, int kvHeads, int hd,"
                    + " int window, int sinks, int half, float scale, const int* pos");
    static final KernelSignature ANCHOR_COMMIT = KernelSignature.of(EMBRYO_CU, "re_anchor_commit",
            "const float* k, const float* v, float* ringK, float* ringV, int tokens, int window, int kvDim, const int* pos");
    static final KernelSignature RESONANCE_ROUTE = KernelSignature.of(EMBRYO_CU, "re_resonance_route",
            "const float* y, const float* mu, const float* u, const float* bias, int* idx, float* wts, int experts, int rank, int dim");
    static final KernelSignature CLUSTER_LOGSOFTMAX = KernelSignature.of(EMBRYO_CU, "re_cluster_logsoftmax", "float* lc, int clusters");
    static final KernelSignature HEAD_FINISH = KernelSignature.of(EMBRYO_CU, "re_head_finish",
            "float* out, const float* lc, const double* gate, int perRow, int vocab, int clusters, int size, float spread");

    static KernelSignature headRows(String kind) {
        return KernelSignature.of(EMBRYO_CU, "re_head_rows_" + kind, "const void* w, const float* rs, const float* cf,"
                + " const float* x, const float* lc, const double* gate, int perRow, float* out, int vocab, int cols, int clusters, int size");
    }

    // ---- sealed --o1 layers (resident_o1.cu) ----
    static final KernelSignature O1_KEEP_QUERIES = KernelSignature.of(O1_CU, "ro_keep_queries",
            "const float* q, float* store, int qDim, const int* pos");
    static final KernelSignature O1_MEANS = KernelSignature.of(O1_CU, "ro_means",
            "const float* x, int stride, int hd, int p, int m, double* out");
    static final KernelSignature O1_ABSORB_PROMPT = KernelSignature.of(O1_CU, "ro_absorb_prompt",
            "const float* kc, const float* vc, float* far, int heads, int kvHeads, int hd, int dv, int m, int from, int to, float scale");
    static final KernelSignature O1_SEAL_COPY = KernelSignature.of(O1_CU, "ro_seal_copy",
            "const float* kc, const float* vc, float* ringK, float* ringV, float* sinkK, float* sinkV, int kvDim, int vDim,"
                    + " int window, int sinks, int p");
    static final KernelSignature O1_ROPE = KernelSignature.of(O1_CU, "ro_rope",
            "float* q, float* k, const float* qw, const float* kw, int qNorm, int kNorm, float eps, int offset,"
                    + " const float* invFreq, int rotaryDim, float ropeScale, int heads, int kvHeads, int hd, const int* pos");
    static final KernelSignature O1_ATTEND = KernelSignature.of(O1_CU, "ro_attend",
            "const float* q, const float* k, const float* v, const float* ringK, const float* ringV, const float* sinkK,"
                    + " const float* sinkV, float* far, const float* headSinks, float* out, int heads, int kvHeads, int hd, int dv,"
                    + " int window, int sinks, int m, float scale, int tokens, const int* pos");
    static final KernelSignature O1_COMMIT = KernelSignature.of(O1_CU, "ro_commit",
            "const float* k, const float* v, float* ringK, float* ringV, int tokens, int window, int kvDim, int vDim, const int* pos");

    /** Every signature the resident forward can load (the per-dtype and per-size families expanded). */
    static List<KernelSignature> all() {
        List<KernelSignature> all = new ArrayList<>(List.of(SPLIT, SPLIT3, I8_WIDEN,
                GEMM_OUT, GEMM_OUT3, RESIDUAL_SPLIT3, GLU_OUT, RMSNORM, GLU_ACT, MOE_ROUTE, ARGMAX_ROWS, PLE_COMBINE, PLI_GATE, SCALE_CAP, EXPERT_SCALE, GDN_UNFUSE, GDN_CONV, GDN_GATES, GDN_RULE,
                GDN_NORM, SPLIT_GATE, SIGMOID_MUL, GATED_ADD, ANCHOR_ATTEND, ANCHOR_COMMIT, RESONANCE_ROUTE, CLUSTER_LOGSOFTMAX, HEAD_FINISH,
                O1_KEEP_QUERIES, O1_MEANS, O1_ABSORB_PROMPT, O1_SEAL_COPY, O1_ROPE, O1_ATTEND, O1_COMMIT));
        for (String k : KINDS) all.addAll(List.of(matvec(k), matvec3(k), glu(k), embed(k), moeGlu(k), moeDown(k), headRows(k)));
        for (String k : Q4_KINDS) all.addAll(List.of(matvec(k), matvec3(k), glu(k), embed(k), widenQ4(k), moeGlu(k), moeDown(k)));
        for (KvType kv : KV_TYPES) {
            all.addAll(List.of(qkRopeAppend(kv), attnPartial(kv), attnRows(kv)));
            if (attnChunk(kv) != null) all.add(attnChunk(kv));
            for (int d : ResidentLowering.PREFILL_DIMS) all.add(prefill(d, kv));
            for (int i = 0; i < prefillTensorCoreBuckets(kv); i++) all.add(prefillTensorCores(ResidentLowering.PREFILL_DIMS[i], kv));
        }
        for (int n : ResidentLowering.GLU_SPLIT_N) all.add(gluSplit(n));
        for (int rb : SMALL_BATCH_BLOCK_ROWS)
            for (int n : SMALL_BATCH_ROWS) all.addAll(List.of(smallMatvec(n, rb), smallMatvec3(n, rb), smallGlu(n, rb)));
        return all;
    }
}
