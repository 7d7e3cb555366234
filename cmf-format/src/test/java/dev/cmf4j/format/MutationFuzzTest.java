package dev.cmf4j.format;

import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.format.quant.PayloadException;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Seeded mutation fuzzing: at least 10,000 corrupted copies of the fixture files are opened from
 * memory. Each must either open (and then verify, read masks/vocab, touch and dequantize every tensor
 * without surprises) or fail with a {@link CmfException}; any other exception fails the test with the
 * seed and iteration that reproduce it. Bounded: small files, no disk I/O per case.
 */
class MutationFuzzTest {
    static final int CASES = 12_000;
    static final long SEED = 0x5EED_CAFEL;

    @Test
    void mutatedFilesYieldOnlyTypedErrors() throws IOException {
        Path tiny = TestFixtures.require("cmf/tiny");
        List<byte[]> seeds = new ArrayList<>();
        try (Stream<Path> s = Stream.concat(Files.list(tiny), Files.list(tiny.resolve("sharded")))) {
            // the smaller files (<= 40 KB: q4_block, vbit and the shards) keep each case cheap
            for (Path p : s.filter(p -> p.toString().endsWith(".cmf") && size(p) <= 40_000).sorted().toList()) {
                byte[] b = Files.readAllBytes(p);
                seeds.add(b);
                Mutable m = new Mutable(b);
                try { // a variant without the masks hash, so structural masks checks are reached
                    seeds.add(m.replaceInHeader("\"masks\": \"", "\"masky\": \"").reseal().b);
                } catch (IllegalArgumentException noMasks) { /* file has no masks hash */ }
            }
        }
        SplittableRandom rnd = new SplittableRandom(SEED);
        Map<String, Integer> outcomes = new TreeMap<>();
        var threads = java.lang.management.ManagementFactory.getThreadMXBean();
        long t0 = System.nanoTime(), c0 = threads.getCurrentThreadCpuTime();
        for (int i = 0; i < CASES; i++) {
            byte[] seed = seeds.get(rnd.nextInt(seeds.size()));
            Mutable m = new Mutable(seed);
            int n = 1 + rnd.nextInt(3);
            for (int k = 0; k < n; k++) mutate(m, rnd);
            int seal = rnd.nextInt(10);
            if (seal < 6) m.reseal();
            else if (seal < 8 && m.b.length >= 128) m.u64(0x70, 0).u64(0x78, 0);
            String outcome;
            try {
                outcome = exercise(m);
            } catch (CmfException e) {
                outcome = e.getClass().getSimpleName();
                assertThat(e.getMessage()).contains("fuzz.cmf");
            } catch (Throwable t) {
                throw new AssertionError("case " + i + " (seed " + SEED + ") escaped as " + t, t);
            }
            outcomes.merge(outcome, 1, Integer::sum);
        }
        long ms = (System.nanoTime() - t0) / 1_000_000, cpuMs = (threads.getCurrentThreadCpuTime() - c0) / 1_000_000;
        System.out.println("MutationFuzzTest: " + CASES + " mutated files in " + ms + " ms wall, " + cpuMs + " ms CPU: " + outcomes);
        assertThat(outcomes.values().stream().mapToInt(Integer::intValue).sum()).isEqualTo(CASES);
        assertThat(outcomes).containsKeys("opened", "Bounds", "Parse", "Integrity");
    }

    static long size(Path p) {
        try { return Files.size(p); } catch (IOException e) { throw new java.io.UncheckedIOException(e); }
    }

    /** Opens and uses the file; returns "opened" when nothing was wrong enough to refuse it. */
    static String exercise(Mutable m) {
        try (CmfFile f = CmfFile.open(m.seg(), "fuzz.cmf")) {
            f.verify();
            f.masks().ifPresent(ms -> ms.masks().forEach(t -> t.layerActive(0)));
            f.index();
            try {
                f.vocab();
            } catch (CmfException.Integrity e) {
                return "opened (vocab Integrity)";
            }
            for (TensorEntry t : f.tensors()) {
                MemorySegment d = t.data();
                if (d.byteSize() > 0) { d.get(ValueLayout.JAVA_BYTE, 0); d.get(ValueLayout.JAVA_BYTE, d.byteSize() - 1); }
                if (Dequantizers.decodable(t.dtype()) && t.elements() <= 1 << 20) {
                    try {
                        Dequantizers.of(t.dtype()).all(d, t.shape());
                    } catch (PayloadException e) {
                        // the dequantizer refused a payload that fits the container's size rules: typed, fine
                    }
                }
            }
            return "opened";
        }
    }

