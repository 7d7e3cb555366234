package dev.cmf4j.convert.gguf;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.convert.ConvertException;
import dev.cmf4j.convert.HfArch;
import dev.cmf4j.convert.HfConfig;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.SourceTensor;
import dev.cmf4j.convert.TensorData;
import dev.cmf4j.convert.TensorOrder;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A GGUF file opened for conversion (architectures llama, qwen2, qwen3, qwen3moe, gemma3, gemma4, gpt-oss). The metadata is
 * turned into an HF-style config and mapped by {@link HfArch}, so the arch block has the same fields
 * as for a Hugging Face folder; tensors get their HF names and {@code [out, in]} shapes; llama's Q/K
 * rows, which llama.cpp's converter permuted into GGML's interleaved-RoPE order, are put back in HF
 * order; the embedded tokenizer becomes a tokenizer.json ({@link GgufTokenizer}).
 *
 * <p>Differences from an HF conversion, recorded in provenance: gemma3 GGUFs store norm weights with
 * the +1 of Gemma's (1+w) RMSNorm already added, so the arch says {@code norm_style: "qwen"} and the
 * weights are kept as stored (subtracting 1 again would round); {@code rope_freqs.weight} (llama3 rope
 * scaling) becomes {@code arch.rope_freq_factors}; quantized GGUF blocks are dequantized with ggml's
 * formulas and re-encoded by the chosen CMF policy.
 */
