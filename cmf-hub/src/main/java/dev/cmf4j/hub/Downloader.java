package dev.cmf4j.hub;

import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Brings files of one commit into the cache. A file already in the snapshot or among the blobs is not fetched;
 * a small one is fetched as one stream into {@code blobs/{etag}.incomplete} and resumed from that file's length
 * (as huggingface_hub resumes, so either tool continues the other's download); a large one is fetched as ranged
 * chunks on several connections into {@code blobs/{etag}.chunks}, each finished chunk recorded (after its bytes
 * are flushed) in {@code .chunks.done}, so a later run fetches only the chunks not done. A cut connection is
 * resumed at the byte it reached; after {@link HubSettings#retries} attempts in a row that bring nothing the pull
 * stops and says how to resume. Every file's size and hash (the LFS sha256, else the git blob id) are checked
 * before it is renamed into {@code blobs/}; a file that fails is deleted.
 */
final class Downloader {
    private final HubApi api;
    private final HubCache cache;
    private final HubSettings settings;

    Downloader(HubApi api, HubCache cache, HubSettings settings) {
        this.api = api;
        this.cache = cache;
        this.settings = settings;
    }

    /** One file being fetched: where its bytes go and how many of its parts are still to come. */
    private final class Fetch {
        final RepoFile file;
        final Path part;
        final boolean chunked;
        final Closeable lock;
        final FileChannel out;
        final AtomicInteger partsLeft = new AtomicInteger();
        long have;

        Fetch(RepoFile file, boolean chunked, Closeable lock, HubUri uri) throws IOException {
            this.file = file;
            this.chunked = chunked;
            this.lock = lock;
            this.part = chunked ? cache.chunked(uri, file.etag()) : cache.incomplete(uri, file.etag());
            Files.createDirectories(part.getParent());
            this.out = FileChannel.open(part, StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.READ);
        }

        void close() {
            try (lock; out) {
                // both released
            } catch (IOException ignored) {
                // closing a channel or a lock file we only read and wrote: nothing left to save
            }
        }
    }

    /** A range of one file for one connection. */
    private record Job(Fetch fetch, int chunk, long from, long to) {}

    /**
     * Makes {@code snapshots/{commit}/} hold every file of {@code files}; returns the bytes fetched.
     */
    long fetch(HubUri uri, String commit, List<RepoFile> files, TransferProgress progress) {
        Map<String, RepoFile> wanted = new LinkedHashMap<>();
        for (RepoFile f : files)
            if (!cache.present(uri, commit, f) && !cache.hasBlob(uri, f)) wanted.putIfAbsent(f.etag(), f);
        List<Fetch> fetches = new ArrayList<>();
        List<Job> jobs = new ArrayList<>();
        AtomicLong fetched = new AtomicLong();
        try {
            long total = 0, have = 0;
            for (RepoFile f : wanted.values()) {
                Closeable lock = cache.lock(uri, f.etag());
                if (cache.hasBlob(uri, f)) {            // another process finished it while we waited for the lock
                    lock.close();
                    continue;
                }
                boolean chunked = settings.connections() > 1 && f.size() >= 2 * settings.chunkBytes()
                        && !Files.exists(cache.incomplete(uri, f.etag()));
                Fetch fx = new Fetch(f, chunked, lock, uri);
                fetches.add(fx);
                plan(uri, fx, jobs);
                total += f.size();
                have += fx.have;
            }
            if (!fetches.isEmpty()) {
                progress.start(uri.at(commit).toString(), fetches.size(), total, have);
                run(uri, commit, jobs, progress, fetched);
                progress.finish();
            }
            for (RepoFile f : files) cache.link(uri, commit, f);
        } catch (IOException e) {
            throw new HubException(uri + ": cannot write the cache at " + cache.root() + ": " + e.getMessage(), e);
        } finally {
            for (Fetch fx : fetches) fx.close();
        }
        return fetched.get();
    }

    /** The jobs that bring {@code fx} from what is on disk to complete. */
    private void plan(HubUri uri, Fetch fx, List<Job> jobs) throws IOException {
        long size = fx.file.size();
        if (!fx.chunked) {
            long from = fx.out.size();
            if (from > size) {
                fx.out.truncate(0);
                from = 0;
            }
            fx.have = from;
            if (from == size) {             // an empty file, or a stream whose last run got every byte
                finish(uri, fx);
                return;
            }
            fx.partsLeft.set(1);
            jobs.add(new Job(fx, 0, from, size));
            return;
        }
        long chunk = settings.chunkBytes();
        int chunks = (int) ((size + chunk - 1) / chunk);
        BitSet done = readChunkLog(cache.chunkLog(uri, fx.file.etag()), chunk, chunks);
        List<Job> mine = new ArrayList<>();
        for (int i = 0; i < chunks; i++) {
            long from = i * chunk, to = Math.min(size, from + chunk);
            if (done.get(i)) fx.have += to - from;
            else mine.add(new Job(fx, i, from, to));
        }
        fx.partsLeft.set(mine.size());
        if (mine.isEmpty()) finish(uri, fx);            // every chunk was there: only the checks were missing
        jobs.addAll(mine);
    }

    private void run(HubUri uri, String commit, List<Job> jobs, TransferProgress progress, AtomicLong fetched) throws IOException {
        if (jobs.isEmpty()) return;
        AtomicReference<RuntimeException> failure = new AtomicReference<>();
        int threads = Math.min(settings.connections(), jobs.size());
        ExecutorService pool = Executors.newFixedThreadPool(threads, r -> {
            Thread t = new Thread(r, "cmf-hub-download");
            t.setDaemon(true);
            return t;
        });
        try {
            List<Future<?>> futures = new ArrayList<>();
            for (Job j : jobs)
                futures.add(pool.submit(() -> {
                    if (failure.get() != null) return;
                    try {
                        transfer(uri, commit, j, n -> {
                            fetched.addAndGet(n);
                            progress.add(n);
                        }, failure);
                        if (j.fetch().chunked) recordChunk(uri, j);
                        if (j.fetch().partsLeft.decrementAndGet() == 0) finish(uri, j.fetch());
                    } catch (IOException e) {
                        failure.compareAndSet(null, new HubException(uri + " " + j.fetch().file.path() + ": " + HubApi.why(e), e));
                    } catch (RuntimeException e) {
                        failure.compareAndSet(null, e);
                    }
                }));
            for (Future<?> f : futures) {
                try {
                    f.get();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    failure.compareAndSet(null, new HubException("download interrupted"));
                    break;
                } catch (java.util.concurrent.ExecutionException e) {
                    failure.compareAndSet(null, new HubException(String.valueOf(e.getCause()), e.getCause()));
                }
            }
        } finally {
            pool.shutdownNow();
        }
        if (failure.get() != null) throw failure.get();
    }

    /** One range, resumed at the byte reached whenever the connection fails, until it is complete. */
    private void transfer(HubUri uri, String commit, Job j, java.util.function.LongConsumer onBytes,
                          AtomicReference<RuntimeException> failure) throws IOException {
        RepoFile f = j.fetch().file;
        AtomicLong reached = new AtomicLong(j.from());
        long pos = j.from();
        int fruitless = 0;
        while (true) {
            if (failure.get() != null) throw new IOException("stopped: another download failed");
            try {
                HubApi.Linked linked = api.download(uri, commit, f, j.fetch().out, pos, j.to(), reached, onBytes);
                check(uri, f, linked);
                return;
            } catch (IOException e) {
                if (Thread.currentThread().isInterrupted()) throw e;
                long got = reached.get();
                fruitless = got > pos ? 0 : fruitless + 1;
                pos = got;
                if (fruitless > settings.retries() && e instanceof HubApi.Busy busy)
                    throw new HubException(busy.error.getMessage() + "; still so after " + settings.retries() + " retries", e);
                if (fruitless > settings.retries())
                    throw new IOException("the connection was cut at byte " + pos + " of " + f.size() + " and " + settings.retries()
                            + " retries brought no further byte (" + HubApi.why(e) + "); what arrived is kept: run the same "
                            + "command again to resume", e);
                if (fruitless > 0) HubApi.backoff(fruitless - 1);
            }
        }
    }

    /** The Hub's own word on the file (first answer's headers) must agree with its file list. */
    private static void check(HubUri uri, RepoFile f, HubApi.Linked linked) {
        // only a sha256-shaped etag is compared: the content's own hash is checked at the end anyway
        if (f.lfs() && linked.sha256().filter(e -> e.matches("[0-9a-f]{64}")).isPresent() && !linked.sha256().get().equals(f.sha256()))
            throw new HubException(uri + " " + f.path() + ": the Hub's X-Linked-Etag " + linked.sha256().get()
                    + " differs from the sha256 in its file list " + f.sha256());
        if (linked.size().isPresent() && linked.size().get() != f.size())
            throw new HubException(uri + " " + f.path() + ": the Hub's X-Linked-Size " + linked.size().get()
                    + " differs from the size in its file list " + f.size());
    }

    private synchronized void recordChunk(HubUri uri, Job j) throws IOException {
        j.fetch().out.force(false);             // the chunk's bytes are on disk before the log says so
        Path log = cache.chunkLog(uri, j.fetch().file.etag());
        if (!Files.exists(log)) Files.writeString(log, "chunk " + settings.chunkBytes() + "\n", StandardCharsets.UTF_8);
        Files.writeString(log, j.chunk() + "\n", StandardCharsets.UTF_8, StandardOpenOption.APPEND);
    }

    /** Chunks recorded as done by an earlier run with the same chunk size (anything else starts over). */
    private static BitSet readChunkLog(Path log, long chunk, int chunks) throws IOException {
        BitSet done = new BitSet(chunks);
        if (!Files.isRegularFile(log)) return done;
        List<String> lines = Files.readAllLines(log, StandardCharsets.UTF_8);
        if (lines.isEmpty() || !lines.getFirst().equals("chunk " + chunk)) {
            Files.delete(log);
            return done;
        }
        for (String l : lines.subList(1, lines.size())) {
            try {
                int i = Integer.parseInt(l.strip());
                if (i >= 0 && i < chunks) done.set(i);
            } catch (NumberFormatException e) {
                // a line cut by a crash: that chunk is fetched again
            }
        }
        return done;
    }

    /** Size and hash checks, then the rename into {@code blobs/}; a file that fails them is removed. */
    private void finish(HubUri uri, Fetch fx) throws IOException {
        RepoFile f = fx.file;
        fx.out.force(false);
        long size = fx.out.size();
        String got = size == f.size() ? hash(fx.part, f) : null;
        if (got == null || !got.equals(f.etag())) {
            Files.deleteIfExists(fx.part);
            Files.deleteIfExists(cache.chunkLog(uri, f.etag()));
            throw new HubException(uri + " " + f.path() + ": the download was refused and removed: "
                    + (got == null ? "it has " + size + " bytes, the Hub lists " + f.size()
                    : (f.lfs() ? "sha256 " : "git blob id ") + got + " differs from the Hub's " + f.etag())
                    + "; run the command again to fetch it anew");
        }
        fx.out.close();
        Files.move(fx.part, cache.blob(uri, f.etag()), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        Files.deleteIfExists(cache.chunkLog(uri, f.etag()));
    }

    /** sha256 of the content for LFS files; the git blob id (sha1 of "blob SIZE\0" + content) otherwise. */
    static String hash(Path file, RepoFile f) throws IOException {
        MessageDigest md;
        try {
            md = MessageDigest.getInstance(f.lfs() ? "SHA-256" : "SHA-1");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        if (!f.lfs()) md.update(("blob " + f.size() + "\0").getBytes(StandardCharsets.US_ASCII));
        byte[] buf = new byte[1 << 20];
        try (InputStream in = Files.newInputStream(file)) {
            for (int n; (n = in.read(buf)) > 0; ) md.update(buf, 0, n);
        }
        return HexFormat.of().formatHex(md.digest());
    }
}
