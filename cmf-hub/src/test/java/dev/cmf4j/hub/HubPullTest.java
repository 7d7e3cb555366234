package dev.cmf4j.hub;

import dev.cmf4j.convert.Converter;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.testkit.FakeHub;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.zip.GZIPInputStream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code cmf pull} against {@link FakeHub}: a whole pull and its CMF, the cache layout, resumed and refused
 * downloads, the token, the errors, served from the fixture models.
 */
class HubPullTest {
    static final String WEIGHTS = "model.safetensors";

    @TempDir Path tmp;
    FakeHub server;
    Path model;            // the fixture folder the repository is made of
    FakeHub.Repo repo;
    long weightBytes;

    /** hf://test/llama: the llama fixture (2.2 MB of weights, nine 256 KiB chunks) and files no converter reads. */
    @BeforeEach void serve() throws IOException {
        model = Fixtures.require("models/llama");
        weightBytes = Files.size(model.resolve(WEIGHTS));
        server = FakeHub.start();
        repo = server.repo("test/llama").tag("v1");
        for (String f : List.of("config.json", "generation_config.json", WEIGHTS)) repo.file(f, model.resolve(f));
        repo.file("README.md", "# a test model\n".getBytes()).file("golden.safetensors", model.resolve("golden.safetensors"));
    }

    @AfterEach void stop() {
        if (server != null) server.close();
    }

    HubSettings settings() {
        return HubSettings.of(server.endpoint(), tmp.resolve("cache")).withChunkBytes(256 << 10).withConnections(4).withRetries(2)
                .withStallTimeout(Duration.ofSeconds(5));
    }

    static Hub.Options opts(String quant) { return Hub.Options.of(quant).withThreads(2); }

    long size(String f) throws IOException { return Files.size(model.resolve(f)); }

