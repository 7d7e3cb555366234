package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A Hugging Face checkpoint folder opened for conversion: {@code config.json}, the safetensors weights
 * (single file or sharded), tokenizer files. Plans the output tensors: HF names kept, except the
 * rewrites listed in docs/ARCH_FIELDS.md (multimodal prefix dropped, fused 3-D experts split into
 * per-expert {@code [out, in]} matrices, Qwen3-Next's fused GDN input projections split into the
 * Qwen3.5 names), in {@link TensorOrder}.
 */
public final class HfCheckpoint implements ModelSource {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    /** A decoder layer's or the MTP head's layer (fused tensors split alike). */
    private static final Pattern LAYER_PREFIX = Pattern.compile("^(model\\.(?:mtp\\.)?layers\\.\\d+\\.)(.*)$");

    private final Path dir;
    private final HfConfig config;
    private final SafetensorsReader weights;
    private final BlockScaledWeights blocks;
    private final ObjectNode arch;
    private final List<SourceTensor> tensors;
    private final byte[] tokenizerJson;
    private final ObjectNode tokenizerConfig;
    private final ObjectNode provenance;

    private HfCheckpoint(Path dir, HfConfig config, SafetensorsReader weights) {
        this.dir = dir;
        this.config = config;
        this.weights = weights;
        this.blocks = new BlockScaledWeights(weights, config);
        this.arch = HfArch.fromConfig(config);
        this.provenance = F.objectNode();
        this.tensors = plan();
        this.tokenizerJson = TokenizerBundle.readTokenizerJson(dir);
        this.tokenizerConfig = TokenizerBundle.chatBundle(dir, config, tokenizerJson);
        provenance.put("source_format", "safetensors");
        provenance.set("hf_config", config.json());
        Path gen = dir.resolve("generation_config.json");
        if (Files.isRegularFile(gen)) provenance.set("hf_generation_config", HfConfig.read(gen).json());
    }

    /** Opens a checkpoint folder; fails with a message naming what is missing or malformed. */
    public static HfCheckpoint open(Path dir) {
        if (!Files.isDirectory(dir)) throw new ConvertException(dir + ": not a folder (expected a Hugging Face checkpoint folder or a .gguf file)");
        Path cfg = dir.resolve("config.json");
        if (!Files.isRegularFile(cfg)) throw new ConvertException(dir + ": no config.json in this folder");
        HfConfig config = HfConfig.read(cfg);
        SafetensorsReader w = SafetensorsReader.open(dir);
        try {
            return new HfCheckpoint(dir, config, w);
        } catch (RuntimeException e) {
            w.close();
            throw e;
        }
    }

    @Override public ObjectNode arch() { return arch; }

    @Override public List<SourceTensor> tensors() { return tensors; }

    @Override public byte[] tokenizerJson() { return tokenizerJson; }

    @Override public ObjectNode tokenizerConfig() { return tokenizerConfig; }

    @Override public ObjectNode provenance() { return provenance; }

    @Override public String describe() { return dir.toString(); }

    public SafetensorsReader weights() { return weights; }

    @Override public void close() { weights.close(); }

    // ---- planning ------------------------------------------------------------------------------

