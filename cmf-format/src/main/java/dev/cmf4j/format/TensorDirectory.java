package dev.cmf4j.format;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * The binary tensor directory (CMF_FORMAT.md §1.3):
 * <pre>
 * u64 count | u64 pool_off (= 16 + count*56, relative to the section)
 * count x 56-byte records:
 *   u32 name_off (relative to pool_off) | u16 name_len | u8 dtype | u8 ndim (&lt;= 6)
 *   u32 shape[6] (zero-padded) | u64 off (relative to data_off, multiple of 64) | u64 nbytes | u64 hash
 * UTF-8 name pool
 * </pre>
 * Parsing checks every bound before reading it, and the record count against the section length
 * before allocating anything, so a hostile count cannot cause a large allocation.
 */
public final class TensorDirectory {
    private TensorDirectory() {}

    public static final int RECORD = 56;
    public static final int MAX_NDIM = 6;
    public static final int TENSOR_ALIGN = 64;

    private static final ValueLayout.OfInt U32 = Envelope.U32;
    private static final ValueLayout.OfLong U64 = Envelope.U64;
    private static final ValueLayout.OfShort U16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** A directory record before it is bound to a mapped payload (what the writer emits). */
    public record Record(String name, DType dtype, long[] shape, long offset, long nbytes, long hash) {}