public final class GgufSource implements ModelSource {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    private static final Pattern BLK = Pattern.compile("^blk\\.(\\d+)\\.(.+)$");
    private static final List<String> SUPPORTED = List.of("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "gemma4", "gpt-oss");

    private final GgufReader r;
    private final String arch;
    private final ObjectNode archBlock;
    private final List<SourceTensor> tensors;
    private final byte[] tokenizerJson;
    private final ObjectNode tokenizerConfig;
    private final ObjectNode provenance = F.objectNode();

    GgufSource(GgufReader r) {
        this.r = r;
        this.arch = r.string("general.architecture");
        if (arch == null) throw new ConvertException(r.file() + ": general.architecture is missing");
        if (!SUPPORTED.contains(arch))
            throw new ConvertException(r.file() + ": GGUF architecture \"" + arch + "\" is not supported (" + String.join(", ", SUPPORTED) + ")");
        provenance.put("source_format", "gguf");
        provenance.put("gguf_version", r.version());
        ObjectNode meta = provenance.putObject("gguf_metadata");
        for (Map.Entry<String, Object> e : r.metadata().entrySet()) {
            Object v = e.getValue();
            if (v instanceof Long l) meta.put(e.getKey(), l);
            else if (v instanceof Double d) meta.put(e.getKey(), d);
            else if (v instanceof Boolean b) meta.put(e.getKey(), b);
            else if (v instanceof String s && !e.getKey().equals("tokenizer.chat_template")) meta.put(e.getKey(), s);
        }
        ObjectNode config = hfConfig();
        provenance.set("derived_hf_config", config);
        this.archBlock = HfArch.fromConfig(HfConfig.of(config, r.file() + " (metadata)"));
        if (arch.equals("gemma3")) {
            archBlock.put("norm_style", "qwen");
            provenance.put("norm_note", "gemma3 GGUF norm weights already include the +1 of (1+w); stored as is with norm_style qwen");
        }
        archBlock.put("gguf_architecture", arch);
        this.tensors = plan();
        this.tokenizerJson = GgufTokenizer.toJson(r, provenance);
        this.tokenizerConfig = chatBundle();
    }

    public static GgufSource open(Path file) {
        GgufReader r = GgufReader.open(file);
        try {
            return new GgufSource(r);
        } catch (RuntimeException e) {
            r.close();
            throw e;
        }
    }

    @Override public ObjectNode arch() { return archBlock; }

    @Override public List<SourceTensor> tensors() { return tensors; }

    @Override public byte[] tokenizerJson() { return tokenizerJson; }

    @Override public ObjectNode tokenizerConfig() { return tokenizerConfig; }

    @Override public ObjectNode provenance() { return provenance; }

    @Override public String describe() { return r.file().toString(); }

    public GgufReader reader() { return r; }

    @Override public void close() { r.close(); }

    // ---- metadata -> config ----------------------------------------------------------------------

    private long req(String key) {
        Long v = r.integer(arch + "." + key);
        if (v == null) throw new ConvertException(r.file() + ": metadata " + arch + "." + key + " is missing");
        if (v <= 0) throw new ConvertException(r.file() + ": metadata " + arch + "." + key + " must be positive, found " + v);
        return v;
    }

    private ObjectNode hfConfig() {
        if (arch.equals("gemma4")) return gemma4Config();
        ObjectNode c = F.objectNode();
        c.put("model_type", switch (arch) {
            case "gemma3" -> "gemma3_text";
            case "qwen3moe" -> "qwen3_moe";
            case "gpt-oss" -> "gpt_oss";
            default -> arch;
        });
        c.putArray("architectures").add("gguf:" + arch);
        long hidden = req("embedding_length"), layers = req("block_count"), heads = req("attention.head_count");
        c.put("hidden_size", hidden);
        c.put("num_hidden_layers", layers);
        c.put("num_attention_heads", heads);
        Long kv = r.integer(arch + ".attention.head_count_kv");
        c.put("num_key_value_heads", kv == null ? heads : kv);
        Long hd = r.integer(arch + ".attention.key_length");
        long headDim = hd != null ? hd : hidden / heads;
        c.put("head_dim", headDim);
        c.put("intermediate_size", req("feed_forward_length"));
        Long vocab = r.integer(arch + ".vocab_size");
        if (vocab == null && r.array("tokenizer.ggml.tokens") != null) vocab = (long) r.array("tokenizer.ggml.tokens").size();
        if (vocab == null && r.has("token_embd.weight")) vocab = r.tensor("token_embd.weight").ne()[1];
        if (vocab == null) throw new ConvertException(r.file() + ": cannot tell the vocabulary size");
        c.put("vocab_size", vocab);
        Double eps = r.number(arch + ".attention.layer_norm_rms_epsilon");
        // GGUF stores f32; the shortest decimal of that float is what the HF config said (1e-5, not 9.99999974e-6)
        c.put("rms_norm_eps", eps == null ? 1e-6 : Double.parseDouble(Float.toString((float) (double) eps)));
        Long ctx = r.integer(arch + ".context_length");
        if (ctx != null) c.put("max_position_embeddings", ctx);
        c.put("tie_word_embeddings", !r.has("output.weight"));
        c.put("hidden_act", arch.equals("gemma3") ? "gelu_pytorch_tanh" : "silu");
        c.put("attention_bias", r.has("blk.0.attn_q.bias"));
        Double theta = r.number(arch + ".rope.freq_base");
        double ropeTheta = theta == null ? 10000.0 : theta;
        Long rotDim = r.integer(arch + ".rope.dimension_count");
        double partial = rotDim == null ? 1.0 : (double) rotDim / headDim;
        ObjectNode rope = F.objectNode();
        String st = r.string(arch + ".rope.scaling.type");
        Double factor = r.number(arch + ".rope.scaling.factor");
        if (st != null && !st.equals("none") && factor != null && factor != 1.0) {
            switch (st) {
                case "linear" -> rope.put("rope_type", "linear").put("factor", factor);
                case "yarn" -> {
                    rope.put("rope_type", "yarn").put("factor", factor);
                    Long orig = r.integer(arch + ".rope.scaling.original_context_length");
                    if (orig != null) rope.put("original_max_position_embeddings", Math.toIntExact(orig));
                    Double bf = r.number(arch + ".rope.scaling.yarn_beta_fast"), bs = r.number(arch + ".rope.scaling.yarn_beta_slow");
                    if (bf != null) rope.put("beta_fast", bf);
                    if (bs != null) rope.put("beta_slow", bs);
                }
                default -> throw new ConvertException(r.file() + ": rope scaling type \"" + st + "\" is not supported");
            }
            // gpt-oss is trained with transformers' untruncated YaRN ramp; GGUF has no key for it
            if (arch.equals("gpt-oss") && st.equals("yarn")) rope.put("truncate", false);
        } else {
            rope.put("rope_type", "default");
        }
        rope.put("rope_theta", ropeTheta);
        if (partial != 1.0) rope.put("partial_rotary_factor", partial);
        if (arch.equals("gemma3")) {
            Long window = r.integer("gemma3.attention.sliding_window");
            c.put("sliding_window", window == null ? 4096 : window);
            c.put("sliding_window_pattern", 6);           // llama.cpp's fixed Gemma 3 pattern
            c.put("query_pre_attn_scalar", headDim);       // not stored in GGUF; llama.cpp assumes head_dim
            ObjectNode rp = c.putObject("rope_parameters");
            rp.set("full_attention", rope);
            rp.putObject("sliding_attention").put("rope_type", "default").put("rope_theta", 10000.0);
            provenance.put("gemma3_note", "query_pre_attn_scalar, the sliding-window pattern (6) and the local rope theta (10000) "
                    + "are not in GGUF metadata; llama.cpp's values were used");
        } else {
            c.set("rope_parameters", rope);
        }
        if (arch.equals("qwen3moe") || arch.equals("gpt-oss")) moeConfig(c, layers);
        return c;
    }

    /**
     * The MoE part of the config. GGUF does not store what llama.cpp hard-codes: qwen3moe always renormalizes the
     * top-k weights; gpt-oss's clamped SwiGLU (alpha 1.702, limit 7) and its sliding layers every other layer from
     * layer 0 (unless {@code sliding_window_pattern} says otherwise).
     */
    private void moeConfig(ObjectNode c, long layers) {
        long experts = req("expert_count");
        c.put("num_local_experts", experts);
        c.put("num_experts_per_tok", req("expert_used_count"));
        long expertFf = req("expert_feed_forward_length");
        if (arch.equals("qwen3moe")) {
            c.put("moe_intermediate_size", expertFf);
            c.put("norm_topk_prob", true);
            c.put("decoder_sparse_step", 1);
            c.putArray("mlp_only_layers");
            provenance.put("moe_note", "norm_topk_prob is not in GGUF metadata; llama.cpp's qwen3moe always normalizes (true)");
            return;
        }
        c.put("intermediate_size", expertFf);
        c.put("swiglu_limit", 7.0);
        Long window = r.integer(arch + ".attention.sliding_window");
        if (window == null) throw new ConvertException(r.file() + ": metadata " + arch + ".attention.sliding_window is missing");
        c.put("sliding_window", window);
        ArrayNode types = c.putArray("layer_types");
        Object pat = r.metadata().get(arch + ".attention.sliding_window_pattern");
        List<?> given = pat instanceof List<?> l ? l : null;
        Long period = pat instanceof Long p ? p : null;
        for (int i = 0; i < layers; i++) {
            boolean sliding;
            if (given != null) {
                if (given.size() != layers) throw new ConvertException(r.file() + ": " + arch + ".attention.sliding_window_pattern has " + given.size() + " entries for " + layers + " layers");
                sliding = Boolean.TRUE.equals(given.get(i));
            } else {
                long p = period == null ? 2 : period;       // llama.cpp: layer i slides when i % p < p - 1
                sliding = p == 0 || i % p < p - 1;
            }
            types.add(sliding ? "sliding_attention" : "full_attention");
        }
        provenance.put("moe_note", "swiglu_limit (7), swiglu_alpha (1.702) and the sliding-layer pattern are not in GGUF metadata; llama.cpp's values were used");
    }

    /**
     * Gemma 4 as llama.cpp's converter writes it: per-layer arrays where layers differ (feed_forward_length for the
     * double-wide KV-shared layers, head_count_kv when global layers have their own), key_length for the global layers
     * and key_length_swa for the sliding ones, the layer pattern as a bool array, and the global layers' proportional
     * partial rope as {@code rope_freqs.weight}: 1 for each rotated frequency, 1e30 (no rotation) for the rest.
     */
    private ObjectNode gemma4Config() {
        ObjectNode c = F.objectNode();
        c.put("model_type", "gemma4_text");
        c.putArray("architectures").add("gguf:gemma4");
        long hidden = req("embedding_length"), layers = req("block_count"), heads = req("attention.head_count");
        c.put("hidden_size", hidden);
        c.put("num_hidden_layers", layers);
        c.put("num_attention_heads", heads);
        long fullDim = req("attention.key_length");
        Long swaDim = r.integer(arch + ".attention.key_length_swa");
        long headDim = swaDim == null ? fullDim : swaDim;
        c.put("head_dim", headDim);
        Object types = r.metadata().get(arch + ".attention.sliding_window_pattern");
        if (!(types instanceof List<?> tl) || tl.size() != layers)
            throw new ConvertException(r.file() + ": metadata gemma4.attention.sliding_window_pattern should list " + layers + " layers");
        ArrayNode lt = c.putArray("layer_types");
        for (Object o : tl) lt.add(Boolean.TRUE.equals(o) ? "sliding_attention" : "full_attention");
        long[] kv = perLayer("attention.head_count_kv", layers);
        long[] ff = perLayer("feed_forward_length", layers);
        long swaKv = -1, fullKv = -1;
        for (int i = 0; i < layers; i++) if (Boolean.TRUE.equals(tl.get(i))) swaKv = kv[i]; else fullKv = kv[i];
        c.put("num_key_value_heads", swaKv > 0 ? swaKv : fullKv);
        ObjectNode plc = c.putObject("per_layer_config");
        for (int i = 0; i < layers; i++) {
            if (Boolean.TRUE.equals(tl.get(i))) continue;
            ObjectNode o = plc.putObject(Integer.toString(i));
            if (fullDim != headDim) o.put("head_dim", fullDim);
            if (swaKv > 0 && kv[i] != swaKv) o.put("num_key_value_heads", kv[i]);
            if (o.isEmpty()) plc.remove(Integer.toString(i));
        }
        c.put("intermediate_size", ff[0]);
        boolean doubleWide = false;
        for (long f : ff) if (f == 2 * ff[0]) doubleWide = true; else if (f != ff[0])
            throw new ConvertException(r.file() + ": gemma4.feed_forward_length " + java.util.Arrays.toString(ff) + " is neither one width nor double-wide layers");
        c.put("use_double_wide_mlp", doubleWide);
        Long shared = r.integer(arch + ".attention.shared_kv_layers");
        c.put("num_kv_shared_layers", shared == null ? 0 : shared);
        Long ple = r.integer(arch + ".embedding_length_per_layer_input");
        c.put("hidden_size_per_layer_input", ple == null ? 0 : ple);
        if (r.has("per_layer_token_embd.weight")) c.put("vocab_size_per_layer_input", r.tensor("per_layer_token_embd.weight").shape()[0]);
        c.put("vocab_size", r.tensor("token_embd.weight").shape()[0]);
        Double eps = r.number(arch + ".attention.layer_norm_rms_epsilon");
        c.put("rms_norm_eps", eps == null ? 1e-6 : Double.parseDouble(Float.toString((float) (double) eps)));
        Long ctx = r.integer(arch + ".context_length");
        if (ctx != null) c.put("max_position_embeddings", ctx);
        Long window = r.integer(arch + ".attention.sliding_window");
        if (window != null) c.put("sliding_window", window);
        Double cap = r.number(arch + ".final_logit_softcapping");
        if (cap != null) c.put("final_logit_softcapping", cap);
        c.put("tie_word_embeddings", !r.has("output.weight"));
        c.put("hidden_activation", "gelu_pytorch_tanh");
        // attention_k_eq_v: full layers that own K but no V (the 26B/31B style)
        boolean kEqV = false;
        for (int i = 0; i < layers; i++)
            if (!Boolean.TRUE.equals(tl.get(i)) && r.has("blk." + i + ".attn_k.weight") && !r.has("blk." + i + ".attn_v.weight")) kEqV = true;
        c.put("attention_k_eq_v", kEqV);
        ObjectNode rp = c.putObject("rope_parameters");
        Double theta = r.number(arch + ".rope.freq_base"), thetaSwa = r.number(arch + ".rope.freq_base_swa");
        ObjectNode full = rp.putObject("full_attention");
        if (r.has("rope_freqs.weight")) {
            float[] f = r.readFloats(r.tensor("rope_freqs.weight"));
            int rotated = 0;
            for (float v : f) if (v == 1f) rotated++; else if (!(v >= 1e29f)) throw new ConvertException(r.file()
                    + ": rope_freqs.weight holds " + v + "; gemma4's are 1 (rotated) or 1e30 (not rotated)");
            full.put("rope_type", "proportional").put("partial_rotary_factor", 2.0 * rotated / fullDim);
        } else {
            full.put("rope_type", "default");
        }
        full.put("rope_theta", theta == null ? 1e6 : theta);
        ObjectNode swa = rp.putObject("sliding_attention");
        swa.put("rope_type", "default").put("rope_theta", thetaSwa == null ? 1e4 : thetaSwa);
        Long rotSwa = r.integer(arch + ".rope.dimension_count_swa");
        if (rotSwa != null && rotSwa != headDim) swa.put("partial_rotary_factor", (double) rotSwa / headDim);
        if (r.has("blk.0.ffn_gate_inp.weight")) {          // the MoE block beside the dense MLP (26B-A4B style)
            c.put("enable_moe_block", true);
            c.put("num_experts", req("expert_count"));
            c.put("top_k_experts", req("expert_used_count"));
            c.put("moe_intermediate_size", req("expert_feed_forward_length"));
        }
        provenance.put("gemma4_note", "the proportional rope's partial factor comes from rope_freqs.weight (1 = rotated, 1e30 = not)");
        return c;
    }

    /** A per-layer metadata value given either once or as an array of {@code layers}. */
    private long[] perLayer(String key, long layers) {
        Object v = r.metadata().get(arch + "." + key);
        long[] out = new long[(int) layers];
        if (v instanceof Long l) java.util.Arrays.fill(out, l);
        else if (v instanceof List<?> list && list.size() == layers) for (int i = 0; i < layers; i++) out[i] = ((Number) list.get(i)).longValue();
        else throw new ConvertException(r.file() + ": metadata " + arch + "." + key + " should be a number or " + layers + " numbers");
        return out;
    }

    // ---- tensors -------------------------------------------------------------------------------

    private List<SourceTensor> plan() {
        List<SourceTensor> out = new ArrayList<>();
        Set<String> names = new LinkedHashSet<>();
        int heads = archBlock.get("num_attention_heads").asInt(), kvHeads = archBlock.get("num_kv_heads").asInt();
        for (GgufReader.Tensor t : r.tensors()) {
            String n = t.name();
            if (n.equals("rope_freqs.weight") && arch.equals("gemma4")) continue;   // the partial rope, read into the config
            if (n.equals("rope_freqs.weight")) {
                float[] f = r.readFloats(t);
                ArrayNode a = archBlock.putArray("rope_freq_factors");
                for (float v : f) a.add(v);
                continue;
            }
            if (arch.equals("gemma4") && n.matches("blk\\.\\d+\\.ffn_gate_up_exps\\.weight")) {
                r.requireDecodable(t);
                splitGateUp(t, "model.layers." + n.split("\\.")[1] + ".experts.%d.", names, out);
                continue;
            }
            String experts = expertName(n);
            if (experts != null) {
                if (arch.equals("gemma4")) experts = experts.replace(".mlp.experts.", ".experts.");
                r.requireDecodable(t);
                splitExperts(t, experts, names, out);
                continue;
            }
            String hf = hfName(n);
            if (hf == null) throw new ConvertException(r.file() + ": tensor " + n + " is not understood for architecture " + arch);
            if (!names.add(hf)) throw new ConvertException(r.file() + ": two tensors map to " + hf);
            r.requireDecodable(t);
            long[] shape = t.shape();
            TensorData data = (off, dst, dOff, len) -> r.readFloats(t, off, dst, dOff, len);
            String transform = "";
            if (arch.equals("llama") && (n.matches("blk\\.\\d+\\.attn_q\\.(weight|bias)") || n.matches("blk\\.\\d+\\.attn_k\\.(weight|bias)"))) {
                int h = n.contains("attn_q") ? heads : kvHeads;
                data = unpermute(t, data, h);
                transform = "llama.cpp rope permutation undone";
            }
            out.add(new SourceTensor(hf, shape, t.typeName(), transform, data));
        }
        out.sort((a, b) -> TensorOrder.NAMES.compare(a.name(), b.name()));
        return List.copyOf(out);
    }

    private static final Pattern EXPS = Pattern.compile("^blk\\.(\\d+)\\.ffn_(gate|up|down)_exps\\.(weight|bias)$");

    /** For a merged expert tensor {@code blk.N.ffn_X_exps.S}: the per-expert HF name with {@code %d} for the expert. */
    private static String expertName(String n) {
        Matcher m = EXPS.matcher(n);
        return m.matches() ? "model.layers." + m.group(1) + ".mlp.experts.%d." + m.group(2) + "_proj." + m.group(3) : null;
    }

    /**
     * llama.cpp stores a layer's experts as one tensor, {@code [n_expert, out, in]} (biases {@code [n_expert, out]});
     * each expert's slice is already an HF {@code [out, in]} matrix, so splitting is reading at an offset.
     */
    private void splitExperts(GgufReader.Tensor t, String pattern, Set<String> names, List<SourceTensor> out) {
        long[] s = t.shape();
        if (s.length < 2) throw new ConvertException(r.file() + ": tensor " + t.name() + " should have an expert dimension, has shape " + java.util.Arrays.toString(s));
        long[] one = java.util.Arrays.copyOfRange(s, 1, s.length);
        long per = 1;
        for (long d : one) per *= d;
        for (int x = 0; x < s[0]; x++) {
            String hf = String.format(pattern, x);
            if (!names.add(hf)) throw new ConvertException(r.file() + ": two tensors map to " + hf);
            long base = x * per;
            TensorData data = (off, dst, dOff, len) -> r.readFloats(t, base + off, dst, dOff, len);
            out.add(new SourceTensor(hf, one, t.typeName(), "llama.cpp merged experts split", data));
        }
    }

    /** Gemma 4's merged {@code [n_expert, 2·I, hidden]} gate/up experts: rows 0..I are the gate, I..2I the up projection. */
    private void splitGateUp(GgufReader.Tensor t, String prefix, Set<String> names, List<SourceTensor> out) {
        long[] s = t.shape();
        if (s.length != 3 || s[1] % 2 != 0) throw new ConvertException(r.file() + ": tensor " + t.name() + " should be [n_expert, 2·I, hidden], is " + java.util.Arrays.toString(s));
        long half = s[1] / 2 * s[2];
        for (int x = 0; x < s[0]; x++) {
            for (int part = 0; part < 2; part++) {
                String hf = String.format(prefix, x) + (part == 0 ? "gate_proj.weight" : "up_proj.weight");
                if (!names.add(hf)) throw new ConvertException(r.file() + ": two tensors map to " + hf);
                long base = x * 2 * half + part * half;
                TensorData data = (off, dst, dOff, len) -> r.readFloats(t, base + off, dst, dOff, len);
                out.add(new SourceTensor(hf, new long[] {s[1] / 2, s[2]}, t.typeName(), "llama.cpp merged gate/up experts split", data));
            }
        }
    }

    /** The HF name for a llama.cpp tensor name, or null. */
    String hfName(String n) {
        switch (n) {
            case "token_embd.weight": return "model.embed_tokens.weight";
            case "per_layer_token_embd.weight": return "model.embed_tokens_per_layer.weight";
            case "per_layer_model_proj.weight": return "model.per_layer_model_projection.weight";
            case "per_layer_proj_norm.weight": return "model.per_layer_projection_norm.weight";
            case "output_norm.weight": return "model.norm.weight";
            case "output.weight": return "lm_head.weight";
            default: break;
        }
        Matcher m = BLK.matcher(n);
        if (!m.matches()) return null;
        String p = "model.layers." + m.group(1) + ".";
        String rest = m.group(2);
        int dot = rest.lastIndexOf('.');
        if (dot < 0) return null;
        String base = rest.substring(0, dot), suffix = rest.substring(dot);
        boolean gemma = arch.startsWith("gemma"), gptOss = arch.equals("gpt-oss");
        String local = switch (base) {
            case "attn_norm" -> "input_layernorm";
            case "ffn_norm" -> gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm";
            case "post_attention_norm" -> "post_attention_layernorm";
            case "post_ffw_norm" -> "post_feedforward_layernorm";
            case "attn_q" -> "self_attn.q_proj";
            case "attn_k" -> "self_attn.k_proj";
            case "attn_v" -> "self_attn.v_proj";
            case "attn_output" -> "self_attn.o_proj";
            case "attn_q_norm" -> "self_attn.q_norm";
            case "attn_k_norm" -> "self_attn.k_norm";
            case "ffn_gate" -> "mlp.gate_proj";
            case "ffn_up" -> "mlp.up_proj";
            case "ffn_down" -> "mlp.down_proj";
            case "ffn_gate_inp" -> gptOss ? "mlp.router" : arch.equals("gemma4") ? (suffix.equals(".scale") ? "router.scale" : "router.proj") : "mlp.gate";
            case "attn_sinks" -> gptOss && suffix.equals(".weight") ? "self_attn.sinks" : null;
            case "layer_output_scale" -> arch.equals("gemma4") && suffix.equals(".weight") ? "layer_scalar" : null;
            case "inp_gate" -> arch.equals("gemma4") ? "per_layer_input_gate" : null;
            case "proj" -> arch.equals("gemma4") ? "per_layer_projection" : null;
            case "post_norm" -> arch.equals("gemma4") ? "post_per_layer_input_norm" : null;
            case "post_ffw_norm_1" -> arch.equals("gemma4") ? "post_feedforward_layernorm_1" : null;
            case "post_ffw_norm_2" -> arch.equals("gemma4") ? "post_feedforward_layernorm_2" : null;
            case "pre_ffw_norm_2" -> arch.equals("gemma4") ? "pre_feedforward_layernorm_2" : null;
            case "ffn_down_exps" -> arch.equals("gemma4") && suffix.equals(".scale") ? "router.per_expert_scale" : null;
            default -> null;
        };
        if (local == null) return null;
        if (local.equals("router.scale") || local.equals("router.per_expert_scale")) return p + local;
        return local.equals("self_attn.sinks") || local.equals("layer_scalar") ? p + local : p + local + suffix;
    }

    /**
     * Undoes llama.cpp's {@code permute}: within each head, GGUF row {@code 2i + j} holds HF row
     * {@code j·(hd/2) + i} (j ∈ {0, 1}); so HF row {@code h·hd + j·hd/2 + i} is read from GGUF row
     * {@code h·hd + 2i + j}. Works for weights ([rows, in]) and biases ([rows]).
     */
    private TensorData unpermute(GgufReader.Tensor t, TensorData src, int heads) {
        long[] shape = t.shape();
        long rows = shape[0], cols = shape.length > 1 ? shape[1] : 1;
        if (rows % heads != 0 || (rows / heads) % 2 != 0)
            throw new ConvertException(r.file() + ": tensor " + t.name() + " has " + rows + " rows, not a whole number of even-sized heads (" + heads + ")");
        long hd = rows / heads, half = hd / 2;
        return (offset, dst, dstOff, len) -> {
            while (len > 0) {
                long row = offset / cols, c = offset % cols;
                long h = row / hd, within = row % hd, j = within / half, i = within % half;
                long srcRow = h * hd + 2 * i + j;
                int take = (int) Math.min(len, cols - c);
                src.read(srcRow * cols + c, dst, dstOff, take);
                offset += take;
                dstOff += take;
                len -= take;
            }
        };
    }

    // ---- chat bundle -----------------------------------------------------------------------------

    private ObjectNode chatBundle() {
        ObjectNode o = F.objectNode();
        String tpl = r.string("tokenizer.chat_template");
        if (tpl != null) o.put("chat_template", tpl);
        List<Object> toks = r.array("tokenizer.ggml.tokens");
        Long eos = r.integer("tokenizer.ggml.eos_token_id"), eot = r.integer("tokenizer.ggml.eot_token_id");
        ArrayNode e = F.arrayNode();
        if (eos != null) e.add(eos);
        if (eot != null && !eot.equals(eos)) e.add(eot);
        if (!e.isEmpty()) o.set("eos_token_ids", e);
        Long bos = r.integer("tokenizer.ggml.bos_token_id"), pad = r.integer("tokenizer.ggml.padding_token_id");
        if (bos != null) o.put("bos_token_id", bos);
        if (pad != null) o.put("pad_token_id", pad);
        if (toks != null) {
            putText(o, "bos_token", bos, toks);
            putText(o, "eos_token", eos, toks);
            putText(o, "pad_token", pad, toks);
            putText(o, "unk_token", r.integer("tokenizer.ggml.unknown_token_id"), toks);
        }
        Boolean addBos = r.bool("tokenizer.ggml.add_bos_token"), addEos = r.bool("tokenizer.ggml.add_eos_token");
        if (addBos != null) o.put("add_bos_token", addBos);
        if (addEos != null) o.put("add_eos_token", addEos);
        return o.isEmpty() ? null : o;
    }

    private static void putText(ObjectNode o, String key, Long id, List<Object> toks) {
        if (id != null && id >= 0 && id < toks.size() && toks.get((int) (long) id) instanceof String s) o.put(key, s);
    }
}
