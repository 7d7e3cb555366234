package dev.cmf4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.backend.Activation;
import dev.cmf4j.backend.Glu;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Builds a {@link ModelSpec} from a CMF header ({@code arch} block, with {@code provenance.hf_config_extras}
 * as fallback) and the tensor directory. Capabilities follow tensor presence (q/k norms, biases, sinks,
 * output gate by q_proj width, V = K when v_proj is absent, KV sharing when k_proj is absent, MoE by
 * router tensors, Gemma sandwich norms by pre_feedforward_layernorm); the arch block supplies sizes,
 * rope and the few switches tensors cannot show. Family names decide only defaults the file leaves out
 * (documented in docs/ENGINE.md).
 */
public final class SpecBuilder {
    private final ArchView a;
    private final Weights w;
    private final String family;
    private final int hidden;
    private final float eps;
    private final NormStyle style;
    /** The prefix of the layers being built ({@link #p}). */
    private String layerPrefix = "model.layers.";

    private SpecBuilder(JsonNode arch, JsonNode provenance, Weights w) {
        this.a = new ArchView(arch, provenance == null ? null : provenance.get("hf_config_extras"),
                provenance == null ? null : provenance.get("hf_config"));
        this.w = w;
        String name = a.str("arch_name", "model_type");
        this.family = name == null ? "" : name.toLowerCase(Locale.ROOT);
        Integer h = a.integer("hidden_size");
        if (h == null) {
            Tensor e = w.find("model.embed_tokens.weight");
            if (e == null) throw new ModelException("arch has no hidden_size and the file no model.embed_tokens.weight");
            h = (int) e.cols();
        }
        this.hidden = h;
        this.eps = (float) a.num(1e-6, "rms_norm_eps", "layer_norm_eps");
        NormStyle ns = NormStyle.ofArch(a.str("norm_style"));
        if (a.str("norm_style") != null && ns == null)
            throw new ModelException("unknown arch.norm_style '" + a.str("norm_style") + "' (expected qwen or gemma)");
        this.style = ns != null ? ns : defaultNormStyle(family);
    }

    /** Builds the spec of a CMF file from its header JSON and tensors. */
    public static ModelSpec build(JsonNode header, Weights weights) { return build(header, weights, null); }

    /**
     * @param archOverrides fields deep-merged over {@code header.arch} (e.g. {"moe": {"top_k": 2}} for a file
     *                      whose arch block lacks them); may be null
     */
    public static ModelSpec build(JsonNode header, Weights weights, JsonNode archOverrides) {
        if (header == null || header.get("arch") == null || header.get("arch").isNull())
            throw new ModelException("the file's header has no arch block: it is not a runnable model");
        JsonNode arch = ArchView.merge(header.get("arch"), archOverrides);
        JsonNode provenance = header.get("provenance");
        return new SpecBuilder(arch, provenance != null && provenance.isObject() ? provenance : null, weights).build();
    }

    /** The tensors of a file's MTP head all start with this. */
    public static final String MTP_PREFIX = "model.mtp.";

    /**
     * The MTP head of a CMF file ({@code model.mtp.*}, the names of Hugging Face's Qwen3-Next checkpoints), or null when
     * the file has none. Its decoder layer is built as the model's own layers are (same arch block, capabilities from
     * its tensors), as a full-attention layer; the embedding and head are the model's ({@code mtp.share_embed} and
     * {@code mtp.share_lm_head}, true by default, else {@code model.mtp.embed_tokens.weight} and
     * {@code model.mtp.lm_head.weight}).
     *
     * @param target the model's own spec (its vocabulary, positions, embedding scale and head)
     */
    public static MtpSpec buildMtp(JsonNode header, Weights weights, JsonNode archOverrides, ModelSpec target) {
        if (weights.names().stream().noneMatch(n -> n.startsWith(MTP_PREFIX))) return null;
        JsonNode arch = ArchView.merge(header.get("arch"), archOverrides);
        JsonNode provenance = header.get("provenance");
        return new SpecBuilder(arch, provenance != null && provenance.isObject() ? provenance : null, weights).mtp(target);
    }

    private MtpSpec mtp(ModelSpec target) {
        Integer n = a.integer("mtp.num_layers", "num_nextn_predict_layers", "mtp_num_hidden_layers");
        int layers = 0;
        while (w.has(MTP_PREFIX + "layers." + layers + ".input_layernorm.weight")) layers++;
        if (n != null && n != layers)
            throw new ModelException("arch.mtp.num_layers is " + n + " but the file has " + layers + " MTP layers ("
                    + MTP_PREFIX + "layers.N.input_layernorm.weight)");
        if (layers != 1)
            throw new ModelException(layers == 0 ? "the MTP head has no layer (" + MTP_PREFIX + "layers.0.*)"
                    : "MTP heads of " + layers + " layers are not supported (one layer, applied recursively)");
        if (target.headClusters() != null) throw new ModelException("an MTP head over a clustered head is not supported");
        Boolean shareEmbed = a.bool("mtp.share_embed"), shareHead = a.bool("mtp.share_lm_head");
        String embedding = Boolean.FALSE.equals(shareEmbed) ? MTP_PREFIX + "embed_tokens.weight" : target.embedding();
        String head = Boolean.FALSE.equals(shareHead) ? MTP_PREFIX + "lm_head.weight" : target.head();
        if (!w.has(embedding)) throw new ModelException("arch.mtp.share_embed is false but the file has no '" + embedding + "'");
        if (!w.has(head)) throw new ModelException("arch.mtp.share_lm_head is false but the file has no '" + head + "'");
        layerPrefix = MTP_PREFIX + "layers.";
        // the MTP layer attends over every position it has seen: a full-attention layer whatever the model's mix
        LayerSpec layer = layer(0, new Kind[] {Kind.FULL}, 1, null);
        ModelSpec body = new ModelSpec(target.archName() + " mtp", hidden, target.vocab(), target.maxPositions(), embedding,
                target.embedScale(), null, List.of(layer), norm(MTP_PREFIX + "norm.weight"), head, target.finalSoftcap(), null);
        String fc = MTP_PREFIX + "fc.weight";
        if (!w.has(fc)) throw new ModelException("missing tensor '" + fc + "' (the MTP head's input projection)");
        return new MtpSpec(body, fc, norm(MTP_PREFIX + "pre_fc_norm_embedding.weight"), norm(MTP_PREFIX + "pre_fc_norm_hidden.weight"));
    }

