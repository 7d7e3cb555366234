package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.cuda.KernelSignature.Kernel;

import static dev.cmf4j.backend.cuda.ResidentLowering.GLU_SPLIT_N;
import static dev.cmf4j.backend.cuda.ResidentLowering.PREFILL_DIMS;
import static dev.cmf4j.backend.cuda.ResidentLowering.PREFILL_TC_BUCKETS;

/**
 * The kernels a resident forward launches, loaded once from {@link Kernels}' signatures (owner thread): the per-dtype
 * families indexed by {@link ResidentWeights#kind}, the KV-cache kernels of one cache type, the prefill attention per
 * head-dimension bucket (tensor-core ones only from sm_80), and the architecture kernels.
 */
final class ResidentKernels {
    /** By {@link ResidentWeights#kind}, the 4-bit kinds 4 and 5 included. */
    final Kernel[] fnMatvec = new Kernel[6], fnMatvec3 = new Kernel[6], fnGlu = new Kernel[6], fnEmbed = new Kernel[6];
    /** r_widen_q4_block, r_widen_q4tp (kinds 4, 5 at 0, 1): 4-bit weights as f32 for the prefill's GEMMs. */
    final Kernel[] fnWidenQ4 = new Kernel[2];
    final Kernel[] fnMoeGlu = new Kernel[6], fnMoeDown = new Kernel[6];
    /**
     * The int8 small-batch products (resident_mmvq.cu) by block shape ({@link Kernels#SMALL_BATCH_BLOCK_ROWS}) and rows of
     * x a block ({@link Kernels#SMALL_BATCH_ROWS}).
     */
    final Kernel[][] fnSmallMatvec = new Kernel[2][2], fnSmallMatvec3 = new Kernel[2][2], fnSmallGlu = new Kernel[2][2];
    /** r_qk_rope_append, r_attn_partial and r_attn_rows for the forward's KV cache type. */
    final Kernel fnRope, fnAttn, fnAttnRows;
    /** r_attn_chunk for the forward's KV cache type (null for a q8 cache): few-row chunks' attention split over the keys. */
    final Kernel fnAttnChunk;
    /** r_attn_prefill_{32,64,128,256}: prefill attention for head dims up to 32, 64, 128, 256. */
    final Kernel[] fnPrefill = new Kernel[PREFILL_DIMS.length];
    /** r_attn_prefill_tc_{32,64,128}: the same on tensor cores (f16 parts, f32 accuracy), sm_80 and up (q8: 32, 64); else null. */
    final Kernel[] fnPrefillTc = new Kernel[PREFILL_TC_BUCKETS];
    /** The cuBLAS prefill's splits and epilogues; r_glu_split_N per {@link ResidentForward#GLU_SPLIT_N}. */
    final Kernel fnSplit, fnI8Widen, fnGemmOut, fnGluOut, fnSplit3, fnGemmOut3, fnResidualSplit3;
    final Kernel[] fnGluSplit = new Kernel[GLU_SPLIT_N.length];
    final Kernel fnArchNorm, fnGluAct, fnRoute, fnArgmax, fnPleCombine, fnPliGate, fnScaleCap, fnExpertScale;
    final Kernel fnGdnUnfuse, fnGdnConv, fnGdnGates, fnGdnRule, fnGdnNorm, fnSplitGate, fnSigmoidMul, fnGatedAdd;