    /** Parses the directory of {@code file} and slices every payload out of its data section. */
    static List<TensorEntry> parse(MemorySegment file, Envelope env, String label) {
        Section ds = env.directory();
        MemorySegment dir = file.asSlice(ds.offset(), ds.length());
        long base = ds.offset();
        long len = dir.byteSize();
        long count = dir.get(U64, 0);
        long poolOff = dir.get(U64, 8);
        long maxCount = (len - 16) / RECORD;
        if (count < 0 || count > maxCount) {
            throw new CmfException.Bounds(label, base, "directory claims " + Long.toUnsignedString(count)
                    + " tensors but its " + len + " bytes hold at most " + maxCount);
        }
        long recordsEnd = 16 + count * RECORD;
        if (poolOff < recordsEnd || poolOff > len) {
            throw new CmfException.Bounds(label, base + 8, "name pool offset " + Long.toUnsignedString(poolOff)
                    + " must lie in [" + recordsEnd + ", " + len + "] (after " + count + " records)");
        }
        long poolLen = len - poolOff;
        MemorySegment data = file.asSlice(env.data().offset(), env.data().length());
        long dataLen = data.byteSize();
        var utf8 = StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT).onUnmappableCharacter(CodingErrorAction.REPORT);
        List<TensorEntry> out = new ArrayList<>((int) count);
        Set<String> names = new HashSet<>();
        for (long i = 0; i < count; i++) {
            long r = 16 + i * RECORD;
            long at = base + r;
            long nameOff = dir.get(U32, r) & 0xFFFFFFFFL;
            int nameLen = dir.get(U16, r + 4) & 0xFFFF;
            int dtypeId = dir.get(ValueLayout.JAVA_BYTE, r + 6) & 0xFF;
            int ndim = dir.get(ValueLayout.JAVA_BYTE, r + 7) & 0xFF;
            if (nameLen == 0) throw new CmfException.Parse(label, at, "tensor record " + i + " has an empty name");
            if (nameOff + nameLen > poolLen) {
                throw new CmfException.Bounds(label, at, "tensor record " + i + " name [" + nameOff + ", +" + nameLen
                        + ") lies outside the " + poolLen + "-byte name pool");
            }
            String name;
            try {
                ByteBuffer nb = dir.asSlice(poolOff + nameOff, nameLen).asByteBuffer();
                name = utf8.decode(nb).toString();
            } catch (CharacterCodingException e) {
                throw new CmfException.Parse(label, base + poolOff + nameOff, "tensor record " + i
                        + " name is not valid UTF-8");
            }
            DType dtype = DType.ofId(dtypeId);
            if (dtype == null) {
                throw new CmfException.Parse(label, at + 6, "tensor '" + name + "' has unknown dtype id " + dtypeId
                        + " (known ids 0-18)");
            }
            if (ndim > MAX_NDIM) {
                throw new CmfException.Parse(label, at + 7, "tensor '" + name + "' has ndim " + ndim
                        + "; at most " + MAX_NDIM + " dimensions are allowed");
            }
            long[] shape = new long[ndim];
            for (int d = 0; d < MAX_NDIM; d++) {
                long v = dir.get(U32, r + 8 + 4L * d) & 0xFFFFFFFFL;
                if (d < ndim) shape[d] = v;
                else if (v != 0) {
                    throw new CmfException.Parse(label, at + 8 + 4L * d, "tensor '" + name + "' shape slot " + d
                            + " beyond ndim " + ndim + " must be zero, found " + v);
                }
            }
            long off = dir.get(U64, r + 32);
            long nbytes = dir.get(U64, r + 40);
            long hash = dir.get(U64, r + 48);
            if (off < 0 || nbytes < 0 || off > dataLen || nbytes > dataLen - off) {
                throw new CmfException.Bounds(label, at + 32, "tensor '" + name + "' payload ["
                        + Long.toUnsignedString(off) + ", +" + Long.toUnsignedString(nbytes)
                        + ") lies outside the " + dataLen + "-byte data section");
            }
            if (off % TENSOR_ALIGN != 0) {
                throw new CmfException.Bounds(label, at + 32, "tensor '" + name + "' offset " + off
                        + " is not a multiple of " + TENSOR_ALIGN);
            }
            String bad = PayloadSize.check(dtype, shape, nbytes);
            if (bad != null) throw new CmfException.Parse(label, at + 40, "tensor '" + name + "': " + bad);
            if (!names.add(name)) {
                throw new CmfException.Parse(label, at, "tensor name '" + name + "' appears twice in the directory");
            }
            out.add(new TensorEntry(name, dtype, shape, off, nbytes, hash, data.asSlice(off, nbytes)));
        }
        checkNoOverlap(out, label, env.data().offset());
        return out;
    }

    /** Payloads must not share bytes: sorted by offset, each ends before the next begins. */
    private static void checkNoOverlap(List<TensorEntry> entries, String label, long dataOff) {
        int n = entries.size();
        long[] keys = new long[n];
        for (int i = 0; i < n; i++) keys[i] = entries.get(i).offset();
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) order[i] = i;
        Arrays.sort(order, (a, b) -> Long.compare(keys[a], keys[b]));
        for (int k = 1; k < n; k++) {
            TensorEntry prev = entries.get(order[k - 1]), cur = entries.get(order[k]);
            if (cur.offset() < prev.offset() + prev.nbytes()) {
                throw new CmfException.Bounds(label, dataOff + cur.offset(), "tensor '" + cur.name()
                        + "' payload overlaps tensor '" + prev.name() + "'");
            }
        }
    }

    /** Encodes records into directory bytes (names pooled in record order). */
    public static byte[] encode(List<Record> records) {
        byte[][] names = new byte[records.size()][];
        long pool = 0;
        for (int i = 0; i < records.size(); i++) {
            names[i] = records.get(i).name().getBytes(StandardCharsets.UTF_8);
            if (names[i].length == 0 || names[i].length > 0xFFFF) {
                throw new IllegalArgumentException("tensor name must be 1..65535 UTF-8 bytes: " + records.get(i).name());
            }
            pool += names[i].length;
        }
        long poolOff = 16 + (long) records.size() * RECORD;
        long total = poolOff + pool;
        if (total > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("directory too large: " + total + " bytes");
        MemorySegment s = MemorySegment.ofArray(new byte[(int) total]);
        s.set(U64, 0, records.size());
        s.set(U64, 8, poolOff);
        long nameOff = 0;
        for (int i = 0; i < records.size(); i++) {
            Record rec = records.get(i);
            long r = 16 + (long) i * RECORD;
            if (nameOff > 0xFFFFFFFFL) throw new IllegalArgumentException("name pool exceeds 4 GiB");
            if (rec.shape().length > MAX_NDIM) throw new IllegalArgumentException("ndim > 6: " + rec.name());
            s.set(U32, r, (int) nameOff);
            s.set(U16, r + 4, (short) names[i].length);
            s.set(ValueLayout.JAVA_BYTE, r + 6, (byte) rec.dtype().id);
            s.set(ValueLayout.JAVA_BYTE, r + 7, (byte) rec.shape().length);
            for (int d = 0; d < rec.shape().length; d++) {
                long v = rec.shape()[d];
                if (v < 0 || v > 0xFFFFFFFFL) throw new IllegalArgumentException("dimension out of u32 range: " + rec.name());
                s.set(U32, r + 8 + 4L * d, (int) v);
            }
            s.set(U64, r + 32, rec.offset());
            s.set(U64, r + 40, rec.nbytes());
            s.set(U64, r + 48, rec.hash());
            MemorySegment.copy(names[i], 0, s, ValueLayout.JAVA_BYTE, poolOff + nameOff, names[i].length);
            nameOff += names[i].length;
        }
        return s.toArray(ValueLayout.JAVA_BYTE);
    }
}
