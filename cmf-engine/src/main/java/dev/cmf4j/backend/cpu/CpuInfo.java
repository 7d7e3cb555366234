package dev.cmf4j.backend.cpu;

import jdk.incubator.vector.FloatVector;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The host CPU as a benchmark's reader needs it: its name, its x86 family and model (or ARM implementer and part), the
 * processors Java sees, the Vector API's width and the instruction sets that decide what the kernels (and llama.cpp's)
 * can use. Speed is only comparable on the same CPU: the project's 2-vCPU benchmark machine ran 512-bit FMAs at two a
 * cycle in one session and at one in another (docs/CPU_KERNELS.md, "Which machine"). Read from {@code /proc/cpuinfo} on Linux; elsewhere the
 * name is {@code os.arch} and there are no features.
 *
 * @param name       the model name ("AMD EPYC 9654 96-Core Processor"), or the architecture where the OS gives none
 * @param identity   x86 "family 25 model 17 stepping 1", ARM "implementer 0x41 part 0xd4f", or empty
 * @param processors what {@link Runtime#availableProcessors()} reports (the pool's default thread count)
 * @param vectorBits the Vector API's preferred float width
 * @param features   the instruction sets of {@link #FEATURES} the CPU reports, in that order
 */
public record CpuInfo(String name, String identity, int processors, int vectorBits, List<String> features) {
    /**
     * The flags worth naming: the widths and dot-product instructions that separate one host's kernels (or
     * llama.cpp's) from another's. x86 first, then ARM.
     */
    static final List<String> FEATURES = List.of("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni",
            "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "asimd", "asimddp", "i8mm", "bf16", "sve", "sve2");

    private static CpuInfo host;

    /** This machine's CPU, read once. */
    public static synchronized CpuInfo host() {
        if (host == null) {
            String text = "";
            try {
                Path p = Path.of("/proc/cpuinfo");
                if (Files.isReadable(p)) text = Files.readString(p);
            } catch (IOException | RuntimeException e) {
                text = "";   // not Linux, or not readable: the architecture stands for the name
            }
            host = parse(text, System.getProperty("os.arch", "unknown"), Runtime.getRuntime().availableProcessors(),
                    FloatVector.SPECIES_PREFERRED.vectorBitSize());
        }
        return host;
    }

    /** From the text of {@code /proc/cpuinfo} (its first processor's block; empty text gives the architecture alone). */
    static CpuInfo parse(String cpuinfo, String arch, int processors, int vectorBits) {
        Map<String, String> f = new HashMap<>();
        for (String line : cpuinfo.split("\n")) {
            if (line.isBlank()) {
                if (!f.isEmpty()) break;             // the first processor's block is enough
                continue;
            }
            int colon = line.indexOf(':');
            if (colon < 0) continue;
            f.putIfAbsent(line.substring(0, colon).trim().toLowerCase(Locale.ROOT), line.substring(colon + 1).trim());
        }
        String name = first(f, "model name", "hardware", "cpu model", "uarch");
        if (name == null || name.isEmpty()) name = arch;
        String identity = "";
        if (f.containsKey("cpu family"))
            identity = "family " + f.get("cpu family") + " model " + f.getOrDefault("model", "?")
                    + (f.containsKey("stepping") ? " stepping " + f.get("stepping") : "");
        else if (f.containsKey("cpu implementer"))
            identity = "implementer " + f.get("cpu implementer") + " part " + f.getOrDefault("cpu part", "?");
        String flags = first(f, "flags", "features");
        Set<String> has = flags == null ? Set.of() : Set.of(flags.toLowerCase(Locale.ROOT).split("\\s+"));
        List<String> features = new ArrayList<>();
        for (String x : FEATURES) if (has.contains(x)) features.add(x);
        return new CpuInfo(name, identity, processors, vectorBits, List.copyOf(features));
    }

    private static String first(Map<String, String> f, String... keys) {
        for (String k : keys) if (f.containsKey(k)) return f.get(k);
        return null;
    }

    /** One line: "AMD EPYC (family 25 model 17 stepping 1), 2 processors, 512-bit vectors, avx2 fma avx512f". */
    public String describe() {
        StringBuilder b = new StringBuilder(name);
        if (!identity.isEmpty()) b.append(" (").append(identity).append(')');
        b.append(", ").append(processors).append(processors == 1 ? " processor" : " processors");
        b.append(", ").append(vectorBits).append("-bit vectors");
        if (!features.isEmpty()) b.append(", ").append(String.join(" ", features));
        return b.toString();
    }
}
