package dev.cmf4j.backend.cuda;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.List;

/**
 * The on-disk cache of compiled kernel modules: one CUBIN per (source, options, compiler version,
 * architecture), named by the SHA-256 of all four, so a changed kernel or flag never loads a stale
 * image. Folder: {@code -Dcmf.cuda.cache}, else {@code $XDG_CACHE_HOME/cmf4j/cuda}, else
 * {@code ~/.cache/cmf4j/cuda}. Writes go through a temporary file and a rename, so concurrent
 * processes never read half a file; an unwritable folder only costs a recompile.
 */
public final class KernelCache {
    private final Path dir;

    public KernelCache(Path dir) { this.dir = dir; }

    public static KernelCache defaultCache() {
        String p = System.getProperty("cmf.cuda.cache");
        if (p != null) return new KernelCache(Path.of(p));
        String xdg = System.getenv("XDG_CACHE_HOME");
        Path base = xdg != null && !xdg.isBlank() ? Path.of(xdg) : Path.of(System.getProperty("user.home"), ".cache");
        return new KernelCache(base.resolve("cmf4j").resolve("cuda"));
    }

    public Path dir() { return dir; }

    /** The cache key of a compile. */
    public static String key(String source, List<String> options, String compiler, String arch) {
        try {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            for (String s : List.of(source, String.join("\u0000", options), compiler, arch)) {
                md.update(s.getBytes(StandardCharsets.UTF_8));
                md.update((byte) 0x1f);
            }
            return HexFormat.of().formatHex(md.digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The cached image, or null when absent or unreadable. */
    public byte[] get(String key) {
        Path f = dir.resolve(key + ".cubin");
        try {
            return Files.isRegularFile(f) ? Files.readAllBytes(f) : null;
        } catch (IOException e) {
            return null;
        }
    }

    /** Stores an image; failures are ignored (the cache is an optimisation). */
    public void put(String key, byte[] image) {
        try {
            Files.createDirectories(dir);
            Path tmp = Files.createTempFile(dir, key, ".tmp");
            Files.write(tmp, image);
            try {
                Files.move(tmp, dir.resolve(key + ".cubin"), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, dir.resolve(key + ".cubin"), StandardCopyOption.REPLACE_EXISTING);
            }
        } catch (IOException | RuntimeException ignored) {
            // read-only home, full disk: compile again next time
        }
    }
}
