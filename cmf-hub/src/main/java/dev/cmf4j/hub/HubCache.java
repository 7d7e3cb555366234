package dev.cmf4j.hub;

import java.io.Closeable;
import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.ReentrantLock;
import java.util.regex.Pattern;

/**
 * The Hub cache folder, laid out as huggingface_hub lays it out so either tool reuses the other's files:
 * <pre>
 * {cache}/models--ORG--REPO/blobs/{etag}                  file contents, named by sha256 (LFS) or git blob id
 * {cache}/models--ORG--REPO/blobs/{etag}.incomplete       a download in progress, a contiguous prefix
 * {cache}/models--ORG--REPO/snapshots/{commit}/{path}     relative symlinks to ../../blobs/{etag}
 * {cache}/models--ORG--REPO/refs/{revision}               the commit a branch or tag pointed at last
 * {cache}/.locks/models--ORG--REPO/{etag}.lock            held while a blob is being written
 * </pre>
 * and, ours alone, {@code blobs/{etag}.chunks} (a chunked download: the file being filled plus
 * {@code .chunks.done}, the chunks already in it) and {@code cmf/{commit}/{name}.cmf} (converted models).
 */
final class HubCache {
    private static final Pattern COMMIT = Pattern.compile("[0-9a-f]{40}");

    private final Path root;

    HubCache(Path root) { this.root = root; }

    Path root() { return root; }

    Path repo(HubUri uri) { return root.resolve(uri.cacheFolder()); }

    Path blob(HubUri uri, String etag) { return repo(uri).resolve("blobs").resolve(etag); }

    Path incomplete(HubUri uri, String etag) { return blob(uri, etag).resolveSibling(etag + ".incomplete"); }

    Path chunked(HubUri uri, String etag) { return blob(uri, etag).resolveSibling(etag + ".chunks"); }

    Path chunkLog(HubUri uri, String etag) { return blob(uri, etag).resolveSibling(etag + ".chunks.done"); }

    Path snapshot(HubUri uri, String commit) { return repo(uri).resolve("snapshots").resolve(commit); }

    Path snapshotFile(HubUri uri, String commit, RepoFile f) { return snapshot(uri, commit).resolve(f.path()); }

    /** Where the CMF converted from {@code commit} under {@code name} lives. */
    Path cmf(HubUri uri, String commit, String name) { return repo(uri).resolve("cmf").resolve(commit).resolve(name + ".cmf"); }

    /** The commit {@code uri}'s revision pointed at when last resolved here, if known. */
    Optional<String> ref(HubUri uri) {
        if (uri.pinned()) return Optional.of(uri.revision());
        Path p = refPath(uri);
        try {
            if (!Files.isRegularFile(p)) return Optional.empty();
            String c = Files.readString(p, StandardCharsets.UTF_8).strip();
            return COMMIT.matcher(c).matches() ? Optional.of(c) : Optional.empty();
        } catch (IOException e) {
            return Optional.empty();
        }
    }

    /** Records that {@code uri}'s revision points at {@code commit} (nothing to record for a commit). */
    void writeRef(HubUri uri, String commit) {
        if (uri.revision().equals(commit)) return;
        Path p = refPath(uri);
        try {
            Files.createDirectories(p.getParent());
            Path tmp = Files.createTempFile(p.getParent(), p.getFileName() + ".", ".tmp");     // one per writer: pulls race here
            Files.writeString(tmp, commit, StandardCharsets.UTF_8);
            Files.move(tmp, p, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            throw new HubException("cannot write " + p + ": " + e.getMessage(), e);
        }
    }

    private Path refPath(HubUri uri) { return repo(uri).resolve("refs").resolve(uri.revision()); }

    /** True when the snapshot already holds {@code f} with its full size (fetched by us or by Python tools). */
    boolean present(HubUri uri, String commit, RepoFile f) {
        Path p = snapshotFile(uri, commit, f);
        try {
            return Files.isRegularFile(p) && Files.size(p) == f.size();
        } catch (IOException e) {
            return false;
        }
    }

    /** True when the blob is complete (it is only ever renamed into place after its checks). */
    boolean hasBlob(HubUri uri, RepoFile f) {
        Path b = blob(uri, f.etag());
        try {
            return Files.isRegularFile(b) && Files.size(b) == f.size();
        } catch (IOException e) {
            return false;
        }
    }

    /** Points {@code snapshots/{commit}/{path}} at the blob: a relative symlink, or a copy where links are not allowed. */
    void link(HubUri uri, String commit, RepoFile f) throws IOException {
        Path link = snapshotFile(uri, commit, f), blob = blob(uri, f.etag());
        Files.createDirectories(link.getParent());
        if (Files.exists(link, LinkOption.NOFOLLOW_LINKS)) {
            if (Files.isRegularFile(link) && Files.size(link) == f.size()) return;
            Files.delete(link);
        }
        try {
            Files.createSymbolicLink(link, link.getParent().relativize(blob));
        } catch (FileAlreadyExistsException e) {
            // another process linked it first
        } catch (UnsupportedOperationException | IOException e) {
            Files.copy(blob, link, StandardCopyOption.REPLACE_EXISTING);
        }
    }

    /** In-process locks by lock file: a file lock is per process, so threads of one JVM queue here first. */
    private static final ConcurrentHashMap<Path, ReentrantLock> LOCAL = new ConcurrentHashMap<>();

    /**
     * An exclusive lock on {@code name} (a blob's etag, a CMF's name) across threads and processes, at
     * huggingface_hub's lock file path; close releases it.
     */
    Closeable lock(HubUri uri, String name) throws IOException {
        Path p = root.resolve(".locks").resolve(uri.cacheFolder()).resolve(name + ".lock").toAbsolutePath();
        ReentrantLock local = LOCAL.computeIfAbsent(p, k -> new ReentrantLock());
        local.lock();
        FileChannel ch = null;
        try {
            Files.createDirectories(p.getParent());
            ch = FileChannel.open(p, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
            ch.lock();
        } catch (IOException | RuntimeException e) {
            if (ch != null) ch.close();
            local.unlock();
            throw e;
        }
        FileChannel held = ch;
        return () -> {
            try {
                held.close();
            } finally {
                local.unlock();
            }
        };
    }
}
