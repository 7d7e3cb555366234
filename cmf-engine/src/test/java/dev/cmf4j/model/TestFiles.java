package dev.cmf4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.format.DType;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * Minimal test-only readers (CMF envelope + directory, safetensors) so engine tests can run before the
 * format module's CmfFile lands. Trusted fixture input only; no bound checks beyond the obvious.
 */
public final class TestFiles {
    private TestFiles() {}

    static final ValueLayout.OfLong U64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfInt U32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfShort U16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    public record Loaded(JsonNode header, Weights weights) {}

    static MemorySegment map(Path p) throws IOException {
        try (FileChannel ch = FileChannel.open(p, StandardOpenOption.READ)) {
            return ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size(), Arena.global());
        }
    }

    public static Loaded cmf(Path p) throws IOException {
        MemorySegment f = map(p);
        long ho = f.get(U64, 16), hl = f.get(U64, 24), doff = f.get(U64, 32), dataOff = f.get(U64, 48);
        byte[] hb = f.asSlice(ho, hl).toArray(ValueLayout.JAVA_BYTE);
        JsonNode header = new ObjectMapper().readTree(new String(hb, StandardCharsets.UTF_8));
        long count = f.get(U64, doff), pool = doff + f.get(U64, doff + 8);
        Map<String, Tensor> map = new LinkedHashMap<>();
        for (long i = 0; i < count; i++) {
            long r = doff + 16 + i * 56;
            int nameOff = f.get(U32, r);
            int nameLen = f.get(U16, r + 4) & 0xFFFF;
            int dtype = f.get(ValueLayout.JAVA_BYTE, r + 6) & 0xFF;
            int ndim = f.get(ValueLayout.JAVA_BYTE, r + 7) & 0xFF;
            long[] shape = new long[ndim];
            for (int d = 0; d < ndim; d++) shape[d] = f.get(U32, r + 8 + 4L * d) & 0xFFFFFFFFL;
            long off = f.get(U64, r + 32), nbytes = f.get(U64, r + 40);
            String name = new String(f.asSlice(pool + nameOff, nameLen).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8);
            map.put(name, new Tensor(name, DType.ofId(dtype), shape, f.asSlice(dataOff + off, nbytes)));
        }
        return new Loaded(header, weights(map));
    }

    /** Float tensors of a safetensors file (F32/BF16/F16/I64), by name. */
    public static Map<String, Tensor> safetensors(Path p) throws IOException {
        MemorySegment f = map(p);
        long n = f.get(U64, 0);
        JsonNode h = new ObjectMapper().readTree(new String(f.asSlice(8, n).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8));
        Map<String, Tensor> out = new LinkedHashMap<>();
        for (var it = h.fields(); it.hasNext(); ) {
            var e = it.next();
            if (e.getKey().equals("__metadata__")) continue;
            JsonNode v = e.getValue();
            DType dt = switch (v.get("dtype").asText()) {
                case "F32" -> DType.F32;
                case "BF16" -> DType.BF16;
                case "F16" -> DType.F16;
                case "I64" -> DType.U64;
                default -> throw new IOException("dtype " + v.get("dtype"));
            };
            long[] shape = new long[v.get("shape").size()];
            for (int i = 0; i < shape.length; i++) shape[i] = v.get("shape").get(i).asLong();
            long s = v.get("data_offsets").get(0).asLong(), en = v.get("data_offsets").get(1).asLong();
            out.put(e.getKey(), new Tensor(e.getKey(), dt, shape, f.asSlice(8 + n + s, en - s)));
        }
        return out;
    }

    public static Weights weights(Map<String, Tensor> map) {
        return new Weights() {
            @Override public Tensor find(String name) { return map.get(name); }

            @Override public Set<String> names() { return map.keySet(); }
        };
    }

    public static float[] floats(Tensor t) {
        float[] out = new float[Math.toIntExact(t.size())];
        MemorySegment.copy(t.data(), ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 0, out, 0, out.length);
        return out;
    }

    public static int[] ints(Tensor t) {
        int[] out = new int[Math.toIntExact(t.size())];
        for (int i = 0; i < out.length; i++) out[i] = Math.toIntExact(t.data().get(U64, 8L * i));
        return out;
    }
}
