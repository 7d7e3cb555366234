package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.SpecBuilder;
import dev.cmf4j.model.Tensor;
import dev.cmf4j.model.Weights;
import dev.cmf4j.model.graph.Batch;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.Overlay;
import dev.cmf4j.model.graph.SkillBatchTest;
import dev.cmf4j.model.graph.State;
import dev.cmf4j.model.graph.Workspace;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Skills per row on the GPU-resident forward (mock driver): SkillBatchTest's three synthetic skills on the llama fixture
 * (f32). One batch holding rows of the three skills and the backbone, prompt chunks then decode rows in a scrambled
 * order, gives every row the logits it gets run alone (1e-4) and the same greedy picks, through the matvec kernels and
 * through cuBLAS; alone, each skill gives the CPU engine's logits for it; with a budget of 0 the copies are given back
 * after every step and uploaded again, with the same logits.
 */
class CudaSkillsTest {
    @TempDir static Path tmp;
    static Path lib;
    static CudaContext ctx;
    static final String[] WHO = {null, "a", "b", "c"};

    @BeforeAll static void open() throws Exception {
        lib = MockCuda.build(tmp);
        ctx = new CudaContext(CudaDriver.load(List.of(lib.toString())), 0, List.of(lib.toString()), new KernelCache(tmp.resolve("cache")));
    }

    @AfterAll static void close() { if (ctx != null) ctx.close(); }

    record Model(Weights weights, ModelSpec spec) {}

    static Model model(SkillBatchTest.Fixture f) {
        Map<String, Tensor> all = new HashMap<>(f.base());
        all.putAll(f.skills());
        Weights w = SkillBatchTest.weights(all, List.of("a", "b", "c"));
        return new Model(w, SpecBuilder.build(f.header(), w));
    }

    /** The logits of every position of {@code ids} run alone through skill {@code who} (chunks of 8). */
    static float[] alone(Graph g, String who, int[] ids) { return alone(g, g.overlay(who, null, 1f), ids); }

    static float[] alone(Graph g, Overlay o, int[] ids) { return SkillBatchTest.alone(g, o, ids); }

    /** Each sequence alone through {@code os[i]}, then all batched ({@link #ALL_SKILLS}): the worst |Δ|, printed. */
    static double batchedAgainstAlone(Graph g, Overlay[] os, int[][] seqs, String what) {
        float[][] single = new float[4][];
        for (int i = 0; i < 4; i++) single[i] = alone(g, os[i], seqs[i]);
        double worst = batched(g, os, seqs, single, ALL_SKILLS);
        System.out.printf("GPU mixed-%s batch: max |Δ| %.3g%n", what, worst);
        return worst;
    }

    /** The CPU engine's logits of {@code prompt} then {@code extra} under task {@code task} of {@code file}, and the backbone's. */
    static float[][] cpuMasked(Path file, String task, int[] prompt, int[] extra) {
        try (var m = dev.cmf4j.model.Model.open(file)) {
            return new float[][] {dev.cmf4j.model.TaskMaskTest.run(m.graph(), m.graph().withTask(Overlay.NONE, task), prompt, extra),
                    dev.cmf4j.model.TaskMaskTest.run(m.graph(), Overlay.NONE, prompt, extra)};
        }
    }

    /** Four sequences (backbone, a, b, c): their prompts, then 4 continuation ids each. */
    static int[][] sequences() throws Exception {
        int[] src = Golden.load(Fixtures.require("models/llama")).inputIds();
        int[][] prompts = {java.util.Arrays.copyOfRange(src, 0, 9), java.util.Arrays.copyOfRange(src, 5, 12),
                java.util.Arrays.copyOfRange(src, 11, 24), java.util.Arrays.copyOfRange(src, 20, 23)};
        int[][] seqs = new int[4][];
        for (int i = 0; i < 4; i++) {
            seqs[i] = java.util.Arrays.copyOf(prompts[i], prompts[i].length + 4);
            for (int d = 0; d < 4; d++) seqs[i][prompts[i].length + d] = src[(30 + 3 * i + d) % src.length];
        }
        return seqs;
    }

    static final int[] PROMPT = {9, 7, 13, 3};

