package dev.cmf4j.hub;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.convert.Converter;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.Progress;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.format.CmfFile;

import java.io.Closeable;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;

/**
 * Models from the Hugging Face Hub as CMF files: {@link #pull} resolves {@code hf://ORG/REPO[@REV]} to a commit,
 * downloads what the converter needs into the Hub's cache layout (reusing whatever huggingface_hub or an earlier
 * pull left there), converts it once through the same path as {@code cmf convert}, and keeps the CMF in the cache
 * under the commit and quantization, so a second pull of the same model is only a revision lookup (none at all for
 * a commit, or with {@code HF_HUB_OFFLINE=1}). See docs/HUB.md.
 *
 * <pre>{@code
 * Path cmf = Hub.resolveModel("hf://Qwen/Qwen3-0.6B", "q8_2f", System.err);
 * }</pre>
 */
public final class Hub implements AutoCloseable {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final HubSettings settings;
    private final HubApi api;
    private final HubCache cache;
    private final Downloader downloader;

    public Hub(HubSettings settings) {
        this.settings = settings;
        this.api = new HubApi(settings);
        this.cache = new HubCache(settings.cache());
        this.downloader = new Downloader(api, cache, settings);
    }

    /** A hub configured from {@code HF_ENDPOINT}, {@code HF_TOKEN}, {@code HF_HOME}, {@code HF_HUB_CACHE}, {@code HF_HUB_OFFLINE}. */
    public static Hub fromEnvironment() { return new Hub(HubSettings.fromEnvironment()); }

    public HubSettings settings() { return settings; }

    /** Closes the HTTP client (after the requests under way). */
    @Override public void close() { api.close(); }

    /**
     * How to pull: {@code quant} a cmf quant mode ({@code auto} when null) or a GGUF quant type choosing a GGUF
     * file; {@code file} a GGUF file of the repository (or null); the two progress reporters; conversion threads.
     */
    public record Options(String quant, String file, TransferProgress download, Progress convert, int threads) {
        public Options {
            if (threads < 1) throw new IllegalArgumentException("threads must be >= 1");
        }

        public static Options of(String quant) {
            return new Options(quant, null, TransferProgress.NONE, Progress.NONE, Math.max(1, Runtime.getRuntime().availableProcessors()));
        }

        public Options withFile(String f) { return new Options(quant, f, download, convert, threads); }

        public Options withProgress(TransferProgress d, Progress c) { return new Options(quant, file, d, c, threads); }

        public Options withThreads(int t) { return new Options(quant, file, download, convert, t); }

        TensorPolicy.Mode mode() {
            return quant != null && ModelFiles.isCmfMode(quant) ? TensorPolicy.Mode.parse(quant) : TensorPolicy.Mode.AUTO;
        }
    }

    /**
     * A pulled model: its CMF file, the commit it came from, whether the cache already held the CMF, and the bytes
     * this pull downloaded.
     */
    public record Pulled(Path cmf, HubUri source, boolean reused, long downloadedBytes) {}

    /**
     * The reusable entry point ({@code Cmf.open("hf://...")} will call it): the CMF for {@code uri} at
     * {@code quant} (null: keep the source's float types), pulled and converted when the cache lacks it, with
     * progress lines on {@code progress} (null: silent).
     */
    public static Path resolveModel(String uri, String quant, PrintStream progress) {
        return resolveModel(HubSettings.fromEnvironment(), uri, quant, progress);
    }

    /** {@link #resolveModel(String, String, PrintStream)} from the Hub and cache {@code settings} name. */
    public static Path resolveModel(HubSettings settings, String uri, String quant, PrintStream progress) {
        Options o = Options.of(quant);
        if (progress != null) o = o.withProgress(TransferProgress.lines(progress), Progress.lines(progress));
        try (Hub hub = new Hub(settings)) {
            return hub.pull(HubUri.parse(uri), o).cmf();
        }
    }