    private List<SourceTensor> plan() {
        String family = arch.get("arch_name").asText();
        boolean tied = arch.path("tie_word_embeddings").asBoolean(false);
        List<SourceTensor> out = new ArrayList<>();
        List<String> dropped = new ArrayList<>();
        Map<String, SafetensorsReader.Tensor> byOut = new LinkedHashMap<>();
        List<SafetensorsReader.Tensor> sourceTensors = new ArrayList<>();
        for (SafetensorsReader.Tensor t : weights.tensors())
            if (!blocks.isPart(t.name()) && !blocks.decoded().containsKey(t.name())) sourceTensors.add(t);
        blocks.decoded().values().forEach(d -> sourceTensors.add(d.tensor()));
        for (SafetensorsReader.Tensor t : sourceTensors) {
            String name = t.name();
            if (name.startsWith("model.language_model.")) name = "model." + name.substring("model.language_model.".length());
            else if (name.startsWith("language_model.model.")) name = "model." + name.substring("language_model.model.".length());
            else if (name.startsWith("language_model.lm_head.")) name = name.substring("language_model.".length());
            else if (name.startsWith("mtp.")) name = "model." + name;   // Qwen3-Next's MTP head: model.mtp.* in CMF
            boolean text = (name.startsWith("model.") || name.startsWith("lm_head."))
                    && !name.matches("model\\.(vision_tower|audio_tower|embed_vision|embed_audio|multi_modal_projector|visual)\\..*");
            if (!text || (tied && name.equals("lm_head.weight"))) {
                dropped.add(t.name());
                continue;
            }
            if (byOut.put(name, t) != null) throw new ConvertException(weights.source() + ": two tensors map to the name " + name);
        }
        if (!tied && !byOut.containsKey("lm_head.weight"))
            throw new ConvertException(weights.source() + ": config says tie_word_embeddings=false but there is no lm_head.weight");
        Map<String, Integer> transformCounts = new HashMap<>();
        for (var e : byOut.entrySet()) {
            String name = e.getKey();
            SafetensorsReader.Tensor t = e.getValue();
            if (!blocks.decoded().containsKey(t.name())) requireFloat(t);
            int before = out.size();
            if (!expand(family, name, t, out)) out.add(new SourceTensor(name, t.shape(), t.dtypeName(), "", direct(t, 0)));
            if (out.size() - before != 1 || !out.getLast().transform().isEmpty()) {
                transformCounts.merge(out.getLast().transform(), 1, Integer::sum);
            }
        }
        out.sort((a, b) -> TensorOrder.NAMES.compare(a.name(), b.name()));
        mtpBlock(byOut.keySet());
        if (!dropped.isEmpty()) {
            ArrayNode d = provenance.putArray("dropped_tensors");
            dropped.forEach(d::add);
        }
        if (!blocks.decoded().isEmpty()) {
            ObjectNode dec = provenance.putObject("decoded_tensors");
            blocks.decoded().values().forEach(d -> dec.put(d.encoding(), dec.path(d.encoding()).asInt(0) + 1));
        }
        if (!transformCounts.isEmpty()) {
            ObjectNode tr = provenance.putObject("tensor_transforms");
            transformCounts.forEach(tr::put);
        }
        return List.copyOf(out);
    }

    /**
     * {@code arch.mtp} when the checkpoint has an MTP head: its layer count (the config's {@code num_nextn_predict_layers}
     * or {@code mtp_num_hidden_layers}, else the layers present) and the embedding and head it shares with the model.
     */
    private void mtpBlock(java.util.Set<String> names) {
        java.util.Set<Integer> layers = new java.util.TreeSet<>();
        boolean any = false;
        for (String n : names) {
            if (!n.startsWith("model.mtp.")) continue;
            any = true;
            Matcher m = MTP_LAYER.matcher(n);
            if (m.matches()) layers.add(Integer.parseInt(m.group(1)));
        }
        if (!any) return;
        HfConfig c = config.text();
        Integer n = c.integer("num_nextn_predict_layers");
        if (n == null) n = c.integer("mtp_num_hidden_layers");
        ObjectNode mtp = arch.putObject("mtp");
        mtp.put("num_layers", n != null ? n : layers.size());
        mtp.put("share_lm_head", !names.contains("model.mtp.lm_head.weight"));
        mtp.put("share_embed", !names.contains("model.mtp.embed_tokens.weight"));
    }

    private static final Pattern MTP_LAYER = Pattern.compile("^model\\.mtp\\.layers\\.(\\d+)\\..*$");

