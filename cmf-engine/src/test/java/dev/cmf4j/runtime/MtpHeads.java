package dev.cmf4j.runtime;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfHeader;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.ModelArch;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.model.CmfWeights;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.Model;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.NormStyle;
import dev.cmf4j.model.Tensor;
import dev.cmf4j.model.Weights;

import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Model files with an MTP head ({@code model.mtp.*}) for tests: a CMF model rewritten with the repo's writer plus a
 * random head, or an "oracle" head that drafts a known continuation (MtpDraftTest, and the GPU-resident drafting tests).
 */
public final class MtpHeads {
    private MtpHeads() {}

    /** An added tensor (f32). */
    public record Extra(long[] shape, float[] values) {}

    /** {@code src} rewritten with {@code editArch} applied to its arch block and the tensors {@code add} added (f32). */
    public static Path rewrite(Path src, Path out, Consumer<ObjectNode> editArch, Map<String, Extra> add) {
        try (CmfFile f = CmfFile.open(src)) {
            ObjectNode arch = f.header().arch().toJson();
            editArch.accept(arch);
            CmfHeader h0 = f.header();
            CmfHeader h = new CmfHeader(h0.format(), h0.version(), ModelArch.fromJson(arch), h0.quantType(), h0.tokenizerConfig(),
                    List.of(), null, h0.provenance(), null, null, null, null, null, null, null, Map.of());
            try (CmfWriter w = CmfWriter.create(out, h)) {
                for (TensorEntry t : f.tensors()) w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
                for (var e : add.entrySet()) {
                    ByteBuffer b = ByteBuffer.allocate(e.getValue().values().length * 4).order(ByteOrder.LITTLE_ENDIAN);
                    for (float v : e.getValue().values()) b.putFloat(v);
                    w.addTensor(e.getKey(), DType.F32, e.getValue().shape(), b.array());
                }
                w.finish();
            }
        }
        return out;
    }

    /**
     * A random MTP head for the model in {@code cmf}: layer 0 copies the shapes of the model's last full-attention layer,
     * each tensor drawn around its source's mean with its spread (so norm weights stay norm-like); fc [h, 2h] and the
     * three norms likewise.
     */
    public static Map<String, Extra> randomHead(Path cmf, long seed) {
        Map<String, Extra> out = new LinkedHashMap<>();
        Random r = new Random(seed);
        try (Model m = Model.open(cmf)) {
            ModelSpec spec = m.spec();
            int full = -1;
            for (int i = 0; i < spec.numLayers(); i++)
                if (spec.layer(i).mixer() instanceof Mixer.Attention a && !a.sliding() && !a.sharesKv()) full = i;
            assertThat(full).as("a full-attention layer to copy").isNotNegative();
            Weights w = new CmfWeights(m.file());
            String from = "model.layers." + full + ".";
            for (String n : w.names().stream().sorted().toList())
                if (n.startsWith(from)) out.put("model.mtp.layers.0." + n.substring(from.length()), like(w.get(n), r));
            int h = spec.hidden();
            Tensor norm = w.get("model.norm.weight");
            for (String n : List.of("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm")) out.put("model.mtp." + n + ".weight", like(norm, r));
            float[] fc = new float[2 * h * h];
            for (int i = 0; i < fc.length; i++) fc[i] = (float) (r.nextGaussian() / Math.sqrt(2 * h));
            out.put("model.mtp.fc.weight", new Extra(new long[] {h, 2L * h}, fc));
        }
        return out;
    }

    private static Extra like(Tensor t, Random r) {
        float[] v = floats(t);
        double mean = 0, sq = 0;
        for (float x : v) { mean += x; sq += x * x; }
        mean /= v.length;
        double sd = Math.sqrt(Math.max(sq / v.length - mean * mean, 1e-6));
        float[] out = new float[v.length];
        for (int i = 0; i < v.length; i++) out[i] = (float) (mean + sd * r.nextGaussian());
        return new Extra(t.shape(), out);
    }

    public static float[] floats(Tensor t) {
        assertThat(t.dtype()).isEqualTo(DType.F32);
        return t.data().toArray(ValueLayout.JAVA_FLOAT_UNALIGNED);
    }

    /** {@code src} (a CMF model) written to {@code out} with a random head drawn from {@code seed}, as the converter writes arch.mtp. */
    public static Path withRandomHead(Path src, Path out, long seed) {
        return rewrite(src, out, a -> a.putObject("mtp").put("num_layers", 1).put("share_lm_head", true).put("share_embed", true),
                randomHead(src, seed));
    }