    private static NormStyle defaultNormStyle(String family) {
        if (family.startsWith("gemma4")) return NormStyle.PLAIN;
        if (family.startsWith("gemma") || family.startsWith("qwen3_next") || family.startsWith("qwen3_5")
                || family.startsWith("qwen3.5")) return NormStyle.OFFSET;
        return NormStyle.PLAIN;
    }

    private boolean isGemma() { return family.startsWith("gemma"); }

    private boolean isGemma4() { return family.startsWith("gemma4"); }

    private boolean isGptOss() { return family.startsWith("gpt_oss") || family.startsWith("gpt-oss"); }

    private enum Kind { FULL, SLIDING, LINEAR, BOUNDED }

    private static Kind kindOf(String s, int layer) {
        String k = s.toLowerCase(Locale.ROOT).replace("_", "");
        return switch (k) {
            case "fullattention", "full", "attention", "globalattention" -> Kind.FULL;
            case "slidingattention", "sliding", "localattention", "slidingwindowattention" -> Kind.SLIDING;
            case "linearattention", "linear", "gateddeltanet" -> Kind.LINEAR;
            case "boundedattention" -> Kind.BOUNDED;
            default -> throw new ModelException("layer " + layer + " has layer type '" + s
                    + "', which this engine cannot run (supported: FullAttention, SlidingAttention, LinearAttention,"
                    + " BoundedAttention)");
        };
    }

    private ModelSpec build() {
        String embedding = "model.embed_tokens.weight";
        Tensor emb = w.get(embedding);
        int vocab = a.integer("vocab_size") != null ? a.integer("vocab_size") : (int) emb.rows();
        int layers = bounded("num_layers", a.require("num_layers", "num_layers", "num_hidden_layers"), 1 << 12);
        bounded("hidden_size", hidden, 1 << 20);
        bounded("vocab_size", vocab, 1 << 26);
        int maxPos = a.integer("max_position_embeddings") != null ? a.integer("max_position_embeddings") : 1 << 20;
        String head = w.has("lm_head.weight") ? "lm_head.weight" : embedding;
        Tensor headT = w.get(head);
        if (headT.rows() < vocab)
            throw new ModelException("output head '" + head + "' has " + headT.rows() + " rows, fewer than vocab_size " + vocab);
        float embedScale = (float) a.num(isGemma() ? Math.sqrt(hidden) : 1.0, "embed_multiplier");

        Kind[] kinds = layerKinds(layers);
        AnchorCore anchor = anchorCore(kinds);
        int firstShared = firstKvSharedLayer(layers, kinds);
        List<LayerSpec> specs = new ArrayList<>();
        for (int i = 0; i < layers; i++) specs.add(layer(i, kinds, firstShared, anchor));

        ModelSpec.PerLayerEmbedding ple = null;
        if (w.has("model.embed_tokens_per_layer.weight")) {
            int dim = specs.getFirst().perLayerInput() != null
                    ? (int) w.get(specs.getFirst().perLayerInput().gate()).rows()
                    : a.require("per-layer input width", "g3n.ple_dim", "hidden_size_per_layer_input");
            ple = new ModelSpec.PerLayerEmbedding("model.embed_tokens_per_layer.weight", (float) Math.sqrt(dim), dim,
                    "model.per_layer_model_projection.weight", (float) Math.pow(hidden, -0.5),
                    new Norm("model.per_layer_projection_norm.weight", style, eps, dim), (float) Math.pow(2.0, -0.5));
        }
        float softcap = (float) a.num(0.0, "final_logit_softcapping");
        return new ModelSpec(family.isEmpty() ? "unknown" : family, hidden, vocab, maxPos, embedding, embedScale, ple,
                specs, new Norm("model.norm.weight", style, eps, hidden), head, softcap, headClusters(vocab));
    }

    private Kind[] layerKinds(int layers) {
        Kind[] kinds = new Kind[layers];
        JsonNode lt = a.node("layer_types");
        if (lt != null) {
            if (!lt.isArray() || lt.size() != layers)
                throw new ModelException("arch.layer_types has " + (lt.isArray() ? lt.size() : "no") + " entries for " + layers + " layers");
            for (int i = 0; i < layers; i++) kinds[i] = kindOf(lt.get(i).asText(), i);
        } else {
            Integer pattern = a.integer("sliding_window_pattern");
            Integer window = a.integer("sliding_window");
            for (int i = 0; i < layers; i++)
                kinds[i] = window != null && pattern != null && pattern > 1 && (i + 1) % pattern != 0 ? Kind.SLIDING : Kind.FULL;
        }
        return kinds;
    }

