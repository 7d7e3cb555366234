package dev.cmf4j.convert;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Reads Hugging Face safetensors checkpoints: one {@code .safetensors} file, a sharded checkpoint
 * through its {@code model.safetensors.index.json}, or a folder holding either. Files are memory
 * mapped ({@code java.lang.foreign}), so opening costs only the headers and reading a tensor touches
 * only its pages.
 *
 * <p>File layout: u64 little-endian header length N, N bytes of UTF-8 JSON
 * ({@code name -> {dtype, shape, data_offsets:[begin,end]}} plus an optional {@code __metadata__}
 * string map), then the data area; offsets are relative to the data area. Every bound is checked at
 * open: header length within the file, offsets within the data area, {@code end - begin} equal to
 * {@code numel × element size} (with overflow checks). Anything wrong raises a
 * {@link ConvertException} naming the file, the tensor and the problem.
 *
 * <p>Floats: F32, F16 and BF16 read to {@code float[]} (exact widening). Integers: I64, I32, I16, I8,
 * U32, U16, U8 and BOOL read to {@code long[]}. Other dtypes (F64, F8_*, U64, sub-byte types) can be
 * listed but reading them is refused with a message naming the tensor and its dtype.
 *
 * <p>Thread-safe for reading after open (the mapping is shared); {@link #close()} unmaps everything.
 */
public final class SafetensorsReader implements AutoCloseable {

    /** Largest header accepted; the safetensors library refuses headers over 100 MB too. */
    static final long MAX_HEADER_BYTES = 100L << 20;
    private static final int MAX_DIMS = 16;
    private static final ValueLayout.OfFloat F32_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfShort I16_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfInt I32_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfLong I64_LE = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ObjectMapper JSON = JsonMapper.builder()
            .enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION)
            .build();
    static {
        JSON.getFactory().setStreamReadConstraints(StreamReadConstraints.builder()
                .maxStringLength((int) MAX_HEADER_BYTES).maxNestingDepth(64).build());
    }

    /** The safetensors element types this reader knows; {@code size} is bytes per element. */
    public enum Dtype {
        BOOL(1), U8(1), I8(1), U16(2), I16(2), F16(2), BF16(2), U32(4), I32(4), F32(4), U64(8), I64(8), F64(8),
        F8_E4M3(1), F8_E5M2(1), F8_E8M0(1);

        public final int size;

        Dtype(int size) { this.size = size; }

        /** The dtype spelled {@code s} in a header, or null if this reader does not know it. */
        static Dtype parse(String s) {
            for (Dtype d : values()) if (d.name().equals(s)) return d;
            return null;
        }

        /** Readable to {@code float[]}. */
        public boolean isFloat() { return this == F32 || this == F16 || this == BF16; }

        /** Readable to {@code long[]}. */
        public boolean isInteger() {
            return this == I64 || this == I32 || this == I16 || this == I8 || this == U32 || this == U16
                    || this == U8 || this == BOOL;
        }
    }

    /**
     * One tensor: its dtype as spelled in the header ({@code dtype} is null when this reader does not know
     * the spelling), its shape, and where its bytes lie ({@code begin} relative to the data area of
     * {@code file}).
     */
    public record Tensor(String name, Dtype dtype, String dtypeName, long[] shape, Path file, long begin, long nbytes) {
        public Tensor {
            shape = shape.clone();
        }

        @Override public long[] shape() { return shape.clone(); }

        public int rank() { return shape.length; }

        public long dim(int i) { return shape[i]; }

        /** Number of elements (1 for a scalar). */
        public long numel() {
            long n = 1;
            for (long d : shape) n *= d;
            return n;
        }

        @Override public String toString() {
            return name + " " + dtypeName + Arrays.toString(shape);
        }

        @Override public boolean equals(Object o) {
            return o instanceof Tensor t && name.equals(t.name) && dtypeName.equals(t.dtypeName)
                    && Arrays.equals(shape, t.shape) && file.equals(t.file) && begin == t.begin && nbytes == t.nbytes;
        }

        @Override public int hashCode() { return name.hashCode() * 31 + Arrays.hashCode(shape); }
    }

    /** One mapped file. */
    private record Shard(Path file, MemorySegment data, Map<String, String> metadata) {}

    private final Arena arena;
    private final Path source;
    private final Map<String, Tensor> tensors;
    private final Map<Path, Shard> shards;
    private final Map<String, String> metadata;

    private SafetensorsReader(Arena arena, Path source, Map<String, Tensor> tensors, Map<Path, Shard> shards,
                              Map<String, String> metadata) {
        this.arena = arena;
        this.source = source;
        this.tensors = tensors;
        this.shards = shards;
        this.metadata = metadata;
    }

    /**
     * Opens {@code path}: a {@code .safetensors} file, a {@code *.safetensors.index.json} index, or a
     * folder holding {@code model.safetensors.index.json} (preferred when both exist) or
     * {@code model.safetensors}.
     */
    public static SafetensorsReader open(Path path) {
        if (Files.isDirectory(path)) {
            Path index = path.resolve("model.safetensors.index.json");
            if (Files.isRegularFile(index)) return openIndex(index);
            Path single = path.resolve("model.safetensors");
            if (Files.isRegularFile(single)) return openFile(single);
            throw new ConvertException(path + ": no model.safetensors or model.safetensors.index.json in this folder");
        }
        if (!Files.isRegularFile(path)) throw new ConvertException(path + ": no such file");
        if (path.getFileName().toString().endsWith(".json")) return openIndex(path);
        return openFile(path);
    }

    private static SafetensorsReader openFile(Path file) {
        Arena arena = Arena.ofShared();
        try {
            Map<String, Tensor> ts = new LinkedHashMap<>();
            Shard shard = load(arena, file, ts);
            return new SafetensorsReader(arena, file, Collections.unmodifiableMap(ts), Map.of(file, shard),
                    shard.metadata());
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    private static SafetensorsReader openIndex(Path index) {
        JsonNode root;
        try {
            long size = Files.size(index);
            if (size > MAX_HEADER_BYTES) throw new ConvertException(index + ": index file is " + size + " bytes, over the " + MAX_HEADER_BYTES + " limit");
            root = JSON.readTree(Files.readAllBytes(index));
        } catch (IOException e) {
            throw new ConvertException(index + ": cannot read sharded-checkpoint index: " + e.getMessage(), e);
        }
        if (root == null || !root.isObject()) throw new ConvertException(index + ": index is not a JSON object");
        JsonNode wm = root.get("weight_map");
        if (wm == null || !wm.isObject()) throw new ConvertException(index + ": index has no \"weight_map\" object");
        Path dir = index.toAbsolutePath().getParent();
        Map<String, String> wanted = new LinkedHashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = wm.fields(); it.hasNext(); ) {
            var e = it.next();
            if (!e.getValue().isTextual()) throw new ConvertException(index + ": weight_map[\"" + e.getKey() + "\"] is not a file name");
            wanted.put(e.getKey(), e.getValue().asText());
        }
        Arena arena = Arena.ofShared();
        try {
            Map<Path, Shard> shards = new LinkedHashMap<>();
            Map<String, Tensor> all = new LinkedHashMap<>();
            for (String fname : new java.util.LinkedHashSet<>(wanted.values())) {
                Path f = dir.resolve(fname).normalize();
                if (!f.getParent().equals(dir.normalize()) || fname.contains("/") || fname.contains("\\"))
                    throw new ConvertException(index + ": shard name \"" + fname + "\" must be a plain file name in the index's folder");
                if (!Files.isRegularFile(f)) throw new ConvertException(index + ": shard " + fname + " is missing");
                shards.put(f, load(arena, f, all));
            }
            Map<String, Tensor> ordered = new LinkedHashMap<>();
            for (var e : wanted.entrySet()) {
                Tensor t = all.get(e.getKey());
                Path expected = dir.resolve(e.getValue()).normalize();
                if (t == null || !t.file().equals(expected))
                    throw new ConvertException(index + ": tensor " + e.getKey() + " is listed in shard " + e.getValue() + " but that shard does not hold it");
                ordered.put(e.getKey(), t);
            }
            JsonNode md = root.get("metadata");
            Map<String, String> meta = new LinkedHashMap<>();
            if (md != null && md.isObject()) md.fields().forEachRemaining(e -> meta.put(e.getKey(), e.getValue().asText()));
            return new SafetensorsReader(arena, index, Collections.unmodifiableMap(ordered), shards,
                    Collections.unmodifiableMap(meta));
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /**
     * Maps {@code file}, checks the envelope, parses its header into {@code out} (in header order) and
     * returns the shard whose data segment starts after the header.
     */
    private static Shard load(Arena arena, Path file, Map<String, Tensor> out) {
        MemorySegment all;
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            all = size == 0 ? MemorySegment.NULL : ch.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
        } catch (IOException e) {
            throw new ConvertException(file + ": cannot map safetensors file: " + e.getMessage(), e);
        }
        return shard(file, all, out);
    }

    /** A single safetensors file already in memory ({@code label} names it in errors); the caller keeps {@code bytes} alive. */
    static SafetensorsReader read(Path label, MemorySegment bytes) {
        Map<String, Tensor> ts = new LinkedHashMap<>();
        Shard shard = shard(label, bytes, ts);
        return new SafetensorsReader(Arena.ofConfined(), label, Collections.unmodifiableMap(ts), Map.of(label, shard), shard.metadata());
    }

    /** Checks the envelope of a file's bytes and parses its header into {@code out}. */
    private static Shard shard(Path file, MemorySegment all, Map<String, Tensor> out) {
        long size = all.byteSize();
        if (size < 8) throw new ConvertException(file + ": truncated safetensors file (" + size + " bytes, need at least 8 for the header length)");
        long n = all.get(I64_LE, 0);
        if (n < 2 || n > MAX_HEADER_BYTES)
            throw new ConvertException(file + ": header length " + Long.toUnsignedString(n) + " is out of range (2.." + MAX_HEADER_BYTES + "); not a safetensors file?");
        if (8 + n > size)
            throw new ConvertException(file + ": truncated safetensors file: header says " + n + " bytes of JSON but only " + (size - 8) + " follow");
        byte[] json = all.asSlice(8, n).toArray(ValueLayout.JAVA_BYTE);
        MemorySegment data = all.asSlice(8 + n);
        Map<String, String> meta = parseHeader(file, json, data.byteSize(), out);
        return new Shard(file, data, meta);
    }

    /** Parses a JSON header into {@code out}, checking every entry; returns its {@code __metadata__}. */
    private static Map<String, String> parseHeader(Path file, byte[] json, long dataLen, Map<String, Tensor> out) {
        JsonNode root;
        try {
            root = JSON.readTree(json);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new ConvertException(file + ": safetensors header is not valid JSON: " + e.getOriginalMessage());
        } catch (IOException e) {
            throw new ConvertException(file + ": safetensors header is not valid JSON: " + e.getMessage());
        }
        if (root == null || !root.isObject()) throw new ConvertException(file + ": safetensors header is not a JSON object");
        Map<String, String> meta = new LinkedHashMap<>();
        for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
            var e = it.next();
            String name = e.getKey();
            JsonNode v = e.getValue();
            if (name.equals("__metadata__")) {
                if (!v.isObject()) throw new ConvertException(file + ": __metadata__ is not a JSON object");
                v.fields().forEachRemaining(m -> meta.put(m.getKey(), m.getValue().asText()));
                continue;
            }
            String where = file + ": tensor " + name + ": ";
            if (!v.isObject()) throw new ConvertException(where + "entry is not a JSON object");
            JsonNode dt = v.get("dtype"), sh = v.get("shape"), off = v.get("data_offsets");
            if (dt == null || !dt.isTextual()) throw new ConvertException(where + "missing \"dtype\"");
            if (sh == null || !sh.isArray()) throw new ConvertException(where + "missing \"shape\" array");
            if (off == null || !off.isArray() || off.size() != 2) throw new ConvertException(where + "\"data_offsets\" must be [begin, end]");
            if (sh.size() > MAX_DIMS) throw new ConvertException(where + "rank " + sh.size() + " is over " + MAX_DIMS);
            long[] shape = new long[sh.size()];
            long numel = 1;
            for (int i = 0; i < shape.length; i++) {
                JsonNode d = sh.get(i);
                if (!d.isIntegralNumber() || !d.canConvertToLong() || d.asLong() < 0)
                    throw new ConvertException(where + "shape[" + i + "] = " + d + " is not a non-negative integer");
                shape[i] = d.asLong();
                try {
                    numel = Math.multiplyExact(numel, shape[i]);
                } catch (ArithmeticException ex) {
                    throw new ConvertException(where + "shape " + sh + " overflows 64 bits");
                }
            }
            for (int i = 0; i < 2; i++) {
                JsonNode o = off.get(i);
                if (!o.isIntegralNumber() || !o.canConvertToLong() || o.asLong() < 0)
                    throw new ConvertException(where + "data_offsets[" + i + "] = " + o + " is not a non-negative integer");
            }
            long begin = off.get(0).asLong(), end = off.get(1).asLong();
            if (begin > end) throw new ConvertException(where + "data_offsets [" + begin + ", " + end + "] run backwards");
            if (end > dataLen) throw new ConvertException(where + "data_offsets end " + end + " is past the data area (" + dataLen + " bytes); file truncated?");
            Dtype dtype = Dtype.parse(dt.asText());
            if (dtype != null) {
                long want;
                try {
                    want = Math.multiplyExact(numel, dtype.size);
                } catch (ArithmeticException ex) {
                    throw new ConvertException(where + "byte size of shape " + sh + " overflows 64 bits");
                }
                if (end - begin != want)
                    throw new ConvertException(where + "holds " + (end - begin) + " bytes but " + dt.asText() + sh + " needs " + want);
            }
            out.put(name, new Tensor(name, dtype, dt.asText(), shape, file, begin, end - begin));
        }
        return Collections.unmodifiableMap(meta);
    }

    // ---- accessors -------------------------------------------------------------------------------

    /** The path this reader was opened from (file or index). */
    public Path source() { return source; }

    /** {@code __metadata__} of a single file, or the index's {@code metadata}. */
    public Map<String, String> metadata() { return metadata; }

    /** All tensors, in header (single file) or weight_map (sharded) order. */
    public List<Tensor> tensors() { return List.copyOf(tensors.values()); }

    /** Tensor names, in the order of {@link #tensors()}. */
    public List<String> names() { return new ArrayList<>(tensors.keySet()); }

    public boolean has(String name) { return tensors.containsKey(name); }

    /** The tensor called {@code name}, or an error naming the checkpoint. */
    public Tensor tensor(String name) {
        Tensor t = tensors.get(name);
        if (t == null) throw new ConvertException(source + ": no tensor named " + name);
        return t;
    }

    /** The raw little-endian bytes of {@code name} (a view into the mapping; valid until close). */
    public MemorySegment bytes(String name) {
        Tensor t = tensor(name);
        return shards.get(t.file()).data().asSlice(t.begin(), t.nbytes());
    }

    /** All elements of a float tensor (F32/F16/BF16), widened exactly to float32. */
    public float[] readFloats(String name) {
        Tensor t = tensor(name);
        long n = t.numel();
        if (n > Integer.MAX_VALUE - 8)
            throw new ConvertException(source + ": tensor " + name + " has " + n + " elements, too many for one array; read it in ranges");
        float[] out = new float[(int) n];
        readFloats(name, 0, out, 0, (int) n);
        return out;
    }

    /**
     * Elements {@code [first, first + len)} (flat, row-major) of a float tensor into
     * {@code dst[off .. off + len)}, widened exactly to float32. Lets a converter stream huge tensors.
     */
    public void readFloats(String name, long first, float[] dst, int off, int len) {
        Tensor t = tensor(name);
        requireFloat(t);
        checkRange(t, first, len);
        java.util.Objects.checkFromIndexSize(off, len, dst.length);
        MemorySegment seg = shards.get(t.file()).data().asSlice(t.begin(), t.nbytes());
        switch (t.dtype()) {
            case F32 -> MemorySegment.copy(seg, F32_LE, first * 4, dst, off, len);
            case F16 -> {
                for (int i = 0; i < len; i++) dst[off + i] = Float.float16ToFloat(seg.get(I16_LE, (first + i) * 2));
            }
            case BF16 -> {
                for (int i = 0; i < len; i++) dst[off + i] = Float.intBitsToFloat((seg.get(I16_LE, (first + i) * 2) & 0xFFFF) << 16);
            }
            default -> throw new AssertionError();
        }
    }

    /** All elements of an integer tensor (I64/I32/I16/I8/U32/U16/U8/BOOL) as longs. */
    public long[] readLongs(String name) {
        Tensor t = tensor(name);
        if (t.dtype() == null || !t.dtype().isInteger())
            throw new ConvertException(source + ": tensor " + name + " has dtype " + t.dtypeName()
                    + "; only I64, I32, I16, I8, U32, U16, U8 and BOOL read as integers");
        long n = t.numel();
        if (n > Integer.MAX_VALUE - 8) throw new ConvertException(source + ": tensor " + name + " has " + n + " elements, too many for one array");
        MemorySegment seg = bytes(name);
        long[] out = new long[(int) n];
        switch (t.dtype()) {
            case I64 -> MemorySegment.copy(seg, I64_LE, 0, out, 0, (int) n);
            case I32 -> { for (int i = 0; i < n; i++) out[i] = seg.get(I32_LE, i * 4L); }
            case U32 -> { for (int i = 0; i < n; i++) out[i] = seg.get(I32_LE, i * 4L) & 0xFFFFFFFFL; }
            case I16 -> { for (int i = 0; i < n; i++) out[i] = seg.get(I16_LE, i * 2L); }
            case U16 -> { for (int i = 0; i < n; i++) out[i] = seg.get(I16_LE, i * 2L) & 0xFFFF; }
            case I8 -> { for (int i = 0; i < n; i++) out[i] = seg.get(ValueLayout.JAVA_BYTE, i); }
            case U8, BOOL -> { for (int i = 0; i < n; i++) out[i] = seg.get(ValueLayout.JAVA_BYTE, i) & 0xFF; }
            default -> throw new AssertionError();
        }
        return out;
    }

    private void requireFloat(Tensor t) {
        if (t.dtype() == null || !t.dtype().isFloat())
            throw new ConvertException(source + ": tensor " + t.name() + " has dtype " + t.dtypeName()
                    + ", which this converter does not read as floats (supported: F32, F16, BF16)");
    }

    private void checkRange(Tensor t, long first, int len) {
        if (first < 0 || len < 0 || first > t.numel() - len)
            throw new IndexOutOfBoundsException("elements [" + first + ", " + (first + len) + ") of " + t.name() + " with " + t.numel() + " elements");
    }

    @Override public void close() { arena.close(); }
}
