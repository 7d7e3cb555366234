package dev.cmf4j.format;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Writes a CMF v2 file (or shard set) by streaming: each tensor's payload goes to disk when it is
 * added, so memory stays bounded by the largest payload the caller hands over (or by a chunk, with
 * {@link #openTensor}). Layout, as CMF_FORMAT.md §1.1/§1.3 prescribe:
 * <pre>
 * envelope (128) | header JSON (compact) | directory (right after the header) | zero pad
 * | data blob at a 4096 boundary: tensors 64-aligned, tensors &gt;= 16 KiB 4096-aligned, zero pad between
 * | masks | vocab | index (back to back, shard 1 only)
 * </pre>
 * Like the reference streaming writer it reserves a gap for envelope+header+directory before the
 * data ({@link Options#reserve}); should the head outgrow it, {@link #finish} moves the data once to a
 * larger boundary (correct, only slower). Feature bits are derived from content: TENSOR_DIR always,
 * BINARY_MASKS iff masks, QUANT_2F iff a q8_2f or vbit tensor exists, LOOP_MASKS iff masks and
 * {@code arch.num_loops > 1}, PRISM_HADAMARD/BOUNDED_STATE/ROUTER_V2/GENOME/SKILLS_V2 iff the header
 * holds what they announce; SKILL_FILE, PRISM_AFFINE and DECISION come from {@link Options#features}.
 *
 * <p>Crash safety: everything is written to hidden temp files in the destination directory, read
 * back and validated with the same checks {@link CmfFile#open} applies, fsynced, and only then
 * atomically renamed onto the final names. On any failure, or {@link #close} without
 * {@link #finish}, the temp files are deleted and no file appears at the destination.
 *
 * <p>Threads: {@link #addTensor} may be called from several threads at once (hashing runs in the
 * calling thread; the disk write is serialized). Directory order is the order in which tensors were
 * added.
 */
public final class CmfWriter implements AutoCloseable {

    /** Tensors at least this large start on a page boundary (cold experts and skills get their own pages). */
    public static final long PAGE_ALIGN_MIN = 16 * 1024;

    /**
     * Writer settings.
     *
     * @param reserve       bytes reserved before the data blob for envelope+header+directory (rounded up
     *                      to 4096); 0 picks {@code 1 MiB + 2 x header}, room for about 8,000 tensors
     *                      (see {@link #withExpectedTensors}). The gap is a hole in the file, not
     *                      written blocks.
     * @param maxShardBytes start a new shard when the data of the current one would exceed this (0 = never)
     * @param features      extra required_features bits that cannot be derived from content
     *                      (SKILL_FILE, PRISM_AFFINE, DECISION)
     */
    public record Options(long reserve, long maxShardBytes, int features) {
        public static final Options DEFAULT = new Options(0, 0, 0);

        public Options withReserve(long r) { return new Options(r, maxShardBytes, features); }

        /**
         * Sizes the reserve for about {@code n} tensors (56-byte record plus a generous name each),
         * so models with tens of thousands of tensors never need the data moved at the end.
         */
        public Options withExpectedTensors(long n) { return withReserve((64L << 10) + n * (56 + 200)); }
        public Options withMaxShardBytes(long m) { return new Options(reserve, m, features); }
        public Options withFeatures(int f) { return new Options(reserve, maxShardBytes, f); }
    }

    private static final int NON_DERIVED = Feature.SKILL_FILE.mask() | Feature.PRISM_AFFINE.mask() | Feature.DECISION.mask();

    private final Path out;
    private final CmfHeader header;
    private final Options options;
    private final long reserve;
    private final ReentrantLock lock = new ReentrantLock();
    private final List<ShardOut> shards = new ArrayList<>();
    private final Set<String> names = new HashSet<>();
    private boolean quant2f;
    private byte[] masks;
    private byte[] vocab;
    private byte[] index;
    private boolean done;
    private boolean failed;

    /** One file being written. */
    private final class ShardOut {
        final Path tmp;
        final FileChannel ch;
        final List<TensorDirectory.Record> records = new ArrayList<>();
        long dataOff;
        long cursor;          // end of the last payload, relative to dataOff

        ShardOut() throws IOException {
            String base = out.getFileName().toString();
            tmp = out.resolveSibling("." + base + ".tmp-" + Long.toHexString(ThreadLocalRandom.current().nextLong())
                    + "-" + (shards.size() + 1));
            ch = FileChannel.open(tmp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE, StandardOpenOption.READ);
            dataOff = reserve;
        }
    }

    private CmfWriter(Path out, CmfHeader header, Options options) {
        this.out = out.toAbsolutePath();
        this.header = header;
        this.options = options;
        if ((options.features() & ~NON_DERIVED) != 0) {
            throw new IllegalArgumentException("only SKILL_FILE, PRISM_AFFINE and DECISION may be given as extra features");
        }
        long r = options.reserve() > 0 ? options.reserve() + 2L * header.toBytes().length
                : (1L << 20) + 2L * header.toBytes().length;
        this.reserve = align(Math.max(r, Envelope.SIZE + 16), Envelope.DATA_ALIGN);
    }

    /** Starts writing {@code out} (a single file unless {@link Options#maxShardBytes} or {@link #nextShard} split it). */
    public static CmfWriter create(Path out, CmfHeader header) { return create(out, header, Options.DEFAULT); }

    public static CmfWriter create(Path out, CmfHeader header, Options options) {
        if (!"cmf".equals(header.format()) || header.version() != 2) {
            throw new IllegalArgumentException("header must be format \"cmf\" version 2");
        }
        CmfWriter w = new CmfWriter(out, header, options);
        try {
            w.shards.add(w.new ShardOut());
        } catch (IOException e) {
            throw new CmfException.Io(out.toString(), "cannot create temp file: " + e.getMessage(), e);
        }
        return w;
    }

    // ------------------------------------------------------------------ tensors

    /** Adds a tensor whose payload is in memory (any segment: heap, native or a slice of another mmap). */
    public void addTensor(String name, DType dtype, long[] shape, MemorySegment payload) {
        long hash = Hash64.of(payload);             // outside the lock: hashing runs at memory speed per thread
        lock.lock();
        try {
            Slot s = begin(name, dtype, shape, payload.byteSize());
            writeAt(s.shard, s.pos, payload);
            s.shard.records.add(new TensorDirectory.Record(name, dtype, shape.clone(), s.off, payload.byteSize(), hash));
        } finally {
            lock.unlock();
        }
    }

    public void addTensor(String name, DType dtype, long[] shape, byte[] payload) {
        addTensor(name, dtype, shape, MemorySegment.ofArray(payload));
    }

    public void addTensor(String name, DType dtype, long[] shape, ByteBuffer payload) {
        addTensor(name, dtype, shape, MemorySegment.ofBuffer(payload));
    }

    /**
     * Starts a tensor whose payload the caller streams in pieces (for tensors too large to hold):
     * write exactly {@code nbytes} through the returned sink, then close it. The writer is held by the
     * calling thread until then.
     */
    public TensorSink openTensor(String name, DType dtype, long[] shape, long nbytes) {
        lock.lock();
        try {
            Slot s = begin(name, dtype, shape, nbytes);
            return new TensorSink(s, name, dtype, shape.clone(), nbytes);
        } catch (RuntimeException e) {
            lock.unlock();
            throw e;
        }
    }

    /** Receives one tensor's payload piece by piece; see {@link #openTensor}. */
    public final class TensorSink implements AutoCloseable {
        private final Slot slot;
        private final String name;
        private final DType dtype;
        private final long[] shape;
        private final long nbytes;
        private final Hash64.Streaming hash = new Hash64.Streaming();
        private long written;
        private boolean closed;

        private TensorSink(Slot slot, String name, DType dtype, long[] shape, long nbytes) {
            this.slot = slot;
            this.name = name;
            this.dtype = dtype;
            this.shape = shape;
            this.nbytes = nbytes;
        }

        public void write(MemorySegment piece) {
            if (closed) throw new IllegalStateException("tensor '" + name + "' is already closed");
            if (piece.byteSize() > nbytes - written) {
                failed = true;
                throw new IllegalArgumentException("tensor '" + name + "': more than the declared " + nbytes + " bytes");
            }
            hash.update(piece);
            writeAt(slot.shard, slot.pos + written, piece);
            written += piece.byteSize();
        }

        public void write(byte[] b, int off, int len) { write(MemorySegment.ofArray(b).asSlice(off, len)); }

        public void write(ByteBuffer b) { write(MemorySegment.ofBuffer(b)); }

        /** Records the tensor; fails (and dooms the file) if fewer bytes than declared arrived. */
        @Override public void close() {
            if (closed) return;
            closed = true;
            try {
                if (written != nbytes) {
                    failed = true;
                    throw new IllegalStateException("tensor '" + name + "': " + written + " of " + nbytes + " bytes written");
                }
                slot.shard.records.add(new TensorDirectory.Record(name, dtype, shape, slot.off, nbytes, hash.value()));
            } finally {
                lock.unlock();
            }
        }
    }

    private record Slot(ShardOut shard, long off, long pos) {}

    /**
     * Validates a new tensor and allocates its aligned place; caller holds the lock. A rejected
     * tensor (bad name, shape or size) leaves the writer usable; an I/O failure dooms it.
     */
    private Slot begin(String name, DType dtype, long[] shape, long nbytes) {
        if (done) throw new IllegalStateException("writer already finished");
        if (failed) throw new IllegalStateException("writer failed earlier; close it");
        if (name == null || name.isEmpty()) throw new IllegalArgumentException("tensor name must not be empty");
        int nameLen = name.getBytes(StandardCharsets.UTF_8).length;
        if (nameLen > 0xFFFF) throw new IllegalArgumentException("tensor name longer than 65535 bytes: " + name);
        if (dtype == null) throw new IllegalArgumentException("tensor '" + name + "': dtype is null");
        if (shape.length > TensorDirectory.MAX_NDIM) {
            throw new IllegalArgumentException("tensor '" + name + "': ndim " + shape.length + " > " + TensorDirectory.MAX_NDIM);
        }
        for (long d : shape) {
            if (d < 0 || d > 0xFFFFFFFFL) throw new IllegalArgumentException("tensor '" + name + "': dimension " + d + " outside u32");
        }
        String bad = PayloadSize.check(dtype, shape, nbytes);
        if (bad != null) throw new IllegalArgumentException("tensor '" + name + "': " + bad);
        if (!names.add(name)) throw new IllegalArgumentException("tensor '" + name + "' added twice");
        ShardOut s = shards.getLast();
        long off = align(s.cursor, nbytes >= PAGE_ALIGN_MIN ? Envelope.DATA_ALIGN : TensorDirectory.TENSOR_ALIGN);
        if (options.maxShardBytes() > 0 && !s.records.isEmpty() && off + nbytes > options.maxShardBytes()) {
            s = startShard();
            off = 0;
        }
        s.cursor = off + nbytes;
        if (dtype == DType.Q8_2F || dtype == DType.VBIT) quant2f = true;
        return new Slot(s, off, s.dataOff + off);
    }

    /** Ends the current shard; tensors added after this go to the next one. */
    public void nextShard() {
        lock.lock();
        try {
            if (shards.getLast().records.isEmpty()) throw new IllegalStateException("current shard has no tensors");
            startShard();
        } finally {
            lock.unlock();
        }
    }

    private ShardOut startShard() {
        try {
            ShardOut s = new ShardOut();
            shards.add(s);
            return s;
        } catch (IOException e) {
            failed = true;
            throw new CmfException.Io(out.toString(), "cannot create temp shard file: " + e.getMessage(), e);
        }
    }

    private void writeAt(ShardOut s, long pos, MemorySegment src) {
        try {
            long n = src.byteSize();
            for (long done = 0; done < n; ) {
                long chunk = Math.min(n - done, 1L << 30);       // ByteBuffer views are int-indexed
                ByteBuffer b = src.asSlice(done, chunk).asByteBuffer();
                while (b.hasRemaining()) pos += s.ch.write(b, pos);
                done += chunk;
            }
        } catch (IOException e) {
            failed = true;
            throw new CmfException.Io(s.tmp.toString(), "write failed: " + e.getMessage(), e);
        }
    }

    // ------------------------------------------------------------------ sections

    /** The HF tokenizer.json bytes (stored verbatim in shard 1's vocab section). */
    public void setVocab(byte[] tokenizerJson) { vocab = tokenizerJson == null ? null : tokenizerJson.clone(); }

    /** Task masks; their blob sizes are checked against the header's arch now. */
    public void setMasks(Masks m) {
        if (m == null) { masks = null; return; }
        byte[] sec = m.encode();
        boolean loop = loopMasks();
        Masks.parse(MemorySegment.ofArray(sec), header.arch(), loop, out + " (masks)", 0);
        masks = sec;
    }

    /** The deprecated sparse index section, raw (kept only so round trips lose nothing). */
    public void setIndex(byte[] raw) { index = raw == null ? null : raw.clone(); }

    private boolean loopMasks() {
        return header.arch() != null && header.arch().numLoops() != null && header.arch().numLoops() > 1;
    }

    // ------------------------------------------------------------------ finish

    /**
     * Writes headers and directories, validates, fsyncs and renames the files into place.
     *
     * @return the written files, shard 1 first
     */
    public List<Path> finish() {
        lock.lock();
        try {
            if (done) throw new IllegalStateException("writer already finished");
            if (failed) throw new IllegalStateException("writer failed earlier; nothing was written");
            int count = shards.size();
            List<Path> finals = new ArrayList<>();
            String fname = out.getFileName().toString();
            String base = fname.endsWith(".cmf") ? fname.substring(0, fname.length() - 4) : fname;
            for (int i = 0; i < count; i++) {
                finals.add(count == 1 ? out : out.resolveSibling(String.format("%s-%05d-of-%05d.cmf", base, i + 1, count)));
            }
            for (int i = 0; i < count; i++) {
                writeHead(shards.get(i), i, count, Feature.TENSOR_DIR.mask() | options.features() | derivedFeatures(i == 0));
            }
            for (int i = 0; i < count; i++) validate(shards.get(i), finals.get(i));
            for (ShardOut s : shards) close(s.ch, s.tmp);
            for (int i = 0; i < count; i++) move(shards.get(i).tmp, finals.get(i));
            fsyncDir(out.getParent());
            done = true;
            return finals;
        } catch (RuntimeException e) {
            failed = true;
            throw e;
        } finally {
            if (!done) abort();
            lock.unlock();
        }
    }

    /** Content-derived bits; the masks ones only where the masks are (shard 1), the others model-wide. */
    private int derivedFeatures(boolean firstShard) {
        int f = 0;
        boolean m = masks != null && firstShard;
        if (m) f |= Feature.BINARY_MASKS.mask();
        if (quant2f) f |= Feature.QUANT_2F.mask();
        if (m && loopMasks()) f |= Feature.LOOP_MASKS.mask();
        ModelArch a = header.arch();
        if (a != null && a.prismHadamard() != null) f |= Feature.PRISM_HADAMARD.mask();
        if (a != null && (a.anchorCore() != null || (a.layerTypes() != null && a.layerTypes().contains("BoundedAttention")))) {
            f |= Feature.BOUNDED_STATE.mask();
        }
        if (header.router() != null) f |= Feature.ROUTER_V2.mask();
        if (header.genome() != null) f |= Feature.GENOME.mask();
        if (header.skills().stream().anyMatch(s -> s.kind() != null)) f |= Feature.SKILLS_V2.mask();
        return f;
    }

    private void writeHead(ShardOut s, int i, int count, int features) {
        boolean first = i == 0;
        CmfHeader h = header.withShard(count > 1 ? new CmfHeader.ShardInfo(i + 1, count) : null);
        byte[] m = first ? masks : null, v = first ? vocab : null, x = first ? index : null;
        if (!first) h = h.withSkills(List.of()).withTokenizerConfig(null);   // chat bundle and skills: shard 1 only
        h = h.withSectionHashes(new CmfHeader.SectionHashes(m == null ? null : Hash64.of(m),
                v == null ? null : Hash64.of(v), x == null ? null : Hash64.of(x)));
        if (h.sectionHashes().isEmpty()) h = h.withSectionHashes(null);
        byte[] hb = h.toBytes();
        byte[] db = TensorDirectory.encode(s.records);
        long headEnd = Envelope.SIZE + (long) hb.length + db.length;
        try {
            boolean moved = headEnd > s.dataOff;
            if (moved) relocate(s, align(headEnd, Envelope.DATA_ALIGN));
            long dataLen = s.cursor;
            long at = s.dataOff + dataLen;
            Section ms = new Section("masks", m == null ? 0 : at, m == null ? 0 : m.length);
            at += ms.length();
            Section vs = new Section("vocab", v == null ? 0 : at, v == null ? 0 : v.length);
            at += vs.length();
            Section xs = new Section("index", x == null ? 0 : at, x == null ? 0 : x.length);
            at += xs.length();
            Envelope env = new Envelope(Envelope.VERSION, 0, features,
                    new Section("header", Envelope.SIZE, hb.length),
                    new Section("directory", Envelope.SIZE + hb.length, db.length),
                    new Section("data", s.dataOff, dataLen), ms, vs, xs, Hash64.of(hb), Hash64.of(db));
            s.ch.truncate(at);          // drop anything past the last section (e.g. after a relocation)
            put(s, 0, env.encode());
            put(s, Envelope.SIZE, hb);
            put(s, Envelope.SIZE + hb.length, db);
            // Untouched, the gap is a hole that reads as zeros; after a relocation it holds old payload bytes.
            if (moved) {
                byte[] zeros = new byte[Envelope.DATA_ALIGN];
                for (long z = headEnd; z < s.dataOff; z += zeros.length) {
                    put(s, z, Arrays.copyOf(zeros, (int) Math.min(zeros.length, s.dataOff - z)));
                }
            }
            if (m != null) put(s, ms.offset(), m);
            if (v != null) put(s, vs.offset(), v);
            if (x != null) put(s, xs.offset(), x);
            s.ch.force(true);
        } catch (IOException e) {
            throw new CmfException.Io(s.tmp.toString(), "write failed: " + e.getMessage(), e);
        }
    }

    /** Moves the data blob of {@code s} to {@code newOff} (the head outgrew the reserve). */
    private void relocate(ShardOut s, long newOff) throws IOException {
        long len = s.cursor;
        // copy backwards in chunks so the overlapping move never overwrites unread bytes
        long chunk = 1 << 20;
        ByteBuffer buf = ByteBuffer.allocate((int) chunk);
        for (long end = len; end > 0; ) {
            long start = Math.max(0, end - chunk);
            buf.clear().limit((int) (end - start));
            long p = s.dataOff + start;
            while (buf.hasRemaining()) {
                int r = s.ch.read(buf, p);
                if (r < 0) { // a hole at the end of a sparse file reads as EOF: zeros
                    while (buf.hasRemaining()) buf.put((byte) 0);
                    break;
                }
                p += r;
            }
            buf.flip();
            long q = newOff + start;
            while (buf.hasRemaining()) q += s.ch.write(buf, q);
            end = start;
        }
        s.dataOff = newOff;
    }

    private static void put(ShardOut s, long pos, byte[] b) throws IOException {
        ByteBuffer bb = ByteBuffer.wrap(b);
        while (bb.hasRemaining()) pos += s.ch.write(bb, pos);
    }

    /** Re-reads the temp file through the reader's checks so an invalid file is never published. */
    private void validate(ShardOut s, Path finalName) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment m = s.ch.map(FileChannel.MapMode.READ_ONLY, 0, s.ch.size(), arena);
            CmfFile.Shard shard = CmfFile.read(m, finalName + " (being written)");
            CmfFile.masksOf(shard);
        } catch (IOException e) {
            throw new CmfException.Io(s.tmp.toString(), "cannot re-read for validation: " + e.getMessage(), e);
        }
    }

    private static void close(FileChannel ch, Path p) {
        try {
            ch.close();
        } catch (IOException e) {
            throw new CmfException.Io(p.toString(), "close failed: " + e.getMessage(), e);
        }
    }

    private static void move(Path from, Path to) {
        try {
            try {
                Files.move(from, to, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(from, to, StandardCopyOption.REPLACE_EXISTING);
            }
        } catch (IOException e) {
            throw new CmfException.Io(to.toString(), "cannot rename " + from + " into place: " + e.getMessage(), e);
        }
    }

    private static void fsyncDir(Path dir) {
        if (dir == null) return;
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true);
        } catch (IOException | UnsupportedOperationException e) {
            // Some platforms cannot open directories; the renames are still atomic, only not yet durable.
        }
    }

    /** Deletes every temp file (after a failure or an unfinished close). */
    private void abort() {
        for (ShardOut s : shards) {
            try { s.ch.close(); } catch (IOException ignored) { /* deleting anyway */ }
            try { Files.deleteIfExists(s.tmp); } catch (IOException ignored) { /* best effort */ }
        }
    }

    /** Without a successful {@link #finish}: discards everything written, leaving no file behind. */
    @Override public void close() {
        lock.lock();
        try {
            if (!done) {
                failed = true;
                abort();
                done = true;
            }
        } finally {
            lock.unlock();
        }
    }

    static long align(long x, long a) { return (x + a - 1) / a * a; }

    /** Copies every tensor, the masks, vocab and index of {@code src} into {@code w} (round trips, re-sharding). */
    public static void copyAll(CmfFile src, CmfWriter w) {
        for (TensorEntry t : src.tensors()) w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
        src.masks().ifPresent(w::setMasks);
        src.vocab().ifPresent(w::setVocab);
        src.index().ifPresent(ix -> w.setIndex(ix.toArray(ValueLayout.JAVA_BYTE)));
    }

    @Override public String toString() { return "CmfWriter[" + out + ", shards=" + shards.size() + ", tensors=" + names.size() + "]"; }
}