    /** Index of the first layer that reads another layer's K/V (Gemma4 KV sharing), or layers when none. */
    private int firstKvSharedLayer(int layers, Kind[] kinds) {
        Integer n = a.integer("g3n.num_kv_shared_layers", "num_kv_shared_layers");
        if (n != null && n > 0) return layers - n;
        for (int i = 0; i < layers; i++)
            if ((kinds[i] == Kind.FULL || kinds[i] == Kind.SLIDING) && w.has(p(i) + "self_attn.q_proj.weight") && !w.has(p(i) + "self_attn.k_proj.weight"))
                return i;
        return layers;
    }

    /** Checks 1 <= value <= max (absurd sizes fail here, not as an allocation failure later). */
    private static int bounded(String what, int value, int max) {
        if (value < 1 || value > max) throw new ModelException("arch " + what + " = " + value + " is outside 1.." + max);
        return value;
    }

    /** Where layer i's tensors are named: the decoder's {@code model.layers.i.}, or the MTP head's {@code model.mtp.layers.i.}. */
    private String p(int i) { return layerPrefix + i + "."; }

    private String opt(String name) { return w.has(name) ? name : null; }

    private LayerSpec layer(int i, Kind[] kinds, int firstShared, AnchorCore anchor) {
        String p = p(i);
        Mixer mixer = switch (kinds[i]) {
            case LINEAR -> deltaNet(i);
            case BOUNDED -> boundedAttention(i, anchor);
            case FULL, SLIDING -> attention(i, kinds, firstShared);
        };
        Ffn ffn = ffn(i);
        Norm preMixer = norm(p + "input_layernorm.weight");
        Norm postMixer = null, preFfn, postFfn = null;
        if (w.has(p + "pre_feedforward_layernorm.weight")) {
            postMixer = optNorm(p + "post_attention_layernorm.weight");
            preFfn = norm(p + "pre_feedforward_layernorm.weight");
            postFfn = optNorm(p + "post_feedforward_layernorm.weight");
        } else {
            preFfn = norm(p + "post_attention_layernorm.weight");
        }
        LayerSpec.PerLayerInput pli = null;
        if (w.has(p + "per_layer_input_gate.weight"))
            pli = new LayerSpec.PerLayerInput(p + "per_layer_input_gate.weight", p + "per_layer_projection.weight",
                    norm(p + "post_per_layer_input_norm.weight"), activation());
        return new LayerSpec(i, mixer, ffn, preMixer, postMixer, preFfn, postFfn, pli, opt(p + "layer_scalar"));
    }

    private Norm norm(String name) {
        if (!w.has(name)) throw new ModelException("missing tensor '" + name + "'");
        return new Norm(name, style, eps, (int) w.get(name).size());
    }

    private Norm optNorm(String name) { return w.has(name) ? norm(name) : null; }

    private Activation activation() {
        String act = a.str("hidden_act", "hidden_activation");
        if (act == null) return isGemma() ? Activation.GELU_TANH : Activation.SILU;
        return switch (act.toLowerCase(java.util.Locale.ROOT)) {
            case "silu", "swish", "swiglu" -> Activation.SILU;
            case "gelu_tanh", "gelu_pytorch_tanh", "gelu_new", "gelu_fast", "geglu" -> Activation.GELU_TANH;
            case "gelu" -> Activation.GELU;
            default -> throw new ModelException("unsupported activation '" + act + "'");
        };
    }

    // ---------------------------------------------------------------- attention

