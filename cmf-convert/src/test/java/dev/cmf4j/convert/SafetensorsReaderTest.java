package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class SafetensorsReaderTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    @TempDir Path tmp;

    private static long[] s(long... d) { return d; }

    // ---- the real fixture files ------------------------------------------------------------------

    /** Llama's embedding output (golden hidden_states[0]) is exactly embed_tokens rows of the prompt ids. */
    @Test void llamaWeightsAndGoldensAgree() throws IOException {
        Path dir = Fixtures.require("models/llama");
        JsonNode golden = JSON.readTree(dir.resolve("golden.json").toFile());
        try (var w = SafetensorsReader.open(dir); var g = SafetensorsReader.open(dir.resolve("golden.safetensors"))) {
            assertThat(w.tensors()).hasSize(21);
            assertThat(w.metadata()).containsEntry("format", "pt");
            var emb = w.tensor("model.embed_tokens.weight");
            assertThat(emb.dtype()).isEqualTo(SafetensorsReader.Dtype.F32);
            assertThat(emb.shape()).containsExactly(1024, 128);

            long[] ids = g.readLongs("input_ids");
            long[] expectIds = JSON.treeToValue(golden.get("input_ids"), long[].class);
            assertThat(ids).containsExactly(expectIds);
            long[] greedy = g.readLongs("greedy_ids");
            assertThat(greedy).containsExactly(JSON.treeToValue(golden.get("greedy_ids"), long[].class));

            float[] table = w.readFloats("model.embed_tokens.weight");
            float[] hidden = g.readFloats("hidden_states");
            int h = 128;
            for (int t = 0; t < ids.length; t++) {
                float[] row = Arrays.copyOfRange(table, (int) ids[t] * h, (int) ids[t] * h + h);
                float[] got = Arrays.copyOfRange(hidden, t * h, t * h + h);
                assertThat(got).as("position %d", t).containsExactly(row);
            }
            float[] logits = g.readFloats("logits");
            float maxAbs = 0;
            for (float v : logits) maxAbs = Math.max(maxAbs, Math.abs(v));
            assertThat((double) maxAbs).isEqualTo(golden.get("max_abs_logit").asDouble(), org.assertj.core.data.Offset.offset(1e-6));
        }
    }

    /** qwen3_e2e stores bf16 weights; its golden embedding output is their exact float32 upcast. */
    @Test void bf16WidensExactly() throws IOException {
        Path dir = Fixtures.require("models/qwen3_e2e");
        try (var w = SafetensorsReader.open(dir.resolve("model.safetensors"));
             var g = SafetensorsReader.open(dir.resolve("golden.safetensors"))) {
            var emb = w.tensor("model.embed_tokens.weight");
            assertThat(emb.dtype()).isEqualTo(SafetensorsReader.Dtype.BF16);
            long[] ids = g.readLongs("input_ids");
            float[] hidden = g.readFloats("hidden_states");
            int h = (int) emb.dim(1);
            float[] row = new float[h];
            for (int t = 0; t < ids.length; t++) {
                w.readFloats(emb.name(), ids[t] * h, row, 0, h);
                assertThat(Arrays.copyOfRange(hidden, t * h, t * h + h)).as("position %d", t).containsExactly(row);
            }
        }
    }

    // ---- synthetic files ---------------------------------------------------------------------------

    @Test void readsEveryFloatAndIntegerDtype() throws IOException {
        byte[] i32 = le(8, b -> { b.putInt(-7); b.putInt(Integer.MAX_VALUE); });
        byte[] u16 = le(4, b -> { b.putShort((short) 0xFFFF); b.putShort((short) 3); });
        Path f = new SafetensorsFiles()
                .f32("a.f32", s(2, 2), 1f, -2.5f, 3e-38f, Float.MAX_VALUE)
                .f16("a.f16", s(3), 0.5f, -65504f, 6.1035156e-05f)
                .bf16("a.bf16", s(2), 1.5f, -3.0e38f)
                .add("a.i32", "I32", s(2), i32)
                .add("a.u16", "U16", s(2), u16)
                .add("a.u8", "U8", s(2), new byte[] {(byte) 255, 1})
                .add("a.bool", "BOOL", s(1), new byte[] {1})
                .i64("a.scalar", s(), 42)
                .write(tmp.resolve("x.safetensors"));
        try (var r = SafetensorsReader.open(f)) {
            assertThat(r.names()).containsExactly("a.f32", "a.f16", "a.bf16", "a.i32", "a.u16", "a.u8", "a.bool", "a.scalar");
            assertThat(r.readFloats("a.f32")).containsExactly(1f, -2.5f, 3e-38f, Float.MAX_VALUE);
            assertThat(r.readFloats("a.f16")).containsExactly(0.5f, -65504f, 6.1035156e-05f);
            assertThat(r.readFloats("a.bf16")).containsExactly(1.5f, Float.intBitsToFloat(Float.floatToRawIntBits(-3.0e38f) & 0xFFFF0000));
            assertThat(r.readLongs("a.i32")).containsExactly(-7, Integer.MAX_VALUE);
            assertThat(r.readLongs("a.u16")).containsExactly(65535, 3);
            assertThat(r.readLongs("a.u8")).containsExactly(255, 1);
            assertThat(r.readLongs("a.bool")).containsExactly(1);
            assertThat(r.readLongs("a.scalar")).containsExactly(42);
            assertThat(r.tensor("a.scalar").numel()).isEqualTo(1);
            float[] part = new float[2];
            r.readFloats("a.f32", 1, part, 0, 2);
            assertThat(part).containsExactly(-2.5f, 3e-38f);
            assertThatThrownBy(() -> r.readFloats("a.f32", 3, part, 0, 2)).isInstanceOf(IndexOutOfBoundsException.class);
            assertThat(r.bytes("a.u8").byteSize()).isEqualTo(2);
        }
    }

    @Test void refusesOtherDtypesNamingTensorAndDtype() throws IOException {
        Path f = new SafetensorsFiles()
                .add("w.f64", "F64", s(1), new byte[8])
                .add("w.fp4", "F4", s(4), new byte[2])
                .f32("w.ok", s(1), 1f)
                .write(tmp.resolve("x.safetensors"));
        try (var r = SafetensorsReader.open(f)) {
            assertThat(r.tensor("w.fp4").dtype()).isNull();
            assertThat(r.tensor("w.fp4").dtypeName()).isEqualTo("F4");
            assertThatThrownBy(() -> r.readFloats("w.f64")).isInstanceOf(ConvertException.class)
                    .hasMessageContaining("w.f64").hasMessageContaining("F64").hasMessageContaining(f.toString());
            assertThatThrownBy(() -> r.readFloats("w.fp4")).hasMessageContaining("w.fp4").hasMessageContaining("F4");
            assertThatThrownBy(() -> r.readLongs("w.ok")).hasMessageContaining("w.ok").hasMessageContaining("F32");
            assertThatThrownBy(() -> r.tensor("nope")).isInstanceOf(ConvertException.class).hasMessageContaining("nope");
        }
    }

    @Test void shardedCheckpointThroughIndex() throws IOException {
        new SafetensorsFiles().f32("b", s(2), 3f, 4f).f32("a", s(1), 1f).write(tmp.resolve("model-00001-of-00002.safetensors"));
        new SafetensorsFiles().f16("c", s(1), 5f).write(tmp.resolve("model-00002-of-00002.safetensors"));
        Files.writeString(tmp.resolve("model.safetensors.index.json"), """
                {"metadata": {"total_size": 14}, "weight_map": {
                  "a": "model-00001-of-00002.safetensors",
                  "c": "model-00002-of-00002.safetensors",
                  "b": "model-00001-of-00002.safetensors"}}""");
        try (var r = SafetensorsReader.open(tmp)) {
            assertThat(r.names()).containsExactly("a", "c", "b");
            assertThat(r.readFloats("b")).containsExactly(3f, 4f);
            assertThat(r.readFloats("c")).containsExactly(5f);
            assertThat(r.metadata()).containsEntry("total_size", "14");
        }
    }

    @Test void indexErrorsNameTheProblem() throws IOException {
        new SafetensorsFiles().f32("a", s(1), 1f).write(tmp.resolve("s1.safetensors"));
        Path idx = tmp.resolve("model.safetensors.index.json");
        Files.writeString(idx, "{\"weight_map\": {\"a\": \"s2.safetensors\"}}");
        assertThatThrownBy(() -> SafetensorsReader.open(idx)).isInstanceOf(ConvertException.class).hasMessageContaining("s2.safetensors is missing");
        Files.writeString(idx, "{\"weight_map\": {\"a\": \"../s1.safetensors\"}}");
        assertThatThrownBy(() -> SafetensorsReader.open(idx)).hasMessageContaining("plain file name");
        Files.writeString(idx, "{\"weight_map\": {\"b\": \"s1.safetensors\"}}");
        assertThatThrownBy(() -> SafetensorsReader.open(idx)).hasMessageContaining("tensor b");
        Files.writeString(idx, "{\"weight\": {}}");
        assertThatThrownBy(() -> SafetensorsReader.open(idx)).hasMessageContaining("weight_map");
        assertThatThrownBy(() -> SafetensorsReader.open(tmp.resolve("empty-dir-does-not-exist"))).hasMessageContaining("no such file");
    }

    @Test void corruptFilesGiveClearErrors() throws IOException {
        SafetensorsFiles w = new SafetensorsFiles().f32("x", s(2), 1f, 2f);
        byte[] good = w.bytes();
        expectError(Arrays.copyOf(good, 5), "truncated");
        expectError(Arrays.copyOf(good, good.length - 1), "past the data area");
        byte[] huge = good.clone();
        ByteBuffer.wrap(huge).order(ByteOrder.LITTLE_ENDIAN).putLong(0, 1L << 40);
        expectError(huge, "out of range");
        byte[] longer = good.clone();
        ByteBuffer.wrap(longer).order(ByteOrder.LITTLE_ENDIAN).putLong(0, good.length);
        expectError(longer, "only");
        expectError(w.bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]"), "not valid JSON");
        expectError(w.bytes("[1,2]"), "not a JSON object");
        expectError(w.bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}"), "needs 12");
        expectError(w.bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}"), "shape[0]");
        expectError(w.bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}"), "backwards");
        expectError(w.bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], \"data_offsets\": [0, 8]}}"), "overflows");
        expectError(w.bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": [2]}}"), "data_offsets");
        expectError(w.bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, \"x\": {}}"), "not valid JSON");
        expectError(new byte[0], "truncated");
    }

    /** Random byte damage to a valid file: it either opens and reads, or fails with a ConvertException. */
    @Test void fuzzedHeadersNeverCrash() throws IOException {
        byte[] good = new SafetensorsFiles().f32("w", s(2, 2), 1, 2, 3, 4).f16("n", s(2), 1, 2)
                .i64("ids", s(1), 9).bytes();
        Random rnd = new Random(1234);
        Path f = tmp.resolve("fuzz.safetensors");
        for (int iter = 0; iter < 300; iter++) {
            byte[] b = good.clone();
            int flips = 1 + rnd.nextInt(4);
            for (int k = 0; k < flips; k++) b[rnd.nextInt(Math.min(b.length, 8 + 200))] = (byte) rnd.nextInt(256);
            if (rnd.nextInt(5) == 0) b = Arrays.copyOf(b, rnd.nextInt(b.length));
            Files.write(f, b);
            try (var r = SafetensorsReader.open(f)) {
                for (var t : r.tensors()) {
                    try {
                        if (t.dtype() != null && t.dtype().isFloat() && t.numel() < 1000) r.readFloats(t.name());
                        if (t.dtype() != null && t.dtype().isInteger() && t.numel() < 1000) r.readLongs(t.name());
                    } catch (ConvertException expected) {
                        // a refused dtype is fine
                    }
                }
            } catch (ConvertException expected) {
                assertThat(expected.getMessage()).contains(f.toString());
            }
        }
    }

    private void expectError(byte[] content, String fragment) throws IOException {
        Path f = tmp.resolve("bad.safetensors");
        Files.write(f, content);
        assertThatThrownBy(() -> SafetensorsReader.open(f).close())
                .isInstanceOf(ConvertException.class)
                .hasMessageContaining(f.toString())
                .hasMessageContaining(fragment);
    }

    private static byte[] le(int n, java.util.function.Consumer<ByteBuffer> fill) {
        ByteBuffer b = ByteBuffer.allocate(n).order(ByteOrder.LITTLE_ENDIAN);
        fill.accept(b);
        return b.array();
    }
}