    /**
     * Steps of every skill: step 0 the prompts of a and c with the backbone's first 5 tokens, step 1 the backbone's rest
     * with b's prompt beside a's and c's first decode rows, then decode rows in scrambled orders.
     */
    static final int[][] ALL_SKILLS = {{1, 3, 0}, {3, 1, 0, 2}, {2, 0, 3, 1}, {3, 2, 1, 0}, {0, 2, 1, 3}};
    /** Steps of changing skills: {a, backbone}, {b, c}, {a, backbone, c}, {b, a}, all. */
    static final int[][] CHANGING = {{1, 0}, {2, 3}, {1, 0, 3}, {2, 1}, {0, 3, 2, 1}};

    /**
     * The four sequences batched in steps holding the sequences {@code orders} lists (a sequence's first steps run its
     * prompt, the backbone's in two chunks, then one decode row a step; greedy ids from the device on the last step).
     * Returns the worst |Δ| against {@code want} (each sequence's logits alone).
     */
    static double batched(Graph g, int[][] seqs, float[][] want, int[][] orders) {
        Overlay[] os = new Overlay[4];
        for (int i = 0; i < 4; i++) os[i] = g.overlay(WHO[i], null, 1f);
        return batched(g, os, seqs, want, orders);
    }

    /** As above, sequence i reading its weights through {@code os[i]}. */
    static double batched(Graph g, Overlay[] os, int[][] seqs, float[][] want, int[][] orders) {
        int v = g.vocab();
        State[] st = new State[4];
        for (int i = 0; i < 4; i++) {
            st[i] = g.newState(16, 64);
            st[i].useOverlay(os[i]);
        }
        Workspace ws = g.newWorkspace(64, 64);
        int[] at = new int[4];   // tokens each sequence has run
        double worst = 0;
        for (int step = 0; step < orders.length; step++) {
            Batch b = new Batch();
            int[] who = orders[step];
            for (int i : who) {
                int n = at[i] < PROMPT[i] ? (step == 0 && i == 0 ? 5 : PROMPT[i] - at[i]) : 1;
                b.add(st[i], seqs[i], at[i], n, Batch.Logits.LAST);
            }
            boolean greedy = step == orders.length - 1;
            float[] logits = new float[b.logitRows() * v];
            int[] ids = new int[b.logitRows()];
            if (greedy) g.forwardArgmax(b, ws, ids);
            else g.forward(b, ws, logits, null);
            for (int r = 0; r < who.length; r++) {
                int i = who[r];
                at[i] += b.span(r).tokens();
                int pos = at[i] - 1;
                if (greedy)
                    assertThat(ids[r]).as("greedy pick of sequence " + i).isEqualTo(dev.cmf4j.backend.cpu.VectorMath.argmax(want[i], pos * v, v));
                else
                    worst = Math.max(worst, Golden.maxDiff(logits, r * v, want[i], pos * v, v));
            }
        }
        for (State s : st) s.close();
        return worst;
    }

