package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Maps a Hugging Face {@code config.json} to the CMF header's {@code arch} block. Field names are the
 * reference converter's (CMF_FORMAT.md §1.5); what a model needs beyond them is added under new names,
 * all listed in docs/ARCH_FIELDS.md. The block is meant to be complete: together with the tensor
 * directory it determines the forward pass, with per-layer values resolved here (head dims, KV heads,
 * attention scale, KV-sharing source, FFN kind, rope per layer type) so the engine does not have to
 * re-derive transformers' defaults.
 *
 * <p>Families: llama (and mistral), qwen2, qwen3, qwen3_moe, qwen3_next (and Qwen3.5's qwen3_5 /
 * qwen3_5_moe naming), gemma3, gemma4 (dense and MoE, {@code per_layer_config} or
 * {@code global_head_dim} style), gpt_oss.
 */
public final class HfArch {
    private HfArch() {}

    private static final JsonNodeFactory F = JsonNodeFactory.instance;

    /** CMF layer type names for HF's layer_types values. */
    static String cmfLayerType(String hf, HfConfig cfg) {
        return switch (hf) {
            case "full_attention" -> "FullAttention";
            case "sliding_attention" -> "SlidingAttention";
            case "linear_attention" -> "LinearAttention";
            default -> throw cfg.error("layer type \"" + hf + "\" is not supported (full_attention, sliding_attention, linear_attention)");
        };
    }

    /** The family (CMF arch_name) a config's model_type maps to, or an error listing the supported ones. */
    public static String family(HfConfig cfg) {
        String mt = cfg.string("model_type", null);
        if (mt == null) {
            List<String> archs = cfg.strings("architectures");
            throw cfg.error("no \"model_type\"" + (archs == null ? "" : " (architectures " + archs + ")"));
        }
        return switch (mt.toLowerCase(Locale.ROOT)) {
            case "llama", "mistral" -> "llama";
            case "qwen2" -> "qwen2";
            case "qwen3" -> "qwen3";
            case "qwen3_moe" -> "qwen3_moe";
            case "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text" -> "qwen3_next";
            case "gemma3", "gemma3_text" -> "gemma3";
            case "gemma4", "gemma4_text" -> "gemma4";
            case "gpt_oss" -> "gpt_oss";
            default -> throw cfg.error("model_type \"" + mt + "\" is not supported; cmf convert knows llama, mistral, qwen2, "
                    + "qwen3, qwen3_moe, qwen3_next, qwen3_5(_moe), gemma3, gemma4, gpt_oss");
        };
    }

    /** Most layers a config may declare: a hostile config must not size per-layer tables at billions of entries. */
    static final int MAX_LAYERS = 1 << 12;