    private void requireFloat(SafetensorsReader.Tensor t) {
        if (t.dtype() == null || !t.dtype().isFloat())
            throw new ConvertException(t.file() + ": tensor " + t.name() + " has dtype " + t.dtypeName()
                    + "; cmf convert reads F32, F16 and BF16 weights, F8_E4M3 with weight_scale_inv block scales and MXFP4 "
                    + "_blocks/_scales pairs (other quantized checkpoints, e.g. GPTQ/AWQ, are not supported)");
    }

    /** Emits the split form of a fused tensor; false when {@code t} is copied as is. */
    private boolean expand(String family, String name, SafetensorsReader.Tensor t, List<SourceTensor> out) {
        Matcher m = LAYER_PREFIX.matcher(name);
        String prefix = m.matches() ? m.group(1) : "";
        String local = m.matches() ? m.group(2) : name;
        long[] s = t.shape();
        String dt = t.dtypeName();

        if (family.equals("qwen3_next") && local.equals("linear_attn.in_proj_qkvz.weight")) {
            splitQkvz(prefix, t, out);
            return true;
        }
        if (family.equals("qwen3_next") && local.equals("linear_attn.in_proj_ba.weight")) {
            splitBa(prefix, t, out);
            return true;
        }
        boolean gptOss = family.equals("gpt_oss");
        if (local.endsWith("experts.gate_up_proj") && s.length == 3) {
            String base = prefix + local.substring(0, local.length() - "gate_up_proj".length());
            long e = s[0];
            if (gptOss) {                       // [E, hidden, 2I], input-major, gate/up interleaved by column
                long hidden = s[1], twoI = s[2];
                if (twoI % 2 != 0) throw shapeError(t, "odd gate_up width");
                for (long x = 0; x < e; x++) {
                    out.add(new SourceTensor(base + x + ".gate_proj.weight", new long[] {twoI / 2, hidden}, dt,
                            "gpt_oss gate_up_proj de-interleave+transpose", transposedColumns(t, x * hidden * twoI, hidden, twoI, 0, 2)));
                    out.add(new SourceTensor(base + x + ".up_proj.weight", new long[] {twoI / 2, hidden}, dt,
                            "gpt_oss gate_up_proj de-interleave+transpose", transposedColumns(t, x * hidden * twoI, hidden, twoI, 1, 2)));
                }
            } else {                            // [E, 2I, hidden]: rows 0..I gate, I..2I up
                long twoI = s[1], hidden = s[2];
                if (twoI % 2 != 0) throw shapeError(t, "odd gate_up height");
                long half = twoI / 2 * hidden;
                for (long x = 0; x < e; x++) {
                    out.add(new SourceTensor(base + x + ".gate_proj.weight", new long[] {twoI / 2, hidden}, dt,
                            "experts.gate_up_proj split", direct(t, x * twoI * hidden)));
                    out.add(new SourceTensor(base + x + ".up_proj.weight", new long[] {twoI / 2, hidden}, dt,
                            "experts.gate_up_proj split", direct(t, x * twoI * hidden + half)));
                }
            }
            return true;
        }
        if (local.endsWith("experts.down_proj") && s.length == 3) {
            String base = prefix + local.substring(0, local.length() - "down_proj".length());
            long e = s[0];
            for (long x = 0; x < e; x++) {
                if (gptOss) {                   // [E, I, hidden] input-major -> [hidden, I]
                    long inter = s[1], hidden = s[2];
                    out.add(new SourceTensor(base + x + ".down_proj.weight", new long[] {hidden, inter}, dt,
                            "gpt_oss down_proj transpose", transposedColumns(t, x * inter * hidden, inter, hidden, 0, 1)));
                } else {                        // [E, hidden, I]
                    out.add(new SourceTensor(base + x + ".down_proj.weight", new long[] {s[1], s[2]}, dt,
                            "experts.down_proj split", direct(t, x * s[1] * s[2])));
                }
            }
            return true;
        }
        if (gptOss && local.endsWith("experts.gate_up_proj_bias") && s.length == 2) {
            String base = prefix + local.substring(0, local.length() - "gate_up_proj_bias".length());
            long twoI = s[1];
            for (long x = 0; x < s[0]; x++) {
                out.add(new SourceTensor(base + x + ".gate_proj.bias", new long[] {twoI / 2}, dt,
                        "gpt_oss gate_up_proj_bias de-interleave", transposedColumns(t, x * twoI, 1, twoI, 0, 2)));
                out.add(new SourceTensor(base + x + ".up_proj.bias", new long[] {twoI / 2}, dt,
                        "gpt_oss gate_up_proj_bias de-interleave", transposedColumns(t, x * twoI, 1, twoI, 1, 2)));
            }
            return true;
        }
        if (gptOss && local.endsWith("experts.down_proj_bias") && s.length == 2) {
            String base = prefix + local.substring(0, local.length() - "down_proj_bias".length());
            for (long x = 0; x < s[0]; x++) {
                out.add(new SourceTensor(base + x + ".down_proj.bias", new long[] {s[1]}, dt,
                        "gpt_oss down_proj_bias split", direct(t, x * s[1])));
            }
            return true;
        }
        return false;
    }

