package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.model.ConvertedGoldenTest;
import dev.cmf4j.model.Model;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.runtime.BatchDriver;
import dev.cmf4j.runtime.Completion;
import dev.cmf4j.runtime.GenerationRequest;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.MtpDraft;
import dev.cmf4j.runtime.LastLayerRows;
import dev.cmf4j.runtime.MtpHeads;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.Speculation;
import dev.cmf4j.runtime.TokenSink;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code --draft mtp} with the model GPU-resident (mock driver and kernel emulator): the resident forward copies the
 * last layer's rows (x before the final norm) back with the logits, and the head runs on the host graph from them.
 * Checked: those rows against the CPU graph's, for a session's own steps (prompt chunk, captured decode step, an
 * all-logits chunk) and for batched steps (a captured step of decode rows, a step with a prompt chunk, a greedy step);
 * greedy output token for token as plain greedy decoding on the device, with a random head and an oracle head (whose
 * drafts are kept: the same drafted and accepted counts as on the CPU), on llama and on qwen3_next (whose rejected
 * tokens go back through host copies of its recurrent state and run again, handing their rows over again); the
 * scheduler drafting for several sequences; and one-line refusals where the rows cannot come back.
 */
class CudaMtpDraftTest {
    static final int[] PROMPT = {5, 77, 300, 12, 901, 44, 3, 618, 250, 17, 4};

    @TempDir static Path tmp;
    static Path lib;
    static CudaContext ctx;
    private static final Map<String, Path> files = new HashMap<>();

    @BeforeAll static void open() throws Exception {
        lib = MockCuda.build(tmp);
        ctx = new CudaContext(CudaDriver.load(List.of(lib.toString())), 0, List.of(lib.toString()), new KernelCache(tmp.resolve("cache")));
    }

    @AfterAll static void close() { if (ctx != null) ctx.close(); }

    /** models/NAME converted at f32. */
    static synchronized Path converted(String name) {
        return files.computeIfAbsent(name, n -> ConvertedGoldenTest.convert(Fixtures.require("models/" + n), tmp.resolve(n + "-f32.cmf"),
                TensorPolicy.Mode.F32));
    }

    static synchronized Path randomHead(String name) {
        Path src = converted(name);   // (before the lookup below: converting adds to the map)
        return files.computeIfAbsent(name + " random", n -> MtpHeads.withRandomHead(src, tmp.resolve(name + "-mtp.cmf"), 7));
    }

    /** models/NAME as a Hugging Face folder with a random head under mtp.*, converted to q8_2f. */
    static synchronized Path quantizedHead(String name) throws Exception {
        Path key = files.get(name + " q8_2f");
        if (key != null) return key;
        Path dir = MtpHeads.hfFolderWithHead(Fixtures.require("models/" + name), tmp.resolve("hf-" + name + "-mtp"),
                MtpHeads.randomHead(converted(name), 5));
        Path out = ConvertedGoldenTest.convert(dir, tmp.resolve(name + "-mtp-q8_2f.cmf"), TensorPolicy.Mode.Q8_2F);
        files.put(name + " q8_2f", out);
        return out;
    }

    static synchronized Path oracleHead(String name, int[] greedy) {
        Path src = converted(name);
        return files.computeIfAbsent(name + " oracle " + Arrays.toString(greedy),
                n -> MtpHeads.withOracleHead(src, tmp.resolve(name + "-oracle-" + files.size() + ".cmf"), greedy));
    }

    /** A model opened on the mock GPU, with its backend (closed after it). */
    record Gpu(Model model, Backend backend) implements AutoCloseable {
        @Override public void close() {
            model.close();
            if (backend != null) backend.close();
        }
    }

    static Gpu onGpu(Path file) { return onGpu(file, 0); }

