package dev.cmf4j.convert.gguf;

import dev.cmf4j.convert.ConvertException;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Reads GGUF files (versions 2 and 3), memory mapped. Layout: magic "GGUF", u32 version, u64 tensor
 * count, u64 metadata count, the metadata key/value pairs, the tensor infos (name, n_dims, dims in
 * ggml order — dims[0] is the innermost, contiguous one —, type, offset), then the data area at the
 * next {@code general.alignment} boundary (default 32). Every length, count and offset is checked
 * against the bytes that remain before it is used; anything wrong raises a {@link ConvertException}
 * naming the file, the byte offset and the problem.
 *
 * <p>Metadata values are kept as Java values: integers as {@code Long}, floats as {@code Double},
 * {@code Boolean}, {@code String}, arrays as {@code List}.
 */
public final class GgufReader implements AutoCloseable {
    static final int MAGIC = 0x46554747;          // "GGUF" little-endian
    private static final int MAX_DIMS = 4;
    /** Longest metadata array accepted (the largest vocabularies have ~260K tokens). */
    static final long MAX_ARRAY = 1L << 24;
    private static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfDouble F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /**
     * One tensor: {@code ne} in ggml order (ne[0] = row length), {@code type} null when the id is unknown,
     * {@code offset} absolute in the file.
     */
    public record Tensor(String name, int typeId, GgmlType type, long[] ne, long offset, long nbytes) {
        public Tensor {
            ne = ne.clone();
        }

        @Override public long[] ne() { return ne.clone(); }

        public long numel() {
            long n = 1;
            for (long d : ne) n *= d;
            return n;
        }

        /** The shape in row-major order ({@code [out, in]} for a matrix): ne reversed. */
        public long[] shape() {
            long[] s = new long[ne.length];
            for (int i = 0; i < ne.length; i++) s[i] = ne[ne.length - 1 - i];
            return s;
        }

        public String typeName() { return type == null ? "type " + typeId : type.name(); }

        @Override public String toString() { return name + " " + typeName() + Arrays.toString(ne); }
    }

    private final Path file;
    private final Arena arena;
    private final MemorySegment map;
    private final int version;
    private final Map<String, Object> metadata;
    private final Map<String, Tensor> tensors;

    private GgufReader(Path file, Arena arena, MemorySegment map, int version, Map<String, Object> metadata,
                       Map<String, Tensor> tensors) {
        this.file = file;
        this.arena = arena;
        this.map = map;
        this.version = version;
        this.metadata = metadata;
        this.tensors = tensors;
    }

    public static GgufReader open(Path file) {
        Arena arena = Arena.ofShared();
        try {
            MemorySegment m;
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                long size = ch.size();
                m = size == 0 ? MemorySegment.NULL : ch.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
            } catch (IOException e) {
                throw new ConvertException(file + ": cannot read: " + e.getMessage(), e);
            }
            return parse(file, arena, m);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /** A cursor over the mapped bytes that checks every read. */
    private static final class Cursor {
        final Path file;
        final MemorySegment m;
        long pos;

        Cursor(Path file, MemorySegment m) {
            this.file = file;
            this.m = m;
        }

        ConvertException error(String what) {
            return new ConvertException(file + ": at byte " + pos + ": " + what);
        }

        void need(long n, String what) {
            if (n < 0 || n > m.byteSize() - pos) throw error("truncated GGUF file: " + what + " needs " + n + " bytes, "
                    + Math.max(0, m.byteSize() - pos) + " remain");
        }

        int u32(String what) { need(4, what); int v = m.get(I32, pos); pos += 4; return v; }

        long u64(String what) { need(8, what); long v = m.get(I64, pos); pos += 8; return v; }

        /** A u64 count that must be non-negative and at most {@code max}. */
        long count(String what, long max) {
            long n = u64(what);
            if (n < 0 || n > max) throw error(what + " " + Long.toUnsignedString(n) + " is out of range (max " + max + ")");
            return n;
        }

        String string(String what) {
            long n = u64(what + " length");
            if (n < 0 || n > m.byteSize() - pos) throw error(what + ": string length " + Long.toUnsignedString(n) + " runs past the end of the file");
            if (n > Integer.MAX_VALUE - 16) throw error(what + ": string of " + n + " bytes is too long");
            byte[] b = m.asSlice(pos, n).toArray(ValueLayout.JAVA_BYTE);
            pos += n;
            try {
                return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT).decode(java.nio.ByteBuffer.wrap(b)).toString();
            } catch (CharacterCodingException e) {
                throw error(what + " is not valid UTF-8");
            }
        }
    }