    /** hf://test/qwen3-e2e: the qwen3_e2e fixture with the real Qwen3 tokenizer and its chat template. */
    @Test void pullConvertsLikeConvertAndLaysOutTheCacheLikeTheHub() throws Exception {
        Path fixture = Fixtures.require("models/qwen3_e2e"), tok = Fixtures.require("tokenizers/qwen3");
        Path folder = Files.createDirectories(tmp.resolve("qwen3-e2e"));
        for (String f : List.of("config.json", "generation_config.json", WEIGHTS)) Files.copy(fixture.resolve(f), folder.resolve(f));
        try (InputStream in = new GZIPInputStream(Files.newInputStream(tok.resolve("tokenizer.json.gz")))) {
            Files.copy(in, folder.resolve("tokenizer.json"));
        }
        Files.copy(tok.resolve("tokenizer_config.json"), folder.resolve("tokenizer_config.json"));
        List<String> needed = List.of("config.json", "generation_config.json", WEIGHTS, "tokenizer.json", "tokenizer_config.json");
        FakeHub.Repo qwen = server.repo("test/qwen3-e2e");
        for (String f : needed) qwen.file(f, folder.resolve(f));
        qwen.file("README.md", "# a test model\n".getBytes()).file("golden.safetensors", fixture.resolve("golden.safetensors"));

        Hub.Pulled p = new Hub(settings()).pull(HubUri.parse("hf://test/qwen3-e2e"), opts("q8_2f"));
        assertThat(p.reused()).isFalse();
        assertThat(p.source()).isEqualTo(HubUri.parse("hf://test/qwen3-e2e@" + qwen.commit()));
        long wanted = 0;
        for (String f : needed) wanted += Files.size(folder.resolve(f));
        assertThat(p.downloadedBytes()).isEqualTo(wanted);
        assertThat(server.bytesServed("golden.safetensors")).as("files the converter does not read stay on the Hub").isZero();
        assertThat(server.bytesServed("README.md")).isZero();

        Path ref = tmp.resolve("ref.cmf");
        try (ModelSource s = Sources.open(folder)) {
            Converter.convert(s, ref, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.Q8_2F, List.of())).withThreads(2));
        }
        assertSameModel(p.cmf(), ref);
        try (CmfFile f = CmfFile.open(p.cmf())) {
            var prov = f.header().provenance();
            assertThat(prov.path("source_model").asText()).isEqualTo("hf://test/qwen3-e2e@" + qwen.commit());
            assertThat(prov.path("hf_commit").asText()).isEqualTo(qwen.commit());
            assertThat(prov.path("hf_revision").asText()).isEqualTo("main");
        }

        // huggingface_hub's layout: blobs by sha256 / git blob id, snapshot links, the ref of main
        Path r = tmp.resolve("cache/models--test--qwen3-e2e");
        byte[] w = Files.readAllBytes(folder.resolve(WEIGHTS)), cfg = Files.readAllBytes(folder.resolve("config.json"));
        assertThat(r.resolve("blobs/" + FakeHub.sha256(w))).hasBinaryContent(w);
        assertThat(r.resolve("blobs/" + FakeHub.gitOid(cfg))).hasBinaryContent(cfg);
        Path snap = r.resolve("snapshots/" + qwen.commit());
        assertThat(Files.isSymbolicLink(snap.resolve(WEIGHTS))).isTrue();
        assertThat(Files.readSymbolicLink(snap.resolve(WEIGHTS)).toString()).isEqualTo("../../blobs/" + FakeHub.sha256(w));
        assertThat(snap.resolve("tokenizer.json")).hasSameBinaryContentAs(folder.resolve("tokenizer.json"));
        assertThat(r.resolve("refs/main")).hasContent(qwen.commit());
        assertThat(p.cmf()).isEqualTo(r.resolve("cmf/" + qwen.commit() + "/model-q8_2f.cmf"));
        try (var leftovers = Files.list(r.resolve("blobs"))) {
            assertThat(leftovers.map(x -> x.getFileName().toString())).allMatch(n -> n.matches("[0-9a-f]{40}|[0-9a-f]{64}"));
        }
        // the weights came from the CDN as ranged chunks of 256 KiB
        assertThat(server.requests().stream().filter(q -> q.server().equals("cdn")).toList()).hasSizeGreaterThan(10)
                .allMatch(q -> q.range() != null && q.range().startsWith("bytes="));
    }

    /** The same tensors (dtype, shape, content hash), architecture, tokenizer and chat bundle. */
    static void assertSameModel(Path got, Path want) {
        try (CmfFile a = CmfFile.open(got); CmfFile b = CmfFile.open(want)) {
            assertThat(a.tensors()).hasSameSizeAs(b.tensors());
            for (int i = 0; i < a.tensors().size(); i++) {
                TensorEntry x = a.tensors().get(i), y = b.tensors().get(i);
                assertThat(x.name()).isEqualTo(y.name());
                assertThat(x.dtype()).isEqualTo(y.dtype());
                assertThat(x.shape()).isEqualTo(y.shape());
                assertThat(x.hash()).as(x.name()).isEqualTo(y.hash());
            }
            assertThat(a.header().arch()).isEqualTo(b.header().arch());
            assertThat(a.header().tokenizerConfig()).isEqualTo(b.header().tokenizerConfig());
            assertThat(a.vocab().isPresent()).isEqualTo(b.vocab().isPresent());
            if (a.vocab().isPresent()) assertThat(a.vocab().get()).isEqualTo(b.vocab().get());
        }
    }

    @Test void aSecondPullReusesTheCache() throws Exception {
        Hub hub = new Hub(settings());
        Hub.Pulled first = hub.pull(HubUri.parse("hf://test/llama"), opts(null));
        server.resetCounts();
        long t0 = System.nanoTime();
        Hub.Pulled again = hub.pull(HubUri.parse("hf://test/llama"), opts(null));
        double ms = (System.nanoTime() - t0) / 1e6;
        assertThat(again.cmf()).isEqualTo(first.cmf());
        assertThat(again.reused()).isTrue();
        assertThat(again.downloadedBytes()).isZero();
        assertThat(server.requests()).as("only the revision and its file list").allMatch(q -> q.path().startsWith("/api/models/"));
        assertThat(ms).as("second pull, ms").isLessThan(5000);

        // a pinned commit and offline mode need no request at all
        server.resetCounts();
        assertThat(hub.pull(HubUri.parse("hf://test/llama@" + repo.commit()), opts(null)).cmf()).isEqualTo(first.cmf());
        assertThat(new Hub(settings().withOffline(true)).pull(HubUri.parse("hf://test/llama"), opts("auto")).cmf()).isEqualTo(first.cmf());
        assertThat(server.requests()).isEmpty();
        assertThatThrownBy(() -> new Hub(settings().withOffline(true)).pull(HubUri.parse("hf://test/llama"), opts("q4_block")))
                .hasMessageContaining("HF_HUB_OFFLINE is set");

        // files fetched before (here: by the first pull, as Python tools would leave them) are not fetched again
        server.resetCounts();
        Hub.Pulled other = hub.pull(HubUri.parse("hf://test/llama@v1"), opts("f16"));
        assertThat(other.reused()).isFalse();
        assertThat(other.downloadedBytes()).isZero();
        assertThat(tmp.resolve("cache/models--test--llama/refs/v1")).hasContent(repo.commit());

        // a Hub that cannot be reached: the last known commit's CMF, as huggingface_hub falls back to refs/
        server.close();
        assertThat(hub.pull(HubUri.parse("hf://test/llama"), opts(null)).cmf()).isEqualTo(first.cmf());
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/llama"), opts("q8_row"))).isInstanceOf(HubException.class)
                .hasMessageContaining("cannot reach the Hub");
    }

    @Test void concurrentPullsInOneJvmFetchAndConvertOnce() throws Exception {
        try (Hub hub = new Hub(settings())) {
            var pool = java.util.concurrent.Executors.newFixedThreadPool(3);
            List<java.util.concurrent.Future<Hub.Pulled>> pulls = new java.util.ArrayList<>();
            for (int i = 0; i < 3; i++) pulls.add(pool.submit(() -> hub.pull(HubUri.parse("hf://test/llama"), opts("q8_row"))));
            List<Hub.Pulled> done = new java.util.ArrayList<>();
            for (var f : pulls) done.add(f.get());
            pool.shutdown();
            assertThat(done.stream().map(Hub.Pulled::cmf).distinct()).hasSize(1);
            assertThat(done.stream().filter(p -> !p.reused())).as("one conversion").hasSize(1);
            assertThat(server.bytesServed(WEIGHTS)).as("the weights travel once").isEqualTo(weightBytes);
        }
    }

    @Test void anEmptyFileAndAStreamWithEveryByteAreCheckedWithoutARequest() throws Exception {
        repo.file("empty.txt", new byte[0]);
        HubSettings s = settings();
        RepoFile empty = new RepoFile("empty.txt", 0, FakeHub.gitOid(new byte[0]), null);
        byte[] cfg = Files.readAllBytes(model.resolve("config.json"));
        RepoFile config = new RepoFile("config.json", cfg.length, FakeHub.gitOid(cfg), null);
        HubUri uri = HubUri.parse("hf://test/llama");
        HubCache cache = new HubCache(s.cache());
        Files.createDirectories(cache.incomplete(uri, config.etag()).getParent());
        Files.write(cache.incomplete(uri, config.etag()), cfg);        // a run that stopped after the last byte
        HubApi api = new HubApi(s);
        try {
            assertThat(new Downloader(api, cache, s).fetch(uri, repo.commit(), List.of(empty, config), TransferProgress.NONE)).isZero();
        } finally {
            api.close();
        }
        assertThat(server.requests()).isEmpty();
        assertThat(cache.snapshotFile(uri, repo.commit(), empty)).exists().isEmptyFile();
        assertThat(cache.snapshotFile(uri, repo.commit(), config)).hasBinaryContent(cfg);
    }

    @Test void filesLeftByPythonToolsAreUsedAsTheyAre() throws Exception {
        // what huggingface_hub's snapshot_download leaves: blobs by etag, relative links, refs/main
        Path r = tmp.resolve("cache/models--test--llama"), snap = r.resolve("snapshots/" + repo.commit());
        Files.createDirectories(snap);
        Files.createDirectories(r.resolve("blobs"));
        for (String f : List.of("config.json", "generation_config.json", WEIGHTS)) {
            byte[] b = Files.readAllBytes(model.resolve(f));
            String etag = f.endsWith(".safetensors") ? FakeHub.sha256(b) : FakeHub.gitOid(b);
            Files.write(r.resolve("blobs/" + etag), b);
            Files.createSymbolicLink(snap.resolve(f), Path.of("../../blobs/" + etag));
        }
        Files.createDirectories(r.resolve("refs"));
        Files.writeString(r.resolve("refs/main"), repo.commit());
        Hub.Pulled p = new Hub(settings()).pull(HubUri.parse("hf://test/llama"), opts(null));
        assertThat(p.downloadedBytes()).isZero();
        assertThat(server.requests()).allMatch(q -> q.path().startsWith("/api/models/"));
        assertThat(p.cmf()).exists();
    }

    @Test void busyAnswersAreRetried() throws Exception {
        server.failWith("hub", 503, 2);             // the revision lookup, then its retry
        server.failWith("cdn", 503, 2);
        Hub.Pulled p = new Hub(settings().withConnections(1)).pull(HubUri.parse("hf://test/llama"), opts(null));
        assertThat(p.cmf()).exists();
        assertThat(server.bytesServed(WEIGHTS)).isEqualTo(weightBytes);

        server.failWith("hub", 503, 100);
        assertThatThrownBy(() -> new Hub(settings().withRetries(1)).pull(HubUri.parse("hf://test/llama@v1"), opts(null)))
                .isInstanceOf(HubException.class).hasMessageContaining("HTTP 503");
        server.clearFaults();
        server.failWith("cdn", 429, 100);
        Hub fresh = new Hub(HubSettings.of(server.endpoint(), tmp.resolve("cache2")).withRetries(1));
        assertThatThrownBy(() -> fresh.pull(HubUri.parse("hf://test/llama"), opts(null)))
                .hasMessageContaining("rate-limiting").hasMessageContaining("still so after 1 retries");
    }

    @Test void aCutConnectionResumesAtTheByteItReached() throws Exception {
        // one stream (one connection): cut twice, each time after 100 KB; no byte is sent twice
        server.cut(WEIGHTS, 100_000, 2);
        Hub.Pulled p = new Hub(settings().withConnections(1)).pull(HubUri.parse("hf://test/llama"), opts(null));
        assertThat(server.bytesServed(WEIGHTS)).isEqualTo(weightBytes);
        assertThat(server.requests()).anyMatch(q -> "bytes=100000-".concat(String.valueOf(weightBytes - 1)).equals(q.range()))
                .anyMatch(q -> ("bytes=200000-" + (weightBytes - 1)).equals(q.range()));
        assertThat(p.cmf()).exists();
    }

    @Test void aStreamThatWillNotResumeStopsAndTheNextPullFetchesOnlyTheRest() throws Exception {
        server.cut(WEIGHTS, 300_000, 1);       // the stream dies at 300 KB,
        server.cut(WEIGHTS, 0, 100);           // then every retry dies before its first byte
        Hub hub = new Hub(settings().withConnections(1).withRetries(2));
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/llama"), opts(null))).isInstanceOf(HubException.class)
                .hasMessageContaining(WEIGHTS).hasMessageContaining("cut at byte 300000")
                .hasMessageContaining("run the same command again to resume");
        String sha = FakeHub.sha256(Files.readAllBytes(model.resolve(WEIGHTS)));
        Path partial = tmp.resolve("cache/models--test--llama/blobs/" + sha + ".incomplete");
        assertThat(Files.size(partial)).isEqualTo(300_000);

        server.clearFaults();
        server.resetCounts();
        Hub.Pulled p = hub.pull(HubUri.parse("hf://test/llama"), opts(null));
        assertThat(server.bytesServed(WEIGHTS)).as("only the missing bytes").isEqualTo(weightBytes - 300_000);
        assertThat(server.requests()).anyMatch(q -> ("bytes=300000-" + (weightBytes - 1)).equals(q.range()));
        assertThat(p.cmf()).exists();
        assertThat(partial).doesNotExist();
    }

    @Test void chunksDoneBeforeAFailureAreNotFetchedAgain() throws Exception {
        long chunk = 256 << 10;
        server.cutFrom(WEIGHTS, 3 * chunk, 0, 100);        // chunk 3 never arrives
        Hub hub = new Hub(settings().withConnections(4).withRetries(1));
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/llama"), opts(null))).isInstanceOf(HubException.class)
                .hasMessageContaining("cut at byte " + 3 * chunk);
        String sha = FakeHub.sha256(Files.readAllBytes(model.resolve(WEIGHTS)));
        Path log = tmp.resolve("cache/models--test--llama/blobs/" + sha + ".chunks.done");
        List<String> lines = Files.readAllLines(log);
        assertThat(lines.getFirst()).isEqualTo("chunk " + chunk);
        long kept = 0;
        for (String l : lines.subList(1, lines.size())) {
            int i = Integer.parseInt(l);
            kept += Math.min(weightBytes, (i + 1) * chunk) - i * chunk;
        }
        assertThat(kept).as("the chunks fetched beside the failing one").isGreaterThan(0);

        server.clearFaults();
        server.resetCounts();
        hub.pull(HubUri.parse("hf://test/llama"), opts(null));
        assertThat(server.bytesServed(WEIGHTS)).isEqualTo(weightBytes - kept);
        assertThat(log).doesNotExist();
    }

    @Test void aStalledTransferIsCutAndResumed() throws Exception {
        server.stall("config.json", 30_000, 1);
        Hub hub = new Hub(settings().withStallTimeout(Duration.ofMillis(300)));
        long t0 = System.nanoTime();
        Hub.Pulled p = hub.pull(HubUri.parse("hf://test/llama"), opts(null));
        assertThat((System.nanoTime() - t0) / 1e9).as("seconds; the stall lasts 30").isLessThan(15);
        assertThat(p.cmf()).exists();
    }

    @Test void aCorruptedFileIsRefusedAndRemoved() throws Exception {
        Hub hub = new Hub(settings());
        String sha = FakeHub.sha256(Files.readAllBytes(model.resolve(WEIGHTS)));
        Path blobs = tmp.resolve("cache/models--test--llama/blobs");
        server.corrupt(WEIGHTS, 1_000_000);
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/llama"), opts(null))).isInstanceOf(HubException.class)
                .hasMessageContaining(WEIGHTS).hasMessageContaining("refused and removed").hasMessageContaining("sha256");
        assertThat(blobs.resolve(sha)).doesNotExist();
        assertThat(blobs.resolve(sha + ".chunks")).doesNotExist();
        assertThat(blobs.resolve(sha + ".chunks.done")).doesNotExist();

        server.clearFaults();
        server.corrupt("config.json", 10);         // a small (git) file is checked against its git blob id
        Hub fresh = new Hub(HubSettings.of(server.endpoint(), tmp.resolve("cache2")));
        assertThatThrownBy(() -> fresh.pull(HubUri.parse("hf://test/llama"), opts(null)))
                .hasMessageContaining("config.json").hasMessageContaining("git blob id");

        server.clearFaults();
        assertThat(hub.pull(HubUri.parse("hf://test/llama"), opts(null)).cmf()).exists();
        assertThat(blobs.resolve(sha)).exists();
    }

    @Test void theTokenGoesToTheHubAsABearerAndNeverToTheCdn() {
        server.requireToken("hf_secret");
        assertThatThrownBy(() -> new Hub(settings()).pull(HubUri.parse("hf://test/llama"), opts(null)))
                .isInstanceOf(HubException.class).hasMessageContaining("HTTP 401").hasMessageContaining("set HF_TOKEN");
        assertThatThrownBy(() -> new Hub(settings().withToken("hf_wrong")).pull(HubUri.parse("hf://test/llama"), opts(null)))
                .hasMessageContaining("refused the token in HF_TOKEN");
        server.resetCounts();
        assertThat(new Hub(settings().withToken("hf_secret")).pull(HubUri.parse("hf://test/llama"), opts(null)).cmf()).exists();
        assertThat(server.requests().stream().filter(q -> q.server().equals("hub"))).isNotEmpty()
                .allMatch(q -> "Bearer hf_secret".equals(q.authorization()));
        assertThat(server.requests().stream().filter(q -> q.server().equals("cdn"))).isNotEmpty().allMatch(q -> q.authorization() == null);
    }

    @Test void errorsSayWhatIsWrong() throws IOException {
        Hub hub = new Hub(settings());
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/llama@nope"), opts(null)))
                .hasMessageContaining("hf://test/llama@nope").hasMessageContaining("no such revision (HTTP 404)");
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/missing"), opts(null)))
                .hasMessageContaining("HTTP 401").hasMessageContaining("does not exist, or it is private or gated");
        assertThatThrownBy(() -> new Hub(settings().withToken("t")).pull(HubUri.parse("hf://test/missing"), opts(null)))
                .hasMessageContaining("no such repository (HTTP 404)");
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/llama"), opts(null).withFile("model.gguf")))
                .hasMessageContaining("no file \"model.gguf\"");
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/llama"), opts("q3_k")))
                .hasMessageContaining("neither a cmf quantization");

        server.repo("test/gated").gated().file("config.json", model.resolve("config.json")).file(WEIGHTS, model.resolve(WEIGHTS));
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/gated"), opts(null)))
                .hasMessageContaining("gated (HTTP 403)").hasMessageContaining("HF_TOKEN");

        server.repo("test/pickles").file("config.json", model.resolve("config.json")).file("pytorch_model.bin", new byte[100]);
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/pickles"), opts(null)))
                .hasMessageContaining("nothing cmf can convert").hasMessageContaining("PyTorch pickles");
        server.repo("test/empty").file("README.md", new byte[3]);
        assertThatThrownBy(() -> hub.pull(HubUri.parse("hf://test/empty"), opts(null))).hasMessageContaining("there is no config.json");

        try (FakeHub gone = FakeHub.start()) {
            HubSettings dead = HubSettings.of(gone.endpoint(), tmp.resolve("c2"));
            gone.close();
            assertThatThrownBy(() -> new Hub(dead).pull(HubUri.parse("hf://test/llama"), opts(null)))
                    .hasMessageContaining("cannot reach the Hub at " + gone.endpoint());
        }
    }

    @Test void aShardedCheckpointIsFetchedThroughItsIndex() throws Exception {
        String index = "{\"metadata\":{},\"weight_map\":{" + String.join(",", tensorNames().stream().map(n -> "\"" + n + "\":\"" + WEIGHTS + "\"").toList()) + "}}";
        FakeHub.Repo sharded = server.repo("test/sharded");
        for (String f : List.of("config.json", WEIGHTS)) sharded.file(f, model.resolve(f));
        sharded.file("model.safetensors.index.json", index.getBytes()).file("consolidated.safetensors", new byte[1 << 20]);
        Hub.Pulled p = new Hub(settings()).pull(HubUri.parse("hf://test/sharded"), opts(null));
        assertThat(server.bytesServed("consolidated.safetensors")).as("not named by the index").isZero();
        try (CmfFile f = CmfFile.open(p.cmf())) {
            assertThat(f.tensors()).hasSize(tensorNames().size());
        }
    }

    @Test void aGgufIsChosenByItsTypeOrByName() throws Exception {
        Path dir = Fixtures.require("gguf");
        FakeHub.Repo g = server.repo("test/llama-gguf");
        for (String q : List.of("q8_0", "q4_0", "f32")) g.file("llama-" + q + ".gguf", dir.resolve("llama3rope-" + q + ".gguf"));
        g.file("mmproj-f16.gguf", new byte[10]);
        HubUri uri = HubUri.parse("hf://test/llama-gguf");
        Hub hub = new Hub(settings());
        assertThatThrownBy(() -> hub.pull(uri, opts(null))).hasMessageContaining("several GGUF files")
                .hasMessageContaining("llama-q4_0.gguf").hasMessageNotContaining("mmproj");
        assertThatThrownBy(() -> hub.pull(uri, opts("Q5_K_M"))).hasMessageContaining("no GGUF file of type Q5_K_M");

        Hub.Pulled p = hub.pull(uri, opts("Q8_0"));
        assertThat(p.cmf().getFileName()).hasToString("llama-q8_0-auto.cmf");
        assertThat(server.bytesServed("llama-q4_0.gguf")).isZero();
        Path ref = tmp.resolve("ref.cmf");
        try (ModelSource s = Sources.open(dir.resolve("llama3rope-q8_0.gguf"))) {
            Converter.convert(s, ref, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.AUTO, List.of())).withThreads(2));
        }
        assertSameModel(p.cmf(), ref);
        try (CmfFile f = CmfFile.open(p.cmf())) {
            assertThat(f.header().provenance().path("hf_file").asText()).isEqualTo("llama-q8_0.gguf");
        }

        server.resetCounts();
        assertThat(hub.pull(uri.at(g.commit()), opts("Q8_0")).cmf()).as("cached, found by its type").isEqualTo(p.cmf());
        assertThat(server.requests()).isEmpty();
    }

    List<String> tensorNames() {
        try (var r = dev.cmf4j.convert.SafetensorsReader.open(model.resolve(WEIGHTS))) {
            return r.tensors().stream().map(dev.cmf4j.convert.SafetensorsReader.Tensor::name).toList();
        }
    }
}
