package dev.cmf4j.format;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.List;

/**
 * The fixed 128-byte head of every CMF v2 file (CMF_FORMAT.md §1.1): magic, version, flags,
 * required features, six (offset, length) sections and the header/directory hashes. {@link #parse}
 * checks everything that can be checked from these 128 bytes and the file size; readers navigate
 * only through it, never by assuming an order of sections.
 */
public record Envelope(int version, int flags, int features, Section header, Section directory,
                       Section data, Section masks, Section vocab, Section index,
                       long headerHash, long dirHash) {

    public static final int SIZE = 128;
    public static final int VERSION = 2;
    /** The data blob starts on this boundary (page size of the mmap). */
    public static final int DATA_ALIGN = 4096;
    static final byte[] MAGIC = {'C', 'M', 'F', 1};

    static final ValueLayout.OfInt U32 = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfLong U64 = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /** The sections in envelope order. */
    public List<Section> sections() { return List.of(header, directory, data, masks, vocab, index); }

    /**
     * Reads and validates the envelope of {@code file}: magic, version, feature bits, every section
     * inside the file and not overlapping another or the envelope, the data blob 4096-aligned.
     */
    public static Envelope parse(MemorySegment file, String label) {
        long size = file.byteSize();
        if (size < 4 || !magicMatches(file)) {
            throw new CmfException.InvalidMagic(label, 0, size < 4
                    ? "file is " + size + " bytes, too short for the CMF magic"
                    : "expected magic \"CMF\\x01\" (43 4d 46 01), found " + hex4(file));
        }
        if (size < SIZE) {
            throw new CmfException.Bounds(label, size, "file is " + size + " bytes; the envelope needs " + SIZE);
        }
        int version = file.get(U32, 4);
        if (version != VERSION) {
            throw new CmfException.UnsupportedVersion(label, 4, "expected CMF version 2, found "
                    + Integer.toUnsignedString(version) + (version == 1 ? " (CMF v1 is not supported)" : ""));
        }
        int flags = file.get(U32, 8);
        int features = file.get(U32, 12);
        int unknown = features & ~Feature.SUPPORTED;
        if (unknown != 0) {
            int bit = Integer.numberOfTrailingZeros(unknown);
            Feature f = Feature.ofBit(bit);
            throw new CmfException.UnsupportedFeature(label, 12, "required_features bit " + bit
                    + (f != null ? " (" + f + ", reserved by the format)" : " (unassigned)")
                    + " is set; this reader supports bits 0-2 and 5-13 (features=0x"
                    + Integer.toHexString(features) + ")");
        }
        if ((features & Feature.TENSOR_DIR.mask()) == 0) {
            throw new CmfException.Parse(label, 12, "required_features bit 0 (TENSOR_DIR) must always be set");
        }
        Section header = section(file, label, "header", 0x10);
        Section dir = section(file, label, "directory", 0x20);
        Section data = section(file, label, "data", 0x30);
        Section masks = section(file, label, "masks", 0x40);
        Section vocab = section(file, label, "vocab", 0x50);
        Section index = section(file, label, "index", 0x60);
        if (!header.present()) throw new CmfException.Parse(label, 0x18, "header section is empty; expected JSON");
        if (dir.length() < 16) {
            throw new CmfException.Bounds(label, 0x28, "directory is " + dir.length()
                    + " bytes; it needs at least 16 (count and pool offset)");
        }
        if (data.offset() % DATA_ALIGN != 0) {
            throw new CmfException.Bounds(label, 0x30, "data_off " + data.offset()
                    + " is not a multiple of " + DATA_ALIGN);
        }
        List<Section> all = List.of(header, dir, data, masks, vocab, index);
        for (int i = 0; i < all.size(); i++) {
            Section a = all.get(i);
            if (!a.present()) continue;
            for (int j = i + 1; j < all.size(); j++) {
                Section b = all.get(j);
                if (b.present() && a.offset() < b.end() && b.offset() < a.end()) {
                    throw new CmfException.Bounds(label, b.offset(), "section " + b + " overlaps section " + a);
                }
            }
        }
        return new Envelope(version, flags, features, header, dir, data, masks, vocab, index,
                file.get(U64, 0x70), file.get(U64, 0x78));
    }

    private static Section section(MemorySegment file, String label, String name, long at) {
        long off = file.get(U64, at), len = file.get(U64, at + 8);
        long size = file.byteSize();
        if (len == 0) return new Section(name, 0, 0);   // absent: its offset field means nothing and is never used
        // Unsigned u64 values above Long.MAX_VALUE read as negative and are past any real file.
        if (off < 0 || len < 0 || off > size || len > size - off) {
            throw new CmfException.Bounds(label, at, name + " section [" + Long.toUnsignedString(off) + ", +"
                    + Long.toUnsignedString(len) + ") extends past the end of the file (" + size + " bytes)");
        }
        if (off < SIZE) {
            throw new CmfException.Bounds(label, at, name + " section starts at " + off
                    + ", inside the " + SIZE + "-byte envelope");
        }
        return new Section(name, off, len);
    }

    private static boolean magicMatches(MemorySegment file) {
        for (int i = 0; i < 4; i++) if (file.get(ValueLayout.JAVA_BYTE, i) != MAGIC[i]) return false;
        return true;
    }

    private static String hex4(MemorySegment file) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < 4; i++) sb.append(String.format("%s%02x", i == 0 ? "" : " ", file.get(ValueLayout.JAVA_BYTE, i)));
        return sb.toString();
    }

    /** The 128 envelope bytes. */
    public byte[] encode() {
        MemorySegment s = MemorySegment.ofArray(new byte[SIZE]);
        for (int i = 0; i < 4; i++) s.set(ValueLayout.JAVA_BYTE, i, MAGIC[i]);
        s.set(U32, 4, version);
        s.set(U32, 8, flags);
        s.set(U32, 12, features);
        long at = 0x10;
        for (Section sec : sections()) {
            s.set(U64, at, sec.present() ? sec.offset() : 0);
            s.set(U64, at + 8, sec.length());
            at += 16;
        }
        s.set(U64, 0x70, headerHash);
        s.set(U64, 0x78, dirHash);
        return s.toArray(ValueLayout.JAVA_BYTE);
    }
}