    @Test void aMixedSkillBatchGivesEachRowItsSingleRunLogits() throws Exception {
        SkillBatchTest.Fixture f = SkillBatchTest.fixture();
        try (var ignored = f.reader()) {
            Model m = model(f);
            int[][] seqs = sequences();
            float[][] cpu = new float[4][], cpuBackbone = new float[4][];
            Graph onCpu = new Graph(m.spec(), m.weights(), new CpuBackend(new CpuMatMul(), CpuBackend.pool(), null));
            for (int i = 0; i < 4; i++) {
                cpu[i] = alone(onCpu, WHO[i], seqs[i]);
                cpuBackbone[i] = alone(onCpu, Overlay.NONE, seqs[i]);
            }
            for (boolean cublas : new boolean[] {false, true}) {
                try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                    gpu.notes(n -> {});
                    if (cublas) gpu.useCublas(List.of(lib.toString()), 2);   // groups of 2+ rows as GEMMs, single rows by matvec
                    Graph g = new Graph(m.spec(), m.weights(), new CudaBackend(gpu));
                    assertThat(g.device()).isNotNull();
                    for (String s : List.of("a", "b", "c")) assertThat(g.skillProblem(s)).as(s).isNull();
                    float[][] want = new float[4][];
                    for (int i = 0; i < 4; i++) {
                        want[i] = alone(g, WHO[i], seqs[i]);
                        assertThat(Golden.maxDiff(want[i], 0, cpu[i], 0, cpu[i].length)).as("GPU alone vs CPU, " + WHO[i]).isLessThan(1e-3);
                        if (i > 0) assertThat(Golden.maxDiff(want[i], 0, cpuBackbone[i], 0, want[i].length)).as(WHO[i] + " moves the logits").isGreaterThan(0.05);
                    }
                    double worst = batched(g, seqs, want, ALL_SKILLS);
                    System.out.printf("GPU mixed-skill batch (cublas %s): max |Δ| %.3g%n", cublas, worst);
                    assertThat(worst).as("cublas " + cublas).isLessThanOrEqualTo(1e-4);
                    OverlayWeights sc = ((ResidentForward) g.device()).overlays();
                    assertThat(sc.uploads()).as("each skill uploaded once").isEqualTo(3);
                    assertThat(sc.evictions()).isZero();
                }
            }
        }
    }

    /**
     * The last layer's rows a mixed-skill batch hands back (an MTP head's input: the device sorts the spans by skill and
     * puts the rows back in the caller's order) against the CPU graph's, the last step a greedy one.
     */
    @Test void aMixedSkillBatchHandsBackEachRowsHiddenStateInOrder() throws Exception {
        SkillBatchTest.Fixture f = SkillBatchTest.fixture();
        try (var ignored = f.reader(); CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            Model m = model(f);
            int[][] seqs = sequences();
            float[][] want = rowsBatched(new Graph(m.spec(), m.weights(), new CpuBackend(new CpuMatMul(), CpuBackend.pool(), null)), seqs);
            float[][] got = rowsBatched(new Graph(m.spec(), m.weights(), new CudaBackend(gpu)), seqs);
            for (int i = 0; i < 4; i++) {
                double worst = Golden.maxDiff(got[i], 0, want[i], 0, want[i].length);
                System.out.printf("GPU mixed-skill batch, sequence %d's hidden rows: max |Δ| %.3g%n", i, worst);
                assertThat(worst).as("sequence " + i + " (" + WHO[i] + ")").isLessThan(1e-4);
                double size = 0;
                for (float x : want[i]) size = Math.max(size, Math.abs(x));
                assertThat(size).as("sequence " + i + "'s rows were written").isGreaterThan(0.1);
            }
        }
    }

    /** Each sequence's last-layer rows by position ([positions, hidden]) over {@link #ALL_SKILLS}' steps, the last greedy. */
    static float[][] rowsBatched(Graph g, int[][] seqs) {
        int h = g.hidden();
        float[][] rows = new float[4][];
        State[] st = new State[4];
        for (int i = 0; i < 4; i++) {
            rows[i] = new float[seqs[i].length * h];
            st[i] = g.newState(16, 64);
            st[i].useOverlay(g.overlay(WHO[i], null, 1f));
        }
        Workspace ws = g.newWorkspace(64, 64);
        int[] at = new int[4];
        for (int step = 0; step < ALL_SKILLS.length; step++) {
            Batch b = new Batch();
            int[] who = ALL_SKILLS[step];
            for (int i : who) b.add(st[i], seqs[i], at[i], at[i] < PROMPT[i] ? (step == 0 && i == 0 ? 5 : PROMPT[i] - at[i]) : 1,
                    Batch.Logits.LAST);
            int[] from = at.clone();
            Graph.HiddenObserver o = g.lastLayer((x, tokens, width) -> {
                for (int r = 0, row = 0; r < who.length; r++) {
                    int n = b.span(r).tokens();
                    System.arraycopy(x, row * width, rows[who[r]], from[who[r]] * width, n * width);
                    row += n;
                }
            });
            if (step == ALL_SKILLS.length - 1) g.forwardArgmax(b, ws, new int[b.logitRows()], o);
            else g.forward(b, ws, new float[b.logitRows() * g.vocab()], o);
            for (int r = 0; r < who.length; r++) at[who[r]] += b.span(r).tokens();
        }
        for (int i = 0; i < 4; i++) rows[i] = java.util.Arrays.copyOf(rows[i], at[i] * h);
        for (State s : st) s.close();
        return rows;
    }

    @Test void copiesGivenBackUnderASmallBudgetComeBackWithTheSameLogits() throws Exception {
        SkillBatchTest.Fixture f = SkillBatchTest.fixture();
        try (var ignored = f.reader(); CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            Model m = model(f);
            int[][] seqs = sequences();
            gpu.notes(n -> {});
            Graph g;
            System.setProperty(OverlayWeights.BUDGET_PROPERTY, "0");   // read when the skills are installed
            try {
                g = new Graph(m.spec(), m.weights(), new CudaBackend(gpu));
            } finally {
                System.clearProperty(OverlayWeights.BUDGET_PROPERTY);
            }
            float[][] want = new float[4][];
            for (int i = 0; i < 4; i++) want[i] = alone(g, WHO[i], seqs[i]);
            OverlayWeights sc = ((ResidentForward) g.device()).overlays();
            long uploads = sc.uploads();
            assertThat(uploads).isEqualTo(3);
            double worst = batched(g, seqs, want, CHANGING);
            assertThat(worst).isLessThanOrEqualTo(1e-4);
            // every step holds other skills than the one before: copies go back at once (budget 0) and come up again
            assertThat(sc.evictions()).isGreaterThanOrEqualTo(3);
            assertThat(sc.uploads() - uploads).isGreaterThanOrEqualTo(3);
            assertThat(sc.residentBytes()).as("only the last step's skills stay").isPositive();
        }
    }

    /**
     * fixtures/lora's two PEFT adapters applied un-merged on the device: alone, each gives peft's logits (README: 1e-3)
     * and the backbone its own; one at half scale the CPU engine's; batched steps of the backbone, both adapters and
     * the half-scale one give every row its single-run logits (1e-4) and greedy picks.
     */
    @Test void unmergedAdaptersGiveTheirGoldensAloneAndInMixedBatches() throws Exception {
        Path lora = Fixtures.require("lora");
        Path base = dev.cmf4j.model.ConvertedGoldenTest.convert(Fixtures.require("models/llama"), tmp.resolve("llama-f32.cmf"),
                dev.cmf4j.convert.TensorPolicy.Mode.F32);
        int[] ids;
        Map<String, float[]> golden = new HashMap<>();
        try (var r = dev.cmf4j.convert.SafetensorsReader.open(lora.resolve("golden.safetensors"))) {
            long[] l = r.readLongs("input_ids");
            ids = new int[l.length];
            for (int i = 0; i < l.length; i++) ids[i] = Math.toIntExact(l[i]);
            for (String k : List.of("base", "skill_a", "skill_b")) golden.put(k, r.readFloats("logits_" + k));
        }
        var adapters = List.of(dev.cmf4j.model.LoraGoldenTest.engine(dev.cmf4j.convert.PeftAdapter.read(lora.resolve("skill_a"))),
                dev.cmf4j.model.LoraGoldenTest.engine(dev.cmf4j.convert.PeftAdapter.read(lora.resolve("skill_b"))));
        for (String k : List.of("skill_a", "skill_b"))   // (so matching them says the deltas were applied)
            assertThat(Golden.maxDiff(golden.get(k), 0, golden.get("base"), 0, golden.get(k).length)).as(k + " moves the logits").isGreaterThan(0.01);
        int[][] seqs = sequences();
        float[] halfCpu;
        try (var m = dev.cmf4j.model.Model.open(base, null, new CpuBackend(), adapters)) {
            halfCpu = alone(m.graph(), m.graph().overlay(null, "skill_b", 0.5f), ids);
        }
        for (boolean cublas : new boolean[] {false, true})
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(n -> {});
                if (cublas) gpu.useCublas(List.of(lib.toString()), 2);
                try (var m = dev.cmf4j.model.Model.open(base, null, new CudaBackend(gpu), adapters)) {
                    Graph g = m.graph();
                    assertThat(g.device()).isNotNull();
                    Overlay[] os = {Overlay.NONE, g.overlay(null, "skill_a", 1f), g.overlay(null, "skill_b", 1f),
                            g.overlay(null, "skill_b", 0.5f)};
                    String[] want = {"base", "skill_a", "skill_b"};
                    for (int i = 0; i < 3; i++)
                        assertThat(Golden.maxDiff(alone(g, os[i], ids), 0, golden.get(want[i]), 0, golden.get(want[i]).length))
                                .as(want[i] + " alone, cublas " + cublas).isLessThanOrEqualTo(1e-3);
                    assertThat(Golden.maxDiff(alone(g, os[3], ids), 0, halfCpu, 0, halfCpu.length)).as("skill_b × 0.5").isLessThanOrEqualTo(1e-3);
                    assertThat(batchedAgainstAlone(g, os, seqs, "adapter")).as("cublas " + cublas).isLessThanOrEqualTo(1e-4);
                }
            }
    }

    /**
     * Task masks on the device: a mask turning off layer 0, two heads and five neurons of layer 1 of the llama fixture
     * gives the CPU engine's logits for it (prompt and decode steps), an all-ones mask the backbone's; batched steps of
     * masked and unmasked rows give every row its single-run logits; expert bits on qwen3_moe give the CPU's logits.
     */
    @Test void taskMasksGiveTheCpusLogitsAloneAndInMixedBatches() throws Exception {
        Path dir = Fixtures.require("models/llama");
        Path base = dev.cmf4j.model.ConvertedGoldenTest.convert(dir, tmp.resolve("llama-tasks.cmf"), dev.cmf4j.convert.TensorPolicy.Mode.F32);
        var cut = new dev.cmf4j.model.TaskMaskTest.Blob(2, 256, 4, 0).layerOff(0).headOff(1, 1).headOff(1, 3);
        for (int i : new int[] {0, 5, 77, 200, 255}) cut.neuronOff(1, i);
        Path masked = dev.cmf4j.model.TaskMaskTest.withMasks(base, tmp.resolve("llama-masked.cmf"), List.of("full", "cut"),
                List.of(new dev.cmf4j.model.TaskMaskTest.Blob(2, 256, 4, 0), cut), false);
        int[] ids = Golden.load(dir).inputIds();
        int[] prompt = java.util.Arrays.copyOf(ids, 24), extra = java.util.Arrays.copyOfRange(ids, 24, 30);
        float[][] cpu = cpuMasked(masked, "cut", prompt, extra);
        float[] want = cpu[0], backbone = cpu[1];
        int[][] seqs = sequences();
        for (boolean cublas : new boolean[] {false, true})
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(n -> {});
                if (cublas) gpu.useCublas(List.of(lib.toString()), 2);
                try (var m = dev.cmf4j.model.Model.open(masked, null, new CudaBackend(gpu))) {
                    Graph g = m.graph();
                    assertThat(g.device()).isNotNull();
                    Overlay c = g.withTask(Overlay.NONE, "cut"), full = g.withTask(Overlay.NONE, "full");
                    float[] got = dev.cmf4j.model.TaskMaskTest.run(g, c, prompt, extra);
                    assertThat(Golden.maxDiff(got, 0, want, 0, want.length)).as("cut, cublas " + cublas).isLessThanOrEqualTo(1e-3);
                    assertThat(Golden.maxDiff(got, 0, backbone, 0, want.length)).as("the mask moves the logits").isGreaterThan(0.1);
                    float[] ones = dev.cmf4j.model.TaskMaskTest.run(g, full, prompt, extra);
                    assertThat(Golden.maxDiff(ones, 0, backbone, 0, backbone.length)).as("all ones").isLessThanOrEqualTo(1e-3);
                    Overlay[] os = {Overlay.NONE, c, g.withTask(g.overlay(null, null, 1f), "cut"), full};
                    assertThat(batchedAgainstAlone(g, os, seqs, "task")).as("cublas " + cublas).isLessThanOrEqualTo(1e-4);
                }
            }
    }

    @Test void expertBitsOnTheDeviceGiveTheCpusLogits() throws Exception {
        Path dir = Fixtures.require("models/qwen3_moe");
        Path base = dev.cmf4j.model.ConvertedGoldenTest.convert(dir, tmp.resolve("moe.cmf"), dev.cmf4j.convert.TensorPolicy.Mode.F32);
        int ffn, heads;
        try (var f = dev.cmf4j.format.CmfFile.open(base)) {
            ffn = f.header().arch().intermediateSize();
            heads = f.header().arch().numAttentionHeads();
        }
        var blob = new dev.cmf4j.model.TaskMaskTest.Blob(2, ffn, heads, 8);
        for (int l = 0; l < 2; l++) for (int e : new int[] {2, 5}) blob.expertOff(l, e);
        Path masked = dev.cmf4j.model.TaskMaskTest.withMasks(base, tmp.resolve("moe-masked.cmf"), List.of("six"), List.of(blob), true);
        int[] ids = Golden.load(dir).inputIds();
        int[] prompt = java.util.Arrays.copyOf(ids, 24), extra = java.util.Arrays.copyOfRange(ids, 24, 30);
        float[][] cpu = cpuMasked(masked, "six", prompt, extra);
        float[] want = cpu[0], backbone = cpu[1];
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(masked, null, new CudaBackend(gpu))) {
                assertThat(m.graph().device()).isNotNull();
                float[] got = dev.cmf4j.model.TaskMaskTest.run(m.graph(), m.graph().withTask(Overlay.NONE, "six"), prompt, extra);
                assertThat(Golden.maxDiff(got, 0, want, 0, want.length)).isLessThanOrEqualTo(1e-3);
                assertThat(Golden.maxDiff(got, 0, backbone, 0, want.length)).as("the mask moves the logits").isGreaterThan(1e-3);
            }
        }
    }

    /**
     * The llama fixture in q8_2f with fixtures/lora's skill_a merged as skill "a" and a mask "cut" (layer 0 off, heads 1
     * and 3 and five neurons of layer 1 off), written into {@code dir}.
     */
    static Path overlayFile(Path dir) throws Exception {
        Path lora = Fixtures.require("lora");
        Path base = dev.cmf4j.model.ConvertedGoldenTest.convert(Fixtures.require("models/llama"),
                dir.resolve("llama-q8-overlays.cmf"), dev.cmf4j.convert.TensorPolicy.Mode.Q8_2F);
        Path skilled = dir.resolve("llama-q8-overlays-a.cmf");
        try (var f = dev.cmf4j.format.CmfFile.open(base)) {
            dev.cmf4j.convert.SkillGraft.add(f, skilled, "a", "A",
                    dev.cmf4j.convert.SkillGraft.fromLora(f, dev.cmf4j.convert.PeftAdapter.read(lora.resolve("skill_a")), null), null);
        }
        var cut = new dev.cmf4j.model.TaskMaskTest.Blob(2, 256, 4, 0).layerOff(0).headOff(1, 1).headOff(1, 3);
        for (int i : new int[] {0, 5, 77, 200, 255}) cut.neuronOff(1, i);
        return dev.cmf4j.model.TaskMaskTest.withMasks(skilled, dir.resolve("llama-q8-overlays-cut.cmf"), List.of("cut"), List.of(cut), false);
    }

    /** fixtures/lora's skill_b, un-merged (it targets every projection, o and down included). */
    static List<dev.cmf4j.model.LowRankAdapter> overlayAdapters() {
        return List.of(dev.cmf4j.model.LoraGoldenTest.engine(dev.cmf4j.convert.PeftAdapter.read(Fixtures.require("lora").resolve("skill_b"))));
    }

    /**
     * A skill, an un-merged adapter and a task mask on one row, and each alone, on q8_2f weights (the llama fixture with
     * fixtures/lora's skill_a merged as skill "a", skill_b un-merged, which targets o and down too, and a mask turning
     * off layer 0, two heads and five neurons of layer 1): each gives the CPU engine's logits (1e-3). The adapter's
     * delta on a masked product reads the masked input, as on the CPU.
     */
    @Test void aSkillAnAdapterAndAMaskOnOneRowGiveTheCpusLogits() throws Throwable {
        Path file = overlayFile(tmp);
        var adapters = overlayAdapters();
        int[] ids = java.util.Arrays.copyOf(Golden.load(Fixtures.require("models/llama")).inputIds(), 12);
        String[][] who = {{"a", null, null}, {null, "skill_b", null}, {null, null, "cut"}, {"a", "skill_b", "cut"}};
        try (var cpu = dev.cmf4j.model.Model.open(file, null, new CpuBackend(), adapters);
             CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(file, null, new CudaBackend(gpu), adapters)) {
                for (String[] w : who) {
                    var c = cpu.graph();
                    float[] want = alone(c, c.withTask(c.overlay(w[0], w[1], 1f), w[2]), ids);
                    var g = m.graph();
                    float[] got = alone(g, g.withTask(g.overlay(w[0], w[1], 1f), w[2]), ids);
                    assertThat(Golden.maxDiff(got, 0, want, 0, want.length)).as(java.util.Arrays.toString(w)).isLessThanOrEqualTo(1e-3);
                }
            }
        }
    }
}
