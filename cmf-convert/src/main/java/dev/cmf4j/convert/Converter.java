package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.convert.quant.FloatSource;
import dev.cmf4j.convert.quant.Quantizer;
import dev.cmf4j.convert.quant.TensorEncoder;
import dev.cmf4j.format.CmfHeader;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.ModelArch;
import dev.cmf4j.format.TokenizerConfig;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Streams a {@link ModelSource} into one CMF file. Tensors are encoded by a worker pool (a large
 * tensor's rows are split across workers; small tensors run whole, several at once) and written by
 * the calling thread strictly in source order, so the file layout is deterministic whatever the
 * thread count. Memory stays bounded: at most {@link Options#memoryBudget} bytes of encoded payload
 * are in flight; a tensor larger than the budget is encoded into a scratch file mapped next to the
 * output instead of the heap. Values are pulled from the source's memory map a row at a time.
 */
public final class Converter {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;

    /** The tool version recorded in provenance (the jar's, or "dev"). */
    public static String toolVersion() {
        String v = Converter.class.getPackage().getImplementationVersion();
        return v == null ? "dev" : v;
    }

    /**
     * @param threads      encoding workers (>= 1)
     * @param memoryBudget bytes of encoded payload allowed in flight
     */
    public record Options(TensorPolicy policy, int threads, long memoryBudget, Progress progress) {
        public Options {
            if (threads < 1) throw new IllegalArgumentException("threads must be >= 1");
            if (memoryBudget < 1 << 20) throw new IllegalArgumentException("memory budget below 1 MiB");
        }

        public static Options of(TensorPolicy policy) {
            return new Options(policy, Math.max(1, Runtime.getRuntime().availableProcessors()), 768L << 20, Progress.NONE);
        }

        public Options withThreads(int t) { return new Options(policy, t, memoryBudget, progress); }
        public Options withProgress(Progress p) { return new Options(policy, threads, memoryBudget, p); }
        public Options withMemoryBudget(long b) { return new Options(policy, threads, b, progress); }
    }

    /** What was written. */
    public record Result(Path file, int tensors, long sourceBytes, long payloadBytes, Map<String, Integer> dtypeCounts,
                         double seconds) {}

    private record Job(SourceTensor tensor, DType dtype, long size, long sourceBytes) {}

    /**
     * What a conversion would write, worked out from the source's metadata and the policy alone (no tensor data read):
     * each tensor's name, source dtype, CMF dtype and shape with its source and encoded bytes, and the header's
     * architecture and quantization type ({@code cmf convert --dry-run}).
     */
    public record Plan(List<Planned> tensors, Map<String, Integer> dtypeCounts, long sourceBytes, long payloadBytes,
                       String arch, String quantType) {
        public Plan { tensors = List.copyOf(tensors); dtypeCounts = Map.copyOf(dtypeCounts); }

        /** Encoded bytes per CMF dtype label. */
        public Map<String, Long> payloadByDtype() {
            Map<String, Long> m = new TreeMap<>();
            for (Planned p : tensors) m.merge(p.dtype().label, p.payloadBytes(), Long::sum);
            return m;
        }
    }

    /** One tensor of a {@link Plan}. */
    public record Planned(String name, String sourceDtype, DType dtype, long[] shape, long sourceBytes, long payloadBytes) {}

    /** The plan of converting {@code src} with {@code o} (the arch is checked as the header would be). */
    public static Plan plan(ModelSource src, Options o) {
        List<Job> jobs = jobs(src, o);
        List<Planned> out = new ArrayList<>();
        Map<String, Integer> counts = new TreeMap<>();
        long source = 0, payload = 0;
        for (Job j : jobs) {
            out.add(new Planned(j.tensor().name(), j.tensor().sourceDtype(), j.dtype(), j.tensor().shape(), j.sourceBytes(), j.size()));
            counts.merge(j.dtype().label, 1, Integer::sum);
            source += j.sourceBytes();
            payload += j.size();
        }
        CmfHeader h = header(src, o, counts);
        return new Plan(out, counts, source, payload, h.arch().archName(), h.quantType());
    }

    /** Each source tensor with the dtype the policy gives it and its encoded and source sizes. */
    private static List<Job> jobs(ModelSource src, Options o) {
        List<Job> jobs = new ArrayList<>();
        for (SourceTensor t : src.tensors()) {
            DType d = o.policy().choose(t);
            jobs.add(new Job(t, d, Quantizer.of(d).encodedSize(t.shape()), sourceBytes(t)));
        }
        return jobs;
    }

    /** A tensor being encoded: its payload memory and the future that completes when it is encoded. */
    private record Pending(Job job, MemorySegment payload, AutoCloseable memory, CompletableFuture<Void> done) {}

    private Converter() {}

    public static Result convert(ModelSource src, Path out, Options o) {
        long t0 = System.nanoTime();
        List<Job> jobs = jobs(src, o);
        Map<String, Integer> counts = new TreeMap<>();
        long totalSource = 0, totalPayload = 0;
        for (Job j : jobs) {
            counts.merge(j.dtype().label, 1, Integer::sum);
            totalSource += j.sourceBytes();
            totalPayload += j.size();
        }
        CmfHeader header = header(src, o, counts);
        Path absOut = out.toAbsolutePath();
        ExecutorService pool = Executors.newFixedThreadPool(o.threads(), daemonThreads());
        Deque<Pending> inflight = new ArrayDeque<>();
        o.progress().start(src.describe(), jobs.size(), totalSource);
        try (CmfWriter w = CmfWriter.create(absOut, header)) {
            if (src.tokenizerJson() != null) w.setVocab(src.tokenizerJson());
            long inflightBytes = 0;
            int scratchNo = 0;
            for (Job j : jobs) {
                while (!inflight.isEmpty() && (inflightBytes + j.size() > o.memoryBudget() || inflight.size() >= 4 * o.threads() + 4)) {
                    inflightBytes -= drain(inflight.removeFirst(), w, o.progress());
                }
                inflight.addLast(submit(j, pool, o, absOut, scratchNo++));
                inflightBytes += j.size() <= o.memoryBudget() ? j.size() : 0;
            }
            while (!inflight.isEmpty()) drain(inflight.removeFirst(), w, o.progress());
            w.finish();
        } catch (RuntimeException e) {
            for (Pending p : inflight) {
                p.done().cancel(true);
                p.done().handle((v, x) -> null).join();     // let workers stop touching the memory
                closeQuietly(p.memory());
            }
            throw e;
        } finally {
            pool.shutdownNow();
        }
        o.progress().finish();
        return new Result(absOut, jobs.size(), totalSource, totalPayload, counts, (System.nanoTime() - t0) / 1e9);
    }

    /** Starts encoding one tensor on the pool. */
    private static Pending submit(Job j, ExecutorService pool, Options o, Path out, int scratchNo) {
        AutoCloseable memory;
        MemorySegment payload;
        if (j.size() <= o.memoryBudget()) {
            Arena arena = Arena.ofShared();
            payload = arena.allocate(Math.max(1, j.size()), 64).asSlice(0, j.size());
            memory = arena;
        } else {
            Scratch s = Scratch.create(out, scratchNo, j.size());
            payload = s.segment;
            memory = s;
        }
        SourceTensor t = j.tensor();
        FloatSource fs = t.data()::read;
        Quantizer q = Quantizer.forSource(j.dtype(), t.sourceDtype());
        CompletableFuture<Void> done = CompletableFuture
                .supplyAsync(() -> q.begin(fs, t.shape()), pool)
                .thenCompose(enc -> encodeParallel(enc, payload, pool, o.threads()));
        return new Pending(j, payload, memory, done);
    }

    /** Splits the encoder's units into chunks of at least ~256K elements, one per worker at most. */
    private static CompletableFuture<Void> encodeParallel(TensorEncoder enc, MemorySegment payload, ExecutorService pool, int threads) {
        long units = enc.units();
        long perUnit = Math.max(1, enc.unitElements());
        long minUnits = Math.max(1, (256L << 10) / perUnit);
        int chunks = (int) Math.max(1, Math.min(threads, units / minUnits));
        if (chunks == 1) {
            enc.encode(0, units, payload);
            return CompletableFuture.completedFuture(null);
        }
        CompletableFuture<?>[] parts = new CompletableFuture<?>[chunks];
        for (int c = 0; c < chunks; c++) {
            long start = units * c / chunks, end = units * (c + 1) / chunks;
            parts[c] = CompletableFuture.runAsync(() -> enc.encode(start, end - start, payload), pool);
        }
        return CompletableFuture.allOf(parts);
    }

    /** Waits for the oldest tensor, writes it, frees its memory; returns the in-memory bytes released. */
    private static long drain(Pending p, CmfWriter w, Progress progress) {
        Job j = p.job();
        try {
            p.done().join();
        } catch (CompletionException e) {
            closeQuietly(p.memory());
            Throwable c = e.getCause() == null ? e : e.getCause();
            if (c instanceof ConvertException ce) throw ce;
            String why = c instanceof InternalError   // the JVM's answer to reading a mapped page past the end of its file
                    ? "the source file was truncated or changed while it was read (" + c.getMessage() + ")" : c.getMessage();
            throw new ConvertException("tensor " + j.tensor().name() + " " + java.util.Arrays.toString(j.tensor().shape())
                    + " -> " + j.dtype().label + ": " + why, c);
        }
        try {
            w.addTensor(j.tensor().name(), j.dtype(), j.tensor().shape(), p.payload());
        } finally {
            closeQuietly(p.memory());
            j.tensor().data().release();
        }
        progress.tensorDone(j.tensor().name(), j.sourceBytes());
        return p.memory() instanceof Arena ? j.size() : 0;
    }

    private static void closeQuietly(AutoCloseable c) {
        try {
            c.close();
        } catch (Exception ignored) {
            // freeing memory; nothing useful to report
        }
    }

    /** A payload too large for the memory budget, encoded into a temp file next to the output. */
    private static final class Scratch implements AutoCloseable {
        final Path file;
        final Arena arena;
        final MemorySegment segment;

        private Scratch(Path file, Arena arena, MemorySegment segment) {
            this.file = file;
            this.arena = arena;
            this.segment = segment;
        }

        static Scratch create(Path out, int no, long size) {
            Path f = out.resolveSibling("." + out.getFileName() + ".scratch-" + no);
            Arena arena = Arena.ofShared();
            try (FileChannel ch = FileChannel.open(f, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                    StandardOpenOption.READ, StandardOpenOption.WRITE, StandardOpenOption.DELETE_ON_CLOSE)) {
                MemorySegment seg = ch.map(FileChannel.MapMode.READ_WRITE, 0, size, arena);
                return new Scratch(f, arena, seg);
            } catch (IOException e) {
                arena.close();
                throw new ConvertException(f + ": cannot create scratch file for a " + size + "-byte tensor: " + e.getMessage(), e);
            }
        }

        @Override public void close() {
            arena.close();
            try {
                Files.deleteIfExists(file);
            } catch (IOException ignored) {
                // DELETE_ON_CLOSE already unlinked it on most systems
            }
        }
    }

    // ---- header ---------------------------------------------------------------------------------

    static CmfHeader header(ModelSource src, Options o, Map<String, Integer> counts) {
        ModelArch arch = ModelArch.fromJson(src.arch());
        TensorPolicy.Mode mode = o.policy().mode();
        String quantType = mode.quantType(autoType(counts));
        ObjectNode prov = F.objectNode();
        prov.put("tool", "cmf4j convert");
        prov.put("tool_version", toolVersion());
        prov.put("source_model", src.describe());
        prov.put("quant", mode.label);
        prov.set("policy", o.policy().describe());
        ObjectNode dc = prov.putObject("dtype_counts");
        counts.forEach(dc::put);
        prov.setAll(src.provenance());
        return CmfHeader.of(arch, quantType).withTokenizerConfig(tokenizerConfig(src.tokenizerConfig())).withProvenance(prov);
    }

    private static String autoType(Map<String, Integer> counts) {
        // the dtype most tensors besides the f32 vectors took (a quantized GGUF mixes q8_row/q4_block with f16 fallbacks)
        String best = "f32";
        for (String d : List.of("bf16", "f16", "q4_block", "q8_2f", "q8_row"))
            if (counts.getOrDefault(d, 0) > counts.getOrDefault(best, 0) || best.equals("f32") && counts.containsKey(d)) best = d;
        return best.toUpperCase(java.util.Locale.ROOT);
    }

    static TokenizerConfig tokenizerConfig(ObjectNode tc) {
        if (tc == null) return null;
        List<Integer> eos = null;
        if (tc.get("eos_token_ids") instanceof ArrayNode a) {
            eos = new ArrayList<>();
            for (JsonNode n : a) eos.add(n.asInt());
        }
        Map<String, JsonNode> extra = new LinkedHashMap<>();
        tc.fields().forEachRemaining(e -> {
            if (!List.of("chat_template", "eos_token_ids", "bos_token_id", "pad_token_id").contains(e.getKey())) extra.put(e.getKey(), e.getValue());
        });
        return new TokenizerConfig(tc.hasNonNull("chat_template") ? tc.get("chat_template").asText() : null, eos,
                tc.hasNonNull("bos_token_id") ? tc.get("bos_token_id").asInt() : null,
                tc.hasNonNull("pad_token_id") ? tc.get("pad_token_id").asInt() : null, extra);
    }

    /** Source bytes of a tensor, for throughput (block formats count their block bytes). */
    static long sourceBytes(SourceTensor t) {
        double per = switch (t.sourceDtype()) {
            case "F16", "BF16" -> 2;
            case "F32" -> 4;
            case "F8_E4M3" -> 1;   // block-scaled FP8 safetensors (the scales, one float per 128×128 block, not counted)
            default -> {   // a GGUF block type, or safetensors MXFP4 (the same 17 bytes per 32): block bytes over elements
                dev.cmf4j.convert.gguf.GgmlType g = java.util.Arrays.stream(dev.cmf4j.convert.gguf.GgmlType.values())
                        .filter(x -> x.name().equals(t.sourceDtype())).findFirst().orElse(null);
                yield g == null ? 4 : (double) g.blockBytes / g.blockSize;
            }
        };
        return (long) Math.ceil(t.numel() * per);
    }

    private static java.util.concurrent.ThreadFactory daemonThreads() {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, "cmf-convert-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }
}