    /** Builds the arch block from a config (the outer one; {@code text_config} is used when present). */
    public static ObjectNode fromConfig(HfConfig outer) {
        String family = family(outer);
        HfConfig c = outer.text();
        ObjectNode a = F.objectNode();
        a.put("arch_name", family);
        a.putNull("moe");

        int hidden = c.positiveInt("hidden_size");
        int layers = c.positiveInt("num_hidden_layers");
        if (layers > MAX_LAYERS) throw c.error("\"num_hidden_layers\" " + layers + " is over " + MAX_LAYERS + " (per-layer tables are sized by it)");
        int heads = c.positiveInt("num_attention_heads");
        int kvHeads = c.has("num_key_value_heads") ? c.positiveInt("num_key_value_heads") : heads;
        Integer hd = c.integer("head_dim");
        int headDim = hd != null && hd > 0 ? hd : hidden / heads;
        int vocab = c.positiveInt("vocab_size");
        Integer inter = c.integer("intermediate_size");

        a.put("hidden_size", hidden);
        if (inter != null) a.put("intermediate_size", inter); else a.putNull("intermediate_size");
        a.put("num_layers", layers);
        a.put("num_attention_heads", heads);
        a.put("num_kv_heads", kvHeads);
        a.put("head_dim", headDim);
        a.put("vocab_size", vocab);

        List<String> hfTypes = layerTypes(family, c, layers);
        ArrayNode lt = a.putArray("layer_types");
        for (String t : hfTypes) lt.add(cmfLayerType(t, c));

        a.put("rms_norm_eps", c.dbl("rms_norm_eps", 1e-6));
        a.put("norm_style", family.equals("gemma3") || family.equals("qwen3_next") ? "gemma" : "qwen");

        // ---- rope -------------------------------------------------------------------------------
        Map<String, ObjectNode> rope = ropeByLayerType(family, c, hfTypes);
        ObjectNode globalRope = rope.containsKey("full_attention") ? rope.get("full_attention") : rope.values().iterator().next();
        a.put("rope_theta", globalRope.get("rope_theta").asDouble());
        a.put("partial_rotary_factor", globalRope.get("partial_rotary_factor").asDouble());
        a.put("tie_word_embeddings", c.bool("tie_word_embeddings",
                outer.bool("tie_word_embeddings", family.startsWith("gemma"))));
        a.put("max_position_embeddings", c.integer("max_position_embeddings", 0));
        for (String k : List.of("linear_conv_kernel_dim", "linear_num_key_heads", "linear_num_value_heads",
                "linear_key_head_dim", "linear_value_head_dim")) {
            if (family.equals("qwen3_next")) a.put(k, c.positiveInt(k)); else a.putNull(k);
        }
        String act = c.string("hidden_activation", c.string("hidden_act", "silu"));
        a.put("hidden_act", switch (act) {
            case "silu", "swish" -> "silu";
            case "gelu_pytorch_tanh", "gelu_tanh", "gelu_new" -> "gelu_tanh";
            default -> throw c.error("hidden activation \"" + act + "\" is not supported (silu, gelu_pytorch_tanh)");
        });
        if (rope.containsKey("sliding_attention") && rope.containsKey("full_attention")) {
            ObjectNode local = rope.get("sliding_attention");
            a.put("rope_local_base_freq", local.get("rope_theta").asDouble());
            a.put("local_partial_rotary_factor", local.get("partial_rotary_factor").asDouble());
            a.put("global_partial_rotary_factor", globalRope.get("partial_rotary_factor").asDouble());
        }
        if ("yarn".equals(globalRope.path("rope_type").asText())) a.set("yarn", yarnBlock(globalRope));
        ObjectNode ropeOut = a.putObject("rope");
        for (var e : rope.entrySet()) ropeOut.set(cmfLayerType(e.getKey(), c), e.getValue());

        // ---- attention, per layer ----------------------------------------------------------------
        Integer window = c.integer("sliding_window");
        boolean anySliding = hfTypes.contains("sliding_attention");
        if (anySliding) {
            if (window == null || window <= 0) throw c.error("sliding layers need a positive \"sliding_window\"");
            a.put("sliding_window", window);
        }
        Integer pattern = c.integer("sliding_window_pattern");
        if (pattern == null) pattern = c.integer("_sliding_window_pattern");
        if (pattern != null && anySliding) a.put("sliding_window_pattern", pattern);

        int[] layerHeadDim = new int[layers];
        int[] layerKv = new int[layers];
        for (int i = 0; i < layers; i++) {
            layerHeadDim[i] = headDim;
            layerKv[i] = kvHeads;
        }
        int[] kvSource = new int[layers];
        java.util.Arrays.fill(kvSource, -1);
        Double fixedScale = null;
        switch (family) {
            case "gemma3" -> {
                double qpas = c.dbl("query_pre_attn_scalar", headDim);
                a.put("query_pre_attn_scalar", qpas);
                fixedScale = 1.0 / Math.sqrt(qpas);
                a.put("embed_multiplier", Math.sqrt(hidden));
            }
            case "gemma4" -> gemma4Attention(c, a, hfTypes, headDim, kvHeads, layerHeadDim, layerKv, kvSource);
            default -> { }
        }
        if (family.equals("gemma4")) fixedScale = 1.0;
        Double finalCap = c.dbl("final_logit_softcapping");
        if (finalCap != null) a.put("final_logit_softcapping", finalCap);
        Double attnCap = c.dbl("attn_logit_softcapping");
        if (attnCap != null) a.put("attn_logit_softcapping", attnCap);

        ArrayNode lhd = a.putArray("layer_head_dims");
        ArrayNode lkv = a.putArray("layer_kv_heads");
        ArrayNode lsc = a.putArray("layer_attention_scales");
        ArrayNode lsrc = a.putArray("layer_kv_sources");
        for (int i = 0; i < layers; i++) {
            boolean attn = !hfTypes.get(i).equals("linear_attention");
            if (attn) {
                lhd.add(layerHeadDim[i]);
                lkv.add(layerKv[i]);
                lsc.add(fixedScale != null ? fixedScale : 1.0 / Math.sqrt(layerHeadDim[i]));
            } else {
                lhd.addNull();
                lkv.addNull();
                lsc.addNull();
            }
            lsrc.add(kvSource[i]);
        }
        a.put("attention_bias", c.bool("attention_bias", family.equals("qwen2")));
        if (family.equals("gpt_oss")) a.put("attention_sinks", true);
        if (family.equals("qwen3_next")) {
            a.put("attn_output_gate", c.bool("attn_output_gate", true));
            a.put("linear_norm_style", "qwen");
            ObjectNode lc = F.objectNode();
            lc.put("kind", "gated_delta_net");
            lc.put("num_heads", c.positiveInt("linear_num_value_heads"));
            lc.put("value_head_dim", c.positiveInt("linear_value_head_dim"));
            a.set("linear_core", lc);
        }

        // ---- feed-forward -----------------------------------------------------------------------
        ArrayNode ffn = a.putArray("layer_ffn_kinds");
        ObjectNode moe = moeBlock(family, c);
        for (int i = 0; i < layers; i++) ffn.add(ffnKind(family, c, i, moe != null));
        if (moe != null) a.set("moe", moe); else a.remove("moe");
        if (family.equals("gemma4")) a.put("use_double_wide_mlp", c.bool("use_double_wide_mlp", false));

        a.put("hf_model_type", outer.string("model_type", ""));
        List<String> archs = outer.strings("architectures");
        if (archs != null && !archs.isEmpty()) a.put("hf_architecture", archs.getFirst());
        return a;
    }

