package dev.cmf4j.format;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.List;
import java.util.Map;

/**
 * The header's {@code arch} block (CMF_FORMAT.md §1.5; the reference's {@code ModelArch} in
 * types.rs). Every component is nullable: a file states only what its model needs, and the engine
 * decides what is mandatory for a given architecture. Format enums ({@code layer_types[i]},
 * {@code norm_style}, {@code linear_core.kind}, {@code anchor_core.kind}) are validated when parsed;
 * an unknown value is a {@link CmfException.Parse}. Fields this class does not name are kept in
 * {@link #extra} and written back by {@link #toJson}.
 */
public record ModelArch(
        String archName, Integer hiddenSize, Integer intermediateSize, Integer numLayers,
        Integer numAttentionHeads, Integer numKvHeads, Integer headDim, Integer vocabSize,
        List<String> layerTypes, Double rmsNormEps, String normStyle, Double ropeTheta,
        Boolean tieWordEmbeddings, Double partialRotaryFactor, Yarn yarn,
        List<Integer> attentionHeadsPerLayer, String hiddenAct, Double embedMultiplier,
        Double queryPreAttnScalar, Integer slidingWindow, Integer slidingWindowPattern,
        Double ropeLocalBaseFreq, Double localPartialRotaryFactor, Integer globalHeadDim,
        Integer numGlobalKvHeads, Double globalPartialRotaryFactor, Double finalLogitSoftcapping,
        Double attnLogitSoftcapping, Boolean attnVNorm, Mla mla, Double activationSituBeta,
        Double activationSituLinearBeta, Mtp mtp, Moe moe, LinearCore linearCore, JsonNode headClusters,
        Integer maxPositionEmbeddings, Integer linearConvKernelDim, Integer linearNumKeyHeads,
        Integer linearNumValueHeads, Integer linearKeyHeadDim, Integer linearValueHeadDim,
        List<Double> ropeFreqFactors, Double logitMultiplier, G3n g3n, Double kdaGateLowerBound,
        Integer numLoops, Boolean loopFinalNorm, AnchorCore anchorCore, JsonNode prismHadamard,
        Map<String, JsonNode> extra) {

    /** Values of {@code layer_types[i]}. */
    public static final List<String> LAYER_TYPES = List.of(
            "FullAttention", "SlidingAttention", "LinearAttention", "ShortConv", "Kda", "BoundedAttention");
    /** Values of {@code norm_style}: qwen = x̂·w, gemma = x̂·(1+w). */
    public static final List<String> NORM_STYLES = List.of("qwen", "gemma");
    /** Values of {@code linear_core.kind} this reader knows. */
    public static final List<String> LINEAR_CORE_KINDS = List.of("gated_delta_net", "vmf_phase", "kda", "short_conv");
    /** Values of {@code anchor_core.kind}. */
    public static final List<String> ANCHOR_CORE_KINDS = List.of("swa_sink_v1");

    public ModelArch { extra = extra == null ? Map.of() : Map.copyOf(extra); }

    /** YaRN rope scaling. */
    public record Yarn(Double factor, Long originalMaxPositionEmbeddings, Double betaFast, Double betaSlow,
                       Double attentionFactor, Double mscaleAllDim, Map<String, JsonNode> extra) {
        static Yarn read(Json.Fields f) {
            if (f == null) return null;
            return new Yarn(f.dbl("factor"), f.longValue("original_max_position_embeddings"), f.dbl("beta_fast"),
                    f.dbl("beta_slow"), f.dbl("attention_factor"), f.dbl("mscale_all_dim"), f.rest());
        }
        ObjectNode toJson() {
            return new Json.Out().put("factor", factor).put("original_max_position_embeddings", originalMaxPositionEmbeddings)
                    .put("beta_fast", betaFast).put("beta_slow", betaSlow).put("attention_factor", attentionFactor)
                    .put("mscale_all_dim", mscaleAllDim).extra(extra).done();
        }
    }

    /** Multi-head latent attention. {@code nope} is kept as raw JSON (its type varies by version). */
    public record Mla(Integer kvLoraRank, Integer qkRopeHeadDim, Integer qkNopeHeadDim, Integer vHeadDim,
                      Integer qLoraRank, JsonNode nope, Map<String, JsonNode> extra) {
        static Mla read(Json.Fields f) {
            if (f == null) return null;
            return new Mla(f.integer("kv_lora_rank"), f.integer("qk_rope_head_dim"), f.integer("qk_nope_head_dim"),
                    f.integer("v_head_dim"), f.integer("q_lora_rank"), f.raw("nope"), f.rest());
        }
        ObjectNode toJson() {
            return new Json.Out().put("kv_lora_rank", kvLoraRank).put("qk_rope_head_dim", qkRopeHeadDim)
                    .put("qk_nope_head_dim", qkNopeHeadDim).put("v_head_dim", vHeadDim).put("q_lora_rank", qLoraRank)
                    .put("nope", nope).extra(extra).done();
        }
    }

    /** Multi-token-prediction head. */
    public record Mtp(Integer numLayers, Boolean shareLmHead, Boolean shareEmbed, Map<String, JsonNode> extra) {
        static Mtp read(Json.Fields f) {
            if (f == null) return null;
            return new Mtp(f.integer("num_layers"), f.bool("share_lm_head"), f.bool("share_embed"), f.rest());
        }
        ObjectNode toJson() {
            return new Json.Out().put("num_layers", numLayers).put("share_lm_head", shareLmHead)
                    .put("share_embed", shareEmbed).extra(extra).done();
        }
    }

    /** Mixture of experts. */
    public record Moe(Integer numExperts, Integer topK, Integer moeIntermediateSize, Boolean normTopkProb,
                      Integer sharedExpertIntermediateSize, Boolean routerSigmoid, Double routedScalingFactor,
                      JsonNode routerResonance, Map<String, JsonNode> extra) {
        static Moe read(Json.Fields f) {
            if (f == null) return null;
            return new Moe(f.integer("num_experts"), f.integer("top_k"), f.integer("moe_intermediate_size"),
                    f.bool("norm_topk_prob"), f.integer("shared_expert_intermediate_size"), f.bool("router_sigmoid"),
                    f.dbl("routed_scaling_factor"), f.raw("router_resonance"), f.rest());
        }
        ObjectNode toJson() {
            return new Json.Out().put("num_experts", numExperts).put("top_k", topK)
                    .put("moe_intermediate_size", moeIntermediateSize).put("norm_topk_prob", normTopkProb)
                    .put("shared_expert_intermediate_size", sharedExpertIntermediateSize)
                    .put("router_sigmoid", routerSigmoid).put("routed_scaling_factor", routedScalingFactor)
                    .put("router_resonance", routerResonance).extra(extra).done();
        }
    }

    /** Linear-attention core (gated delta net, vmf phase, ...). */
    public record LinearCore(String kind, Integer numHeads, Integer nphase, Integer valueHeadDim,
                             JsonNode phaseDeltaLayers, Map<String, JsonNode> extra) {
        static LinearCore read(Json.Fields f) {
            if (f == null) return null;
            return new LinearCore(f.oneOf("kind", LINEAR_CORE_KINDS), f.integer("num_heads"), f.integer("nphase"),
                    f.integer("value_head_dim"), f.raw("phase_delta_layers"), f.rest());
        }
        ObjectNode toJson() {
            return new Json.Out().put("kind", kind).put("num_heads", numHeads).put("nphase", nphase)
                    .put("value_head_dim", valueHeadDim).put("phase_delta_layers", phaseDeltaLayers).extra(extra).done();
        }
    }

    /** Gemma-3n extras (AltUp, LAuReL, per-layer embeddings, KV sharing, activation sparsity). */
    public record G3n(Integer altupNumInputs, Integer laurelRank, Integer pleDim, Integer pleVocab,
                      Integer numKvSharedLayers, List<Double> activationSparsity, Map<String, JsonNode> extra) {
        static G3n read(Json.Fields f) {
            if (f == null) return null;
            return new G3n(f.integer("altup_num_inputs"), f.integer("laurel_rank"), f.integer("ple_dim"),
                    f.integer("ple_vocab"), f.integer("num_kv_shared_layers"), f.doubles("activation_sparsity"), f.rest());
        }
        ObjectNode toJson() {
            return new Json.Out().put("altup_num_inputs", altupNumInputs).put("laurel_rank", laurelRank)
                    .put("ple_dim", pleDim).put("ple_vocab", pleVocab).put("num_kv_shared_layers", numKvSharedLayers)
                    .doubles("activation_sparsity", activationSparsity).extra(extra).done();
        }
    }

    /** Natively bounded attention (CMF 0.8): sliding window plus sink tokens. */
    public record AnchorCore(String kind, Integer window, Integer sink, String rope, String sinkScores,
                             JsonNode trainWindows, JsonNode far, Map<String, JsonNode> extra) {
        static AnchorCore read(Json.Fields f) {
            if (f == null) return null;
            return new AnchorCore(f.oneOf("kind", ANCHOR_CORE_KINDS), f.integer("window"), f.integer("sink"),
                    f.string("rope"), f.string("sink_scores"), f.raw("train_windows"), f.raw("far"), f.rest());
        }
        ObjectNode toJson() {
            Json.Out o = new Json.Out().put("kind", kind).put("window", window).put("sink", sink).put("rope", rope)
                    .put("sink_scores", sinkScores).put("train_windows", trainWindows);
            if (far == null) o.putNull("far"); else o.put("far", far);
            return o.extra(extra).done();
        }
    }

    /** Parses an {@code arch} object (also used by converters that build the block as JSON). */
    public static ModelArch fromJson(ObjectNode node) { return read(new Json.Fields(node, "arch", -1, "arch")); }

    static ModelArch read(Json.Fields f) {
        ModelArch a = new ModelArch(
                f.string("arch_name"), f.integer("hidden_size"), f.integer("intermediate_size"), f.integer("num_layers"),
                f.integer("num_attention_heads"), f.integer("num_kv_heads"), f.integer("head_dim"), f.integer("vocab_size"),
                f.strings("layer_types"), f.dbl("rms_norm_eps"), f.oneOf("norm_style", NORM_STYLES), f.dbl("rope_theta"),
                f.bool("tie_word_embeddings"), f.dbl("partial_rotary_factor"), Yarn.read(f.sub("yarn")),
                f.ints("attention_heads_per_layer"), f.string("hidden_act"), f.dbl("embed_multiplier"),
                f.dbl("query_pre_attn_scalar"), f.integer("sliding_window"), f.integer("sliding_window_pattern"),
                f.dbl("rope_local_base_freq"), f.dbl("local_partial_rotary_factor"), f.integer("global_head_dim"),
                f.integer("num_global_kv_heads"), f.dbl("global_partial_rotary_factor"), f.dbl("final_logit_softcapping"),
                f.dbl("attn_logit_softcapping"), f.bool("attn_v_norm"), Mla.read(f.sub("mla")),
                f.dbl("activation_situ_beta"), f.dbl("activation_situ_linear_beta"), Mtp.read(f.sub("mtp")),
                Moe.read(f.sub("moe")), LinearCore.read(f.sub("linear_core")), f.raw("head_clusters"),
                f.integer("max_position_embeddings"), f.integer("linear_conv_kernel_dim"), f.integer("linear_num_key_heads"),
                f.integer("linear_num_value_heads"), f.integer("linear_key_head_dim"), f.integer("linear_value_head_dim"),
                f.doubles("rope_freq_factors"), f.dbl("logit_multiplier"), G3n.read(f.sub("g3n")),
                f.dbl("kda_gate_lower_bound"), f.integer("num_loops"), f.bool("loop_final_norm"),
                AnchorCore.read(f.sub("anchor_core")), f.raw("prism_hadamard"), f.rest());
        if (a.layerTypes != null) {
            for (int i = 0; i < a.layerTypes.size(); i++) {
                if (!LAYER_TYPES.contains(a.layerTypes.get(i))) {
                    throw new CmfException.Parse(f.label, f.offset, f.path + ".layer_types[" + i + "]: unknown value \""
                            + a.layerTypes.get(i) + "\" (expected one of " + LAYER_TYPES + ")");
                }
            }
        }
        return a;
    }

    /** The {@code arch} object, known fields in schema order, then unknown ones as read. */
    public ObjectNode toJson() {
        Json.Out o = new Json.Out().put("arch_name", archName).put("hidden_size", hiddenSize)
                .put("intermediate_size", intermediateSize).put("num_layers", numLayers)
                .put("num_attention_heads", numAttentionHeads).put("num_kv_heads", numKvHeads).put("head_dim", headDim)
                .put("vocab_size", vocabSize).strings("layer_types", layerTypes).put("rms_norm_eps", rmsNormEps)
                .put("norm_style", normStyle).put("rope_theta", ropeTheta).put("tie_word_embeddings", tieWordEmbeddings)
                .put("partial_rotary_factor", partialRotaryFactor).put("yarn", yarn == null ? null : yarn.toJson())
                .ints("attention_heads_per_layer", attentionHeadsPerLayer).put("hidden_act", hiddenAct)
                .put("embed_multiplier", embedMultiplier).put("query_pre_attn_scalar", queryPreAttnScalar)
                .put("sliding_window", slidingWindow).put("sliding_window_pattern", slidingWindowPattern)
                .put("rope_local_base_freq", ropeLocalBaseFreq).put("local_partial_rotary_factor", localPartialRotaryFactor)
                .put("global_head_dim", globalHeadDim).put("num_global_kv_heads", numGlobalKvHeads)
                .put("global_partial_rotary_factor", globalPartialRotaryFactor)
                .put("final_logit_softcapping", finalLogitSoftcapping).put("attn_logit_softcapping", attnLogitSoftcapping)
                .put("attn_v_norm", attnVNorm).put("mla", mla == null ? null : mla.toJson())
                .put("activation_situ_beta", activationSituBeta).put("activation_situ_linear_beta", activationSituLinearBeta)
                .put("mtp", mtp == null ? null : mtp.toJson()).put("moe", moe == null ? null : moe.toJson())
                .put("linear_core", linearCore == null ? null : linearCore.toJson()).put("head_clusters", headClusters)
                .put("max_position_embeddings", maxPositionEmbeddings).put("linear_conv_kernel_dim", linearConvKernelDim)
                .put("linear_num_key_heads", linearNumKeyHeads).put("linear_num_value_heads", linearNumValueHeads)
                .put("linear_key_head_dim", linearKeyHeadDim).put("linear_value_head_dim", linearValueHeadDim)
                .doubles("rope_freq_factors", ropeFreqFactors).put("logit_multiplier", logitMultiplier)
                .put("g3n", g3n == null ? null : g3n.toJson()).put("kda_gate_lower_bound", kdaGateLowerBound)
                .put("num_loops", numLoops).put("loop_final_norm", loopFinalNorm)
                .put("anchor_core", anchorCore == null ? null : anchorCore.toJson()).put("prism_hadamard", prismHadamard);
        return o.extra(extra).done();
    }
}