    static final long[] INTERESTING = {0, 1, 7, 8, 16, 56, 63, 64, 127, 128, 4095, 4096, 65535, 65536,
            Integer.MAX_VALUE, 0xFFFFFFFFL, 1L << 32, Long.MAX_VALUE, Long.MIN_VALUE, -1, -64};

    static void mutate(Mutable m, SplittableRandom r) {
        int len = m.b.length;
        if (len < 128) { if (len > 0) m.flip(r.nextInt(len)); return; }
        long head = Math.min(len, Math.max(128, m.dataOff()));
        switch (r.nextInt(8)) {
            case 0 -> m.b[r.nextInt(len)] ^= (byte) (1 << r.nextInt(8));                     // any bit
            case 1 -> m.b[r.nextInt((int) head)] = (byte) r.nextInt(256);                    // a head byte
            case 2 -> m.u64(0x10 + 8L * r.nextInt(12), interesting(r, len));                 // an envelope field
            case 3 -> {                                                                      // a directory field
                long d = m.dirOff();
                long count = d >= 128 && d <= len - 16 ? Math.min(m.u64(d) & 0xFFFF, 64) : 0;
                if (count == 0 || d + 16 + 56 * count > len) { m.flip(r.nextInt(len)); return; }
                int rec = r.nextInt((int) count);
                int[] fields = {0, 4, 6, 7, 8, 12, 16, 20, 24, 28, 32, 40, 48};
                int f = fields[r.nextInt(fields.length)];
                long at = m.record(rec, f);
                long v = interesting(r, len);
                switch (f) {
                    case 4 -> { m.u8(at, (int) v); m.u8(at + 1, (int) (v >> 8)); }
                    case 6, 7 -> m.u8(at, f == 7 ? r.nextInt(9) : r.nextInt(24));
                    case 32, 40, 48 -> m.u64(at, v);
                    default -> m.u32(at, (int) v);
                }
            }
            case 4 -> {                                                                      // the header JSON
                long ho = m.headerOff(), hl = m.headerLen();
                if (ho < 128 || hl <= 0 || ho > len || hl > len - ho) { m.flip(r.nextInt(len)); return; }
                byte[] chars = {'{', '}', '[', ']', '"', ',', ':', '0', '9', '-', 'e', '.', 'n', ' ', '\\', (byte) 0xC3, (byte) 0xFF, 0};
                m.b[(int) (ho + r.nextLong(hl))] = chars[r.nextInt(chars.length)];
            }
            case 5 -> {                                                                      // the masks section
                long mo = m.u64(0x40), ml = m.u64(0x48);
                if (mo < 128 || ml <= 0 || mo > len || ml > len - mo) { m.flip(r.nextInt(len)); return; }
                long at = mo + (r.nextBoolean() ? r.nextLong(Math.min(ml, 8)) : r.nextLong(ml));
                m.b[(int) at] = (byte) (r.nextBoolean() ? r.nextInt(256) : m.b[(int) at] ^ (1 << r.nextInt(8)));
            }
            case 6 -> m.truncate(r.nextInt(len));                                            // a truncation
            default -> m.u64(m.dirOff() >= 128 && m.dirOff() <= len - 16 ? m.dirOff() + 8L * r.nextInt(2) : 0x20,
                    interesting(r, len));                                                    // count / pool offset
        }
    }

    static long interesting(SplittableRandom r, int len) {
        return switch (r.nextInt(4)) {
            case 0 -> INTERESTING[r.nextInt(INTERESTING.length)];
            case 1 -> len + r.nextInt(-64, 64);
            case 2 -> r.nextLong(len + 1);
            default -> r.nextLong();
        };
    }
}
