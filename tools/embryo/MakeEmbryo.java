import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.format.CmfHeader;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.ModelArch;
import dev.cmf4j.format.TokenizerConfig;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * Writes a synthetic Embryo (random weights) as a CMF v2 file through the repository's own writer, for benchmarks:
 * gated-delta-net layers and bounded anchors (swa_sink_v1), a resonance-routed MoE with a shared expert in every
 * layer, a hierarchical clustered head tied to the embedding, the names and arch block of the reference's Embryo
 * exporter (fixtures/embryo/README.md §1). Run from the repository root after a build:
 *
 * <pre>
 *   java -cp cmf-cli/target/cmf.jar tools/embryo/MakeEmbryo.java --out /tmp/embryo-56m.cmf [--preset embryo0|tiny]
 *        [--seed 1] [--dtype f32|f16]
 * </pre>
 *
 * The default preset is the reference's Embryo-0 genome with its GDN mixer (cortiq-embryo EmbryoCfg::embryo0: vocab
 * 32768, hidden 384, 8 layers, 4 experts of width 768 plus the shared expert, 128 head clusters, anchors of 8 query /
 * 2 KV heads × 128, GDN 4 heads × 128/128, conv 4) with anchors at layers 3 and 7 (6 GDN + 2 bounded), window 128 and
 * 4 sinks (our choice: the genome leaves them to the trainer), descriptor rank 16: 56.3M parameters.
 */
public final class MakeEmbryo {
    record Geometry(int vocab, int hidden, int layers, List<Integer> anchors, int qHeads, int kvHeads, int headDim,
                    int window, int sinks, int gdnHeads, int dk, int dv, int conv, int experts, int inter, int rank,
                    int clusters) {}

    static final Map<String, Geometry> PRESETS = Map.of(
            "embryo0", new Geometry(32768, 384, 8, List.of(3, 7), 8, 2, 128, 128, 4, 4, 128, 128, 4, 4, 768, 16, 128),
            "tiny", new Geometry(512, 64, 4, List.of(2), 4, 2, 16, 8, 4, 2, 16, 16, 4, 3, 32, 2, 16));

    private final Geometry g;
    private final DType dtype;
    private final long seed;
    private long params;

    MakeEmbryo(Geometry g, DType dtype, long seed) { this.g = g; this.dtype = dtype; this.seed = seed; }

