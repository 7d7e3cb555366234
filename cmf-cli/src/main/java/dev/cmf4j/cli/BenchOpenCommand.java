package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfHeader;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.ModelArch;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.Callable;

/**
 * {@code cmf bench-open} (hidden): shows that opening a CMF file costs time proportional to its
 * directory, not its size. Writes three files with {@link CmfWriter} (a large one with N tensors,
 * a small one with the same N tensors, a large one with 10N tensors), opens each repeatedly and
 * prints the median and best open time, plus the write and verify (hash) throughput. Deletes the
 * files afterwards unless {@code --keep}.
 */
@Command(name = "bench-open", hidden = true, mixinStandardHelpOptions = true,
        description = "Benchmark CmfFile.open on generated files (large vs small, few vs many tensors).")
public final class BenchOpenCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--dir", description = "where to write the generated files (default: java.io.tmpdir)")
    Path dir = Path.of(System.getProperty("java.io.tmpdir"));

    @Option(names = "--gb", description = "size of the large files in GB (default ${DEFAULT-VALUE})")
    double gb = 2.2;

    @Option(names = "--tensors", description = "tensor count N (default ${DEFAULT-VALUE})")
    int tensors = 2000;

    @Option(names = "--reps", description = "opens per file (default ${DEFAULT-VALUE})")
    int reps = 21;

    @Option(names = "--keep", description = "keep the generated files")
    boolean keep;

    private record Result(String what, long bytes, int tensors, double writeS, double firstMs, double medianMs, double bestMs,
                          double cpuMedianMs, double closeMedianMs) {}

    @Override public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        long big = (long) (gb * 1e9);
        Path a = dir.resolve("bench-open-large-" + tensors + ".cmf");
        Path b = dir.resolve("bench-open-small-" + tensors + ".cmf");
        Path c = dir.resolve("bench-open-large-" + tensors * 10 + ".cmf");
        try {
            double[] writeS = {generate(a, big, tensors), generate(b, (long) tensors * 1024, tensors), generate(c, big, tensors * 10)};
            for (int i = 0; i < 100; i++) open(b, tensors);      // JIT warm-up on the small file, so no row pays for compilation
            List<Result> rs = List.of(
                    measure("large, N tensors", a, tensors, writeS[0]),
                    measure("small, N tensors", b, tensors, writeS[1]),
                    measure("large, 10N tensors", c, tensors * 10, writeS[2]));
            out.printf("%-20s %14s %8s %8s %10s %11s %9s %11s %11s%n", "file", "bytes", "tensors", "write s", "1st open",
                    "median open", "best", "median CPU", "close");
            for (Result r : rs) {
                out.printf("%-20s %,14d %8d %8.2f %7.2f ms %8.2f ms %6.2f ms %8.2f ms %8.2f ms%n", r.what, r.bytes, r.tensors,
                        r.writeS, r.firstMs, r.medianMs, r.bestMs, r.cpuMedianMs, r.closeMedianMs);
            }
            long t0 = System.nanoTime();
            try (CmfFile f = CmfFile.open(a)) {
                if (!f.verify().isEmpty()) throw new IllegalStateException("generated file does not verify");
            }
            double vs = (System.nanoTime() - t0) / 1e9;
            out.printf("verify (hash64 of every tensor, parallel over %d cores) of the large file: %.2f s, %.2f GB/s%n",
                    Runtime.getRuntime().availableProcessors(), vs, Files.size(a) / vs / 1e9);
            out.printf("open(large)/open(small) with N tensors: %.2f; open(10N)/open(N) on large files: %.2f%n",
                    rs.get(0).medianMs / rs.get(1).medianMs, rs.get(2).medianMs / rs.get(0).medianMs);
            out.printf("same ratios in CPU time: %.2f and %.2f%n",
                    rs.get(0).cpuMedianMs / rs.get(1).cpuMedianMs, rs.get(2).cpuMedianMs / rs.get(0).cpuMedianMs);
            out.flush();
            return 0;
        } finally {
            if (!keep) for (Path p : List.of(a, b, c)) Files.deleteIfExists(p);
        }
    }

    /** Writes a file of about {@code totalBytes} in {@code n} u8 tensors; returns seconds taken. */
    private double generate(Path p, long totalBytes, int n) throws Exception {
        long per = Math.max(64, totalBytes / n / 64 * 64);
        ModelArch arch = ModelArch.fromJson(new ObjectMapper().createObjectNode().put("arch_name", "bench"));
        long t0 = System.nanoTime();
        try (Arena arena = Arena.ofConfined(); CmfWriter w = CmfWriter.create(p, CmfHeader.of(arch, "U8"),
                CmfWriter.Options.DEFAULT.withReserve(256L * 1024 + n * 128L))) {
            MemorySegment payload = arena.allocate(per, 64);
            for (long i = 0; i + 8 <= per; i += 8) payload.set(ValueLayout.JAVA_LONG_UNALIGNED, i, i * 0x9E3779B97F4A7C15L);
            for (int i = 0; i < n; i++) {
                String name = "model.layers." + (i / 64) + ".mlp.experts." + (i % 64) + ".down_proj.weight";
                w.addTensor(name, DType.U8, new long[] {per}, payload);
            }
            w.finish();
        }
        return (System.nanoTime() - t0) / 1e9;
    }

    private static void open(Path p, int n) {
        try (CmfFile f = CmfFile.open(p)) {
            if (f.tensors().size() != n) throw new IllegalStateException("tensor count");
        }
    }

    private Result measure(String what, Path p, int n, double writeS) throws Exception {
        var threads = java.lang.management.ManagementFactory.getThreadMXBean();
        double[] ms = new double[reps], cpu = new double[reps], close = new double[reps];
        for (int r = 0; r < reps; r++) {
            long s = System.nanoTime(), c = threads.getCurrentThreadCpuTime();
            CmfFile f = CmfFile.open(p);
            if (f.tensors().size() != n) throw new IllegalStateException("tensor count");
            ms[r] = (System.nanoTime() - s) / 1e6;
            cpu[r] = (threads.getCurrentThreadCpuTime() - c) / 1e6;
            long e = System.nanoTime();
            f.close();      // unmapping a shared arena includes a handshake with every thread: timed apart
            close[r] = (System.nanoTime() - e) / 1e6;
        }
        double first = ms[0];
        Arrays.sort(ms);
        Arrays.sort(cpu);
        Arrays.sort(close);
        return new Result(what, Files.size(p), n, writeS, first, ms[reps / 2], ms[0], cpu[reps / 2], close[reps / 2]);
    }
}
