package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.BuildStamp;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * One CUDA kernel file of this package as the jar ships it: the CUDA C source {@code NAME.cu}, and the
 * fatbin nvcc built from it at build time ({@code NAME.fatbin}, by {@value #BUILD_SCRIPT}) with its stamp
 * ({@code NAME.fatbin.stamp}: the SHA-256 of the source and of the fatbin, the nvcc version, the targets).
 * The fatbin is usable only while the stamp's source hash equals this source's: an edited {@code .cu}
 * without a rebuilt fatbin falls back to NVRTC rather than running stale code.
 *
 * @param fatbin the shipped fatbin, or null when none is shipped
 * @param stamp the stamp's {@code key value} lines, empty when none is shipped
 */
record KernelSource(String name, String source, byte[] fatbin, Map<String, String> stamp) {
    static final String BUILD_SCRIPT = "tools/build-cuda-kernels.sh";
    static final String RESOURCE_DIR = "cmf-engine/src/main/resources/dev/cmf4j/backend/cuda";

    /**
     * {@code NAME.cu} with its {@code #include "X.cuh"} lines replaced by those headers (so NVRTC needs no include
     * path and the stamp covers the headers too) and, when present, its fatbin and stamp, read from this package's
     * resources.
     */
    static KernelSource resource(String cuName) {
        String base = fatbinName(cuName);
        byte[] stamp = read(base + ".stamp");
        return new KernelSource(cuName, text(cuName, new java.util.HashSet<>()), read(base),
                stamp == null ? Map.of() : BuildStamp.parse(new String(stamp, StandardCharsets.UTF_8)));
    }

    private static final java.util.regex.Pattern INCLUDE = java.util.regex.Pattern.compile("#include \"([A-Za-z0-9_.]+\\.cuh)\"\\s*");

    /**
     * A kernel file's text with each {@code #include "X.cuh"} line (alone on its line) replaced by that resource's text,
     * recursively, each header once (its own guard does that for nvcc): line for line what the build script hashes.
     * A file without such lines is returned as read.
     */
    static String text(String resource, java.util.Set<String> included) {
        byte[] src = read(resource);
        if (src == null) throw new IllegalStateException("resource dev/cmf4j/backend/cuda/" + resource + " missing from the jar");
        String s = new String(src, StandardCharsets.UTF_8);
        if (!s.contains("#include \"")) return s;
        StringBuilder out = new StringBuilder(s.length() * 2);
        for (String line : s.split("\n", -1)) {
            var m = INCLUDE.matcher(line);
            if (m.matches()) {
                if (included.add(m.group(1))) out.append(text(m.group(1), included));
            } else {
                out.append(line).append('\n');
            }
        }
        out.setLength(out.length() - 1);   // split's last piece (after the final newline) got one too many
        return out.toString();
    }

    /** {@code NAME.fatbin} for {@code NAME.cu}. */
    static String fatbinName(String cuName) {
        return (cuName.endsWith(".cu") ? cuName.substring(0, cuName.length() - 3) : cuName) + ".fatbin";
    }

    /** Why the shipped fatbin must not be used for this source (one clause), or null when it was built from it. */
    String fatbinProblem() {
        String fb = fatbinName(name);
        if (fatbin == null) return "no " + fb + " is shipped";
        String built = stamp.get("source-sha256");
        if (built == null) return fb + " has no " + fb + ".stamp";
        String now = BuildStamp.sourceSha256(source);
        if (!built.equals(now))
            return fb + " is stale (built from " + name + " sha256 " + built.substring(0, Math.min(12, built.length()))
                    + "…, the current " + name + " is " + now.substring(0, 12) + "…)";
        if (!BuildStamp.sha256(fatbin).equals(stamp.get("fatbin-sha256"))) return fb + " does not match the hash its stamp records (damaged)";
        return null;
    }

    private static byte[] read(String resource) {
        try (InputStream in = KernelSource.class.getResourceAsStream(resource)) {
            return in == null ? null : in.readAllBytes();
        } catch (IOException e) {
            throw new IllegalStateException("reading resource " + resource + ": " + e.getMessage(), e);
        }
    }
}