    // ---- layer types ---------------------------------------------------------------------------

    static List<String> layerTypes(String family, HfConfig c, int layers) {
        List<String> given = c.strings("layer_types");
        if (given != null) {
            if (given.size() != layers) throw c.error("\"layer_types\" has " + given.size() + " entries for " + layers + " layers");
            List<String> out = new ArrayList<>(given);
            if (family.equals("gemma4") && !out.getLast().equals("full_attention")) out.set(layers - 1, "full_attention");
            return out;
        }
        List<String> out = new ArrayList<>(layers);
        for (int i = 0; i < layers; i++) {
            out.add(switch (family) {
                case "gemma3" -> ((i + 1) % c.integer("sliding_window_pattern", c.integer("_sliding_window_pattern", 6)) != 0)
                        ? "sliding_attention" : "full_attention";
                case "gemma4" -> (i == layers - 1 || (i + 1) % 6 == 0) ? "full_attention" : "sliding_attention";
                case "qwen3_next" -> ((i + 1) % c.integer("full_attention_interval", 4) == 0) ? "full_attention" : "linear_attention";
                case "gpt_oss" -> i % 2 == 0 ? "sliding_attention" : "full_attention";
                case "qwen2", "qwen3", "qwen3_moe" -> c.bool("use_sliding_window", false) && c.has("sliding_window")
                        && i >= c.integer("max_window_layers", 0) ? "sliding_attention" : "full_attention";
                default -> c.has("sliding_window") && family.equals("llama") && c.integer("sliding_window", 0) > 0
                        ? "sliding_attention" : "full_attention";
            });
        }
        return out;
    }

    // ---- rope ----------------------------------------------------------------------------------