    private Mixer.Attention attention(int i, Kind[] kinds, int firstShared) {
        String s = p(i) + "self_attn.";
        boolean sliding = kinds[i] == Kind.SLIDING;
        int heads = a.require("num_attention_heads", "num_attention_heads");
        JsonNode perLayerHeads = a.node("attention_heads_per_layer");
        if (perLayerHeads != null && perLayerHeads.isArray() && perLayerHeads.size() > i) heads = perLayerHeads.get(i).asInt();
        bounded("layer " + i + " attention heads", heads, 1 << 12);
        int hd = bounded("layer " + i + " head_dim", headDim(i, sliding, heads), 1 << 14);
        JsonNode layerHd = a.archAt("layer_head_dims", i);
        if (layerHd != null && layerHd.asInt() != hd)
            throw new ModelException("layer " + i + ": arch.layer_head_dims says " + layerHd.asInt() + " but the tensors say " + hd);
        String qProj = s + "q_proj.weight";
        long qRows = w.get(qProj).rows();
        boolean gate;
        if (qRows == (long) heads * hd) gate = false;
        else if (qRows == 2L * heads * hd) gate = true;
        else throw new ModelException(qProj + " has " + qRows + " rows; expected " + heads + " heads × " + hd
                + " (or twice that with an output gate)");

        String kProj = opt(s + "k_proj.weight"), vProj = opt(s + "v_proj.weight");
        int kvSource = -1, kvHeads;
        if (kProj != null) {
            long kRows = w.get(kProj).rows();
            if (kRows % hd != 0) throw new ModelException(kProj + " has " + kRows + " rows, not a multiple of head_dim " + hd);
            kvHeads = (int) (kRows / hd);
        } else {
            JsonNode src = a.archAt("layer_kv_sources", i);
            if (src != null && src.asInt() >= 0) kvSource = src.asInt();
            else {
                if (i < firstShared) throw new ModelException("layer " + i + " has no " + s + "k_proj.weight and is not a KV-shared layer");
                for (int j = firstShared - 1; j >= 0 && kvSource < 0; j--)
                    if (kinds[j] == kinds[i] && w.has(p(j) + "self_attn.k_proj.weight")) kvSource = j;
            }
            if (kvSource < 0) throw new ModelException("KV-shared layer " + i + " has no earlier " + kinds[i] + " layer to read from");
            if (kvSource >= i || !w.has(p(kvSource) + "self_attn.k_proj.weight"))
                throw new ModelException("layer " + i + " reads the K/V of layer " + kvSource + ", which computes none before it");
            kvHeads = (int) (w.get(p(kvSource) + "self_attn.k_proj.weight").rows() / hd);
            vProj = null;
        }
        Norm qNorm = optNorm(s + "q_norm.weight"), kNorm = optNorm(s + "k_norm.weight");
        Boolean vn = a.bool("attn_v_norm", "v_norm");
        Norm vNorm = (vn != null ? vn : isGemma4()) && kvSource < 0 ? Norm.unscaled(hd, eps) : null;

        JsonNode layerKv = a.archAt("layer_kv_heads", i);
        if (layerKv != null && layerKv.asInt() != kvHeads)
            throw new ModelException("layer " + i + ": arch.layer_kv_heads says " + layerKv.asInt() + " but the tensors say " + kvHeads);
        float scale;
        JsonNode layerScale = a.archAt("layer_attention_scales", i);
        Double explicit = layerScale != null ? Double.valueOf(layerScale.asDouble()) : a.num("attention_scale", "attn_scale");
        Double qpas = a.num("query_pre_attn_scalar");
        if (explicit != null) scale = explicit.floatValue();
        else if (isGemma4()) scale = 1f;
        else if (qpas != null) scale = (float) Math.pow(qpas, -0.5);
        else scale = (float) Math.pow(hd, -0.5);
        float softcap = (float) a.num(0.0, "attn_logit_softcapping");
        int window = 0;
        if (sliding) {
            Integer sw = a.integer("sliding_window");
            if (sw == null || sw < 1) throw new ModelException("layer " + i + " is a sliding-window layer but arch.sliding_window is missing");
            window = sw;
        }
        Rope rope = rope(sliding, hd);
        if (rope != null && rope.rotaryDim() > hd)   // the rotation pairs x[i] with x[i + rotaryDim/2]: inside the head only
            throw new ModelException("layer " + i + ": rotary dim " + rope.rotaryDim() + " exceeds the head dim " + hd
                    + " (arch.partial_rotary_factor above 1?)");
        return new Mixer.Attention(heads, kvHeads, hd, qProj, kProj, vProj, s + "o_proj.weight",
                opt(s + "q_proj.bias"), kvSource < 0 ? opt(s + "k_proj.bias") : null,
                kvSource < 0 ? opt(s + "v_proj.bias") : null, opt(s + "o_proj.bias"),
                qNorm, kvSource < 0 ? kNorm : null, vNorm, gate, scale, softcap, window, opt(s + "sinks"),
                rope, kvSource);
    }

    private int headDim(int i, boolean sliding, int heads) {
        Tensor qn = w.find(p(i) + "self_attn.q_norm.weight");
        if (qn != null) return (int) qn.size();
        if (!sliding) {
            Integer g = a.integer("global_head_dim");
            if (g != null) return g;
        }
        Integer pl = a.integer("per_layer_config." + i + ".head_dim");
        if (pl != null) return pl;
        Integer hd = a.integer("head_dim");
        return hd != null ? hd : hidden / heads;
    }

    // ---------------------------------------------------------------- rope

    private Rope rope(boolean sliding, int headDim) {
        JsonNode perType = a.archNode("rope");
        if (perType != null && perType.isObject() && perType.get(sliding ? "SlidingAttention" : "FullAttention") != null)
            return ropeOf(perType.get(sliding ? "SlidingAttention" : "FullAttention"), headDim, sliding);
        JsonNode params = a.node("rope_parameters", "rope_scaling");
        boolean nested = params != null && (params.has("full_attention") || params.has("sliding_attention"));
        if (nested) params = params.get(sliding ? "sliding_attention" : "full_attention");
        Double localBase = a.num("rope_local_base_freq");
        double theta;
        if (sliding && localBase != null && !nested) theta = localBase;
        else theta = num(params, "rope_theta", a.num(10000.0, "rope_theta"));
        double partial = sliding
                ? orElse(a.num("local_partial_rotary_factor"), num(params, "partial_rotary_factor", a.num(1.0, "partial_rotary_factor")))
                : orElse(a.num("global_partial_rotary_factor"), num(params, "partial_rotary_factor", a.num(1.0, "partial_rotary_factor")));
        String type = params == null ? null : params.has("rope_type") ? params.get("rope_type").asText()
                : params.has("type") ? params.get("type").asText() : null;
        JsonNode yarn = a.archNode("yarn");
        if (type == null) type = yarn != null ? "yarn" : "default";
        if (sliding && localBase != null && !nested) type = "default";   // Gemma: local layers use plain rope
        if (isGemma4() && !sliding && partial < 1.0 && type.equals("default")) type = "proportional";
        int rot = (int) Math.floor(headDim * partial);
        rot -= rot % 2;
        Rope withFactors = withFreqFactors(theta, rot, type);
        if (withFactors != null) return withFactors;
        JsonNode y = yarn != null ? yarn : params;
        return switch (type.toLowerCase(Locale.ROOT)) {
            case "default", "none", "dynamic" -> Rope.standard(theta, rot);
            case "linear" -> Rope.linear(theta, rot, num(params, "factor", 1.0));
            case "llama3" -> Rope.llama3(theta, rot, num(params, "factor", 8.0), num(params, "low_freq_factor", 1.0),
                    num(params, "high_freq_factor", 4.0), num(params, "original_max_position_embeddings", 8192.0));
            case "yarn" -> Rope.yarn(theta, rot, num(y, "factor", 1.0),
                    num(y, "original_max_position_embeddings", a.num(4096.0, "max_position_embeddings")),
                    orElse(nz(num(y, "beta_fast", 0.0)), 32.0), orElse(nz(num(y, "beta_slow", 0.0)), 1.0),
                    optNum(y, "attention_factor"), optNum(y, "mscale"), optNum(y, "mscale_all_dim"),
                    y != null && y.has("truncate") && !y.get("truncate").isNull() ? y.get("truncate").asBoolean()
                            : params != null && params.has("truncate") ? params.get("truncate").asBoolean() : !isGptOss());
            case "proportional" -> Rope.proportional(theta, headDim, partial, num(params, "factor", 1.0));
            default -> throw new ModelException("rope type '" + type + "' is not supported");
        };
    }

