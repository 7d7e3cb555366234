package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** Test-only safetensors writer: builds small files, valid or deliberately broken. */
final class SafetensorsFiles {
    private static final ObjectMapper JSON = new ObjectMapper();

    record Entry(String name, String dtype, long[] shape, byte[] data) {}

    private final List<Entry> entries = new ArrayList<>();

    SafetensorsFiles add(String name, String dtype, long[] shape, byte[] data) {
        entries.add(new Entry(name, dtype, shape, data));
        return this;
    }

    SafetensorsFiles f32(String name, long[] shape, float... v) {
        ByteBuffer b = ByteBuffer.allocate(v.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        for (float x : v) b.putFloat(x);
        return add(name, "F32", shape, b.array());
    }

    SafetensorsFiles f16(String name, long[] shape, float... v) {
        ByteBuffer b = ByteBuffer.allocate(v.length * 2).order(ByteOrder.LITTLE_ENDIAN);
        for (float x : v) b.putShort(Float.floatToFloat16(x));
        return add(name, "F16", shape, b.array());
    }

    SafetensorsFiles bf16(String name, long[] shape, float... v) {
        ByteBuffer b = ByteBuffer.allocate(v.length * 2).order(ByteOrder.LITTLE_ENDIAN);
        for (float x : v) b.putShort((short) (Float.floatToRawIntBits(x) >>> 16));
        return add(name, "BF16", shape, b.array());
    }

    SafetensorsFiles i64(String name, long[] shape, long... v) {
        ByteBuffer b = ByteBuffer.allocate(v.length * 8).order(ByteOrder.LITTLE_ENDIAN);
        for (long x : v) b.putLong(x);
        return add(name, "I64", shape, b.array());
    }

    /** The header JSON object (with {@code __metadata__}) for the entries, laid out back to back. */
    ObjectNode header() {
        ObjectNode h = JSON.createObjectNode();
        h.putObject("__metadata__").put("format", "pt");
        long off = 0;
        for (Entry e : entries) {
            ObjectNode t = h.putObject(e.name());
            t.put("dtype", e.dtype());
            var s = t.putArray("shape");
            for (long d : e.shape()) s.add(d);
            t.putArray("data_offsets").add(off).add(off + e.data().length);
            off += e.data().length;
        }
        return h;
    }

    byte[] bytes() {
        return bytes(header().toString());
    }

    /** A file with the given header text and this writer's data area. */
    byte[] bytes(String headerJson) {
        byte[] h = headerJson.getBytes(StandardCharsets.UTF_8);
        int dataLen = entries.stream().mapToInt(e -> e.data().length).sum();
        ByteBuffer b = ByteBuffer.allocate(8 + h.length + dataLen).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(h.length).put(h);
        for (Entry e : entries) b.put(e.data());
        return b.array();
    }

    Path write(Path file) throws IOException {
        Files.write(file, bytes());
        return file;
    }
}