    public Pulled pull(HubUri uri, Options o) {
        TensorPolicy.Mode mode = o.mode();
        if (settings.offline() || uri.pinned()) {
            Optional<String> commit = cache.ref(uri);
            Optional<Path> cached = commit.flatMap(c -> cachedCmf(uri, c, o));
            if (cached.isPresent()) return new Pulled(cached.get(), uri.at(commit.get()), true, 0);
            if (settings.offline())
                throw new HubException(uri + ": HF_HUB_OFFLINE is set and the cache at " + settings.cache() + " holds no converted "
                        + "model for it" + (o.quant() == null ? "" : " at --quant " + o.quant()) + "; unset HF_HUB_OFFLINE to download it");
        }
        RepoRevision rev;
        try {
            rev = api.revision(uri);
        } catch (HubException e) {
            if (!e.unreachable()) throw e;
            Optional<String> commit = cache.ref(uri);
            Optional<Path> cached = commit.flatMap(c -> cachedCmf(uri, c, o));
            if (cached.isEmpty()) throw e;
            return new Pulled(cached.get(), uri.at(commit.get()), true, 0);      // the last known commit, as huggingface_hub does
        }
        cache.writeRef(uri, rev.commit());
        ModelFiles files = ModelFiles.choose(rev, o.quant(), o.file());
        Path out = cache.cmf(uri, rev.commit(), files.cmfName(mode));
        if (usable(out)) return new Pulled(out, rev.pinned(), true, 0);

        long fetched;
        Path source;
        switch (files) {
            case ModelFiles.Checkpoint c -> {
                List<RepoFile> all = new ArrayList<>(c.metadata());
                if (c.sharded()) {
                    fetched = downloader.fetch(uri, rev.commit(), List.of(c.weights()), TransferProgress.NONE);
                    all.addAll(shards(rev, cache.snapshotFile(uri, rev.commit(), c.weights())));
                } else {
                    fetched = 0;
                }
                fetched += downloader.fetch(uri, rev.commit(), all, o.download());
                source = cache.snapshot(uri, rev.commit());
            }
            case ModelFiles.Gguf g -> {
                fetched = downloader.fetch(uri, rev.commit(), List.of(g.file()), o.download());
                source = cache.snapshotFile(uri, rev.commit(), g.file());
            }
        }
        Converter.Options co = Converter.Options.of(new TensorPolicy(mode, List.of())).withProgress(o.convert()).withThreads(o.threads());
        String file = files instanceof ModelFiles.Gguf g ? g.file().path() : null;
        try (Closeable lock = cache.lock(uri, rev.commit() + "-" + files.cmfName(mode))) {
            if (usable(out)) return new Pulled(out, rev.pinned(), true, fetched);     // converted meanwhile by another pull
            Files.createDirectories(out.getParent());
            try (ModelSource s = new PulledSource(Sources.open(source), uri, rev.commit(), file)) {
                Converter.convert(s, out, co);
            }
        } catch (IOException e) {
            throw new HubException("cannot write " + out + ": " + e.getMessage(), e);
        }
        return new Pulled(out, rev.pinned(), false, fetched);
    }

    /** The shard files the index names, each of which the repository must hold. */
    private static List<RepoFile> shards(RepoRevision rev, Path index) {
        JsonNode map;
        try {
            map = JSON.readTree(index.toFile()).path("weight_map");
        } catch (IOException e) {
            throw new HubException(rev.pinned() + ": " + ModelFiles.INDEX + " is not valid JSON: " + e.getMessage(), e);
        }
        if (!map.isObject() || map.isEmpty())
            throw new HubException(rev.pinned() + ": " + ModelFiles.INDEX + " has no \"weight_map\" of tensors to shard files");
        Set<String> names = new LinkedHashSet<>();
        map.forEach(v -> names.add(v.asText()));
        List<RepoFile> shards = new ArrayList<>();
        for (String n : names)
            shards.add(rev.file(n).orElseThrow(() -> new HubException(rev.pinned() + ": " + ModelFiles.INDEX + " names the shard \"" + n
                    + "\", which the repository does not hold")));
        return shards;
    }

    /**
     * The CMF an earlier pull made from {@code commit} that fits these options, found without the file list: for a
     * checkpoint or {@code --file} the name is known; a GGUF chosen by its type is the one cached name holding it.
     */
    private Optional<Path> cachedCmf(HubUri uri, String commit, Options o) {
        String suffix = "-" + o.mode().label + ".cmf";
        Path dir = cache.cmf(uri, commit, "x").getParent();
        if (!Files.isDirectory(dir)) return Optional.empty();
        List<Path> hits = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*" + suffix)) {
            for (Path p : ds) {
                String n = p.getFileName().toString();
                String stem = n.substring(0, n.length() - suffix.length());
                boolean fits = o.file() != null ? stem.equals(o.file().replace("/", "--").replaceAll("(?i)\\.gguf$", ""))
                        : o.quant() != null && !ModelFiles.isCmfMode(o.quant())
                        ? stem.toUpperCase(Locale.ROOT).contains(o.quant().toUpperCase(Locale.ROOT))
                        : stem.equals("model");
                if (fits && usable(p)) hits.add(p);
            }
        } catch (IOException e) {
            return Optional.empty();
        }
        return hits.size() == 1 ? Optional.of(hits.getFirst()) : Optional.empty();
    }

    /** A cached CMF counts only when it opens (the writer renames it into place only once complete). */
    private static boolean usable(Path cmf) {
        if (!Files.isRegularFile(cmf)) return false;
        try (CmfFile f = CmfFile.open(cmf)) {
            return !f.tensors().isEmpty();
        } catch (RuntimeException e) {
            return false;
        }
    }
}