    /** A rope given explicitly as transformers' parameters (our converter's {@code arch.rope[type]}). */
    private Rope ropeOf(JsonNode r, int headDim, boolean sliding) {
        double theta = num(r, "rope_theta", 10000.0);
        double partial = num(r, "partial_rotary_factor", 1.0);
        String type = r.has("rope_type") ? r.get("rope_type").asText() : "default";
        int rot = (int) Math.floor(headDim * partial);
        rot -= rot % 2;
        Rope withFactors = withFreqFactors(theta, rot, type);
        if (withFactors != null) return withFactors;
        return switch (type.toLowerCase(Locale.ROOT)) {
            // dynamic NTK equals the default rope within max_position_embeddings, which the session enforces
            case "default", "dynamic" -> Rope.standard(theta, rot);
            case "linear" -> Rope.linear(theta, rot, num(r, "factor", 1.0));
            case "llama3" -> Rope.llama3(theta, rot, num(r, "factor", 8.0), num(r, "low_freq_factor", 1.0),
                    num(r, "high_freq_factor", 4.0), num(r, "original_max_position_embeddings", 8192.0));
            case "yarn" -> Rope.yarn(theta, rot, num(r, "factor", 1.0), num(r, "original_max_position_embeddings", 4096.0),
                    orElse(nz(num(r, "beta_fast", 0.0)), 32.0), orElse(nz(num(r, "beta_slow", 0.0)), 1.0),
                    optNum(r, "attention_factor"), optNum(r, "mscale"), optNum(r, "mscale_all_dim"),
                    !r.has("truncate") || r.get("truncate").isNull() || r.get("truncate").asBoolean());
            case "proportional" -> Rope.proportional(theta, headDim, partial, num(r, "factor", 1.0));
            default -> throw new ModelException("rope type '" + type + "' (" + (sliding ? "sliding" : "full")
                    + " layers) is not supported");
        };
    }

    /**
     * The rope with the arch's explicit per-frequency divisors ({@code rope_freq_factors}: a GGUF's
     * {@code rope_freqs.weight}, llama3 scaling as llama.cpp's converter writes it), or null when it has none or the
     * rope is YaRN; whichever way the rope itself is described (per layer type or in the HF config).
     */
    private Rope withFreqFactors(double theta, int rot, String type) {
        JsonNode factors = a.archNode("rope_freq_factors");
        if (factors == null || !factors.isArray() || factors.isEmpty() || type.equalsIgnoreCase("yarn")) return null;
        float[] f = new float[factors.size()];
        for (int i = 0; i < f.length; i++) f[i] = (float) factors.get(i).asDouble();
        return Rope.withFreqFactors(theta, rot, f);
    }

    private static double num(JsonNode n, String field, double dflt) {
        if (n == null || !n.has(field) || n.get(field).isNull()) return dflt;
        return n.get(field).asDouble();
    }

    private static Double optNum(JsonNode n, String field) {
        if (n == null || !n.has(field) || n.get(field).isNull()) return null;
        return n.get(field).asDouble();
    }

    private static double orElse(Double d, double dflt) { return d != null ? d : dflt; }

    private static Double nz(double d) { return d == 0 ? null : d; }

    // ---------------------------------------------------------------- bounded anchor (Embryo)

    /** The served window and sink count of {@code arch.anchor_core}, checked as the reference checks them at open. */
    private record AnchorCore(int window, int sinks) {}

    /** Most sink + window slots the reference's bounded kernels take (its format ceiling). */
    static final int MAX_SINK_PLUS_WINDOW = 160;

    /** {@code arch.anchor_core}, which must be present exactly when some layer is BoundedAttention; null when neither. */
    private AnchorCore anchorCore(Kind[] kinds) {
        boolean bounded = java.util.Arrays.asList(kinds).contains(Kind.BOUNDED);
        JsonNode ac = a.archNode("anchor_core");
        if (ac == null) {
            if (bounded) throw new ModelException("some layer is BoundedAttention but the arch block has no anchor_core");
            return null;
        }
        if (!bounded) throw new ModelException("arch.anchor_core is present but no layer is BoundedAttention");
        String kind = ac.path("kind").asText(null);
        if (!"swa_sink_v1".equals(kind))
            throw new ModelException("anchor_core.kind '" + kind + "' is not supported (only swa_sink_v1)");
        JsonNode wn = ac.get("window"), sn = ac.get("sink");
        if (wn == null || !wn.canConvertToInt() || sn == null || !sn.canConvertToInt())
            throw new ModelException("anchor_core needs integer window and sink fields, got " + ac);
        int window = wn.asInt(), sinks = sn.asInt();
        if (window < 1) throw new ModelException("anchor_core.window = " + window + " must be at least 1");
        if (sinks < 0 || sinks + window > MAX_SINK_PLUS_WINDOW)
            throw new ModelException("anchor_core sink " + sinks + " + window " + window + " must lie in 1.." + MAX_SINK_PLUS_WINDOW);
        if (!"relative_in_window".equals(ac.path("rope").asText(null)))
            throw new ModelException("anchor_core.rope '" + ac.path("rope").asText(null) + "' is not supported (only relative_in_window)");
        if (!"nope".equals(ac.path("sink_scores").asText(null)))
            throw new ModelException("anchor_core.sink_scores '" + ac.path("sink_scores").asText(null) + "' is not supported (only nope)");
        JsonNode tw = ac.get("train_windows");
        if (tw != null && !tw.isNull())
            for (JsonNode t : tw)
                if (!t.canConvertToInt() || t.asInt() < 1 || t.asInt() > window)
                    throw new ModelException("anchor_core.train_windows entry " + t + " is outside 1.." + window);
        if (ac.get("far") != null && !ac.get("far").isNull())
            throw new ModelException("anchor_core.far is reserved and not executable; it must be null");
        return new AnchorCore(window, sinks);
    }