    /** Qwen3-Next's in_proj_qkvz: per key-head group [q(hk) k(hk) v(r·hv) z(r·hv)] -> in_proj_qkv + in_proj_z. */
    private void splitQkvz(String prefix, SafetensorsReader.Tensor t, List<SourceTensor> out) {
        int nk = arch.get("linear_num_key_heads").asInt(), nv = arch.get("linear_num_value_heads").asInt();
        int hk = arch.get("linear_key_head_dim").asInt(), hv = arch.get("linear_value_head_dim").asInt();
        if (nv % nk != 0) throw shapeError(t, "linear_num_value_heads " + nv + " is not a multiple of linear_num_key_heads " + nk);
        int r = nv / nk, group = 2 * hk + 2 * r * hv;
        long[] s = t.shape();
        if (s.length != 2 || s[0] != (long) nk * group) throw shapeError(t, "expected [" + nk * group + ", hidden]");
        int[] qkv = new int[2 * nk * hk + nv * hv], z = new int[nv * hv];
        int i = 0;
        for (int g = 0; g < nk; g++) for (int j = 0; j < hk; j++) qkv[i++] = g * group + j;
        for (int g = 0; g < nk; g++) for (int j = 0; j < hk; j++) qkv[i++] = g * group + hk + j;
        for (int g = 0; g < nk; g++) for (int j = 0; j < r * hv; j++) qkv[i++] = g * group + 2 * hk + j;
        i = 0;
        for (int g = 0; g < nk; g++) for (int j = 0; j < r * hv; j++) z[i++] = g * group + 2 * hk + r * hv + j;
        out.add(new SourceTensor(prefix + "linear_attn.in_proj_qkv.weight", new long[] {qkv.length, s[1]}, t.dtypeName(),
                "qwen3_next in_proj_qkvz split", gatherRows(t, s[1], qkv)));
        out.add(new SourceTensor(prefix + "linear_attn.in_proj_z.weight", new long[] {z.length, s[1]}, t.dtypeName(),
                "qwen3_next in_proj_qkvz split", gatherRows(t, s[1], z)));
    }

