package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.format.quant.Dequantizers;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Writes a CMF model back as a Hugging Face folder that transformers loads: {@code config.json} and
 * {@code generation_config.json} (the converter kept them in {@code provenance}), {@code tokenizer.json} (the vocab
 * section, verbatim), {@code tokenizer_config.json} (the chat bundle) and {@code model.safetensors}, every backbone
 * tensor dequantized to f32, bf16 or f16 (round to nearest even) under its own name (CMF names are HF's). With a skill
 * id, that skill's replacements stand in for the backbone's tensors: the fine-tuned model. For training on the
 * weights a quantized file really runs, or reading them in tools that know safetensors.
 */
public final class HfExport {
    private HfExport() {}

    /** The float types a tensor can be written as. */
    public enum Dtype {
        F32("F32", 4), BF16("BF16", 2), F16("F16", 2);

        final String label;
        final int bytes;

        Dtype(String label, int bytes) {
            this.label = label;
            this.bytes = bytes;
        }

        public static Dtype of(String s) {
            return switch (s.toLowerCase(java.util.Locale.ROOT)) {
                case "f32", "float32" -> F32;
                case "bf16", "bfloat16" -> BF16;
                case "f16", "float16" -> F16;
                default -> throw new ConvertException("dtype '" + s + "': f32, bf16 or f16");
            };
        }
    }

    /** What was written: the folder, the number of tensors and the safetensors' size. */
    public record Result(Path dir, int tensors, long bytes) {}

    public static Result write(CmfFile f, Path dir, Dtype dtype, String skill) {
        JsonNode prov = f.header().provenance();
        JsonNode config = prov == null ? null : prov.get("hf_config");
        if (config == null || !config.isObject())
            throw new ConvertException(f.label() + " carries no provenance.hf_config (it was not converted from a Hugging Face"
                    + " checkpoint by cmf4j), so config.json cannot be written");
        if (skill != null && f.header().skill(skill) == null)
            throw new ConvertException(f.label() + " has no skill '" + skill + "'");
        ObjectMapper json = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
        try {
            Files.createDirectories(dir);
            json.writeValue(dir.resolve("config.json").toFile(), config);
            JsonNode gen = prov.get("hf_generation_config");
            if (gen != null && gen.isObject()) json.writeValue(dir.resolve("generation_config.json").toFile(), gen);
            var vocab = f.vocab();
            if (vocab.isPresent()) Files.write(dir.resolve("tokenizer.json"), vocab.get());
            var tc = f.header().tokenizerConfig();
            if (tc != null) {
                ObjectNode o = json.createObjectNode();
                tc.extra().forEach(o::set);
                if (tc.chatTemplate() != null) o.put("chat_template", tc.chatTemplate());
                o.put("tokenizer_class", "PreTrainedTokenizerFast");
                json.writeValue(dir.resolve("tokenizer_config.json").toFile(), o);
            }
        } catch (IOException e) {
            throw new UncheckedIOException(dir + ": " + e.getMessage(), e);
        }
        List<TensorEntry> ts = new ArrayList<>();
        for (TensorEntry t : f.tensors()) if (!t.name().startsWith("skill.")) ts.add(t);
        long bytes = writeSafetensors(f, ts, dir.resolve("model.safetensors"), dtype, skill);
        return new Result(dir, ts.size(), bytes);
    }

    private static long writeSafetensors(CmfFile f, List<TensorEntry> ts, Path out, Dtype dtype, String skill) {
        Map<String, Object> header = new LinkedHashMap<>();
        header.put("__metadata__", Map.of("format", "pt"));
        long off = 0;
        for (TensorEntry t : ts) {
            long n = dtype.bytes * t.elements();
            header.put(t.name(), Map.of("dtype", dtype.label, "shape", t.shape(), "data_offsets", List.of(off, off + n)));
            off += n;
        }
        byte[] h;
        try {
            h = new ObjectMapper().writeValueAsBytes(header);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        int padded = (h.length + 7) / 8 * 8;   // the data starts 8-aligned; the header is padded with spaces
        ByteBuffer head = ByteBuffer.allocate(8 + padded).order(ByteOrder.LITTLE_ENDIAN);
        head.putLong(padded).put(h);
        while (head.hasRemaining()) head.put((byte) ' ');
        Path tmp = out.resolveSibling(out.getFileName() + ".tmp");
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                StandardOpenOption.WRITE)) {
            head.flip();
            while (head.hasRemaining()) ch.write(head);
            for (TensorEntry t : ts) {
                TensorEntry src = t;
                if (skill != null) {
                    src = f.find("skill." + skill + "." + t.name()).orElse(t);
                }
                float[] v;
                try {
                    v = Dequantizers.of(src.dtype()).decoder(src.data(), src.shape()).all();
                } catch (RuntimeException e) {
                    throw new ConvertException("tensor '" + src.name() + "' (" + src.dtype().label + "): " + e.getMessage());
                }
                ByteBuffer b = ByteBuffer.allocate(dtype.bytes * v.length).order(ByteOrder.LITTLE_ENDIAN);
                for (float x : v) {
                    switch (dtype) {
                        case F32 -> b.putFloat(x);
                        case F16 -> b.putShort(Float.floatToFloat16(x));
                        case BF16 -> b.putShort(bf16(x));
                    }
                }
                b.flip();
                while (b.hasRemaining()) ch.write(b);
            }
            ch.force(true);
        } catch (IOException e) {
            throw new UncheckedIOException(out + ": " + e.getMessage(), e);
        }
        try {
            Files.move(tmp, out, java.nio.file.StandardCopyOption.REPLACE_EXISTING, java.nio.file.StandardCopyOption.ATOMIC_MOVE);
            return Files.size(out);
        } catch (IOException e) {
            throw new UncheckedIOException(out + ": " + e.getMessage(), e);
        }
    }

    /** float32 → bfloat16, round to nearest even (NaN kept a quiet NaN). */
    static short bf16(float x) {
        int bits = Float.floatToRawIntBits(x);
        if (Float.isNaN(x)) return (short) ((bits >>> 16) | 0x40);
        return (short) ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16);
    }
}