    private Mixer.BoundedAttention boundedAttention(int i, AnchorCore anchor) {
        String s = p(i) + "self_attn.";
        int heads = bounded("num_attention_heads", a.require("num_attention_heads", "num_attention_heads"), 1 << 12);
        int hd = bounded("head_dim", a.integer("head_dim") != null ? a.integer("head_dim") : hidden / heads, 1 << 14);
        int kvHeads = bounded("num_kv_heads", a.integer("num_kv_heads", "num_key_value_heads") != null
                ? a.integer("num_kv_heads", "num_key_value_heads") : heads, heads);
        if (heads % kvHeads != 0)
            throw new ModelException("layer " + i + ": " + heads + " query heads not a multiple of " + kvHeads + " kv heads");
        String sinkK = s + "sink_k.weight", sinkV = s + "sink_v.weight";
        for (String t : new String[] {s + "q_proj.weight", s + "k_proj.weight", s + "v_proj.weight", s + "o_proj.weight", sinkK, sinkV})
            if (!w.has(t)) throw new ModelException("bounded layer " + i + " has no tensor '" + t + "'");
        for (String t : new String[] {sinkK, sinkV}) {
            long[] sh = w.get(t).shape();
            if (sh.length != 3 || sh[0] != kvHeads || sh[1] != anchor.sinks() || sh[2] != hd)
                throw new ModelException("tensor '" + t + "' has shape " + java.util.Arrays.toString(sh) + ", expected ["
                        + kvHeads + ", " + anchor.sinks() + ", " + hd + "]");
        }
        int rot = (int) Math.floor(hd * a.num(1.0, "partial_rotary_factor"));
        rot -= rot % 2;
        if (rot < 0 || rot > hd)
            throw new ModelException("layer " + i + ": rotary dim " + rot + " outside 0.." + hd + " (arch.partial_rotary_factor?)");
        return new Mixer.BoundedAttention(heads, kvHeads, hd, s + "q_proj.weight", s + "k_proj.weight", s + "v_proj.weight",
                s + "o_proj.weight", sinkK, sinkV, anchor.window(), anchor.sinks(), rot, a.num(10000.0, "rope_theta"),
                (float) (1.0 / Math.sqrt(hd)));
    }

    /** {@code arch.head_clusters} with its cluster matrix, or null for a flat head. */
    private ModelSpec.HeadClusters headClusters(int vocab) {
        Integer c = a.integer("head_clusters");
        if (c == null || c == 0) return null;
        if (c < 0 || vocab % c != 0)
            throw new ModelException("arch.head_clusters = " + c + " does not divide vocab_size " + vocab);
        String name = "lm_head.clusters.weight";
        if (!w.has(name)) throw new ModelException("arch.head_clusters = " + c + " but the file has no tensor '" + name + "'");
        long[] sh = w.get(name).shape();
        if (sh.length != 2 || sh[0] != c || sh[1] != hidden)
            throw new ModelException("tensor '" + name + "' has shape " + java.util.Arrays.toString(sh) + ", expected [" + c + ", " + hidden + "]");
        return new ModelSpec.HeadClusters(name, c);
    }

    // ---------------------------------------------------------------- gated delta net

    private Mixer.GatedDeltaNet deltaNet(int i) {
        String s = p(i) + "linear_attn.";
        int nk = a.require("linear_num_key_heads", "linear_num_key_heads");
        int nv = a.require("linear_num_value_heads", "linear_num_value_heads", "linear_core.num_heads");
        int dk = a.require("linear_key_head_dim", "linear_key_head_dim");
        int dv = a.require("linear_value_head_dim", "linear_value_head_dim", "linear_core.value_head_dim");
        int kernel = a.integer("linear_conv_kernel_dim") != null ? a.integer("linear_conv_kernel_dim") : 4;
        bounded("linear_num_key_heads", nk, 1 << 12);
        bounded("linear_num_value_heads", nv, 1 << 12);
        bounded("linear_key_head_dim", dk, 1 << 14);
        bounded("linear_value_head_dim", dv, 1 << 14);
        bounded("linear_conv_kernel_dim", kernel, 1 << 10);
        if (kernel < 2) throw new ModelException("linear_conv_kernel_dim must be at least 2, got " + kernel);
        String kind = a.str("linear_core.kind");
        if (kind != null && !kind.equals("gated_delta_net"))
            throw new ModelException("layer " + i + ": linear core '" + kind + "' is not supported (only gated_delta_net)");
        Mixer.GdnInput input;
        if (w.has(s + "in_proj_qkvz.weight")) input = new Mixer.GdnInput.Fused(s + "in_proj_qkvz.weight", s + "in_proj_ba.weight");
        else input = new Mixer.GdnInput.Split(s + "in_proj_qkv.weight", s + "in_proj_z.weight", s + "in_proj_b.weight", s + "in_proj_a.weight");
        return new Mixer.GatedDeltaNet(nk, nv, dk, dv, kernel, input, s + "conv1d.weight", opt(s + "conv1d.bias"),
                s + "A_log", s + "dt_bias", new Norm(s + "norm.weight", NormStyle.PLAIN, eps, dv), s + "out_proj.weight");
    }