    /** Qwen3-Next's in_proj_ba: per key-head group [b(r) a(r)] -> in_proj_b + in_proj_a. */
    private void splitBa(String prefix, SafetensorsReader.Tensor t, List<SourceTensor> out) {
        int nk = arch.get("linear_num_key_heads").asInt(), nv = arch.get("linear_num_value_heads").asInt();
        int r = nv / nk;
        long[] s = t.shape();
        if (s.length != 2 || s[0] != 2L * nv) throw shapeError(t, "expected [" + 2 * nv + ", hidden]");
        int[] b = new int[nv], a = new int[nv];
        for (int g = 0, i = 0; g < nk; g++) {
            for (int j = 0; j < r; j++, i++) {
                b[i] = g * 2 * r + j;
                a[i] = g * 2 * r + r + j;
            }
        }
        out.add(new SourceTensor(prefix + "linear_attn.in_proj_b.weight", new long[] {nv, s[1]}, t.dtypeName(),
                "qwen3_next in_proj_ba split", gatherRows(t, s[1], b)));
        out.add(new SourceTensor(prefix + "linear_attn.in_proj_a.weight", new long[] {nv, s[1]}, t.dtypeName(),
                "qwen3_next in_proj_ba split", gatherRows(t, s[1], a)));
    }

    private ConvertException shapeError(SafetensorsReader.Tensor t, String what) {
        return new ConvertException(t.file() + ": tensor " + t.name() + " " + java.util.Arrays.toString(t.shape()) + ": " + what);
    }

    // ---- views ---------------------------------------------------------------------------------

    /** Elements {@code [first, first + len)} of source tensor {@code n}, decoded when it is block-quantized. */
    private void read(String n, long first, float[] dst, int off, int len) {
        BlockScaledWeights.Decoded d = blocks.decoded().get(n);
        if (d != null) d.data().read(first, dst, off, len);
        else weights.readFloats(n, first, dst, off, len);
    }

    /** Elements of {@code t} starting at flat element {@code base}. */
    private TensorData direct(SafetensorsReader.Tensor t, long base) {
        String n = t.name();
        return (offset, dst, dstOff, len) -> read(n, base + offset, dst, dstOff, len);
    }

    /** Rows {@code rows[i]} of the 2-D tensor {@code t} (row length {@code cols}), in that order. */
    private TensorData gatherRows(SafetensorsReader.Tensor t, long cols, int[] rows) {
        String n = t.name();
        return (offset, dst, dstOff, len) -> {
            while (len > 0) {
                long r = offset / cols, c = offset % cols;
                int take = (int) Math.min(len, cols - c);
                read(n, rows[(int) r] * cols + c, dst, dstOff, take);
                offset += take;
                dstOff += take;
                len -= take;
            }
        };
    }

    /**
     * The transpose of a column selection: the source block at flat {@code base} is {@code [inRows, width]}
     * (input-major, x @ W); output row {@code o} is source column {@code start + o·step} read down all
     * {@code inRows}, so the output is {@code [(width - start + step - 1) / step, inRows]}. Strided reads
     * from the map would cost a source row per element, so the block is materialized once (one expert
     * matrix) on first read and dropped by {@link TensorData#release()} after the tensor is written.
     */
    private TensorData transposedColumns(SafetensorsReader.Tensor t, long base, long inRows, long width, long start, long step) {
        String n = t.name();
        long outRows = (width - start + step - 1) / step;
        if (outRows * inRows > Integer.MAX_VALUE - 8) throw shapeError(t, "expert matrix too large to transpose in memory");
        return new Materialized(() -> {
            float[] out = new float[(int) (outRows * inRows)];
            float[] row = new float[(int) width];
            for (long i = 0; i < inRows; i++) {
                read(n, base + i * width, row, 0, (int) width);
                for (long o = 0; o < outRows; o++) out[(int) (o * inRows + i)] = row[(int) (start + o * step)];
            }
            return out;
        });
    }

    /** A tensor computed whole on first read, kept until {@link #release()}. */
    static final class Materialized implements TensorData {
        private final java.util.function.Supplier<float[]> compute;
        private float[] values;

        Materialized(java.util.function.Supplier<float[]> compute) { this.compute = compute; }

        private synchronized float[] values() {
            if (values == null) values = compute.get();
            return values;
        }

        @Override public void read(long offset, float[] dst, int dstOff, int len) {
            System.arraycopy(values(), Math.toIntExact(offset), dst, dstOff, len);
        }

        @Override public synchronized void release() { values = null; }
    }
}
