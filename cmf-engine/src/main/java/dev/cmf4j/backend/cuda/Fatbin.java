package dev.cmf4j.backend.cuda;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * The table of contents of a CUDA fatbin ({@code nvcc -fatbin}): which SASS (ELF) and PTX images it holds.
 * The driver reads the fatbin itself ({@code cuModuleLoadData}); this index is for choosing and describing.
 * Layout (NVIDIA's {@code fatbinary} container, little-endian): a 16-byte header {@code u32 magic 0xBA55ED50,
 * u16 version, u16 header size, u64 size of the entries}, then entries, each a header {@code u16 kind
 * (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size (padded)}, with the architecture (e.g. 90)
 * as a {@code u32} at byte 28 of the entry header, followed by its payload (possibly compressed).
 */
record Fatbin(List<Entry> entries) {
    static final int MAGIC = 0xBA55ED50;

    /** One image: PTX (compiled by the driver on load) or SASS for one architecture. */
    record Entry(boolean ptx, int arch) {
        String label() { return (ptx ? "compute_" : "sm_") + arch; }
    }

    /** Parses the entry headers; every offset is checked against the buffer before it is read. */
    static Fatbin parse(byte[] bytes) {
        ByteBuffer b = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        if (bytes.length < 16 || b.getInt(0) != MAGIC) throw new IllegalArgumentException("not a fatbin (no 0xBA55ED50 header)");
        int headerSize = Short.toUnsignedInt(b.getShort(6));
        long end = headerSize + b.getLong(8);
        if (headerSize < 16 || end < headerSize || end > bytes.length)
            throw new IllegalArgumentException("fatbin header claims " + end + " bytes, the file has " + bytes.length + " bytes");
        List<Entry> out = new ArrayList<>();
        long at = headerSize;
        while (at < end) {
            if (end - at < 32) throw new IllegalArgumentException("fatbin entry at " + at + " is truncated");
            int p = (int) at;
            int kind = Short.toUnsignedInt(b.getShort(p));
            long entryHeader = Integer.toUnsignedLong(b.getInt(p + 4)), payload = b.getLong(p + 8);
            if (entryHeader < 32 || payload < 0 || payload > end - at - entryHeader)
                throw new IllegalArgumentException("fatbin entry at " + at + " overruns the file");
            if (kind == 1 || kind == 2) out.add(new Entry(kind == 1, b.getInt(p + 28)));
            at += entryHeader + payload;
        }
        return new Fatbin(List.copyOf(out));
    }

    /**
     * The image the driver runs on a GPU of compute capability {@code major.minor}: SASS of the same major
     * and the highest minor not above the device's, else PTX of the highest architecture not above the
     * device's (compiled by the driver); null when nothing in the fatbin runs there.
     */
    Entry choose(int major, int minor) {
        int cc = major * 10 + minor;
        Entry best = null;
        for (Entry e : entries)
            if (!e.ptx() && e.arch() / 10 == major && e.arch() <= cc && (best == null || e.arch() > best.arch())) best = e;
        if (best != null) return best;
        for (Entry e : entries)
            if (e.ptx() && e.arch() <= cc && (best == null || e.arch() > best.arch())) best = e;
        return best;
    }

    List<String> labels() { return entries.stream().map(Entry::label).toList(); }
}
