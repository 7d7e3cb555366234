package dev.cmf4j.backend;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Map;

/**
 * The stamp a build script writes beside a binary it ships in the jar (a CUDA fatbin, a Vulkan SPIR-V module): {@code key
 * value} lines recording the SHA-256 of the source it was built from and of the binary itself, so a device loads a
 * binary only while it matches its source.
 */
public final class BuildStamp {
    private BuildStamp() {}

    /** A stamp's {@code key value} lines ({@code #} comments skipped). */
    public static Map<String, String> parse(String text) {
        Map<String, String> m = new HashMap<>();
        for (String line : text.split("\n")) {
            line = line.strip();
            if (line.isEmpty() || line.startsWith("#")) continue;
            int sp = line.indexOf(' ');
            if (sp > 0) m.put(line.substring(0, sp), line.substring(sp + 1).strip());
        }
        return Map.copyOf(m);
    }

    /** The SHA-256 the build scripts record for a source: of its bytes with carriage returns dropped. */
    public static String sourceSha256(String source) {
        return sha256(source.replace("\r", "").getBytes(StandardCharsets.UTF_8));
    }

    public static String sha256(byte[] bytes) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