    static GgufReader parse(Path file, Arena arena, MemorySegment m) {
        Cursor c = new Cursor(file, m);
        if (m.byteSize() < 4) throw c.error("truncated GGUF file (" + m.byteSize() + " bytes)");
        int magic = c.u32("magic");
        if (magic != MAGIC) throw new ConvertException(file + ": not a GGUF file (magic " + String.format("0x%08x", magic) + ")");
        int version = c.u32("version");
        if (version != 2 && version != 3) throw new ConvertException(file + ": GGUF version " + version + " is not supported (2 and 3 are)");
        long nTensors = c.count("tensor count", m.byteSize() / 24);
        long nKv = c.count("metadata count", m.byteSize() / 12);
        Map<String, Object> meta = new LinkedHashMap<>();
        for (long i = 0; i < nKv; i++) {
            String key = c.string("metadata key " + i);
            int type = c.u32("type of " + key);
            Object v = value(c, type, key, 0);
            if (meta.put(key, v) != null) throw c.error("metadata key " + key + " appears twice");
        }
        long alignment = 32;
        if (meta.get("general.alignment") instanceof Long a) {
            if (a <= 0 || a > (1 << 20) || (a & (a - 1)) != 0) throw c.error("general.alignment " + a + " is not a power of two");
            alignment = a;
        }
        List<Tensor> infos = new ArrayList<>();
        Map<String, Tensor> byName = new LinkedHashMap<>();
        long[][] dims = new long[(int) nTensors][];
        int[] types = new int[(int) nTensors];
        long[] offs = new long[(int) nTensors];
        String[] names = new String[(int) nTensors];
        for (int i = 0; i < nTensors; i++) {
            names[i] = c.string("tensor " + i + " name");
            int nd = c.u32("n_dims of " + names[i]);
            if (nd < 1 || nd > MAX_DIMS) throw c.error("tensor " + names[i] + ": n_dims " + nd + " is not in 1.." + MAX_DIMS);
            dims[i] = new long[nd];
            for (int d = 0; d < nd; d++) {
                dims[i][d] = c.u64("dim " + d + " of " + names[i]);
                if (dims[i][d] <= 0) throw c.error("tensor " + names[i] + ": dimension " + Long.toUnsignedString(dims[i][d]) + " must be positive");
            }
            types[i] = c.u32("type of " + names[i]);
            offs[i] = c.u64("offset of " + names[i]);
        }
        long dataStart = (c.pos + alignment - 1) / alignment * alignment;
        if (dataStart > m.byteSize() && nTensors > 0) throw c.error("truncated GGUF file: data area starts past the end");
        for (int i = 0; i < nTensors; i++) {
            String n = names[i];
            String where = file + ": tensor " + n + ": ";
            long numel = 1;
            for (long d : dims[i]) {
                try {
                    numel = Math.multiplyExact(numel, d);
                } catch (ArithmeticException e) {
                    throw new ConvertException(where + "dimensions " + Arrays.toString(dims[i]) + " overflow");
                }
            }
            GgmlType t = GgmlType.ofId(types[i]);
            long off = offs[i];
            if (off < 0 || off % alignment != 0) throw new ConvertException(where + "offset " + Long.toUnsignedString(off) + " is not a multiple of the alignment " + alignment);
            long nbytes = -1;
            if (t != null && t.decodable()) {
                if (dims[i][0] % t.blockSize != 0)
                    throw new ConvertException(where + t + " needs a row length that is a multiple of " + t.blockSize + ", found " + dims[i][0]);
                try {
                    nbytes = Math.multiplyExact(numel / t.blockSize, (long) t.blockBytes);
                } catch (ArithmeticException e) {
                    throw new ConvertException(where + "byte size overflows");
                }
                if (off > m.byteSize() - dataStart || nbytes > m.byteSize() - dataStart - off)
                    throw new ConvertException(where + "data [" + off + ", +" + nbytes + ") runs past the end of the file (truncated?)");
            }
            Tensor tt = new Tensor(n, types[i], t, dims[i], dataStart + off, nbytes);
            if (byName.put(n, tt) != null) throw new ConvertException(where + "appears twice");
            infos.add(tt);
        }
        return new GgufReader(file, arena, m, version, Collections.unmodifiableMap(meta), Collections.unmodifiableMap(byName));
    }