    /**
     * Rope parameters per HF layer type present (full_attention / sliding_attention; linear layers have
     * none), each normalized to {rope_type, rope_theta, partial_rotary_factor, type-specific HF keys}.
     * Reads transformers 5 {@code rope_parameters} (flat or keyed by layer type) and 4.x
     * {@code rope_theta}/{@code rope_scaling}/{@code rope_local_base_freq}.
     */
    static Map<String, ObjectNode> ropeByLayerType(String family, HfConfig c, List<String> hfTypes) {
        double topPartial = c.dbl("partial_rotary_factor", 1.0);
        Map<String, ObjectNode> out = new LinkedHashMap<>();
        HfConfig rp = c.sub("rope_parameters");
        List<String> attnTypes = new ArrayList<>(hfTypes.stream().filter(t -> !t.equals("linear_attention")).distinct().toList());
        if (attnTypes.isEmpty()) attnTypes.add("full_attention");
        // a per-type rope_parameters names both types even when the layer pattern uses only one (a short
        // gemma3 with only sliding layers): keep both so rope_theta is the global one the config states
        for (String t : List.of("full_attention", "sliding_attention")) {
            if (rp != null && rp.has(t) && rp.raw(t).isObject() && !attnTypes.contains(t)) attnTypes.add(t);
        }
        attnTypes.sort(java.util.Comparator.comparing(t -> !t.equals("full_attention")));
        for (String t : attnTypes) {
            HfConfig src;
            if (rp != null && rp.has(t) && rp.raw(t).isObject()) src = rp.sub(t);
            else if (rp != null && (rp.has("rope_theta") || rp.has("rope_type"))) src = rp;
            else src = legacyRope(family, c, t);
            out.put(t, normalizeRope(src, c, topPartial));
        }
        return out;
    }

    /** A 4.x config's rope (rope_theta + rope_scaling), as a rope_parameters-style object. */
    private static HfConfig legacyRope(String family, HfConfig c, String layerType) {
        ObjectNode o = F.objectNode();
        boolean local = layerType.equals("sliding_attention") && c.has("rope_local_base_freq");
        o.put("rope_theta", local ? c.dbl("rope_local_base_freq") : c.dbl("rope_theta", 10000.0));
        HfConfig sc = c.sub("rope_scaling");
        if (sc != null && !local) {
            o.setAll(sc.json());
            if (!o.has("rope_type") && o.has("type")) o.set("rope_type", o.get("type"));
        }
        if (!o.has("rope_type")) o.put("rope_type", "default");
        return HfConfig.of(o, c.where() + " rope");
    }

    private static final List<String> ROPE_KEYS = List.of("factor", "low_freq_factor", "high_freq_factor",
            "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim",
            "truncate", "short_factor", "long_factor");

    private static ObjectNode normalizeRope(HfConfig src, HfConfig c, double topPartial) {
        ObjectNode o = F.objectNode();
        String type = src.string("rope_type", src.string("type", "default"));
        switch (type) {
            case "default", "linear", "llama3", "yarn", "proportional", "dynamic", "longrope" -> { }
            default -> throw src.error("rope_type \"" + type + "\" is not supported (default, linear, llama3, yarn, proportional, dynamic, longrope)");
        }
        o.put("rope_type", type);
        Double theta = src.dbl("rope_theta");
        if (theta == null) theta = c.dbl("rope_theta", 10000.0);
        o.put("rope_theta", theta);
        o.put("partial_rotary_factor", src.dbl("partial_rotary_factor", topPartial));
        for (String k : ROPE_KEYS) if (src.has(k)) o.set(k, src.raw(k));
        switch (type) {
            case "linear", "dynamic" -> need(src, "factor");
            case "llama3" -> {
                for (String k : List.of("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")) need(src, k);
            }
            case "yarn" -> {
                need(src, "factor");
                if (!o.has("original_max_position_embeddings"))
                    o.put("original_max_position_embeddings", c.integer("max_position_embeddings", 0));
                if (!o.has("beta_fast")) o.put("beta_fast", 32.0);
                if (!o.has("beta_slow")) o.put("beta_slow", 1.0);
                if (!o.has("attention_factor")) o.put("attention_factor", yarnAttentionFactor(src));
            }
            default -> { }
        }
        return o;
    }

