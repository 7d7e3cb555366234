package dev.cmf4j.convert.gguf;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * Writes the small seed files of {@link GgufFuzzTest} with the test writer: a one-layer llama with a byte-level BPE
 * tokenizer, one with a SentencePiece tokenizer, and quantized tensors of every type the reader dequantizes. Run once
 * by hand (docs/FUZZING.md); the outputs are committed under {@code GgufFuzzTestInputs/readAndImport/}.
 */
final class GgufSeedFiles {
    private GgufSeedFiles() {}

    public static void main(String[] args) throws IOException {
        Path out = Path.of(args[0]);
        Files.createDirectories(out);
        Files.write(out.resolve("llama-bpe.gguf"), llama("gpt2").strings("tokenizer.ggml.merges", List.of("a b", "ab c")).bytes());
        Files.write(out.resolve("llama-spm.gguf"), llama("llama")
                .f32s("tokenizer.ggml.scores", List.of(0f, 0f, 0f, -1f, -2f, -3f, -4f)).bytes());
        Files.write(out.resolve("quant-types.gguf"), new GgufFiles().str("general.architecture", "llama")
                .tensor("q8", GgmlType.Q8_0, new long[] {32, 1}, ramp(32))
                .tensor("q4", GgmlType.Q4_0, new long[] {32, 1}, ramp(32))
                .tensor("q4k", GgmlType.Q4_K, new long[] {256}, ramp(256))
                .tensor("q6k", GgmlType.Q6_K, new long[] {256}, ramp(256))
                .tensor("f16", GgmlType.F16, new long[] {4}, ramp(4))
                .tensor("bf16", GgmlType.BF16, new long[] {4}, ramp(4)).bytes());
    }

    private static GgufFiles llama(String tokenizerModel) {
        return new GgufFiles().str("general.architecture", "llama").u32("llama.block_count", 1)
                .u32("llama.context_length", 64).u32("llama.embedding_length", 32).u32("llama.feed_forward_length", 32)
                .u32("llama.attention.head_count", 2).u32("llama.attention.head_count_kv", 1)
                .f32("llama.rope.freq_base", 10000f).f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
                .str("tokenizer.ggml.model", tokenizerModel)
                .strings("tokenizer.ggml.tokens", List.of("<unk>", "<s>", "</s>", "a", "b", "ab", "c"))
                .i32s("tokenizer.ggml.token_type", List.of(2, 3, 3, 1, 1, 1, 1))
                .u32("tokenizer.ggml.bos_token_id", 1).u32("tokenizer.ggml.eos_token_id", 2)
                .str("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}")
                .tensor("token_embd.weight", GgmlType.F32, new long[] {32, 7}, ramp(224))
                .tensor("output_norm.weight", GgmlType.F32, new long[] {32}, ramp(32))
                .tensor("blk.0.attn_norm.weight", GgmlType.F32, new long[] {32}, ramp(32))
                .tensor("blk.0.attn_q.weight", GgmlType.Q8_0, new long[] {32, 32}, ramp(1024));
    }

    private static float[] ramp(int n) {
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (i % 17 - 8) / 8f;
        return x;
    }
}