    /**
     * A head that knows the model's greedy continuation {@code greedy}: its own embedding gives each token of it a
     * basis vector, its layer adds nothing (o_proj and down_proj zero), fc passes the embedded half, and its own head
     * maps token t's vector to the token that followed t in {@code greedy}. It drafts that bigram chain, so most drafts
     * are accepted (a bigram that recurs with another successor is rejected), which a random head never gives.
     */
    public static Path withOracleHead(Path src, Path out, int[] greedy) {
        Map<String, Extra> head = randomHead(src, 11);
        int h, v;
        boolean offset;
        try (Model m = Model.open(src)) {
            h = m.spec().hidden();
            v = m.spec().vocab();
            offset = m.spec().finalNorm().style() == NormStyle.OFFSET;
        }
        head.replaceAll((n, e) -> n.contains("o_proj") || n.contains("down_proj") ? new Extra(e.shape(), new float[e.values().length]) : e);
        for (String n : List.of("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm")) {
            float[] w = new float[h];
            if (!offset) Arrays.fill(w, 1f);
            head.put("model.mtp." + n + ".weight", new Extra(new long[] {h}, w));
        }
        float[] fc = new float[2 * h * h];
        for (int i = 0; i < h; i++) fc[i * 2 * h + i] = 1f;
        head.put("model.mtp.fc.weight", new Extra(new long[] {h, 2L * h}, fc));
        float[] embed = new float[v * h], lmHead = new float[v * h];
        Map<Integer, Integer> slot = new HashMap<>();
        for (int i = 0; i + 1 < greedy.length; i++) {
            int t = greedy[i];
            if (!slot.containsKey(t)) {
                if (slot.size() == h) continue;   // more distinct tokens than dimensions: the rest draft nothing useful
                slot.put(t, slot.size());
            }
            embed[t * h + slot.get(t)] = 1f;
        }
        for (int i = 0; i + 1 < greedy.length; i++) {
            Integer s = slot.get(greedy[i]);
            if (s == null) continue;
            for (int u = 0; u < v; u++) lmHead[u * h + s] = 0f;   // the last successor seen wins
            lmHead[greedy[i + 1] * h + s] = 1f;
        }
        head.put("model.mtp.embed_tokens.weight", new Extra(new long[] {v, h}, embed));
        head.put("model.mtp.lm_head.weight", new Extra(new long[] {v, h}, lmHead));
        return rewrite(src, out, a -> a.putObject("mtp").put("num_layers", 1).put("share_lm_head", false).put("share_embed", false), head);
    }

    /** How many of the tokens after the first the bigram table of {@code greedy} (last successor wins) predicts. */
    public static int bigramHits(int[] greedy) {
        Map<Integer, Integer> next = new HashMap<>();
        for (int i = 0; i + 1 < greedy.length; i++) next.put(greedy[i], greedy[i + 1]);
        int hits = 0;
        for (int i = 0; i + 1 < greedy.length; i++) if (next.get(greedy[i]) == greedy[i + 1]) hits++;
        return hits;
    }

    /**
     * The Hugging Face folder {@code src} (config.json, model.safetensors) copied to {@code dir} with {@code head}'s
     * tensors added under the checkpoint's names ({@code mtp.*}, as Qwen3-Next ships its head), in f32.
     */
    public static Path hfFolderWithHead(Path src, Path dir, Map<String, Extra> head) throws java.io.IOException {
        java.nio.file.Files.createDirectories(dir);
        java.nio.file.Files.copy(src.resolve("config.json"), dir.resolve("config.json"));
        var json = new com.fasterxml.jackson.databind.ObjectMapper().createObjectNode();
        var data = new java.io.ByteArrayOutputStream();
        try (var st = dev.cmf4j.convert.SafetensorsReader.open(src)) {
            for (var t : st.tensors()) {
                byte[] b = st.bytes(t.name()).toArray(ValueLayout.JAVA_BYTE);
                entry(json, t.name(), t.dtypeName(), t.shape(), data.size(), b.length);
                data.write(b);
            }
        }
        for (var e : head.entrySet()) {   // the converted layer's names are the checkpoint's for this layer (no fused tensors)
            ByteBuffer b = ByteBuffer.allocate(e.getValue().values().length * 4).order(ByteOrder.LITTLE_ENDIAN);
            for (float v : e.getValue().values()) b.putFloat(v);
            entry(json, e.getKey().substring("model.".length()), "F32", e.getValue().shape(), data.size(), b.capacity());
            data.write(b.array());
        }
        byte[] hj = json.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8);
        ByteBuffer len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(hj.length);
        try (var out = java.nio.file.Files.newOutputStream(dir.resolve("model.safetensors"))) {
            out.write(len.array());
            out.write(hj);
            data.writeTo(out);
        }
        return dir;
    }

    private static void entry(ObjectNode json, String name, String dtype, long[] shape, long from, long bytes) {
        ObjectNode t = json.putObject(name);
        t.put("dtype", dtype);
        var sh = t.putArray("shape");
        for (long d : shape) sh.add(d);
        t.putArray("data_offsets").add(from).add(from + bytes);
    }
}