    private static void need(HfConfig src, String key) {
        if (!src.has(key)) throw src.error("rope_type " + src.string("rope_type", src.string("type", "?")) + " needs \"" + key + "\"");
    }

    /** transformers' YaRN default: mscale(factor, mscale) / mscale(factor, mscale_all_dim), or 0.1·ln(factor) + 1. */
    static double yarnAttentionFactor(HfConfig src) {
        double factor = src.dbl("factor", 1.0);
        Double mscale = src.dbl("mscale"), all = src.dbl("mscale_all_dim");
        if (mscale != null && all != null && mscale != 0 && all != 0) return yarnMscale(factor, mscale) / yarnMscale(factor, all);
        return yarnMscale(factor, 1.0);
    }

    private static double yarnMscale(double scale, double m) {
        return scale <= 1 ? 1.0 : 0.1 * m * Math.log(scale) + 1.0;
    }

    private static ObjectNode yarnBlock(ObjectNode rope) {
        ObjectNode y = F.objectNode();
        y.set("factor", rope.get("factor"));
        y.set("original_max_position_embeddings", rope.get("original_max_position_embeddings"));
        y.set("beta_fast", rope.get("beta_fast"));
        y.set("beta_slow", rope.get("beta_slow"));
        y.set("attention_factor", rope.get("attention_factor"));
        if (rope.has("mscale_all_dim")) y.set("mscale_all_dim", rope.get("mscale_all_dim"));
        if (rope.has("mscale")) y.set("mscale", rope.get("mscale"));
        if (rope.has("truncate")) y.set("truncate", rope.get("truncate"));
        return y;
    }

    // ---- gemma4 --------------------------------------------------------------------------------

    private static void gemma4Attention(HfConfig c, ObjectNode a, List<String> types, int headDim, int kvHeads,
                                        int[] layerHeadDim, int[] layerKv, int[] kvSource) {
        int layers = types.size();
        boolean kEqV = c.bool("attention_k_eq_v", false);
        HfConfig plc = c.sub("per_layer_config");
        Integer globalHeadDim = c.integer("global_head_dim");
        Integer globalKv = c.integer("num_global_key_value_heads");
        for (int i = 0; i < layers; i++) {
            boolean full = types.get(i).equals("full_attention");
            if (plc != null) {
                HfConfig o = plc.sub(Integer.toString(i));
                if (o != null) {
                    layerHeadDim[i] = o.integer("head_dim", headDim);
                    layerKv[i] = o.integer("num_key_value_heads", kvHeads);
                }
            } else if (full) {
                // transformers: without per_layer_config, full layers take global_head_dim (default 512)
                // and, when attention_k_eq_v, num_global_key_value_heads.
                layerHeadDim[i] = globalHeadDim != null ? globalHeadDim : 512;
                if (kEqV && globalKv != null) layerKv[i] = globalKv;
            }
        }
        int fullDim = -1, fullKv = -1;
        for (int i = 0; i < layers; i++) if (types.get(i).equals("full_attention")) { fullDim = layerHeadDim[i]; fullKv = layerKv[i]; }
        if (fullDim > 0 && fullDim != headDim) a.put("global_head_dim", fullDim);
        if (fullKv > 0 && fullKv != kvHeads) a.put("num_global_kv_heads", fullKv);
        a.put("attn_v_norm", true);
        a.put("attention_k_eq_v", kEqV);
        a.put("embed_multiplier", Math.sqrt(c.positiveInt("hidden_size")));

        // KV sharing: the last num_kv_shared_layers layers reuse the K/V of the last earlier layer of the same type.
        int shared = c.integer("num_kv_shared_layers", 0);
        if (shared < 0 || shared >= layers) throw c.error("\"num_kv_shared_layers\" " + shared + " must be in [0, " + layers + ")");
        int first = layers - shared;
        for (int i = first; i < layers; i++) {
            int src = -1;
            for (int j = first - 1; j >= 0; j--) if (types.get(j).equals(types.get(i))) { src = j; break; }
            if (src < 0) throw c.error("layer " + i + " shares K/V but no earlier " + types.get(i) + " layer exists");
            kvSource[i] = src;
        }
        int ple = c.integer("hidden_size_per_layer_input", 0);
        if (ple > 0 || shared > 0) {
            ObjectNode g = F.objectNode();
            g.putNull("altup_num_inputs");
            g.putNull("laurel_rank");
            if (ple > 0) {
                g.put("ple_dim", ple);
                g.put("ple_vocab", c.integer("vocab_size_per_layer_input", c.positiveInt("vocab_size")));
                g.put("ple_embed_multiplier", Math.sqrt(ple));
                g.put("ple_projection_scale", 1.0 / Math.sqrt(c.positiveInt("hidden_size")));
                g.put("ple_input_scale", 1.0 / Math.sqrt(2.0));
            } else {
                g.putNull("ple_dim");
                g.putNull("ple_vocab");
            }
            g.put("num_kv_shared_layers", shared);
            a.set("g3n", g);
        }
        String bidi = c.string("use_bidirectional_attention", null);
        if (bidi != null) a.put("use_bidirectional_attention", bidi);
    }