    /** With {@code gemmMinTokens} > 0: cuBLAS (the mock's) for chunks of at least that many rows. */
    static Gpu onGpu(Path file, int gemmMinTokens) {
        CudaMatMul mm = new CudaMatMul(ctx, CpuBackend.newMatMul());
        mm.notes(x -> {});
        if (gemmMinTokens > 0) mm.useCublas(List.of(lib.toString()), gemmMinTokens);
        CudaBackend b = new CudaBackend(mm);
        Model m = Model.open(file, null, b);
        assertThat(m.graph().device()).as("GPU-resident").isNotNull();
        return new Gpu(m, b);
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "qwen3_next"})
    void theResidentForwardHandsBackTheLastLayersRows(String name) {
        try (Model cpu = Model.open(converted(name)); Gpu gpu = onGpu(converted(name))) {
            // a session's own steps: a prompt chunk, two decode steps (the captured graph), an all-logits chunk
            LastLayerRows[] rows = new LastLayerRows[2];
            for (int i = 0; i < 2; i++) {
                Session s = new Session((i == 0 ? cpu : gpu.model()).graph(), 64);
                rows[i] = new LastLayerRows();
                s.observeHidden(rows[i]);
                s.prefill(PROMPT);
                s.decode(9);
                s.decode(31);
                s.logitsAll(new int[] {2, 8, 400, 7});
            }
            LastLayerRows.assertClose(rows[1], rows[0], name + " session steps");
            assertThat(rows[1].at).hasSize(PROMPT.length + 6);

            // batched steps: two decode rows (a captured step), a decode row beside a prompt chunk, then a greedy step
            LastLayerRows[][] batched = new LastLayerRows[2][3];
            int[][] picks = new int[2][];
            for (int i = 0; i < 2; i++) {
                var g = (i == 0 ? cpu : gpu.model()).graph();
                BatchDriver d = new BatchDriver(g, 32, 64);
                Session[] ss = {new Session(g, 64), new Session(g, 64), new Session(g, 64)};
                for (int k = 0; k < 3; k++) {
                    batched[i][k] = new LastLayerRows();
                    ss[k].observeHidden(batched[i][k]);
                }
                d.prefill(new Session[] {ss[0], ss[1]}, new int[][] {PROMPT, {40, 41, 42}}, 8);
                d.step(new Session[] {ss[0], ss[1]}, new int[][] {{6}, {60}});
                d.step(new Session[] {ss[0], ss[1], ss[2]}, new int[][] {{7}, {61, 62, 63}, {3, 1, 4, 1, 5}}, new boolean[] {false, true, false});
                picks[i] = d.stepGreedy(new Session[] {ss[0], ss[1], ss[2]}, new int[][] {{8}, {64}, {9}}).clone();
            }
            assertThat(picks[1]).as(name + ": the greedy step's picks, made on the device").containsExactly(picks[0]);
            for (int k = 0; k < 3; k++) LastLayerRows.assertClose(batched[1][k], batched[0][k], name + " batched, sequence " + k);
        }
    }

    /**
     * The head's own steps GPU-resident (its input rows made on the host, then fc, layer, final norm and head on the
     * device) against the host graph's: a chunk of rows with every row's logits, then one row (the decode attention),
     * then two rows taken back and run again; the logits and the layer's output rows (what the next draft reads). Also
     * with cuBLAS taking the chunk's products (the fc stays a matvec). "llama q8_2f": a Hugging Face folder with the head
     * under {@code mtp.*} converted to q8_2f (the head's fc and layer int8 too), against the CPU's reference products.
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "qwen3_next", "llama q8_2f"})
    void theHeadRunsOnTheDeviceAsOnTheHost(String run) throws Exception {
        String name = run.split(" ")[0];
        boolean q8 = run.endsWith("q8_2f");
        Path file = q8 ? quantizedHead(name) : randomHead(name);
        try (Model cpu = Model.open(file, null, CpuBackend.reference()); Gpu gpu = onGpu(file); Gpu gemm = onGpu(file, 4)) {
            if (q8) assertThat(cpu.file().tensor("model.mtp.fc.weight").dtype()).isEqualTo(dev.cmf4j.format.DType.Q8_2F);
            Graph[] heads = {cpu.mtpGraph(), gpu.model().mtpGraph(), gemm.model().mtpGraph()};
            assertThat(heads[0].device()).isNull();
            assertThat(heads[1].device()).as("the head GPU-resident").isNotNull();
            int before = gemms();
            int h = heads[0].hidden(), v = heads[0].vocab(), n = 9;
            java.util.Random r = new java.util.Random(3);
            float[] rows = new float[(n + 3) * h];
            for (int i = 0; i < rows.length; i++) rows[i] = (float) (2 * r.nextGaussian());
            int[] ids = {5, 77, 300, 12, 901, 44, 3, 618, 250, 17, 4, 9};
            float[][][] got = new float[3][][];
            for (int i = 0; i < 3; i++) {
                Graph g = heads[i];
                float[] all = new float[n * v], one = new float[v], again = new float[2 * v];
                float[][] out = {all, new float[n * h], one, new float[h], again, new float[2 * h]};
                var st = g.newState(16, 64);
                g.forwardMtp(st, ids, 0, n, rows, 0, all, true, g.lastLayer((x, t, w) -> System.arraycopy(x, 0, out[1], 0, t * w)));
                var mark = st.mark(3);
                g.forwardMtp(st, ids, n, 1, rows, n * h, one, false, g.lastLayer((x, t, w) -> System.arraycopy(x, 0, out[3], 0, w)));
                g.forwardMtp(st, ids, n + 1, 1, rows, (n + 1) * h, one, false, null);
                assertThat(st.rewind(mark, n + 1)).isZero();
                g.forwardMtp(st, ids, n + 1, 2, rows, (n + 1) * h, again, true, g.lastLayer((x, t, w) -> System.arraycopy(x, 0, out[5], 0, t * w)));
                assertThat(st.position()).isEqualTo(n + 3);
                got[i] = out;
            }
            String[] what = {"chunk logits", "chunk layer rows", "one row's logits", "its layer row", "after the rewind, logits", "layer rows"};
            assertThat(gemms()).as("the chunk's products through cuBLAS").isGreaterThan(before);
            for (int i = 1; i < 3; i++)
                for (int k = 0; k < what.length; k++) assertClose(got[i][k], got[0][k], name + " head" + (i == 2 ? " (cuBLAS)" : "") + ": " + what[k]);
        }
    }

    /** Logit rows whose argmax the mock's ra_argmax_rows took. */
    static int argmaxRows() { return (int) MockCuda.read(lib, "mock_argmax_rows", java.lang.foreign.ValueLayout.JAVA_INT); }

    /** cuBLAS GEMMs the mock has run. */
    static int gemms() { return (int) MockCuda.read(lib, "mock_gemms", java.lang.foreign.ValueLayout.JAVA_INT); }

    static void assertClose(float[] a, float[] b, String what) {
        float scale = 0;
        for (float x : b) scale = Math.max(scale, Math.abs(x));
        assertThat(scale).as(what + ": written").isPositive();
        for (int i = 0; i < b.length; i++) assertThat(Math.abs(a[i] - b[i])).as(what + " [" + i + "]").isLessThan(1e-4f * Math.max(1f, scale));
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "qwen3_next"})
    void greedyDraftingWithTheHeadIsTokenExactOnTheDevice(String name) {
        int n = 32;
        int[] chain;
        try (Model m = Model.open(converted(name))) { chain = LastLayerRows.greedy(m, PROMPT, 40); }
        for (Path file : List.of(randomHead(name), oracleHead(name, chain))) {
            boolean oracle = file.getFileName().toString().contains("oracle");
            String what = name + (oracle ? " oracle" : " random");
            try (Model cpu = Model.open(file); Gpu gpu = onGpu(file)) {
                Model m = gpu.model();
                assertThat(m.mtpGraph().device()).as("the head GPU-resident").isNotNull();
                int[] want = LastLayerRows.greedy(m, PROMPT, n);
                assertThat(want).as(what + ": plain greedy on the device as on the CPU").containsExactly(LastLayerRows.greedy(cpu, PROMPT, n));
                for (int k : new int[] {1, 3}) {
                    Speculation.Stats[] stats = new Speculation.Stats[2];
                    int[][] next = new int[2][4];
                    for (int i = 0; i < 2; i++) {
                        Model on = i == 0 ? cpu : m;
                        Session t = new Session(on.graph(), 128);
                        MtpDraft head = new MtpDraft(on.mtpGraph(), 128);
                        Speculation sp = new Speculation(head, k, SamplingParams.GREEDY);
                        Generator.Result got = sp.generate(new Generator(t, new Sampler(SamplingParams.GREEDY), Set.of(), List.of()),
                                PROMPT, n, null, null);
                        stats[i] = sp.stats(got.tokens().length);
                        assertThat(got.tokens()).as(what + " k " + k + (i == 0 ? " (CPU)" : " (GPU)")).containsExactly(want);
                        assertThat(t.position()).isEqualTo(PROMPT.length + n - 1);
                        // the head's next drafts after the generation: it held one row per kept position, from the model's rows
                        assertThat(head.propose(t, want[n - 1], 4, new Sampler(SamplingParams.GREEDY), next[i], null)).isEqualTo(4);
                        assertThat(head.position()).isEqualTo(t.position());
                    }
                    Speculation.Stats st = stats[1];
                    System.out.printf("GPU (mock) %s mtp k %d: acceptance %.2f, %.2f tokens per step (%d rounds, %d plain)%n", what, k,
                            st.acceptance(), st.tokensPerStep(), st.rounds(), st.plainSteps());
                    assertThat(st.rounds()).as("drafting rounds ran").isPositive();
                    assertThat(next[1]).as(what + " k " + k + ": the head's drafts after the generation, GPU and CPU").containsExactly(next[0]);
                    if (oracle) {
                        assertThat(st.accepted()).as(what + " k " + k + ": the oracle's drafts are kept").isPositive();
                        assertThat(st).as(what + " k " + k + ": drafted and kept as on the CPU").isEqualTo(stats[0]);
                    }
                }
            }
        }
    }

    /**
     * A drafting round's device steps replay captured graphs: the head's catch-up rows (a chunk) and its further drafts
     * (one row each, as the decode step), the model's verification chunk; plain steps the decode graph. Every chunk shape
     * is captured at its second use in a session, so the generation replays one graph per device step after the prompt
     * but for the first chunk of each shape (at most 2k + 1 of them); greedy drafts are picked on the device (one argmax
     * each), their input rows made there. Token-exact and with
     * the CPU's drafted and kept counts, so each replayed verification read its own position.
     */
    @ParameterizedTest(name = "cuBLAS from {0} rows")
    @ValueSource(ints = {0, 4})
    void draftRoundsReplayCapturedGraphs(int gemmMinTokens) {
        int n = 32, k = 3;
        int[] chain;
        try (Model m = Model.open(converted("llama"))) { chain = LastLayerRows.greedy(m, PROMPT, 40); }
        Path file = oracleHead("llama", chain);
        Speculation.Stats onCpu;
        try (Model cpu = Model.open(file)) {
            Speculation sp = new Speculation(new MtpDraft(cpu.mtpGraph(), 128), k, SamplingParams.GREEDY);
            onCpu = sp.stats(sp.generate(new Generator(new Session(cpu.graph(), 128), new Sampler(SamplingParams.GREEDY), Set.of(), List.of()),
                    PROMPT, n, null, null).tokens().length);
        }
        try (Gpu gpu = onGpu(file, gemmMinTokens)) {
            Model m = gpu.model();
            int[] want = LastLayerRows.greedy(m, PROMPT, n);
            int direct = CudaMockTest.counter(lib, 0);
            new Session(m.graph(), 128).prefill(PROMPT);
            int prompt = CudaMockTest.counter(lib, 0) - direct;   // a prompt's first chunk launches one by one
            direct = CudaMockTest.counter(lib, 0);
            int replays = CudaMockTest.counter(lib, 2), argmaxes = argmaxRows();
            Speculation sp = new Speculation(new MtpDraft(m.mtpGraph(), 128), k, SamplingParams.GREEDY);
            Generator.Result got = sp.generate(new Generator(new Session(m.graph(), 128), new Sampler(SamplingParams.GREEDY), Set.of(), List.of()),
                    PROMPT, n, null, null);
            Speculation.Stats st = sp.stats(got.tokens().length);
            assertThat(got.tokens()).containsExactly(want);
            assertThat(st).as("drafted and kept as on the CPU").isEqualTo(onCpu);
            assertThat(st.rounds()).isGreaterThan(4);
            // per round the head's catch-up, its k' − 1 further drafts and the verification; the plain steps; but the
            // first chunk of each shape (the verification of 2..k + 1 rows, the head's catch-up on the prompt and on 2..k + 1)
            // launches one by one
            long steps = st.rounds() + st.drafted() + st.plainSteps();
            assertThat((long) CudaMockTest.counter(lib, 2) - replays).as("graphs replayed").isBetween(steps - (2L * k + 1), steps);
            // every draft picked on the device (greedy drafts chained there: one wait a round for the head)
            assertThat((long) argmaxRows() - argmaxes).as("drafts picked on the device").isEqualTo(st.drafted());
            assertThat(CudaMockTest.counter(lib, 0) - direct).as("kernels launched one by one: the prompt's, a few chunks' and"
                    + " each draft's argmax and input row").isGreaterThan(prompt).isLessThan(prompt + (2 * k + 1) * prompt + 4 * (int) st.drafted());
        }
    }

    /**
     * With the small-batch int8 products on (-Dcmf.cuda.smallBatchRows=8) and cuBLAS from 2 rows, an int8 model's
     * verification chunks (K + 1 = 4 rows) take resident_mmvq.cu's products, as a batched step of as many rows would,
     * not cuBLAS; and their attention is r_attn_chunk's (chunks of at most 8 rows). Greedy drafting stays token-exact
     * against plain greedy decoding on the device.
     */
    @Test void anInt8ModelsVerificationTakesTheSmallBatchProducts() throws Exception {
        Path file = quantizedHead("llama");
        CudaMatMul mm = new CudaMatMul(ctx, CpuBackend.newMatMul());
        mm.notes(x -> {});
        mm.useCublas(List.of(lib.toString()), 2);
        mm.useSmallBatchRows(8, 8);
        try (Gpu gpu = new Gpu(Model.open(file, null, new CudaBackend(mm)), null)) {
            Model m = gpu.model();
            int n = 24;
            int[] want = LastLayerRows.greedy(m, PROMPT, n);
            int small = CudaMockTest.counter(lib, 9);
            Speculation sp = new Speculation(new MtpDraft(m.mtpGraph(), 128), 3, SamplingParams.GREEDY);
            Generator.Result got = sp.generate(new Generator(new Session(m.graph(), 128), new Sampler(SamplingParams.GREEDY), Set.of(),
                    List.of()), PROMPT, n, null, null);
            assertThat(got.tokens()).as("drafted as plain greedy decoding").containsExactly(want);
            assertThat(sp.stats(got.tokens().length).rounds()).as("drafting rounds ran").isPositive();
            assertThat(CudaMockTest.counter(lib, 9) - small).as("small-batch products in the verifications").isPositive();
        }
    }

    /**
     * A chunk the driver refuses to capture (the instantiation fails at a verification shape's second use) turns chunk
     * capture off for that forward with a note; that chunk and the next launch one by one, their logits as the CPU's.
     */
    @Test void aChunkThatCannotBeCapturedLaunchesOneByOne() {
        Path file = converted("llama");
        CudaMatMul mm = new CudaMatMul(ctx, CpuBackend.newMatMul());
        List<String> notes = new ArrayList<>();
        mm.notes(notes::add);
        try (Model cpu = Model.open(file); CudaBackend b = new CudaBackend(mm); Model m = Model.open(file, null, b)) {
            float[][][] out = new float[2][3][];
            for (int i = 0; i < 2; i++) {
                Session s = new Session((i == 0 ? cpu : m).graph(), 64);
                s.prefill(PROMPT);
                for (int c = 0; c < 3; c++) {
                    if (i == 1 && c == 1) MockCuda.set(lib, "mock_fail_instantiates", 1);
                    int direct = CudaMockTest.counter(lib, 0);
                    out[i][c] = s.logitsAll(new int[] {7 + c, 8, 9}).clone();
                    if (i == 1) assertThat(CudaMockTest.counter(lib, 0)).as("chunk " + c + " launched one by one").isGreaterThan(direct);
                }
            }
            assertThat(notes).anySatisfy(n -> assertThat(n).contains("chunks of few rows (drafts, their verification) launch one by one:"));
            for (int c = 0; c < 3; c++) assertClose(out[1][c], out[0][c], "chunk " + c);
        }
    }

    /**
     * A captured chunk without cuBLAS (the matvec kernels with a row dimension) launches its waiting kernels
     * programmatically, as the decode step does; with cuBLAS, none. Its logits as the CPU's either way.
     */
    @ParameterizedTest(name = "cuBLAS from {0} rows")
    @ValueSource(ints = {0, 2})
    void capturedChunksLaunchProgrammaticallyWithoutCublas(int gemmMinTokens) {
        Path file = converted("llama");
        try (Model cpu = Model.open(file); Gpu gpu = onGpu(file, gemmMinTokens)) {
            float[][] out = new float[2][];
            int programmatic = 0;
            for (int i = 0; i < 2; i++) {
                Session s = new Session((i == 0 ? cpu : gpu.model()).graph(), 64);
                s.prefill(PROMPT);
                s.logitsAll(new int[] {7, 8, 9});
                int before = CudaMockTest.counter(lib, 8), captured = CudaMockTest.counter(lib, 1);
                out[i] = s.logitsAll(new int[] {17, 18, 19}).clone();   // the shape's second chunk: captured
                if (i == 1) {
                    assertThat(CudaMockTest.counter(lib, 1) - captured).as("captured").isEqualTo(1);
                    programmatic = CudaMockTest.counter(lib, 8) - before;
                }
            }
            if (gemmMinTokens == 0) assertThat(programmatic).as("programmatic launches in the chunk").isPositive();
            else assertThat(programmatic).as("programmatic launches beside cuBLAS").isZero();
            assertClose(out[1], out[0], "the captured chunk's logits");
        }
    }

    /** The scheduler on the device: each drafting sequence's head reads the rows of the batched steps. */
    @Test void theSchedulerDraftsWithTheHeadOnTheDevice() throws Exception {
        int n = 24;
        int[] chain;
        try (Model m = Model.open(converted("llama"))) { chain = LastLayerRows.greedy(m, PROMPT, 40); }
        try (Gpu gpu = onGpu(oracleHead("llama", chain))) {
            Model m = gpu.model();
            int[][] prompts = {PROMPT, {9, 8, 7, 6, 5, 4, 3, 2, 1}, {100, 200, 300, 400, 500}, {11, 12}};
            int[][] want = new int[prompts.length][];
            for (int i = 0; i < prompts.length; i++) want[i] = LastLayerRows.greedy(m, prompts[i], n);
            try (Scheduler s = new Scheduler(m.graph(), null, new Scheduler.Config(4, 128, 8, 4 * 4 + 16, 16, 4),
                    Scheduler.Draft.mtp(m.mtpGraph(), 3))) {
                List<CompletableFuture<Completion>> done = new ArrayList<>();
                for (int[] p : prompts) {
                    CompletableFuture<Completion> f = new CompletableFuture<>();
                    done.add(f);
                    s.submit(GenerationRequest.of(p, n, SamplingParams.GREEDY, Set.of(), new TokenSink() {
                        @Override public void finished(Completion c) { f.complete(c); }
                    }));
                }
                for (int i = 0; i < prompts.length; i++)
                    assertThat(done.get(i).get(120, TimeUnit.SECONDS).tokens()).as("request " + i).containsExactly(want[i]);
                Scheduler.Stats st = s.stats();
                System.out.printf("GPU (mock) scheduler with the MTP head: %d drafted, %d accepted, %d steps for %d tokens%n",
                        st.draftedTokens(), st.acceptedTokens(), st.steps(), st.generatedTokens());
                assertThat(st.acceptedTokens()).as("the oracle's drafts for the first prompt are kept").isPositive();
            }
        }
    }

    /**
     * Where the rows cannot come back, the head is refused with one line: a device forward that does not hand them back
     * (as Vulkan's), and observers of every layer on the resident forward.
     */
    @Test void whatCannotWorkIsRefusedWithItsReason() {
        Path file = randomHead("llama");
        CudaMatMul mm = new CudaMatMul(ctx, CpuBackend.newMatMul());
        mm.notes(x -> {});
        try (CudaBackend cuda = new CudaBackend(mm); Model m = Model.open(file, null, new WithoutRows(cuda))) {
            assertThat(m.graph().device()).isNotNull();
            assertThatThrownBy(m::mtpGraph).isInstanceOf(ModelException.class)
                    .hasMessage("the MTP head reads the model's hidden states: this model runs whole on a device whose forward does not"
                            + " hand back the hidden rows it reads (use --device cpu, or a draft model file)");
            Session s = new Session(m.graph(), 32);
            assertThatThrownBy(() -> s.observeHidden((p, x, off, rows, h) -> {})).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("does not hand back the hidden rows");
            assertThat(s.prefill(PROMPT)).as("the model itself runs").hasSize(m.graph().vocab());
        }
        try (Gpu gpu = onGpu(file)) {
            var g = gpu.model().graph();
            assertThatThrownBy(() -> g.forward(g.newState(16, 32), PROMPT, 0, 4, null, false, (index, x, tokens, hidden) -> {}))
                    .isInstanceOf(UnsupportedOperationException.class)
                    .hasMessage("observers of every layer's hidden states need the CPU graph; this model runs on the device");
        }
    }

    /** The CUDA backend with a device forward that runs the model but hands no rows back (the interface's defaults). */
    private record WithoutRows(CudaBackend cuda) implements Backend {
        @Override public String device() { return cuda.device(); }

        @Override public String description() { return cuda.description(); }

        @Override public MatMul matmul() { return cuda.matmul(); }

        @Override public WorkerPool hostPool() { return cuda.hostPool(); }

        @Override public boolean runsWholeModels() { return true; }

        @Override public DeviceForward deviceForward(DecoderPlan plan, KvType kv) {
            DeviceForward f = cuda.deviceForward(plan, kv);
            return f == null ? null : new DeviceForward() {
                @Override public int preferredChunk() { return f.preferredChunk(); }

                @Override public Object newState(int maxChunk, int maxContext) { return f.newState(maxChunk, maxContext); }

                @Override public void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits) {
                    f.forward(state, ids, off, tokens, pos0, logits, allLogits);
                }

                @Override public void release(Object state) { f.release(state); }
            };
        }
    }
}