    // ---------------------------------------------------------------- feed-forward

    private Ffn ffn(int i) {
        String p = p(i), m = p + "mlp.";
        Ffn.GatedMlp dense = w.has(m + "gate_proj.weight")
                ? new Ffn.GatedMlp(m + "gate_proj.weight", m + "up_proj.weight", m + "down_proj.weight", new Glu.Gated(activation()),
                opt(m + "gate_proj.bias"), opt(m + "up_proj.bias"), opt(m + "down_proj.bias"))
                : null;
        Ffn.Moe moe = null;
        Boolean resonance = a.bool("moe.router_resonance");
        if (Boolean.TRUE.equals(resonance) && w.has(m + "experts.0.gate_proj.weight") && !w.has(m + "gate.weight")) {
            Ffn.Router.Resonance r = resonance(i, m);
            moe = moe(i, r, m + "experts.", experts(r, m));
            if (moe.topK() != 1) throw new ModelException("layer " + i + ": resonance routing picks one expert, arch.moe.top_k is " + moe.topK());
        } else if (w.has(p + "router.proj.weight")) {
            moe = moe(i, new Ffn.Router.ScaledSoftmaxTopK(p + "router.proj.weight", p + "router.scale",
                    p + "router.per_expert_scale", eps), expertPrefix(p), (int) w.get(p + "router.proj.weight").rows());
        } else if (w.has(m + "router.weight")) {
            moe = moe(i, new Ffn.Router.TopKSoftmax(m + "router.weight", opt(m + "router.bias")), expertPrefix(p),
                    (int) w.get(m + "router.weight").rows());
        } else if (w.has(m + "gate.weight")) {
            Boolean norm = a.bool("moe.norm_topk_prob", "norm_topk_prob");
            moe = moe(i, new Ffn.Router.SoftmaxTopK(m + "gate.weight", opt(m + "gate.bias"),
                    norm != null ? norm : family.startsWith("qwen3_next")), expertPrefix(p), (int) w.get(m + "gate.weight").rows());
        }
        if (moe != null && dense != null)
            return new Ffn.DenseAndMoe(dense, optNorm(p + "post_feedforward_layernorm_1.weight"), moe,
                    optNorm(p + "pre_feedforward_layernorm_2.weight"), optNorm(p + "post_feedforward_layernorm_2.weight"));
        if (moe != null) return moe;
        if (dense != null) return dense;
        throw new ModelException("layer " + i + " has neither an MLP (" + m + "gate_proj.weight) nor an MoE router");
    }

    /** The resonance descriptors of layer {@code i}: per expert ({@code experts.N.desc.*}) or stacked ({@code desc.*}). */
    private Ffn.Router.Resonance resonance(int i, String m) {
        if (w.has(m + "desc.mu")) {
            String u = opt(m + "desc.u");
            long[] mu = w.get(m + "desc.mu").shape();
            if (mu.length != 2 || mu[1] != hidden)
                throw new ModelException("tensor '" + m + "desc.mu' has shape " + java.util.Arrays.toString(mu) + ", expected [experts, " + hidden + "]");
            if (!w.has(m + "desc.bias")) throw new ModelException("resonance layer " + i + " has no tensor '" + m + "desc.bias'");
            int rank = 0;
            if (u != null) {
                long[] us = w.get(u).shape();
                if (us.length != 3 || us[0] != mu[0] || us[2] != hidden)
                    throw new ModelException("tensor '" + u + "' has shape " + java.util.Arrays.toString(us) + ", expected [" + mu[0] + ", k, " + hidden + "]");
                rank = (int) us[1];
            }
            return new Ffn.Router.Resonance(m + "desc.mu", u, m + "desc.bias", true, rank);
        }
        String e0 = m + "experts.0.desc.";
        if (!w.has(e0 + "mu"))
            throw new ModelException("resonance layer " + i + " has neither '" + m + "desc.mu' nor '" + e0 + "mu'");
        int rank = 0;
        if (w.has(e0 + "u")) {
            long[] us = w.get(e0 + "u").shape();
            if (us.length != 2 || us[1] != hidden)
                throw new ModelException("tensor '" + e0 + "u' has shape " + java.util.Arrays.toString(us) + ", expected [k, " + hidden + "]");
            rank = (int) us[0];
        }
        return new Ffn.Router.Resonance(m + "experts.%d.desc.mu", rank == 0 ? null : m + "experts.%d.desc.u",
                m + "experts.%d.desc.bias", false, rank);
    }

    /** Experts of a resonance layer: the stacked descriptor's rows, else the consecutive {@code experts.N} present. */
    private int experts(Ffn.Router.Resonance r, String m) {
        if (r.stacked()) return (int) w.get(r.mu()).dim(0);
        int n = 0;
        while (w.has(m + "experts." + n + ".gate_proj.weight")) n++;
        return n;
    }

    private String expertPrefix(String p) {
        for (String c : new String[] {p + "mlp.experts.", p + "experts.", p + "moe.experts."})
            for (String probe : new String[] {"0.gate_proj.weight", "0.gate_up_proj.weight", "gate_up_proj", "gate_up_proj.weight", "gate_proj", "gate_proj.weight"})
                if (w.has(c + probe)) return c;
        throw new ModelException("MoE layer " + p + " has a router but no expert tensors");
    }