    // ---- MoE -----------------------------------------------------------------------------------

    private static ObjectNode moeBlock(String family, HfConfig c) {
        ObjectNode m = F.objectNode();
        switch (family) {
            case "qwen3_moe", "qwen3_next" -> {
                Integer n = c.integer("num_experts");
                if (n == null) n = c.integer("num_local_experts");   // transformers 5 spelling for qwen3_moe
                if (n == null || n == 0) return null;
                m.put("num_experts", n);
                m.put("top_k", c.positiveInt("num_experts_per_tok"));
                m.put("moe_intermediate_size", c.positiveInt("moe_intermediate_size"));
                m.put("norm_topk_prob", c.bool("norm_topk_prob", family.equals("qwen3_next")));
                Integer shared = c.integer("shared_expert_intermediate_size");
                if (shared != null && shared > 0) {
                    m.put("shared_expert_intermediate_size", shared);
                    m.put("shared_expert_gate", "sigmoid");
                }
                m.put("router", "softmax_topk");
            }
            case "gpt_oss" -> {
                m.put("num_experts", c.positiveInt("num_local_experts"));
                m.put("top_k", c.positiveInt("num_experts_per_tok"));
                m.put("moe_intermediate_size", c.positiveInt("intermediate_size"));
                m.put("norm_topk_prob", true);
                m.put("router", "topk_softmax");
                m.put("router_bias", true);
                m.put("expert_bias", true);
                m.put("expert_activation", "swiglu_clamp");
                m.put("swiglu_limit", c.dbl("swiglu_limit", 7.0));
                m.put("swiglu_alpha", 1.702);
            }
            case "gemma4" -> {
                if (!c.bool("enable_moe_block", false)) return null;
                m.put("num_experts", c.positiveInt("num_experts"));
                m.put("top_k", c.positiveInt("top_k_experts"));
                m.put("moe_intermediate_size", c.positiveInt("moe_intermediate_size"));
                m.put("norm_topk_prob", true);
                m.put("router", "gemma4");
            }
            default -> { return null; }
        }
        return m;
    }

    private static String ffnKind(String family, HfConfig c, int layer, boolean moe) {
        if (!moe) return "dense";
        return switch (family) {
            case "gemma4" -> "dense+moe";
            case "gpt_oss" -> "moe";
            default -> {
                List<Integer> mlpOnly = c.ints("mlp_only_layers");
                int step = c.integer("decoder_sparse_step", 1);
                boolean sparse = (mlpOnly == null || !mlpOnly.contains(layer)) && step > 0 && (layer + 1) % step == 0;
                yield sparse ? "moe" : "dense";
            }
        };
    }

    /** The arch block's fields as a sorted name list (for docs and tests). */
    static List<String> fieldNames(ObjectNode arch) {
        List<String> out = new ArrayList<>();
        for (Iterator<String> it = arch.fieldNames(); it.hasNext(); ) out.add(it.next());
        return out;
    }

    /** The rope entry for a CMF layer type from an arch block (null when absent). */
    static JsonNode rope(ObjectNode arch, String cmfLayerType) {
        return arch.path("rope").get(cmfLayerType);
    }
}