    private static Object value(Cursor c, int type, String key, int depth) {
        return switch (type) {
            case 0 -> { c.need(1, key); yield (long) (c.m.get(ValueLayout.JAVA_BYTE, c.pos++) & 0xFF); }
            case 1 -> { c.need(1, key); yield (long) c.m.get(ValueLayout.JAVA_BYTE, c.pos++); }
            case 2 -> { c.need(2, key); long v = c.m.get(I16, c.pos) & 0xFFFF; c.pos += 2; yield v; }
            case 3 -> { c.need(2, key); long v = c.m.get(I16, c.pos); c.pos += 2; yield v; }
            case 4 -> (long) c.u32(key) & 0xFFFFFFFFL;
            case 5 -> (long) c.u32(key);
            case 6 -> { c.need(4, key); double v = c.m.get(F32, c.pos); c.pos += 4; yield v; }
            case 7 -> {
                c.need(1, key);
                byte b = c.m.get(ValueLayout.JAVA_BYTE, c.pos++);
                if (b != 0 && b != 1) throw c.error(key + ": bool value " + b + " is not 0 or 1");
                yield b == 1;
            }
            case 8 -> c.string(key);
            case 9 -> {
                if (depth > 2) throw c.error(key + ": arrays nested too deeply");
                int et = c.u32(key + " element type");
                long n = c.count(key + " element count", Math.min(c.m.byteSize() - c.pos, MAX_ARRAY));
                List<Object> out = new ArrayList<>((int) Math.min(n, 1 << 20));
                for (long i = 0; i < n; i++) out.add(value(c, et, key, depth + 1));
                yield Collections.unmodifiableList(out);
            }
            case 10 -> c.u64(key);
            case 11 -> c.u64(key);
            case 12 -> { c.need(8, key); double v = c.m.get(F64, c.pos); c.pos += 8; yield v; }
            default -> throw c.error(key + ": unknown metadata value type " + type);
        };
    }

    // ---- accessors ------------------------------------------------------------------------------

    public Path file() { return file; }

    public int version() { return version; }

    public Map<String, Object> metadata() { return metadata; }

    public List<Tensor> tensors() { return List.copyOf(tensors.values()); }

    public boolean has(String name) { return tensors.containsKey(name); }

    public Tensor tensor(String name) {
        Tensor t = tensors.get(name);
        if (t == null) throw new ConvertException(file + ": no tensor named " + name);
        return t;
    }

    /** The raw bytes of a decodable tensor (a view of the map). */
    public MemorySegment bytes(Tensor t) {
        requireDecodable(t);
        return map.asSlice(t.offset(), t.nbytes());
    }

    void requireDecodable(Tensor t) {
        if (t.type() == null || !t.type().decodable())
            throw new ConvertException(file + ": tensor " + t.name() + " is stored as " + t.typeName()
                    + "; cmf convert imports " + java.util.Arrays.stream(GgmlType.values()).filter(GgmlType::decodable)
                    .map(GgmlType::name).collect(java.util.stream.Collectors.joining(", ")) + " tensors");
    }

    /**
     * Elements {@code [first, first + len)} (flat, ggml order = row-major over the reversed shape) of
     * {@code t}, dequantized with ggml's formulas ({@link GgmlDequant}).
     */
    public void readFloats(Tensor t, long first, float[] dst, int off, int len) {
        requireDecodable(t);
        if (first < 0 || len < 0 || first > t.numel() - len)
            throw new IndexOutOfBoundsException("elements [" + first + ", +" + len + ") of " + t);
        GgmlDequant.read(t.type(), map.asSlice(t.offset(), t.nbytes()), first, dst, off, len);
    }

    public float[] readFloats(Tensor t) {
        if (t.numel() > Integer.MAX_VALUE - 8) throw new ConvertException(file + ": tensor " + t.name() + " too large for one array");
        float[] out = new float[(int) t.numel()];
        readFloats(t, 0, out, 0, out.length);
        return out;
    }

    // ---- typed metadata --------------------------------------------------------------------------

    public String string(String key) {
        Object v = metadata.get(key);
        if (v == null) return null;
        if (v instanceof String s) return s;
        throw new ConvertException(file + ": metadata " + key + " should be a string, found " + v);
    }

    public Long integer(String key) {
        Object v = metadata.get(key);
        if (v == null) return null;
        if (v instanceof Long l) return l;
        throw new ConvertException(file + ": metadata " + key + " should be an integer, found " + v);
    }

    public Double number(String key) {
        Object v = metadata.get(key);
        if (v == null) return null;
        if (v instanceof Double d) return d;
        if (v instanceof Long l) return l.doubleValue();
        throw new ConvertException(file + ": metadata " + key + " should be a number, found " + v);
    }

    public Boolean bool(String key) {
        Object v = metadata.get(key);
        if (v == null) return null;
        if (v instanceof Boolean b) return b;
        throw new ConvertException(file + ": metadata " + key + " should be true/false, found " + v);
    }

    @SuppressWarnings("unchecked")
    public List<Object> array(String key) {
        Object v = metadata.get(key);
        if (v == null) return null;
        if (v instanceof List<?> l) return (List<Object>) l;
        throw new ConvertException(file + ": metadata " + key + " should be an array");
    }

    @Override public void close() { arena.close(); }
}
