package dev.cmf4j.runtime;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.VectorMath;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.format.DType;
import dev.cmf4j.model.CmfWeights;
import dev.cmf4j.model.ConvertedGoldenTest;
import dev.cmf4j.model.Model;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.NormStyle;
import dev.cmf4j.runtime.MtpHeads.Extra;
import dev.cmf4j.model.Tensor;
import dev.cmf4j.model.Weights;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.State;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Drafting with an MTP head ({@code --draft mtp}): fixture models converted to CMF and rewritten with the repo's
 * writer plus a random head ({@code model.mtp.*}, its layer shaped as the model's last full-attention layer). A random
 * head's drafts are nearly all rejected, so the checks that matter beside the token-exact output are that the head
 * computes what it should (against a reference built by hand: its input from the model's hidden rows, then its layer
 * run as an ordinary one-layer model) and that its cache after a speculative generation is the one a head that saw
 * every kept position once would hold.
 */
class MtpDraftTest {
    static final int[] PROMPT = SpeculationTest.PROMPT;   // the prompt SpeculationTest.exactDistribution enumerates after

    @TempDir static Path tmp;
    private static final Map<String, Path> converted = new HashMap<>();

    /** models/NAME converted at f32 (once per class). */
    static synchronized Path convertedFixture(String name) {
        return converted.computeIfAbsent(name, n -> ConvertedGoldenTest.convert(Fixtures.require("models/" + n),
                tmp.resolve(n + "-f32.cmf"), TensorPolicy.Mode.F32));
    }

    static Path rewrite(Path src, Path out, Consumer<ObjectNode> editArch, Map<String, Extra> add) {
        return MtpHeads.rewrite(src, out, editArch, add);
    }

    static Map<String, Extra> randomHead(Path cmf, long seed) { return MtpHeads.randomHead(cmf, seed); }

    static float[] floats(Tensor t) { return MtpHeads.floats(t); }

    private static final Map<String, Path> withHead = new HashMap<>();

    /** models/NAME as CMF with a random MTP head (arch.mtp as the converter writes it). */
    static synchronized Path withHead(String name) {
        return withHead.computeIfAbsent(name, n -> MtpHeads.withRandomHead(convertedFixture(n), tmp.resolve(n + "-mtp.cmf"), 7));
    }

    /** models/NAME with a head that drafts the bigram chain of {@code greedy} ({@link MtpHeads#withOracleHead}). */
    static synchronized Path withOracleHead(String name, int[] greedy) {
        return oracles.computeIfAbsent(name + Arrays.toString(greedy), k -> MtpHeads.withOracleHead(convertedFixture(name),
                tmp.resolve(name + "-oracle-mtp-" + oracles.size() + ".cmf"), greedy));
    }

    private static final Map<String, Path> oracles = new HashMap<>();

    static int bigramHits(int[] greedy) { return MtpHeads.bigramHits(greedy); }

    static Generator.Result plain(Graph g, SamplingParams sp, int n) {
        return new Generator(new Session(g, 128), new Sampler(sp), Set.of(), List.of()).generate(PROMPT, n, null, null);
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "qwen3_next"})
    void greedyIsTokenExactAndTheHeadHoldsOneRowPerKeptPosition(String name) {
        int n = 40;
        int[] greedy;
        try (Model m = Model.open(convertedFixture(name))) { greedy = plain(m.graph(), SamplingParams.GREEDY, n).tokens(); }
        System.out.println(name + " greedy " + Arrays.toString(greedy) + ", its bigram chain predicts " + bigramHits(greedy) + " of " + (n - 1));
        for (Path file : List.of(withHead(name), withOracleHead(name, greedy))) {
            boolean oracle = file.getFileName().toString().contains("oracle");
            try (Model m = Model.open(file)) {
                greedyRuns(name + (oracle ? " oracle" : " random"), m, n, oracle);
            }
        }
    }

    private void greedyRuns(String name, Model m, int n, boolean oracle) {
        {
            Graph target = m.graph();
            Generator.Result want = plain(target, SamplingParams.GREEDY, n);
            for (int k : new int[] {1, 3, 6}) {
                Session t = new Session(target, 128);
                MtpDraft head = new MtpDraft(m.mtpGraph(), 128);
                Speculation spec = new Speculation(head, k, SamplingParams.GREEDY);
                Generator.Result got = spec.generate(new Generator(t, new Sampler(SamplingParams.GREEDY), Set.of(), List.of()),
                        PROMPT, n, null, null);
                Speculation.Stats st = spec.stats(got.tokens().length);
                System.out.printf("%s mtp k %d: acceptance %.2f, %.2f tokens per target step (%d rounds, %d plain)%n", name, k,
                        st.acceptance(), st.tokensPerStep(), st.rounds(), st.plainSteps());
                assertThat(got.tokens()).as(name + " k " + k).containsExactly(want.tokens());
                assertThat(t.position()).isEqualTo(PROMPT.length + n - 1);
                assertThat(st.rounds()).as("drafting rounds ran").isPositive();
                if (oracle) {
                    assertThat(st.accepted()).as(name + " k " + k + ": the oracle's drafts are kept").isPositive();
                    // where the bigram chain predicts nearly every token, so must the head (a repeated token with two
                    // successors, as gemma3's and llama's runs have, rejects drafts and the monitor pauses drafting)
                    if (bigramHits(want.tokens()) >= 0.9 * (n - 1))
                        assertThat(st.acceptance()).as(name + " k " + k + ": the oracle's drafts are mostly kept").isGreaterThan(0.8);
                }
                // the head never runs ahead of the model, and holds a row for every position it consumed
                assertThat(head.position()).isLessThan(t.position());

                // against a head that saw the same kept positions once, in one catch-up: the same drafts
                Session fresh = new Session(target, 128);
                MtpDraft once = new MtpDraft(m.mtpGraph(), 128);
                once.begin(fresh);
                fresh.prefill(t.history());
                int z = want.tokens()[n - 1];
                int[] a = new int[4], b = new int[4];
                Sampler greedy = new Sampler(SamplingParams.GREEDY);
                assertThat(head.propose(t, z, 4, greedy, a, null)).isEqualTo(4);
                float[] la = head.logits().clone();
                assertThat(once.propose(fresh, z, 4, greedy, b, null)).isEqualTo(4);
                assertThat(a).as(name + " k " + k + ": drafts after the generation").containsExactly(b);
                assertClose(la, once.logits(), name + " k " + k + ": the head's last logits");
                assertThat(head.position()).isEqualTo(t.position()).isEqualTo(once.position());
            }
        }
    }

    private static void assertClose(float[] a, float[] b, String what) {
        float scale = 0;
        for (float x : b) scale = Math.max(scale, Math.abs(x));
        for (int i = 0; i < a.length; i++) assertThat(Math.abs(a[i] - b[i])).as(what + " [" + i + "]").isLessThan(1e-4f * Math.max(1f, scale));
    }

    /**
     * The head's first two drafts against a reference: its input rows computed by hand (fc · [enorm(E[t+1]·scale);
     * hnorm(h)], the model's hidden rows from its last layer), then the head's layer, norm and shared head run as an
     * ordinary one-layer model over a table of those rows. Checks the embedding-first concatenation, the norms, the
     * hidden rows the model hands over and the head's own output fed to the second draft.
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "qwen3_next"})
    void theHeadComputesWhatItsDefinitionSays(String name) {
        try (Model m = Model.open(withHead(name))) {
            Graph target = m.graph();
            Graph mtp = m.mtpGraph();
            ModelSpec body = mtp.spec();
            assertThat(mtp.plan().toString()).startsWith("x = model.mtp.fc.weight([norm(" + m.spec().embedding() + "[ids])"
                    + " model.mtp.pre_fc_norm_embedding.weight; norm(hidden) model.mtp.pre_fc_norm_hidden.weight])\nlayer 0 {")
                    .contains("x = norm(x) final model.mtp.norm.weight\nlogits = " + m.spec().head() + "(x)");
            int h = target.hidden(), n = PROMPT.length;
            Weights w = new CmfWeights(m.file());
            boolean offset = body.finalNorm().style() == NormStyle.OFFSET;
            float eps = body.finalNorm().eps();
            float[] fc = floats(w.get("model.mtp.fc.weight"));
            float[] en = floats(w.get("model.mtp.pre_fc_norm_embedding.weight")), hn = floats(w.get("model.mtp.pre_fc_norm_hidden.weight"));
            float[] table = floats(w.get(m.spec().embedding()));
            float scale = m.spec().embedScale();

            // the model's hidden rows of the prompt, and its greedy next token z
            State st = target.newState(64, 128);
            float[] hidden = new float[n * h];
            float[] lg = new float[target.vocab()];
            target.forward(st, PROMPT, 0, n, lg, false, (index, x, tokens, width) -> {
                if (index == target.numLayers()) System.arraycopy(x, 0, hidden, 0, tokens * width);
            });
            int z = VectorMath.argmax(lg, 0, lg.length);
            int[] next = new int[n];   // the token after each position: the prompt's next, z for the last
            System.arraycopy(PROMPT, 1, next, 0, n - 1);
            next[n - 1] = z;
            float[] inputs = new float[(n + 1) * h];
            for (int i = 0; i < n; i++) input(fc, en, hn, table, scale, next[i], hidden, i * h, h, offset, eps, inputs, i * h);

            // pass 1: rows 0..n-1, the first draft's logits and the head's output of row n-1
            float[] g = new float[h];
            float[] ref1 = referenceLogits(mtp, w, inputs, n, h, g);
            int d1 = VectorMath.argmax(ref1, 0, ref1.length);
            // pass 2: row n from the first draft and the head's own output
            input(fc, en, hn, table, scale, d1, g, 0, h, offset, eps, inputs, n * h);
            float[] ref2 = referenceLogits(mtp, w, inputs, n + 1, h, new float[h]);

            for (int k : new int[] {1, 2}) {
                Session t = new Session(target, 128);
                MtpDraft head = new MtpDraft(mtp, 128);
                head.begin(t);
                float[] tl = t.prefill(PROMPT);
                assertThat(VectorMath.argmax(tl, 0, tl.length)).isEqualTo(z);
                int[] xs = new int[k];
                assertThat(head.propose(t, z, k, new Sampler(SamplingParams.GREEDY), xs, null)).isEqualTo(k);
                assertThat(xs[0]).isEqualTo(d1);
                assertClose(head.logits(), k == 1 ? ref1 : ref2, name + " draft " + k + " logits");
            }
        }
    }

    /** out[o, o + h) = fc · [enorm(table[token] · scale); hnorm(hidden[ho, ho + h))]. */
    private static void input(float[] fc, float[] en, float[] hn, float[] table, float scale, int token, float[] hidden, int ho,
                              int h, boolean offset, float eps, float[] out, int o) {
        float[] cat = new float[2 * h];
        for (int i = 0; i < h; i++) cat[i] = table[token * h + i] * scale;
        System.arraycopy(hidden, ho, cat, h, h);
        rmsNorm(cat, 0, h, en, offset, eps);
        rmsNorm(cat, h, h, hn, offset, eps);
        for (int r = 0; r < h; r++) {
            double s = 0;
            for (int c = 0; c < 2 * h; c++) s += (double) fc[r * 2 * h + c] * cat[c];
            out[o + r] = (float) s;
        }
    }

    private static void rmsNorm(float[] x, int off, int n, float[] w, boolean offset, float eps) {
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double) x[off + i] * x[off + i];
        float inv = (float) (1 / Math.sqrt(ss / n + eps));
        for (int i = 0; i < n; i++) x[off + i] = x[off + i] * inv * (offset ? 1 + w[i] : w[i]);
    }

    /**
     * The last row's logits of the head's layer, final norm and head run as an ordinary model whose embedding table
     * holds the given input rows (ids 0..rows-1); {@code g} receives the layer's output of the last row.
     */
    private static float[] referenceLogits(Graph mtp, Weights w, float[] inputs, int rows, int h, float[] g) {
        ModelSpec b = mtp.spec();
        MemorySegment seg = MemorySegment.ofArray(Arrays.copyOf(inputs, rows * h));
        Tensor rowsTable = new Tensor("test.mtp_inputs", DType.F32, new long[] {rows, h}, seg);
        Weights ww = new Weights() {
            @Override public Tensor find(String n) { return n.equals(rowsTable.name()) ? rowsTable : w.find(n); }

            @Override public Set<String> names() { return w.names(); }
        };
        ModelSpec ref = new ModelSpec(b.archName(), b.hidden(), b.vocab(), b.maxPositions(), rowsTable.name(), 1f, null, b.layers(),
                b.finalNorm(), b.head(), b.finalSoftcap(), null);
        Graph rg = new Graph(ref, ww, new CpuBackend());
        int[] ids = new int[rows];
        for (int i = 0; i < rows; i++) ids[i] = i;
        float[] logits = new float[b.vocab()];
        rg.forward(rg.newState(rows, rows), ids, 0, rows, logits, false, (index, x, tokens, width) -> {
            if (index == 1) System.arraycopy(x, (tokens - 1) * width, g, 0, width);
        });
        return logits;
    }

    /**
     * Sampled drafting from the head keeps the model's distribution: 2,000 seeded three-token generations at
     * temperature 1, top-k 4, chi-square against the distribution enumerated from the model's logits (as
     * {@link SpeculationTest} does for draft models).
     */
    @Test void sampledOutputKeepsTheModelsDistribution() {
        try (Model m = Model.open(withHead("qwen3"))) {
            Graph g = m.graph();
            SamplingParams sp = new SamplingParams(1f, 4, 1f, 0f, 1f, 0f, null);
            Map<List<Integer>, Double> exact = SpeculationTest.exactDistribution(g, sp);
            int draws = 2000;
            Map<List<Integer>, Integer> seen = new HashMap<>();
            long drafted = 0, accepted = 0;
            for (int i = 0; i < draws; i++) {
                SamplingParams seeded = sp.withSeed(1000L + i);
                Speculation sd = new Speculation(new MtpDraft(m.mtpGraph(), 64), 2, seeded);
                int[] t = sd.generate(new Generator(new Session(g, 64), new Sampler(seeded), Set.of(), List.of()), PROMPT, 3, null, null).tokens();
                seen.merge(List.of(t[0], t[1], t[2]), 1, Integer::sum);
                drafted += sd.stats(3).drafted();
                accepted += sd.stats(3).accepted();
            }
            System.out.printf("mtp sampled: %d drafted, %d accepted (%.2f)%n", drafted, accepted, (double) accepted / drafted);
            // a random head's top 4 seldom meets the model's: nearly every draft is rejected and the token comes from
            // max(0, p - q); the acceptance path of the rule is SpeculationTest's (a draft model, the same code)
            assertThat(drafted).as("every generation drafted").isGreaterThanOrEqualTo(draws);
            for (int depth : new int[] {2, 3}) {
                double chi = SpeculationTest.chiSquare(exact, seen, draws, depth);
                System.out.printf("mtp chi-square of the first %d tokens: %.1f (critical %.1f)%n", depth, chi,
                        SpeculationTest.critical(exact, draws, depth));
                assertThat(chi).isLessThan(SpeculationTest.critical(exact, draws, depth));
            }
        }
    }

    /**
     * The server's scheduler drafting with the head: six requests at once on qwen3 with the oracle head (built for the
     * first prompt's continuation, so that one's drafts are kept and the others' mostly rejected), each greedy one giving
     * what it gives alone, a sampled one its length, one with log-probabilities (which runs plainly) its greedy output.
     * The head of each sequence reads the hidden rows of the scheduler's batched steps.
     */
    @Test void theSchedulerDraftsWithTheHeadForEachSequence() throws Exception {
        int n = 30;
        int[] greedy;
        try (Model m = Model.open(convertedFixture("qwen3"))) { greedy = plain(m.graph(), SamplingParams.GREEDY, 40).tokens(); }
        try (Model m = Model.open(withOracleHead("qwen3", greedy))) {
            int[][] prompts = {PROMPT, SessionTest.randomIds(9, 1024, 21), SessionTest.randomIds(30, 1024, 22),
                    SessionTest.randomIds(5, 1024, 23), SessionTest.randomIds(12, 1024, 24), SessionTest.randomIds(7, 1024, 25)};
            int[][] want = new int[prompts.length][];
            for (int i = 0; i < prompts.length; i++)
                want[i] = new Generator(new Session(m.graph(), 128), new Sampler(SamplingParams.GREEDY), Set.of(), List.of())
                        .generate(prompts[i], n, null, null).tokens();
            SamplingParams sampled = new SamplingParams(0.8f, 20, 0.9f, 0f, 1f, 0f, 11L);
            try (Scheduler s = new Scheduler(m.graph(), null, new Scheduler.Config(6, 128, 16, 6 * 5 + 16, 16, 6),
                    Scheduler.Draft.mtp(m.mtpGraph(), 4))) {
                List<SchedulerTest.Collect> sinks = new java.util.ArrayList<>();
                for (int i = 0; i < prompts.length; i++) {
                    SchedulerTest.Collect k = new SchedulerTest.Collect();
                    sinks.add(k);
                    GenerationRequest r = GenerationRequest.of(prompts[i], n, i == 4 ? sampled : SamplingParams.GREEDY, Set.of(), k);
                    if (i == 5) r = new GenerationRequest(r.prompt(), r.maxTokens(), r.sampling(), r.eos(), r.stops(), r.presencePenalty(),
                            r.frequencyPenalty(), r.logitBias(), 2, r.timeout(), r.sink(), r.json(), r.overlay());
                    s.submit(r);
                }
                for (int i = 0; i < prompts.length; i++) {
                    Completion c = sinks.get(i).await();
                    if (i == 4) assertThat(c.tokens()).hasSize(n);
                    else assertThat(c.tokens()).as("request " + i).containsExactly(want[i]);
                    if (i == 5) assertThat(sinks.get(i).logprobs).hasSize(n);
                }
                Scheduler.Stats st = s.stats();
                System.out.printf("scheduler with the MTP head: %d drafted, %d accepted, %d steps for %d tokens%n",
                        st.draftedTokens(), st.acceptedTokens(), st.steps(), st.generatedTokens());
                assertThat(st.acceptedTokens()).as("the oracle's drafts for the first prompt are kept").isPositive();
                assertThat(st.draftedTokens()).isGreaterThan(st.acceptedTokens());
                // the first conversation goes on: a kept session holds its prefix (the hidden rows of those positions
                // went with the old head), the new sequence's head starts where the session is and drafts from the rows
                // that follow
                int[] more = java.util.stream.IntStream.concat(Arrays.stream(PROMPT), Arrays.stream(want[0])).toArray();
                int[] wantMore = new Generator(new Session(m.graph(), 128), new Sampler(SamplingParams.GREEDY), Set.of(), List.of())
                        .generate(more, 8, null, null).tokens();
                SchedulerTest.Collect again = new SchedulerTest.Collect();
                s.submit(GenerationRequest.of(more, 8, SamplingParams.GREEDY, Set.of(), again));
                Completion c = again.await();
                assertThat(c.tokens()).containsExactly(wantMore);
                assertThat(c.cachedTokens()).as("a kept session's prefix served the repeat").isPositive();
                assertThat(s.stats().acceptedTokens()).isGreaterThan(st.acceptedTokens());
            }
        }
    }

    /**
     * From a Hugging Face folder: models/qwen3_next with a random head under Qwen3-Next's own names ({@code mtp.*}),
     * converted by the converter, drafts and stays token-exact.
     */
    @Test void aHuggingFaceCheckpointsHeadConvertsAndDrafts() throws Exception {
        Path dir = MtpHeads.hfFolderWithHead(Fixtures.require("models/qwen3_next"), tmp.resolve("hf-qwen3_next-mtp"),
                randomHead(convertedFixture("qwen3_next"), 5));
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve("hf-qwen3_next-mtp.cmf"), TensorPolicy.Mode.F32);
        try (Model m = Model.open(cmf)) {
            assertThat(m.hasMtp()).isTrue();
            Generator.Result want = plain(m.graph(), SamplingParams.GREEDY, 24);
            Speculation spec = new Speculation(new MtpDraft(m.mtpGraph(), 128), 4, SamplingParams.GREEDY);
            Generator.Result got = spec.generate(new Generator(new Session(m.graph(), 128), new Sampler(SamplingParams.GREEDY),
                    Set.of(), List.of()), PROMPT, 24, null, null);
            assertThat(got.tokens()).containsExactly(want.tokens());
            assertThat(spec.stats(24).drafted()).isPositive();
        }
    }

    @Test void aFileWithoutAHeadOrWithAMalformedOneIsRefusedClearly() {
        Path plainFile = convertedFixture("llama");
        try (Model m = Model.open(plainFile)) {
            assertThat(m.hasMtp()).isFalse();
            assertThatThrownBy(m::mtpGraph).isInstanceOf(ModelException.class).hasMessageContaining("has no MTP head")
                    .hasMessageContaining("model.mtp.");
        }
        Map<String, Extra> head = randomHead(plainFile, 3);
        int h;
        try (Model m = Model.open(plainFile)) { h = m.spec().hidden(); }
        Consumer<ObjectNode> arch = a -> a.putObject("mtp").put("num_layers", 1);
        // fc of the wrong width
        Map<String, Extra> narrow = new LinkedHashMap<>(head);
        narrow.put("model.mtp.fc.weight", new Extra(new long[] {h, h}, new float[h * h]));
        checkRefused(rewrite(plainFile, tmp.resolve("narrow.cmf"), arch, narrow), "model.mtp.fc.weight",
                "expected [" + h + ", " + 2 * h + "]");
        // no final norm
        Map<String, Extra> noNorm = new LinkedHashMap<>(head);
        noNorm.remove("model.mtp.norm.weight");
        checkRefused(rewrite(plainFile, tmp.resolve("nonorm.cmf"), arch, noNorm), "missing tensor 'model.mtp.norm.weight'");
        // a layer's tensor missing
        Map<String, Extra> noQ = new LinkedHashMap<>(head);
        noQ.remove("model.mtp.layers.0.self_attn.q_proj.weight");
        checkRefused(rewrite(plainFile, tmp.resolve("noq.cmf"), arch, noQ), "model.mtp.layers.0.self_attn.q_proj.weight");
        // the arch says two layers, the file has one
        checkRefused(rewrite(plainFile, tmp.resolve("two.cmf"), a -> a.putObject("mtp").put("num_layers", 2), head),
                "arch.mtp.num_layers is 2 but the file has 1");
    }

    /** The model opens and decodes plainly; only its head is refused, with a message naming {@code what}. */
    private static void checkRefused(Path file, String... what) {
        try (Model m = Model.open(file)) {
            assertThat(m.hasMtp()).isTrue();
            assertThat(new Session(m.graph(), 32).prefill(PROMPT)).hasSize(m.graph().vocab());
            var thrown = assertThatThrownBy(m::mtpGraph).isInstanceOf(ModelException.class).hasMessageContaining("MTP head");
            for (String s : what) thrown.hasMessageContaining(s);
        }
    }
}