    public static void main(String[] args) throws Exception {
        String out = null, preset = "embryo0", dt = "f32";
        long seed = 1;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--out" -> out = args[++i];
                case "--preset" -> preset = args[++i];
                case "--seed" -> seed = Long.parseLong(args[++i]);
                case "--dtype" -> dt = args[++i];
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                        + " (usage: --out FILE [--preset embryo0|tiny] [--seed N] [--dtype f32|f16])");
            }
        }
        if (out == null) throw new IllegalArgumentException("--out FILE is required");
        Geometry g = PRESETS.get(preset);
        if (g == null) throw new IllegalArgumentException("unknown preset " + preset + " (known: " + PRESETS.keySet() + ")");
        DType d = switch (dt) { case "f32" -> DType.F32; case "f16" -> DType.F16;
            default -> throw new IllegalArgumentException("--dtype must be f32 or f16, got " + dt); };
        long t0 = System.nanoTime();
        long n = new MakeEmbryo(g, d, seed).write(Path.of(out));
        System.out.printf("%s: synthetic Embryo (%s), %,d parameters, %.1f s%n", out, preset, n, (System.nanoTime() - t0) * 1e-9);
    }

    ObjectNode arch() {
        ObjectMapper m = new ObjectMapper();
        ObjectNode a = m.createObjectNode();
        a.put("arch_name", "cortiq_embryo").put("hidden_size", g.hidden).put("intermediate_size", g.inter)
                .put("num_layers", g.layers).put("num_attention_heads", g.qHeads).put("num_kv_heads", g.kvHeads)
                .put("head_dim", g.headDim).put("vocab_size", g.vocab);
        ArrayNode types = a.putArray("layer_types");
        for (int l = 0; l < g.layers; l++) types.add(g.anchors.contains(l) ? "BoundedAttention" : "LinearAttention");
        a.put("rms_norm_eps", 1e-6).put("norm_style", "qwen").put("rope_theta", 10000.0).put("tie_word_embeddings", true)
                .put("partial_rotary_factor", 1.0);
        a.putObject("moe").put("num_experts", g.experts).put("top_k", 1).put("moe_intermediate_size", g.inter)
                .put("norm_topk_prob", true).put("shared_expert_intermediate_size", g.inter).put("router_resonance", true);
        a.putObject("linear_core").put("kind", "gated_delta_net").put("num_heads", g.gdnHeads).put("value_head_dim", g.dv);
        ObjectNode ac = a.putObject("anchor_core");
        ac.put("kind", "swa_sink_v1").put("window", g.window).put("sink", g.sinks).put("rope", "relative_in_window")
                .put("sink_scores", "nope");
        ac.putArray("train_windows").add(g.window);
        ac.putNull("far");
        a.put("head_clusters", g.clusters).put("max_position_embeddings", 131072).put("linear_conv_kernel_dim", g.conv)
                .put("linear_num_key_heads", g.gdnHeads).put("linear_num_value_heads", g.gdnHeads)
                .put("linear_key_head_dim", g.dk).put("linear_value_head_dim", g.dv);
        return a;
    }

    long write(Path out) {
        CmfHeader header = CmfHeader.of(ModelArch.fromJson(arch()), dtype == DType.F32 ? "F32" : "F16")
                .withTokenizerConfig(new TokenizerConfig(null, List.of(256), null, null, null));
        int h = g.hidden, outDim = 0;
        double outStd = 0.02 / Math.sqrt(2.0 * g.layers);
        try (CmfWriter w = CmfWriter.create(out, header)) {
            normal(w, "model.embed_tokens.weight", 0.02, g.vocab, h);
            for (int l = 0; l < g.layers; l++) {
                String p = "model.layers." + l + ".";
                ones(w, p + "input_layernorm.weight", h);
                ones(w, p + "post_attention_layernorm.weight", h);
                if (g.anchors.contains(l)) {
                    String s = p + "self_attn.";
                    normal(w, s + "q_proj.weight", 0.02, g.qHeads * g.headDim, h);
                    normal(w, s + "k_proj.weight", 0.02, g.kvHeads * g.headDim, h);
                    normal(w, s + "v_proj.weight", 0.02, g.kvHeads * g.headDim, h);
                    normal(w, s + "o_proj.weight", outStd, h, g.qHeads * g.headDim);
                    normal(w, s + "sink_k.weight", 1.0, g.kvHeads, g.sinks, g.headDim);
                    normal(w, s + "sink_v.weight", 0.02, g.kvHeads, g.sinks, g.headDim);
                } else {
                    String s = p + "linear_attn.";
                    int cdim = 2 * g.gdnHeads * g.dk + g.gdnHeads * g.dv;
                    normal(w, s + "in_proj_qkv.weight", 0.02, cdim, h);
                    normal(w, s + "in_proj_z.weight", 0.02, g.gdnHeads * g.dv, h);
                    normal(w, s + "in_proj_a.weight", 0.02, g.gdnHeads, h);
                    normal(w, s + "in_proj_b.weight", 0.02, g.gdnHeads, h);
                    normal(w, s + "conv1d.weight", 0.5, cdim, 1, g.conv);
                    float[] aLog = new float[g.gdnHeads];
                    for (int i = 0; i < aLog.length; i++) aLog[i] = (float) Math.log(1 + 15.0 * i / Math.max(1, g.gdnHeads - 1));
                    put(w, s + "A_log", aLog, g.gdnHeads);
                    put(w, s + "dt_bias", new float[g.gdnHeads], g.gdnHeads);
                    ones(w, s + "norm.weight", g.dv);
                    normal(w, s + "out_proj.weight", outStd, h, g.gdnHeads * g.dv);
                }
                String m = p + "mlp.";
                mlp(w, m + "shared_expert.", outStd);
                for (int e = 0; e < g.experts; e++) {
                    String x = m + "experts." + e + ".";
                    mlp(w, x, outStd);
                    normal(w, x + "desc.mu", 1.0, h);
                    if (g.rank > 0) put(w, x + "desc.u", orthonormal(x + "desc.u", g.rank, h), g.rank, h);
                    put(w, x + "desc.bias", new float[1], 1);
                }
            }
            ones(w, "model.norm.weight", h);
            normal(w, "lm_head.clusters.weight", 0.02, g.clusters, h);
            w.setVocab(tokenizer(g.vocab));
            w.finish();
        }
        return params;
    }

    private void mlp(CmfWriter w, String p, double outStd) {
        normal(w, p + "gate_proj.weight", 0.02, g.inter, g.hidden);
        normal(w, p + "up_proj.weight", 0.02, g.inter, g.hidden);
        normal(w, p + "down_proj.weight", outStd, g.hidden, g.inter);
    }

    /** Its own stream per tensor (seed and name), so a tensor's values do not depend on the ones written before it. */
    private SplittableRandom rng(String name) { return new SplittableRandom(seed * 0x9E3779B97F4A7C15L ^ name.hashCode()); }

    private void normal(CmfWriter w, String name, double std, long... shape) {
        SplittableRandom r = rng(name);
        long n = 1;
        for (long d : shape) n *= d;
        params += n;
        int esz = dtype == DType.F32 || shape.length < 2 ? 4 : 2;
        DType dt = shape.length < 2 ? DType.F32 : dtype;   // vectors stay f32, as the exporter's f16 profile keeps them
        try (CmfWriter.TensorSink sink = w.openTensor(name, dt, shape, n * esz)) {
            ByteBuffer b = ByteBuffer.allocate(1 << 16).order(ByteOrder.LITTLE_ENDIAN);
            for (long i = 0; i < n; i++) {
                float v = (float) (gaussian(r) * std);
                if (esz == 4) b.putFloat(v); else b.putShort(Float.floatToFloat16(v));
                if (!b.hasRemaining()) { b.flip(); sink.write(b); b.clear(); }
            }
            b.flip();
            if (b.hasRemaining()) sink.write(b);
        }
    }

    private static double gaussian(SplittableRandom r) {
        double u = Math.max(1e-300, r.nextDouble()), v = r.nextDouble();
        return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
    }

    private void ones(CmfWriter w, String name, int n) {
        float[] x = new float[n];
        java.util.Arrays.fill(x, 1f);
        put(w, name, x, n);
    }

    private void put(CmfWriter w, String name, float[] x, long... shape) {
        params += x.length;
        DType dt = shape.length < 2 || name.contains(".desc.") ? DType.F32 : dtype;   // descriptors stay exact
        ByteBuffer b = ByteBuffer.allocate(x.length * (dt == DType.F32 ? 4 : 2)).order(ByteOrder.LITTLE_ENDIAN);
        for (float v : x) if (dt == DType.F32) b.putFloat(v); else b.putShort(Float.floatToFloat16(v));
        w.addTensor(name, dt, shape, b.flip());
    }

    /** {@code rows} orthonormal directions in R^dim (Gram–Schmidt over Gaussian vectors). */
    private float[] orthonormal(String name, int rows, int dim) {
        SplittableRandom r = rng(name);
        double[][] u = new double[rows][dim];
        for (int i = 0; i < rows; i++) {
            for (int j = 0; j < dim; j++) u[i][j] = gaussian(r);
            for (int k = 0; k < i; k++) {
                double d = 0;
                for (int j = 0; j < dim; j++) d += u[i][j] * u[k][j];
                for (int j = 0; j < dim; j++) u[i][j] -= d * u[k][j];
            }
            double n = 0;
            for (int j = 0; j < dim; j++) n += u[i][j] * u[i][j];
            n = Math.sqrt(n);
            for (int j = 0; j < dim; j++) u[i][j] /= n;
        }
        float[] out = new float[rows * dim];
        for (int i = 0; i < rows; i++) for (int j = 0; j < dim; j++) out[i * dim + j] = (float) u[i][j];
        return out;
    }

    /** The fixtures' minimal byte-level BPE: ids 0..255 the bytes (GPT-2 alphabet), 256 end of text, then placeholders. */
    static byte[] tokenizer(int vocab) {
        ObjectMapper m = new ObjectMapper();
        ObjectNode t = m.createObjectNode();
        t.put("version", "1.0");
        ArrayNode added = t.putArray("added_tokens");
        added.addObject().put("id", 256).put("content", "<|endoftext|>").put("single_word", false).put("lstrip", false)
                .put("rstrip", false).put("normalized", false).put("special", true);
        t.putObject("pre_tokenizer").put("type", "ByteLevel").put("add_prefix_space", false).put("trim_offsets", true).put("use_regex", true);
        t.putObject("decoder").put("type", "ByteLevel").put("add_prefix_space", true).put("trim_offsets", true).put("use_regex", true);
        ObjectNode model = t.putObject("model");
        model.put("type", "BPE").put("byte_fallback", false);
        ObjectNode v = model.putObject("vocab");
        List<Integer> bs = new ArrayList<>();
        for (int b = '!'; b <= '~'; b++) bs.add(b);
        for (int b = 0xA1; b <= 0xAC; b++) bs.add(b);
        for (int b = 0xAE; b <= 0xFF; b++) bs.add(b);
        int[] cs = new int[256];
        for (int b : bs) cs[b] = b;
        for (int b = 0, extra = 0; b < 256; b++) if (!bs.contains(b)) cs[b] = 256 + extra++;
        for (int b = 0; b < 256; b++) v.put(new String(Character.toChars(cs[b])), b);
        v.put("<|endoftext|>", 256);
        for (int i = 257; i < vocab; i++) v.put("<|unused_" + (i - 257) + "|>", i);
        model.putArray("merges");
        return t.toString().getBytes(StandardCharsets.UTF_8);
    }
}
