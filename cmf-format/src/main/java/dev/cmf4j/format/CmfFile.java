package dev.cmf4j.format;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * An open CMF v2 model: the files memory-mapped read-only through {@code java.lang.foreign}
 * (64-bit offsets, no size limit), validated, and exposed as a header, a tensor directory of
 * zero-copy payload slices, masks and vocab.
 *
 * <p>{@link #open} checks, before anything is trusted: the envelope (magic, version, feature bits,
 * every section inside the file, no section overlapping another, data 4096-aligned), the header and
 * directory hashes, the header JSON and its enums, every directory record (name in the pool and valid
 * UTF-8, known dtype, ndim &le; 6, payload inside the data section, 64-aligned, size consistent with
 * dtype and shape, no two payloads overlapping, no duplicate names), feature bits against content,
 * and the masks section. Its cost is proportional to the header, directory and masks, never to the
 * tensor data. Tensor hashes are checked by {@link #verify}, on demand.
 *
 * <p>A name of the form {@code base-00002-of-00004.cmf} opens the whole shard set: every shard is
 * validated and the directories merged into one view; the header, masks and vocab come from shard 1.
 *
 * <p>Every failure is a {@link CmfException}. Payload slices stay valid until {@link #close}; touching
 * one afterwards throws {@link IllegalStateException}. The mapping is shared: any thread may read.
 */
public final class CmfFile implements AutoCloseable {

    /** Headers and masks meta larger than this are refused (they are kilobytes in practice). */
    static final long MAX_JSON = 256L << 20;

    private static final Pattern SHARD_NAME = Pattern.compile("^(.*)-(\\d{5})-of-(\\d{5})\\.cmf$");

    /** One physical file of the model (a single-file model has one). */
    public record Shard(String label, MemorySegment bytes, Envelope envelope, CmfHeader header,
                        List<TensorEntry> tensors) {
        public Shard { tensors = List.copyOf(tensors); }
    }

    private final String label;
    private final Arena arena;
    private final List<Shard> shards;
    private final CmfHeader header;
    private final List<TensorEntry> tensors;
    private final Map<String, TensorEntry> byName;
    private final Masks masks;
    /** The files mapped, as they were when opened (empty for bytes opened from memory). */
    private final List<MappedFile> mapped;

    /** A mapped file's identity (inode where the OS has one) and size when it was mapped. */
    private record MappedFile(Path path, Object key, long size) {}

    private CmfFile(String label, Arena arena, List<Shard> shards, Masks masks, List<MappedFile> mapped) {
        this.label = label;
        this.mapped = List.copyOf(mapped);
        this.arena = arena;
        this.shards = List.copyOf(shards);
        this.header = shards.getFirst().header();
        this.masks = masks;
        List<TensorEntry> all = new ArrayList<>();
        Map<String, TensorEntry> map = new HashMap<>();
        for (Shard s : shards) {
            for (TensorEntry t : s.tensors()) {
                if (map.putIfAbsent(t.name(), t) != null) {
                    throw new CmfException.Parse(s.label(), s.envelope().directory().offset(),
                            "tensor '" + t.name() + "' appears in more than one shard");
                }
                all.add(t);
            }
        }
        this.tensors = Collections.unmodifiableList(all);
        this.byName = map;
    }

    /**
     * Opens and validates a CMF file (or, for a {@code -NNNNN-of-NNNNN.cmf} name, its whole shard set).
     *
     * @throws CmfException naming the file, the offset and what was expected
     */
    public static CmfFile open(Path path) {
        Path abs = path.toAbsolutePath();
        Matcher m = SHARD_NAME.matcher(abs.getFileName().toString());
        List<Path> files = new ArrayList<>();
        if (m.matches() && Integer.parseInt(m.group(3)) > 0) {
            int count = Integer.parseInt(m.group(3));
            for (int i = 1; i <= count; i++) files.add(abs.resolveSibling(String.format("%s-%05d-of-%05d.cmf", m.group(1), i, count)));
        } else {
            files.add(abs);
        }
        if (files.size() > 1) {
            for (Path p : files) {
                if (!Files.exists(p)) throw new CmfException.Io(p.toString(), "missing shard of " + abs.getFileName(), null);
            }
        }
        Arena arena = Arena.ofShared();
        try {
            List<Shard> shards = new ArrayList<>();
            List<MappedFile> mapped = new ArrayList<>();
            for (int i = 0; i < files.size(); i++) {
                Path p = files.get(i);
                MemorySegment bytes = map(p, arena);
                mapped.add(new MappedFile(p, fileKey(p), bytes.byteSize()));
                Shard s = read(bytes, p.toString());
                if (files.size() > 1) {
                    CmfHeader.ShardInfo si = s.header().shard();
                    if (si == null || si.no() != i + 1 || si.count() != files.size()) {
                        throw new CmfException.Parse(s.label(), s.envelope().header().offset(), "header.shard is "
                                + si + " but the file name says shard " + (i + 1) + " of " + files.size());
                    }
                }
                shards.add(s);
            }
            return new CmfFile(abs.toString(), arena, shards, masksOf(shards.getFirst()), mapped);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /**
     * Opens CMF bytes already in memory (a single file; no shard merging). The caller owns
     * {@code bytes} and must keep it alive while the returned file is used; {@link #close} does not
     * free it. {@code label} names the bytes in error messages.
     */
    public static CmfFile open(MemorySegment bytes, String label) {
        Shard s = read(bytes, label);
        return new CmfFile(label, null, List.of(s), masksOf(s), List.of());
    }

    private static Object fileKey(Path p) {
        try {
            return Files.readAttributes(p, java.nio.file.attribute.BasicFileAttributes.class).fileKey();
        } catch (IOException e) {
            throw new CmfException.Io(p.toString(), "cannot read file attributes: " + e.getMessage(), e);
        }
    }

    private static MemorySegment map(Path p, Arena arena) {
        try (FileChannel ch = FileChannel.open(p, StandardOpenOption.READ)) {
            return ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size(), arena);
        } catch (NoSuchFileException e) {
            throw new CmfException.Io(p.toString(), "no such file", e);
        } catch (IOException | UnsupportedOperationException e) {
            throw new CmfException.Io(p.toString(), "cannot map file: " + e.getMessage(), e);
        }
    }

    /** Validates one physical file and parses everything but the tensor payloads. */
    static Shard read(MemorySegment file, String label) {
        Envelope env = Envelope.parse(file, label);
        Section hs = env.header();
        if (hs.length() > MAX_JSON) {
            throw new CmfException.Parse(label, 0x18, "header is " + hs.length() + " bytes; at most " + MAX_JSON + " accepted");
        }
        MemorySegment headerBytes = file.asSlice(hs.offset(), hs.length());
        if (env.headerHash() != 0) {
            long h = Hash64.of(headerBytes);
            if (h != env.headerHash()) {
                throw new CmfException.Integrity(label, 0x70, "header hash64 is " + Hash64.hex(h)
                        + " but the envelope records " + Hash64.hex(env.headerHash()));
            }
        }
        if (env.dirHash() != 0) {
            long h = Hash64.of(file.asSlice(env.directory().offset(), env.directory().length()));
            if (h != env.dirHash()) {
                throw new CmfException.Integrity(label, 0x78, "directory hash64 is " + Hash64.hex(h)
                        + " but the envelope records " + Hash64.hex(env.dirHash()));
            }
        }
        CmfHeader header = CmfHeader.parse(headerBytes.toArray(ValueLayout.JAVA_BYTE), label, hs.offset());
        List<TensorEntry> tensors = TensorDirectory.parse(file, env, label);
        checkFeatures(env, header, tensors, label);
        return new Shard(label, file, env, header, tensors);
    }

    /** Feature bits that are derived from content must agree with it (CMF_FORMAT.md §1.2). */
    private static void checkFeatures(Envelope env, CmfHeader h, List<TensorEntry> tensors, String label) {
        Set<Feature> f = Feature.of(env.features());
        boolean firstShard = h.shard() == null || h.shard().no() == 1;
        agree(label, Feature.BINARY_MASKS, f, env.masks().present(), true, "a masks section");
        ModelArch a = h.arch();
        agree(label, Feature.PRISM_HADAMARD, f, a != null && a.prismHadamard() != null, true, "arch.prism_hadamard");
        boolean bounded = a != null && (a.anchorCore() != null
                || (a.layerTypes() != null && a.layerTypes().contains("BoundedAttention")));
        agree(label, Feature.BOUNDED_STATE, f, bounded, true, "arch.anchor_core or BoundedAttention layers");
        agree(label, Feature.ROUTER_V2, f, h.router() != null, firstShard, "header.router");
        agree(label, Feature.GENOME, f, h.genome() != null, firstShard, "header.genome");
        boolean v2skills = h.skills().stream().anyMatch(s -> s.kind() != null);
        agree(label, Feature.SKILLS_V2, f, v2skills, firstShard, "v2 skill records (with kind)");
    }

    private static void agree(String label, Feature feat, Set<Feature> set, boolean content, boolean bitImpliesContent,
                              String what) {
        boolean bit = set.contains(feat);
        if (content && !bit) {
            throw new CmfException.Parse(label, 12, "file has " + what + " but required_features bit " + feat.bit
                    + " (" + feat + ") is not set");
        }
        if (bit && !content && bitImpliesContent) {
            throw new CmfException.Parse(label, 12, "required_features bit " + feat.bit + " (" + feat
                    + ") is set but the file has no " + what);
        }
    }

    static Masks masksOf(Shard s) {
        Section ms = s.envelope().masks();
        if (!ms.present()) return null;
        MemorySegment sec = s.bytes().asSlice(ms.offset(), ms.length());
        CmfHeader.SectionHashes sh = s.header().sectionHashes();
        if (sh != null && sh.masks() != null) {
            long h = Hash64.of(sec);
            if (h != sh.masks()) {
                throw new CmfException.Integrity(s.label(), ms.offset(), "masks section hash64 is " + Hash64.hex(h)
                        + " but header.section_hashes.masks records " + Hash64.hex(sh.masks()));
            }
        }
        boolean loop = Feature.of(s.envelope().features()).contains(Feature.LOOP_MASKS);
        return Masks.parse(sec, s.header().arch(), loop, s.label(), ms.offset());
    }

    // ---------------------------------------------------------------- public view

    /** The path (or label) this file was opened from. */
    public String label() { return label; }

    /** The header (of shard 1 for a shard set). */
    public CmfHeader header() { return header; }

    /** The envelope of the first (or only) file. */
    public Envelope envelope() { return shards.getFirst().envelope(); }

    /** The physical files, shard 1 first; one for an unsharded model. */
    public List<Shard> shards() { return shards; }

    /** Every tensor in directory order (shard by shard). */
    public List<TensorEntry> tensors() { return tensors; }

    /** The tensor named {@code name}. @throws CmfException.MissingTensor when there is none */
    public TensorEntry tensor(String name) {
        TensorEntry t = byName.get(name);
        if (t == null) throw new CmfException.MissingTensor(label, name);
        return t;
    }

    /** The tensor named {@code name}, if present. */
    public Optional<TensorEntry> find(String name) { return Optional.ofNullable(byName.get(name)); }

    /** The task masks, if the file has a masks section. */
    public Optional<Masks> masks() { return Optional.ofNullable(masks); }

    /**
     * The verbatim HF {@code tokenizer.json} bytes of the vocab section, if present. Checked against
     * {@code section_hashes.vocab} when recorded. @throws CmfException.Integrity on mismatch
     */
    public Optional<byte[]> vocab() {
        for (Shard s : shards) {
            Section vs = s.envelope().vocab();
            if (!vs.present()) continue;
            MemorySegment seg = s.bytes().asSlice(vs.offset(), vs.length());
            CmfHeader.SectionHashes sh = s.header().sectionHashes();
            if (sh != null && sh.vocab() != null && Hash64.of(seg) != sh.vocab()) {
                throw new CmfException.Integrity(s.label(), vs.offset(), "vocab section hash64 is "
                        + Hash64.hex(Hash64.of(seg)) + " but header.section_hashes.vocab records " + Hash64.hex(sh.vocab()));
            }
            if (vs.length() > Integer.MAX_VALUE - 8) {
                throw new CmfException.Bounds(s.label(), vs.offset(), "vocab section of " + vs.length() + " bytes is too large");
            }
            return Optional.of(seg.toArray(ValueLayout.JAVA_BYTE));
        }
        return Optional.empty();
    }

    /** The raw (deprecated, never executed) sparse index section, if present. */
    public Optional<MemorySegment> index() {
        for (Shard s : shards) {
            Section is = s.envelope().index();
            if (is.present()) return Optional.of(s.bytes().asSlice(is.offset(), is.length()));
        }
        return Optional.empty();
    }

    /** Total payload bytes over all tensors. */
    public long payloadBytes() {
        long n = 0;
        for (TensorEntry t : tensors) n += t.nbytes();
        return n;
    }

    /**
     * Checks every stored hash against the bytes: header and directory (envelope), masks, vocab and
     * index ({@code section_hashes}), and every tensor payload. Reads all data once, tensors in parallel.
     *
     * @return one line per problem; empty when the file is intact
     */
    public List<String> verify() {
        List<String> problems = new ArrayList<>();
        for (Shard s : shards) {
            Envelope e = s.envelope();
            MemorySegment b = s.bytes();
            check(problems, s.label(), "header", e.headerHash(), b, e.header());
            check(problems, s.label(), "directory", e.dirHash(), b, e.directory());
            CmfHeader.SectionHashes sh = s.header().sectionHashes();
            if (sh != null) {
                checkSection(problems, s.label(), "masks", sh.masks(), b, e.masks());
                checkSection(problems, s.label(), "vocab", sh.vocab(), b, e.vocab());
                checkSection(problems, s.label(), "index", sh.index(), b, e.index());
            }
            List<TensorEntry> ts = s.tensors();
            // Tensors hash independently: spread them over the common pool (verify is bound by hashing).
            long[] hashes = new long[ts.size()];
            java.util.stream.IntStream.range(0, ts.size()).parallel().forEach(i -> hashes[i] = Hash64.of(ts.get(i).data()));
            for (int i = 0; i < ts.size(); i++) {
                TensorEntry t = ts.get(i);
                long h = hashes[i];
                if (h != t.hash()) {
                    problems.add(s.label() + ": tensor '" + t.name() + "' payload hash64 is " + Hash64.hex(h)
                            + " but the directory records " + Hash64.hex(t.hash()));
                }
            }
        }
        return problems;
    }

    private static void check(List<String> out, String label, String what, long expected, MemorySegment b, Section s) {
        if (expected == 0) return;
        long h = Hash64.of(b.asSlice(s.offset(), s.length()));
        if (h != expected) out.add(label + ": " + what + " hash64 is " + Hash64.hex(h) + " but the envelope records " + Hash64.hex(expected));
    }

    private static void checkSection(List<String> out, String label, String what, Long expected, MemorySegment b, Section s) {
        if (expected == null) return;
        if (!s.present()) {
            out.add(label + ": header.section_hashes." + what + " is recorded but the file has no " + what + " section");
            return;
        }
        long h = Hash64.of(b.asSlice(s.offset(), s.length()));
        if (h != expected) out.add(label + ": " + what + " section hash64 is " + Hash64.hex(h)
                + " but header.section_hashes." + what + " records " + Hash64.hex(expected));
    }

    /**
     * Checks that no mapped file shrank since it was opened. Reading a page of a mapping past the end of its file
     * faults (the JVM raises an {@link InternalError} for memory-segment reads); a caller that catches such a fault
     * asks here whether the file was truncated under it. A file replaced by another (a new inode) leaves the mapping
     * intact and passes.
     *
     * @throws CmfException.Io naming the file and both sizes when one was truncated
     */
    public void checkIntact() {
        for (MappedFile f : mapped) {
            long now;
            Object key;
            try {
                var attrs = Files.readAttributes(f.path(), java.nio.file.attribute.BasicFileAttributes.class);
                now = attrs.size();
                key = attrs.fileKey();
            } catch (NoSuchFileException e) {
                continue;   // unlinked: the mapping keeps the old file's pages alive
            } catch (IOException e) {
                throw new CmfException.Io(f.path().toString(), "cannot check the file's size: " + e.getMessage(), e);
            }
            if ((f.key() == null || f.key().equals(key)) && now < f.size()) {
                throw new CmfException.Io(f.path().toString(), "the file was truncated from " + f.size() + " to " + now
                        + " bytes while it was open; reopen the model", null);
            }
        }
    }

    /** Unmaps the files; payload slices become unusable. Files opened from a caller's segment are left alone. */
    @Override public void close() {
        if (arena != null && arena.scope().isAlive()) arena.close();
    }
}