    private Ffn.Moe moe(int i, Ffn.Router router, String ep, int routerRows) {
        Integer e = a.integer("moe.num_experts", "num_experts", "num_local_experts");
        int experts = e != null ? e : routerRows;
        if (experts != routerRows)
            throw new ModelException("layer " + i + ": router has " + routerRows + " rows but arch says " + experts + " experts");
        Integer k = a.integer("moe.top_k", "num_experts_per_tok", "top_k_experts", "moe.num_experts_per_tok");
        if (k == null)
            throw new ModelException("layer " + i + " is an MoE layer but the arch block gives no top-k (moe.top_k); "
                    + "supply it as an arch override (cmf: --arch-override '{\"moe\": {\"top_k\": K}}')");
        Ffn.Experts ex = experts(i, ep, experts);
        Glu glu;
        Double limit = a.num("moe.swiglu_limit", "swiglu_limit");
        String expertAct = a.str("moe.expert_activation");
        if (isGptOss() || limit != null || "swiglu_clamp".equals(expertAct))
            glu = new Glu.ClampedSwiglu((float) a.num(1.702, "swiglu_alpha", "moe.swiglu_alpha"), limit != null ? limit.floatValue() : 7f);
        else glu = new Glu.Gated(activation());
        String m = p(i) + "mlp.";
        Ffn.GatedMlp shared = w.has(m + "shared_expert.gate_proj.weight")
                ? new Ffn.GatedMlp(m + "shared_expert.gate_proj.weight", m + "shared_expert.up_proj.weight",
                m + "shared_expert.down_proj.weight", new Glu.Gated(activation()))
                : null;
        return new Ffn.Moe(router, ex, k, glu, shared, shared == null ? null : opt(m + "shared_expert_gate.weight"));
    }

    private Ffn.ExpertMatrix perExpert(String ep, String suffix) {
        return w.has(ep + "0." + suffix) ? new Ffn.ExpertMatrix(ep + "%d." + suffix, false, false) : null;
    }

    private static Ffn.ExpertMatrix fusedBias(String name) {
        return name == null ? null : new Ffn.ExpertMatrix(name, true, false);
    }

    private String first(String... names) {
        for (String n : names) if (w.has(n)) return n;
        return null;
    }

    private Ffn.Experts experts(int i, String ep, int experts) {
        // one tensor per expert
        if (w.has(ep + "0.gate_proj.weight")) {
            Tensor g = w.get(ep + "0.gate_proj.weight");
            if (g.cols() != hidden) throw new ModelException(ep + "0.gate_proj.weight is not [I, " + hidden + "]");
            return new Ffn.Experts(experts, (int) g.rows(), new Ffn.ExpertMatrix(ep + "%d.gate_proj.weight", false, false),
                    new Ffn.ExpertMatrix(ep + "%d.up_proj.weight", false, false), null, false,
                    new Ffn.ExpertMatrix(ep + "%d.down_proj.weight", false, false),
                    perExpert(ep, "gate_proj.bias"), perExpert(ep, "up_proj.bias"), null, perExpert(ep, "down_proj.bias"));
        }
        Boolean inter = a.bool("moe.gate_up_interleaved");
        String layout = a.str("moe.expert_layout");
        boolean interleaved = inter != null ? inter : isGptOss();
        if (w.has(ep + "0.gate_up_proj.weight")) {
            Tensor gu = w.get(ep + "0.gate_up_proj.weight");
            return new Ffn.Experts(experts, (int) gu.rows() / 2, null, null,
                    new Ffn.ExpertMatrix(ep + "%d.gate_up_proj.weight", false, false), interleaved,
                    new Ffn.ExpertMatrix(ep + "%d.down_proj.weight", false, false), null, null,
                    perExpert(ep, "gate_up_proj.bias"), perExpert(ep, "down_proj.bias"));
        }
        // fused 3-D tensors [experts, ·, ·]
        String gateUp = first(ep + "gate_up_proj", ep + "gate_up_proj.weight");
        String down = first(ep + "down_proj", ep + "down_proj.weight");
        if (gateUp == null || down == null) throw new ModelException("layer " + i + ": expert tensors under " + ep + " not recognised");
        long[] gs = w.get(gateUp).shape(), ds = w.get(down).shape();
        if (gs.length != 3 || ds.length != 3 || gs[0] != experts || ds[0] != experts)
            throw new ModelException("layer " + i + ": fused expert tensors must be [" + experts + ", ·, ·]");
        boolean inputMajor;
        if (layout != null) inputMajor = layout.equalsIgnoreCase("input_major");
        else if (gs[2] == hidden && gs[1] != hidden) inputMajor = false;
        else if (gs[1] == hidden && gs[2] != hidden) inputMajor = true;
        else inputMajor = isGptOss();
        int twoI = (int) (inputMajor ? gs[2] : gs[1]);
        int interSize = twoI / 2;
        boolean downInputMajor = ds[1] == interSize && ds[2] == hidden && !(ds[1] == hidden && ds[2] == interSize && !inputMajor);
        return new Ffn.Experts(experts, interSize, null, null, new Ffn.ExpertMatrix(gateUp, true, inputMajor), interleaved,
                new Ffn.ExpertMatrix(down, true, downInputMajor), null, null,
                fusedBias(first(ep + "gate_up_proj_bias", ep + "gate_up_proj.bias")),
                fusedBias(first(ep + "down_proj_bias", ep + "down_proj.bias")));
    }
}