    ResidentKernels(CudaContext ctx, KvType kv) {
        for (int i = 0; i < 4; i++) {
            String kind = Kernels.KINDS[i];
            fnMatvec[i] = Kernels.matvec(kind).load(ctx);
            fnMatvec3[i] = Kernels.matvec3(kind).load(ctx);
            fnGlu[i] = Kernels.glu(kind).load(ctx);
            fnEmbed[i] = Kernels.embed(kind).load(ctx);
            fnMoeGlu[i] = Kernels.moeGlu(kind).load(ctx);
            fnMoeDown[i] = Kernels.moeDown(kind).load(ctx);
        }
        for (int i = 0; i < 2; i++) {
            String kind = Kernels.Q4_KINDS[i];
            fnMatvec[4 + i] = Kernels.matvec(kind).load(ctx);
            fnMatvec3[4 + i] = Kernels.matvec3(kind).load(ctx);
            fnGlu[4 + i] = Kernels.glu(kind).load(ctx);
            fnEmbed[4 + i] = Kernels.embed(kind).load(ctx);
            fnWidenQ4[i] = Kernels.widenQ4(kind).load(ctx);
            fnMoeGlu[4 + i] = Kernels.moeGlu(kind).load(ctx);
            fnMoeDown[4 + i] = Kernels.moeDown(kind).load(ctx);
        }
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 2; i++) {
                int n = Kernels.SMALL_BATCH_ROWS[i], rb = Kernels.SMALL_BATCH_BLOCK_ROWS[b];
                fnSmallMatvec[b][i] = Kernels.smallMatvec(n, rb).load(ctx);
                fnSmallMatvec3[b][i] = Kernels.smallMatvec3(n, rb).load(ctx);
                fnSmallGlu[b][i] = Kernels.smallGlu(n, rb).load(ctx);
            }
        fnRope = Kernels.qkRopeAppend(kv).load(ctx);
        fnAttn = Kernels.attnPartial(kv).load(ctx);
        fnAttnRows = Kernels.attnRows(kv).load(ctx);
        fnAttnChunk = Kernels.attnChunk(kv) == null ? null : Kernels.attnChunk(kv).load(ctx);
        for (int i = 0; i < PREFILL_DIMS.length; i++) fnPrefill[i] = Kernels.prefill(PREFILL_DIMS[i], kv).load(ctx);
        if (ResidentLowering.tensorCoreAttention(ctx.info().ccMajor()))
            for (int i = 0; i < Kernels.prefillTensorCoreBuckets(kv); i++) fnPrefillTc[i] = Kernels.prefillTensorCores(PREFILL_DIMS[i], kv).load(ctx);
        fnSplit = Kernels.SPLIT.load(ctx);
        fnI8Widen = Kernels.I8_WIDEN.load(ctx);
        fnGemmOut = Kernels.GEMM_OUT.load(ctx);
        fnGluOut = Kernels.GLU_OUT.load(ctx);
        fnSplit3 = Kernels.SPLIT3.load(ctx);
        fnGemmOut3 = Kernels.GEMM_OUT3.load(ctx);
        fnResidualSplit3 = Kernels.RESIDUAL_SPLIT3.load(ctx);
        for (int i = 0; i < GLU_SPLIT_N.length; i++) fnGluSplit[i] = Kernels.gluSplit(GLU_SPLIT_N[i]).load(ctx);
        fnArchNorm = Kernels.RMSNORM.load(ctx);
        fnGluAct = Kernels.GLU_ACT.load(ctx);
        fnRoute = Kernels.MOE_ROUTE.load(ctx);
        fnArgmax = Kernels.ARGMAX_ROWS.load(ctx);
        fnPleCombine = Kernels.PLE_COMBINE.load(ctx);
        fnPliGate = Kernels.PLI_GATE.load(ctx);
        fnScaleCap = Kernels.SCALE_CAP.load(ctx);
        fnExpertScale = Kernels.EXPERT_SCALE.load(ctx);
        fnGdnUnfuse = Kernels.GDN_UNFUSE.load(ctx);
        fnGdnConv = Kernels.GDN_CONV.load(ctx);
        fnGdnGates = Kernels.GDN_GATES.load(ctx);
        fnGdnRule = Kernels.GDN_RULE.load(ctx);
        fnGdnNorm = Kernels.GDN_NORM.load(ctx);
        fnSplitGate = Kernels.SPLIT_GATE.load(ctx);
        fnSigmoidMul = Kernels.SIGMOID_MUL.load(ctx);
        fnGatedAdd = Kernels.GATED_ADD.load(ctx);
    }
}
