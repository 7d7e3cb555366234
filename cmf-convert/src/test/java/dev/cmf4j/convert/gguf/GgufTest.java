package dev.cmf4j.convert.gguf;

import dev.cmf4j.convert.ConvertException;
import dev.cmf4j.convert.Converter;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.testkit.Fixtures;
import dev.cmf4j.text.Tokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class GgufTest {
    @TempDir Path tmp;

    private static Path convert(Path src, Path out) {
        try (var s = Sources.open(src)) {
            Converter.convert(s, out, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.F32, List.of())).withThreads(2));
        }
        return out;
    }

    private static float[] values(TensorEntry e) { return Dequantizers.of(e.dtype()).all(e.data(), e.shape()); }

    private static double relRmse(float[] got, float[] want) {
        double se = 0, n = 0;
        for (int i = 0; i < got.length; i++) {
            double d = (double) got[i] - want[i];
            se += d * d;
            n += (double) want[i] * want[i];
        }
        return Math.sqrt(se / n);
    }

    private static void assertBitsEqual(String what, float[] got, float[] want) {
        assertThat(got.length).as(what).isEqualTo(want.length);
        for (int i = 0; i < got.length; i++)
            if (Float.floatToRawIntBits(got[i]) != Float.floatToRawIntBits(want[i]))
                throw new AssertionError(what + ": element " + i + " is " + got[i] + ", expected " + want[i]);
    }

    // ---- the llama fixtures (written by llama.cpp's layout, Q/K permuted, llama3 rope as rope_freqs) ---------

    /** llama3rope-f32.gguf imports to exactly models/llama's weights (Q/K rows un-permuted) and its rope factors. */
    @Test void llamaF32ImportEqualsHfWeights() {
        Path out = convert(Fixtures.require("gguf/llama3rope-f32.gguf"), tmp.resolve("f32.cmf"));
        try (CmfFile f = CmfFile.open(out); SafetensorsReader st = SafetensorsReader.open(Fixtures.require("models/llama"))) {
            assertThat(f.verify()).isEmpty();
            assertThat(f.tensors().stream().map(TensorEntry::name).sorted().toList()).isEqualTo(st.names().stream().sorted().toList());
            for (TensorEntry e : f.tensors()) {
                assertThat(e.shape()).as(e.name()).isEqualTo(st.tensor(e.name()).shape());
                assertBitsEqual(e.name(), values(e), st.readFloats(e.name()));
            }
            var a = f.header().arch();
            assertThat(a.archName()).isEqualTo("llama");
            assertThat(a.hiddenSize()).isEqualTo(128);
            assertThat(a.numKvHeads()).isEqualTo(2);
            assertThat(a.headDim()).isEqualTo(32);
            assertThat(a.rmsNormEps()).isEqualTo(1e-5);
            assertThat(a.tieWordEmbeddings()).isFalse();
            // freq_base 500000 and the llama3 scaling (factor 8, low 1, high 4, original 64 positions) as
            // rope_freqs.weight: one divisor per frequency of the 32-wide heads, 1 for the fast ones, 8 for the slow
            // (the model's logits: ConvertedGoldenTest.llama3GgufWithRopeFrequencyFactorsMatchesTransformers)
            assertThat(a.ropeTheta()).isEqualTo(500000.0);
            assertThat(a.ropeFreqFactors()).hasSize(16);
            assertThat(a.ropeFreqFactors().get(0)).isEqualTo(1.0);
            assertThat(a.ropeFreqFactors().get(15)).isEqualTo(8.0);
            assertThat(f.header().tokenizerConfig().bosTokenId()).isEqualTo(1);
            assertThat(f.header().tokenizerConfig().eosTokenIds()).containsExactly(2);
            assertThat(f.header().tokenizerConfig().chatTemplate()).as("the file has no tokenizer.chat_template").isNull();
            assertThat(f.header().provenance().get("source_format").asText()).isEqualTo("gguf");
        }
    }

    /** Q8_0 / Q4_0 files: the import equals an independent decode of the blocks, and stays within quantization error of HF. */
    @ParameterizedTest
    @ValueSource(strings = {"q8_0", "q4_0"})
    void llamaQuantizedImport(String q) throws IOException {
        Path gguf = Fixtures.require("gguf/llama3rope-" + q + ".gguf");
        Path out = convert(gguf, tmp.resolve(q + ".cmf"));
        double bound = q.equals("q8_0") ? 0.01 : 0.15;
        try (CmfFile f = CmfFile.open(out); SafetensorsReader st = SafetensorsReader.open(Fixtures.require("models/llama"));
             GgufReader r = GgufReader.open(gguf)) {
            for (TensorEntry e : f.tensors()) {
                float[] got = values(e), hf = st.readFloats(e.name());
                assertThat(relRmse(got, hf)).as("%s %s relative RMSE vs HF", q, e.name()).isLessThanOrEqualTo(bound);
            }
            // independent decode of one permuted and one plain tensor, straight from the file bytes
            for (String name : List.of("blk.1.attn_k.weight", "blk.0.ffn_down.weight")) {
                GgufReader.Tensor t = r.tensor(name);
                byte[] raw = r.bytes(t).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
                float[] dec = GgufFiles.dequant(t.type(), raw, (int) t.numel());
                String hfName = name.equals("blk.1.attn_k.weight") ? "model.layers.1.self_attn.k_proj.weight" : "model.layers.0.mlp.down_proj.weight";
                float[] got = values(f.tensor(hfName));
                if (name.contains("attn_k")) dec = unpermute(dec, 2, (int) t.ne()[0]);
                assertBitsEqual(name, got, dec);
            }
        }
    }

    /** {@code --quant auto} maps each GGUF type to the closest CMF dtype. */
    @Test void autoPicksTheClosestDtypePerType() {
        Map<String, DType> want = new java.util.LinkedHashMap<>();
        for (String t : List.of("F32")) want.put(t, DType.F32);
        want.put("F16", DType.F16);
        want.put("BF16", DType.BF16);
        for (String t : List.of("Q8_0", "Q6_K", "Q5_0", "Q5_1", "Q5_K", "F8_E4M3")) want.put(t, DType.Q8_2F);
        for (String t : List.of("Q4_0", "Q4_1", "Q4_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS", "MXFP4")) want.put(t, DType.Q4_BLOCK);
        for (GgmlType g : GgmlType.values())
            if (g.decodable()) assertThat(want).as("auto covers %s", g).containsKey(g.name());
        TensorPolicy auto = new TensorPolicy(TensorPolicy.Mode.AUTO, List.of());
        want.forEach((type, d) -> {
            assertThat(TensorPolicy.auto(type)).as(type).isEqualTo(d);
            var m = new dev.cmf4j.convert.SourceTensor("model.layers.0.mlp.up_proj.weight", new long[] {64, 64}, type, "", (o, dst, off, len) -> {});
            var e = new dev.cmf4j.convert.SourceTensor("model.embed_tokens.weight", new long[] {64, 64}, type, "", (o, dst, off, len) -> {});
            var n = new dev.cmf4j.convert.SourceTensor("model.norm.weight", new long[] {64}, type, "", (o, dst, off, len) -> {});
            assertThat(auto.choose(m)).as(type).isEqualTo(d);
            assertThat(auto.choose(e)).as(type + " embeddings").isEqualTo(d == DType.Q4_BLOCK ? DType.Q8_ROW : d);
            assertThat(auto.choose(n)).as(type + " 1-D").isEqualTo(DType.F32);
        });
    }

    /**
     * {@code --quant auto} on the llama Q4_0 file: every Q4_0 matrix becomes q4_block holding exactly the file's values
     * (ggml's scale rule, negative scales included), the embeddings q8_row; on the Q8_0 file q8_2f, within 8-bit
     * rounding of the file's values.
     */
    @ParameterizedTest
    @ValueSource(strings = {"q4_0", "q8_0"})
    void autoKeepsTheFilesGrid(String q) {
        Path gguf = Fixtures.require("gguf/llama3rope-" + q + ".gguf");
        Path exact = convert(gguf, tmp.resolve(q + "-f32.cmf"));
        Path auto = tmp.resolve(q + "-auto.cmf");
        try (var s = Sources.open(gguf)) {
            Converter.convert(s, auto, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.AUTO, List.of())).withThreads(2));
        }
        double worst = 0;
        try (CmfFile a = CmfFile.open(auto); CmfFile f = CmfFile.open(exact)) {
            for (TensorEntry e : a.tensors()) {
                float[] got = values(e), want = values(f.tensor(e.name()));
                boolean embed = e.name().equals("model.embed_tokens.weight") || e.name().equals("lm_head.weight");
                if (e.shape().length == 1) assertThat(e.dtype()).isEqualTo(DType.F32);
                else if (q.equals("q4_0") && !embed) {
                    assertThat(e.dtype()).as(e.name()).isEqualTo(DType.Q4_BLOCK);
                    assertBitsEqual(e.name(), got, want);
                } else {
                    assertThat(e.dtype()).as(e.name()).isEqualTo(q.equals("q4_0") ? DType.Q8_ROW : DType.Q8_2F);
                    worst = Math.max(worst, relRmse(got, want));
                }
            }
        }
        assertThat(worst).as("8-bit re-encoding of the file's values, relative RMSE").isLessThanOrEqualTo(0.01);
        System.out.println("auto " + q + ": worst 8-bit relative RMSE against the file's values " + worst);
    }

    /**
     * What {@code --quant auto} adds to each type's own error, on the writer's data (N(0, 0.05) with an N(0, 1) outlier
     * every 97th value): float types and Q4_0 nothing (bit for bit), Q8_0 and Q6_K 0.0025 (q8_2f; q8_row's one scale a
     * row would add 0.037), Q4_K 0.18 (q4_block: any 4-bit re-encoding adds about what Q4_K itself costs here).
     */
    @Test void autoReencodingAddsLittleToEachType() {
        Map<GgmlType, Double> bound = Map.of(GgmlType.F32, 0.0, GgmlType.F16, 0.0, GgmlType.BF16, 0.0, GgmlType.Q4_0, 0.0,
                GgmlType.Q8_0, 0.005, GgmlType.Q6_K, 0.005, GgmlType.Q4_K, 0.2);
        long[] shape = {3, 512};
        for (GgmlType t : GgmlType.values()) {
            if (!bound.containsKey(t)) continue;
            float[] file = GgufFiles.dequant(t, GgufFiles.encode(t, weights(512 * 3, 2000 + t.id)), 512 * 3);
            DType d = TensorPolicy.auto(t.name());
            byte[] payload = dev.cmf4j.convert.quant.Quantizer.forSource(d, t.name()).encode(file, shape);
            float[] back = Dequantizers.of(d).all(java.lang.foreign.MemorySegment.ofArray(payload), shape);
            double e = relRmse(back, file);
            System.out.printf("auto %s -> %s: relative RMSE against the file's values %.5f%n", t, d.label, e);
            if (bound.get(t) == 0.0) assertBitsEqual(t + " -> " + d.label, back, file);
            else assertThat(e).as("%s -> %s", t, d.label).isLessThanOrEqualTo(bound.get(t));
        }
    }

    /** HF row h·hd + j·hd/2 + i comes from GGUF row h·hd + 2i + j. */
    private static float[] unpermute(float[] g, int heads, int cols) {
        int rows = g.length / cols, hd = rows / heads;
        float[] out = new float[g.length];
        for (int h = 0; h < heads; h++)
            for (int j = 0; j < 2; j++)
                for (int i = 0; i < hd / 2; i++)
                    System.arraycopy(g, (h * hd + 2 * i + j) * cols, out, (h * hd + j * hd / 2 + i) * cols, cols);
        return out;
    }

    /** The tokenizer.json rebuilt from the GGUF tokenizes like the fixture's synthetic-tokenizer.json. */
    @Test void ggufTokenizerIsEquivalent() throws IOException {
        Path out = convert(Fixtures.require("gguf/llama3rope-q8_0.gguf"), tmp.resolve("t.cmf"));
        Tokenizer ref = Tokenizer.fromFile(Fixtures.require("gguf/synthetic-tokenizer.json"));
        try (CmfFile f = CmfFile.open(out)) {
            Tokenizer ours = Tokenizer.fromJson(f.vocab().orElseThrow());
            List<String> texts = List.of("Hello world", "  spaces   and\ttabs\n\nnew lines", "numbers 1234567 3.14159",
                    "don't WON'T you'll", "unicode: héllo wörld ñ 中文 日本語 😀", "<|begin_of_text|>special<|end_of_text|>",
                    "", " ", "x".repeat(300), "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~");
            for (String t : texts) {
                int[] a = ref.encode(t, false).ids(), b = ours.encode(t, false).ids();
                assertThat(b).as("ids of %s", t).containsExactly(a);
                assertThat(ours.decode(b, false)).as("decode of %s", t).isEqualTo(ref.decode(a, false));
            }
        }
    }

    // ---- every supported tensor type through the test writer ----------------------------------------

    private static float[] weights(int n, long seed) {
        Random r = new Random(seed);
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) (r.nextGaussian() * 0.05 + (i % 97 == 0 ? r.nextGaussian() : 0));
        return x;
    }

    @Test void everyTypeRoundTripsThroughTheWriter() {
        // data: N(0, 0.05) with an N(0, 1) outlier every 97th element (outliers inflate block scales)
        Map<GgmlType, Double> bound = Map.of(GgmlType.F32, 0.0, GgmlType.F16, 5e-4, GgmlType.BF16, 3e-3, GgmlType.Q8_0, 0.015,
                GgmlType.Q4_0, 0.2, GgmlType.Q4_K, 0.13, GgmlType.Q6_K, 0.04);
        GgufFiles w = new GgufFiles().str("general.architecture", "test");
        Map<GgmlType, float[]> src = new java.util.EnumMap<>(GgmlType.class);
        for (GgmlType t : bound.keySet()) {
            float[] x = weights(512 * 3, 1000 + t.id);
            src.put(t, x);
            w.tensor("t." + t.name(), t, new long[] {512, 3}, x);
        }
        Path p = tmp.resolve("types.gguf");
        write(p, w.bytes());
        try (GgufReader r = GgufReader.open(p)) {
            for (GgmlType t : bound.keySet()) {
                GgufReader.Tensor tt = r.tensor("t." + t.name());
                assertThat(tt.type()).isEqualTo(t);
                assertThat(tt.shape()).containsExactly(3, 512);
                float[] got = r.readFloats(tt);
                byte[] raw = r.bytes(tt).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
                assertThat(raw).as("%s payload", t).isEqualTo(GgufFiles.encode(t, src.get(t)));
                assertBitsEqual(t + " vs the ggml formulas", got, GgufFiles.dequant(t, raw, got.length));
                System.out.printf("gguf %s relative RMSE %.5f%n", t, relRmse(got, src.get(t)));
                assertThat(relRmse(got, src.get(t))).as("%s relative RMSE", t).isLessThanOrEqualTo(bound.get(t));
                float[] part = new float[300];
                r.readFloats(tt, 77, part, 0, 300);
                assertBitsEqual(t + " range read", part, Arrays.copyOfRange(got, 77, 377));
            }
        }
    }

    /**
     * Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS and MXFP4 decode bit for bit as ggml's own dequantizers:
     * {@code ggml-dequant-ref.bin} holds, per type, seeded random blocks (their f16 and E8M0 scales set to small finite
     * values) and the floats llama.cpp's {@code dequantize_row_*} (ggml-quants.c, built outside this repository) gave
     * them; each block decoded alone, and a range read across blocks.
     */
    @Test void moreTypesDecodeAsGgmlsOwnDequantizers() throws IOException {
        byte[] all;
        try (var in = GgufTest.class.getResourceAsStream("ggml-dequant-ref.bin")) { all = in.readAllBytes(); }
        ByteBuffer b = ByteBuffer.wrap(all).order(ByteOrder.LITTLE_ENDIAN);
        List<GgmlType> seen = new ArrayList<>();
        while (b.hasRemaining()) {
            GgmlType t = GgmlType.ofId(b.getInt());
            int blocks = b.getInt(), rawLen = b.getInt();
            assertThat(rawLen).as(t.name()).isEqualTo(blocks * t.blockBytes);
            byte[] raw = new byte[rawLen];
            b.get(raw);
            float[] want = new float[blocks * t.blockSize];
            for (int i = 0; i < want.length; i++) want[i] = b.getFloat();
            assertThat(t.decodable()).as(t.name()).isTrue();
            var seg = java.lang.foreign.MemorySegment.ofArray(raw);
            float[] got = new float[want.length], block = new float[t.blockSize];
            for (int k = 0; k < blocks; k++) {
                GgmlDequant.decodeBlock(t, seg, (long) k * t.blockBytes, block);
                System.arraycopy(block, 0, got, k * t.blockSize, t.blockSize);
            }
            assertBitsEqual(t + " vs ggml's dequantize_row", got, want);
            int from = t.blockSize / 2 + 3, len = want.length - from - 5;
            float[] part = new float[len];
            GgmlDequant.read(t, seg, from, part, 0, len);
            assertBitsEqual(t + " range read", part, Arrays.copyOfRange(want, from, from + len));
            seen.add(t);
        }
        assertThat(seen).containsExactly(GgmlType.Q4_1, GgmlType.Q5_0, GgmlType.Q5_1, GgmlType.Q2_K, GgmlType.Q3_K, GgmlType.Q5_K,
                GgmlType.IQ4_NL, GgmlType.IQ4_XS, GgmlType.MXFP4);
    }

    /** Hand-built Q4_K and Q6_K blocks with values worked out on paper from ggml's formulas. */
    @Test void kQuantKnownAnswers() {
        ByteBuffer k4 = ByteBuffer.allocate(144).order(ByteOrder.LITTLE_ENDIAN);
        k4.putShort(Float.floatToFloat16(1.0f)).putShort(Float.floatToFloat16(0.5f));
        byte[] sc = new byte[12];
        sc[0] = (byte) (3 | (1 << 6));   // scale 0 = 3; its top bits give scale 4 its high part (1 -> +16)
        sc[4] = 2;                       // min 0 = 2
        sc[8] = 0x25;                    // scale 4 low = 5, min 4 low = 2
        k4.put(sc);
        byte[] qs = new byte[128];
        qs[0] = 0x07;                    // element 0: low nibble 7; element 32: high nibble 0
        qs[64] = (byte) 0x9B;            // element 128: low nibble 11 (sub-block 4)
        k4.put(qs);
        float[] y = new float[256];
        GgmlDequant.decodeBlock(GgmlType.Q4_K, java.lang.foreign.MemorySegment.ofArray(k4.array()), 0, y);
        assertThat(y[0]).isEqualTo(1.0f * 3 * 7 - 0.5f * 2);        // 20
        assertThat(y[1]).isEqualTo(-1.0f);                            // q = 0
        assertThat(y[128]).isEqualTo(1.0f * 21 * 11 - 0.5f * 2);     // 230
        assertThat(y[160]).isEqualTo(0.0f * 9);                       // sub-block 5: scale 0, min 0 -> 0

        ByteBuffer k6 = ByteBuffer.allocate(210).order(ByteOrder.LITTLE_ENDIAN);
        byte[] ql = new byte[128], qh = new byte[64], s6 = new byte[16];
        ql[0] = 0x21;                    // element 0 low 4 bits = 1, element 64 low 4 bits = 2
        qh[0] = 0x02;                    // element 0 high 2 bits = 2 -> q = 33 - 32 = 1; elements 32/64/96 high bits 0
        s6[0] = 2;
        s6[2] = -3;
        s6[4] = 1;
        k6.put(ql).put(qh).put(s6).putShort(Float.floatToFloat16(0.5f));
        GgmlDequant.decodeBlock(GgmlType.Q6_K, java.lang.foreign.MemorySegment.ofArray(k6.array()), 0, y);
        assertThat(y[0]).isEqualTo(0.5f * 2 * 1);                    // 1
        assertThat(y[32]).isEqualTo(0.5f * -3 * -32);                // 48
        assertThat(y[64]).isEqualTo(0.5f * 1 * (2 - 32));            // -15
    }

    // ---- other architectures through the writer, llama.cpp's naming ---------------------------------

    /** qwen3 (q/k norms, tied, no permutation) written as llama.cpp would, imported: the HF tensors exactly. */
    @Test void qwen3GgufImportMatchesHf() throws IOException {
        Path hf = Fixtures.require("models/qwen3");
        GgufFiles w = new GgufFiles().str("general.architecture", "qwen3")
                .u32("qwen3.block_count", 2).u32("qwen3.context_length", 4096).u32("qwen3.embedding_length", 64)
                .u32("qwen3.feed_forward_length", 192).u32("qwen3.attention.head_count", 4).u32("qwen3.attention.head_count_kv", 2)
                .u32("qwen3.attention.key_length", 32).u32("qwen3.attention.value_length", 32)
                .f32("qwen3.rope.freq_base", 1e6f).f32("qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
        Map<String, String> names = new java.util.LinkedHashMap<>();
        names.put("model.embed_tokens.weight", "token_embd.weight");
        names.put("model.norm.weight", "output_norm.weight");
        for (int i = 0; i < 2; i++) {
            String p = "model.layers." + i + ".", b = "blk." + i + ".";
            names.put(p + "input_layernorm.weight", b + "attn_norm.weight");
            names.put(p + "post_attention_layernorm.weight", b + "ffn_norm.weight");
            names.put(p + "self_attn.q_proj.weight", b + "attn_q.weight");
            names.put(p + "self_attn.k_proj.weight", b + "attn_k.weight");
            names.put(p + "self_attn.v_proj.weight", b + "attn_v.weight");
            names.put(p + "self_attn.o_proj.weight", b + "attn_output.weight");
            names.put(p + "self_attn.q_norm.weight", b + "attn_q_norm.weight");
            names.put(p + "self_attn.k_norm.weight", b + "attn_k_norm.weight");
            names.put(p + "mlp.gate_proj.weight", b + "ffn_gate.weight");
            names.put(p + "mlp.up_proj.weight", b + "ffn_up.weight");
            names.put(p + "mlp.down_proj.weight", b + "ffn_down.weight");
        }
        try (SafetensorsReader st = SafetensorsReader.open(hf)) {
            for (var e : names.entrySet()) {
                long[] s = st.tensor(e.getKey()).shape();
                long[] ne = new long[s.length];
                for (int i = 0; i < s.length; i++) ne[i] = s[s.length - 1 - i];
                boolean twoD = s.length == 2;
                w.tensor(e.getValue(), twoD && e.getKey().contains("mlp") ? GgmlType.F16 : GgmlType.F32, ne, st.readFloats(e.getKey()));
            }
            Path p = tmp.resolve("qwen3.gguf");
            write(p, w.bytes());
            Path out = convert(p, tmp.resolve("qwen3.cmf"));
            try (CmfFile f = CmfFile.open(out)) {
                assertThat(f.header().arch().tieWordEmbeddings()).isTrue();
                assertThat(f.header().arch().archName()).isEqualTo("qwen3");
                assertThat(f.header().arch().ropeTheta()).isEqualTo(1e6);
                assertThat(f.find("lm_head.weight")).isEmpty();
                for (var e : names.entrySet()) {
                    float[] want = st.readFloats(e.getKey());
                    if (e.getKey().contains("mlp")) for (int i = 0; i < want.length; i++) want[i] = Float.float16ToFloat(Float.floatToFloat16(want[i]));
                    assertBitsEqual(e.getKey(), values(f.tensor(e.getKey())), want);
                }
            }
        }
    }

    /**
     * gemma3 as llama.cpp writes it: (1+w) norms stored with the +1 added, ffn_norm = pre-feedforward norm.
     * The import keeps the stored norms and says norm_style qwen; every other tensor is the HF one.
     */
    @Test void gemma3GgufImport() throws IOException {
        Path hf = Fixtures.require("models/gemma3");
        GgufFiles w = new GgufFiles().str("general.architecture", "gemma3")
                .u32("gemma3.block_count", 3).u32("gemma3.context_length", 4096).u32("gemma3.embedding_length", 64)
                .u32("gemma3.feed_forward_length", 128).u32("gemma3.attention.head_count", 4).u32("gemma3.attention.head_count_kv", 2)
                .u32("gemma3.attention.key_length", 16).u32("gemma3.attention.value_length", 16).u32("gemma3.attention.sliding_window", 8)
                .f32("gemma3.rope.freq_base", 1e6f).str("gemma3.rope.scaling.type", "linear").f32("gemma3.rope.scaling.factor", 8f)
                .f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
        Map<String, String> names = new java.util.LinkedHashMap<>();
        names.put("model.embed_tokens.weight", "token_embd.weight");
        names.put("model.norm.weight", "output_norm.weight");
        for (int i = 0; i < 3; i++) {
            String p = "model.layers." + i + ".", b = "blk." + i + ".";
            names.put(p + "input_layernorm.weight", b + "attn_norm.weight");
            names.put(p + "post_attention_layernorm.weight", b + "post_attention_norm.weight");
            names.put(p + "pre_feedforward_layernorm.weight", b + "ffn_norm.weight");
            names.put(p + "post_feedforward_layernorm.weight", b + "post_ffw_norm.weight");
            for (String x : List.of("q", "k", "v")) names.put(p + "self_attn." + x + "_proj.weight", b + "attn_" + x + ".weight");
            names.put(p + "self_attn.o_proj.weight", b + "attn_output.weight");
            names.put(p + "self_attn.q_norm.weight", b + "attn_q_norm.weight");
            names.put(p + "self_attn.k_norm.weight", b + "attn_k_norm.weight");
            for (String x : List.of("gate", "up", "down")) names.put(p + "mlp." + x + "_proj.weight", b + "ffn_" + x + ".weight");
        }
        try (SafetensorsReader st = SafetensorsReader.open(hf)) {
            Map<String, float[]> stored = new java.util.HashMap<>();
            for (var e : names.entrySet()) {
                long[] s = st.tensor(e.getKey()).shape();
                long[] ne = new long[s.length];
                for (int i = 0; i < s.length; i++) ne[i] = s[s.length - 1 - i];
                float[] v = st.readFloats(e.getKey());
                if (e.getKey().endsWith("norm.weight")) for (int i = 0; i < v.length; i++) v[i] += 1f;
                stored.put(e.getKey(), v);
                w.tensor(e.getValue(), GgmlType.F32, ne, v);
            }
            Path p = tmp.resolve("gemma3.gguf");
            write(p, w.bytes());
            Path out = convert(p, tmp.resolve("gemma3.cmf"));
            try (CmfFile f = CmfFile.open(out)) {
                var a = f.header().arch();
                assertThat(a.archName()).isEqualTo("gemma3");
                assertThat(a.normStyle()).isEqualTo("qwen");
                assertThat(a.slidingWindow()).isEqualTo(8);
                assertThat(a.layerTypes()).containsExactly("SlidingAttention", "SlidingAttention", "SlidingAttention");
                assertThat(a.embedMultiplier()).isEqualTo(8.0);
                assertThat(a.ropeLocalBaseFreq()).isEqualTo(10000.0);
                assertThat(a.extra().get("rope").get("FullAttention").get("rope_type").asText()).isEqualTo("linear");
                assertThat(a.tieWordEmbeddings()).isTrue();
                assertThat(f.tensors()).hasSize(names.size());
                for (String n : names.keySet()) assertBitsEqual(n, values(f.tensor(n)), stored.get(n));
            }
        }
    }

    // ---- hostile input ----------------------------------------------------------------------------

    @Test void corruptFilesGiveClearErrors() throws IOException {
        byte[] good = new GgufFiles().str("general.architecture", "llama").tensor("x", GgmlType.Q8_0, new long[] {64, 2}, weights(128, 3)).bytes();
        expect(Arrays.copyOf(good, 3), "truncated");
        byte[] magic = good.clone();
        magic[0] = 'X';
        expect(magic, "not a GGUF file");
        byte[] ver = good.clone();
        ByteBuffer.wrap(ver).order(ByteOrder.LITTLE_ENDIAN).putInt(4, 7);
        expect(ver, "version 7");
        byte[] count = good.clone();
        ByteBuffer.wrap(count).order(ByteOrder.LITTLE_ENDIAN).putLong(8, 1L << 40);
        expect(count, "tensor count");
        byte[] strlen = good.clone();
        ByteBuffer.wrap(strlen).order(ByteOrder.LITTLE_ENDIAN).putLong(24, 1L << 50);
        expect(strlen, "runs past the end");
        expect(Arrays.copyOf(good, good.length - 10), "runs past the end of the file");
        expect(new GgufFiles().raw("y", GgmlType.Q8_0, new long[] {48, 1}, new byte[51]).bytes(), "multiple of 32");
        byte[] unknown = new GgufFiles().raw("z", GgmlType.IQ2_XS, new long[] {256}, new byte[74]).bytes();
        Path p = tmp.resolve("u.gguf");
        write(p, unknown);
        try (GgufReader r = GgufReader.open(p)) {
            assertThatThrownBy(() -> r.readFloats(r.tensor("z"))).isInstanceOf(ConvertException.class).hasMessageContaining("IQ2_XS")
                    .hasMessageContaining("z").hasMessageContaining("Q5_1").hasMessageContaining("IQ4_XS").hasMessageContaining("MXFP4 tensors");
        }
    }

    /** Random damage: a typed error naming the file, or a file that reads. */
    @Test void fuzzedFilesNeverCrash() throws IOException {
        byte[] good = new GgufFiles().str("general.architecture", "llama").u32("llama.block_count", 1)
                .strings("tokenizer.ggml.tokens", List.of("a", "b", "ab"))
                .tensor("x", GgmlType.Q4_0, new long[] {64, 2}, weights(128, 4))
                .tensor("y", GgmlType.Q6_K, new long[] {256}, weights(256, 5)).bytes();
        Random rnd = new Random(99);
        Path p = tmp.resolve("fuzz.gguf");
        for (int iter = 0; iter < 400; iter++) {
            byte[] b = good.clone();
            int flips = 1 + rnd.nextInt(4);
            for (int k = 0; k < flips; k++) b[rnd.nextInt(Math.min(b.length, 400))] = (byte) rnd.nextInt(256);
            if (rnd.nextInt(6) == 0) b = Arrays.copyOf(b, rnd.nextInt(b.length));
            write(p, b);
            try (GgufReader r = GgufReader.open(p)) {
                for (GgufReader.Tensor t : r.tensors()) {
                    if (t.type() != null && t.type().decodable() && t.numel() < 100_000) r.readFloats(t);
                }
            } catch (ConvertException expected) {
                assertThat(expected.getMessage()).contains(p.toString());
            }
        }
    }

    private void expect(byte[] content, String fragment) throws IOException {
        Path p = tmp.resolve("bad.gguf");
        write(p, content);
        assertThatThrownBy(() -> GgufReader.open(p).close()).isInstanceOf(ConvertException.class)
                .hasMessageContaining(p.toString()).hasMessageContaining(fragment);
    }

    private static void write(Path p, byte[] b) {
        try {
            Files.write(p, b);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    @SuppressWarnings("unused")
    private static List<String> list(String... s) { return new ArrayList<>(List.of(s)); }
}
