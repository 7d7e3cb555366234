package dev.cmf4j.format;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Grows a single-file CMF in place, append-only (CMF_FORMAT.md §1.7): the new payloads go after the file's end, then
 * a copy of the masks, vocab and index sections and a new header and directory; only then is the envelope rewritten.
 * Two phases: {@link #prepare} writes and fsyncs everything after the old end (the envelope still points at the old
 * header and directory, so a crash here leaves the file as it was, with a tail no section refers to);
 * {@link Prepared#commit} writes the envelope and fsyncs it. The old header, directory and sections become dead bytes
 * inside the grown data section; {@code cmf compact} rewrites the file without them.
 */
public final class CmfAppend {
    private CmfAppend() {}

    /** One tensor to add. */
    public record NewTensor(String name, DType dtype, long[] shape, MemorySegment payload) {}

    /** An append written up to the envelope; {@link #commit} makes it the file's content. */
    public static final class Prepared {
        private final Path file;
        private final byte[] envelope;
        private boolean done;

        private Prepared(Path file, byte[] envelope) {
            this.file = file;
            this.envelope = envelope;
        }

        /** Rewrites the envelope to point at the new header, directory and sections, and fsyncs it. */
        public void commit() {
            if (done) throw new IllegalStateException("already committed");
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
                writeFully(ch, ByteBuffer.wrap(envelope), 0);
                ch.force(true);
            } catch (IOException e) {
                throw new CmfException.Io(file.toString(), "cannot write the envelope: " + e.getMessage(), e);
            }
            done = true;
        }
    }

    /**
     * Writes {@code tensors} and {@code header} (the file's header with whatever the caller changed, e.g. a skill
     * record added) after the end of {@code file} and fsyncs them; the file's content changes only at
     * {@link Prepared#commit}.
     */
    public static Prepared prepare(Path file, CmfHeader header, List<NewTensor> tensors) {
        Envelope env;
        List<TensorDirectory.Record> records = new ArrayList<>();
        byte[] masks, vocab, index;
        try (CmfFile f = CmfFile.open(file)) {
            if (f.shards().size() != 1) throw new IllegalArgumentException(f.label() + ": a sharded file cannot grow in place");
            env = f.envelope();
            for (TensorEntry t : f.tensors()) records.add(new TensorDirectory.Record(t.name(), t.dtype(), t.shape(), t.offset(), t.nbytes(), t.hash()));
            MemorySegment bytes = f.shards().getFirst().bytes();
            masks = section(bytes, env.masks());
            vocab = section(bytes, env.vocab());
            index = section(bytes, env.index());
        }
        Set<String> names = new HashSet<>();
        for (TensorDirectory.Record r : records) names.add(r.name());
        boolean quant2f = false;
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE, StandardOpenOption.READ)) {
            long end = ch.size(), dataOff = env.data().offset();
            for (NewTensor t : tensors) {
                if (!names.add(t.name())) throw new IllegalArgumentException(file + " already has a tensor '" + t.name() + "'");
                long n = t.payload().byteSize();
                long expect = PayloadSize.expected(t.dtype(), t.shape());
                if (n != expect)
                    throw new IllegalArgumentException("tensor '" + t.name() + "': " + n + " payload bytes, " + t.dtype().label
                            + java.util.Arrays.toString(t.shape()) + " needs " + expect);
                long at = align(end, n >= CmfWriter.PAGE_ALIGN_MIN ? Envelope.DATA_ALIGN : TensorDirectory.TENSOR_ALIGN);
                for (long done = 0; done < n; done += 1 << 26)   // in slices: a payload may pass 2 GiB
                    writeFully(ch, t.payload().asSlice(done, Math.min(1 << 26, n - done)).asByteBuffer(), at + done);
                records.add(new TensorDirectory.Record(t.name(), t.dtype(), t.shape(), at - dataOff, n, Hash64.of(t.payload())));
                quant2f |= t.dtype() == DType.Q8_2F || t.dtype() == DType.VBIT;
                end = at + n;
            }
            Section data = new Section("data", dataOff, Math.max(env.data().length(), end - dataOff));
            Section ms = put(ch, "masks", masks, end);
            end = Math.max(end, ms.end());
            Section vs = put(ch, "vocab", vocab, end);
            end = Math.max(end, vs.end());
            Section is = put(ch, "index", index, end);
            end = Math.max(end, is.end());
            byte[] h = header.toBytes(), dir = TensorDirectory.encode(records);
            writeFully(ch, ByteBuffer.wrap(h), end);
            Section hs = new Section("header", end, h.length);
            writeFully(ch, ByteBuffer.wrap(dir), hs.end());
            Section ds = new Section("directory", hs.end(), dir.length);
            ch.force(true);
            int features = env.features() | (quant2f ? Feature.QUANT_2F.mask() : 0)
                    | (header.skills().stream().anyMatch(s -> s.kind() != null) ? Feature.SKILLS_V2.mask() : 0);
            Envelope next = new Envelope(env.version(), env.flags(), features, hs, ds, data, ms, vs, is,
                    Hash64.of(MemorySegment.ofArray(h)), Hash64.of(MemorySegment.ofArray(dir)));
            return new Prepared(file, next.encode());
        } catch (IOException e) {
            throw new CmfException.Io(file.toString(), "cannot append: " + e.getMessage(), e);
        }
    }

    /** {@link #prepare} then {@link Prepared#commit}. */
    public static void append(Path file, CmfHeader header, List<NewTensor> tensors) { prepare(file, header, tensors).commit(); }

    private static byte[] section(MemorySegment file, Section s) {
        return s.present() ? file.asSlice(s.offset(), s.length()).toArray(ValueLayout.JAVA_BYTE) : null;
    }

    private static Section put(FileChannel ch, String name, byte[] b, long at) throws IOException {
        if (b == null) return new Section(name, 0, 0);
        writeFully(ch, ByteBuffer.wrap(b), at);
        return new Section(name, at, b.length);
    }

    private static void writeFully(FileChannel ch, ByteBuffer b, long at) throws IOException {
        while (b.hasRemaining()) at += ch.write(b, at);
    }

    private static long align(long x, long a) { return (x + a - 1) / a * a; }
}
