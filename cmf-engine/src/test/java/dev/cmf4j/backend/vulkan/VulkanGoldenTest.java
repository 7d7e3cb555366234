package dev.cmf4j.backend.vulkan;

import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.model.ConvertedGoldenTest;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.LastLayerRows;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The fixture goldens through the Vulkan backend (lavapipe in CI): each fixture HF folder converted at f32, run with its
 * weight products on the Vulkan device, against transformers' logits, greedy ids and per-step logits within the bounds
 * the CPU meets (ConvertedGoldenTest); and the reference converter's q8_2f files against the CPU engine on the same file
 * (the goldens are no quantized reference).
 */
class VulkanGoldenTest {
    /** The fixture models the device-resident forward takes; the others run the hybrid path. */
    static final java.util.Set<String> RESIDENT = java.util.Set.of("llama", "qwen3", "gemma3", "gemma4", "qwen3_moe", "gpt_oss", "gemma4_moe",
            "qwen3_next");

    @TempDir static Path tmp;
    static VulkanContext ctx;

    @BeforeAll static void setUp() {
        ctx = VulkanTesting.context();
        Fixtures.require("models");
    }

    /**
     * Every fixture model, each whole on the device (qwen3_moe's, gpt_oss's, gemma4_moe's and qwen3_next's experts and
     * routing, gpt-oss's sinks, gemma4's per-layer parts, gemma4_moe's dense MLP beside its experts, qwen3_next's delta nets
     * and shared expert); the test asserts the path each takes (RESIDENT). On lavapipe a fixture costs ~10× its CPU run
     * (each dispatch is a thread-pool round).
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "qwen3_moe", "gpt_oss", "gemma4", "gemma4_moe", "qwen3_next"})
    void f32MatchesTransformers(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve(model + "-f32.cmf"), TensorPolicy.Mode.F32);
        double tol = model.equals("qwen3_next") ? 2e-3 : 1e-3;
        Golden.Result r;
        long device;
        boolean whole;
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            whole = m.graph().device() != null;
            r = Golden.load(dir).check(m.graph(), 64, tol);
            device = ((VulkanMatMul) b.matmul()).deviceBytes();
        }
        System.out.println("vulkan " + model + " f32 (" + (whole ? "device-resident" : "hybrid") + "): " + r + " (" + device
                + " bytes of weights on the device)");
        assertThat(device).as("the products ran on the device").isPositive();
        assertThat(whole).as("runs whole on the device").isEqualTo(RESIDENT.contains(model));
        assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        assertThat(r.greedyMatches()).as(r.toString()).isTrue();
    }

    /**
     * Batched steps on the resident forward (one submission for every sequence's rows, each attending over its own
     * caches): BatchConformance's 8 sequences joining at different steps, prompt chunks beside decode rows, every row
     * against the sequence alone, greedy ids the same; a composition met again replays its recorded commands. A batch normalises its rows before the products
     * (matvec_decode.comp's several-token pipeline, matmul.comp from 32 rows) where alone a decode step folds the RMSNorm
     * into them: roundings in another order, so within 1e-4, not exact. (The experts' kernels give a row the same bits
     * whatever the rows around it; their attention and router inputs differ as a dense layer's do.) qwen3_next within
     * 5e-4: its delta nets carry those roundings through their recurrent state (on the CPU the fast kernels' row-count
     * dependent sums alone move it by ~1e-4, BatchTest; here 2.6e-4 on lavapipe).
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "gemma4", "qwen3_moe", "gpt_oss", "gemma4_moe", "qwen3_next"})
    void batchedStepsMatchEachSequenceAlone(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve(model + "-batch.cmf"), TensorPolicy.Mode.F32);
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            assertThat(m.graph().device()).as("runs whole on the device").isNotNull();
            var r = dev.cmf4j.model.graph.BatchConformance.run(m.graph(), Golden.load(dir).inputIds());
            System.out.println("vulkan " + model + " batch of 8: max|Δ| " + r.maxDiff() + " at " + r.worstAt() + ", " + r.mixedSteps() + " mixed steps");
            assertThat(r.mixedSteps()).as("steps mixing prompt chunks and decode rows").isPositive();
            assertThat(((VulkanResidentForward) m.graph().device()).batchReplays).as("batched steps replayed as recorded").isPositive();
            assertThat(r.maxDiff()).as(r.worstAt()).isLessThanOrEqualTo(model.equals("qwen3_next") ? 5e-4 : 1e-4);
            assertThat(r.greedySame()).isTrue();
        }
    }

    /**
     * As above with an f16 KV cache (--kv f16): prompt chunks beside decode rows, each part reading its own state's
     * halves and its chunk's own rows; greedy the same, within 3e-3 of each sequence alone (the bound of
     * f16KvCacheMatchesTheCpuEngine, for the same reason: the batch's f32 roundings, as with the f32 cache, move some
     * keys across a half's midpoint, so they are stored a whole f16 step apart; lavapipe: llama 9.2e-4, gemma4 1.9e-3,
     * against the f32 cache's batch printed beside). A part bound to another part's rows or caches would be off by
     * far more.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "gemma4"})
    void batchedStepsMatchEachSequenceAloneWithAnF16Cache(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve(model + "-batch.cmf"), TensorPolicy.Mode.F32);
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b, List.of(), h -> F16_CACHE)) {
            assertThat(m.graph().device()).as("runs whole on the device").isNotNull();
            var r = dev.cmf4j.model.graph.BatchConformance.run(m.graph(), Golden.load(dir).inputIds());
            double f32 = 0;
            try (VulkanBackend b32 = new VulkanBackend(ctx); Model m32 = Model.open(cmf, null, b32)) {
                f32 = dev.cmf4j.model.graph.BatchConformance.run(m32.graph(), Golden.load(dir).inputIds()).maxDiff();
            }
            System.out.println("vulkan " + model + " f16 KV cache, batch of 8: max|Δ| " + r.maxDiff() + " at " + r.worstAt() + ", " + r.mixedSteps()
                    + " mixed steps (the f32 cache's batch: " + f32 + ")");
            assertThat(r.mixedSteps()).as("steps mixing prompt chunks and decode rows").isPositive();
            assertThat(r.maxDiff()).as(r.worstAt()).isLessThanOrEqualTo(3e-3);
            assertThat(r.greedySame()).isTrue();
        }
    }

    /**
     * A step of decode rows only (one token of each of 3 sequences) folds its products as each sequence's own decode step
     * does (matvec_decode.comp's several-token pipeline): every row's logits are bit for bit those of its sequence run
     * alone, step after step (the recorded batch step replayed among them). The MoE models too: moe.comp computes each
     * row's router logits, routing and experts by workgroups of that row alone, however many rows the step has.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "gemma4", "qwen3_moe", "gpt_oss", "gemma4_moe", "qwen3_next"})
    void decodeRowsOfABatchAreExactlyEachSequenceAlone(String model) throws Exception {
        decodeRowsExactly(model, dev.cmf4j.model.AttentionMemory.EXACT);
    }

    /**
     * As above with an f16 KV cache (--kv f16): each row's appends and attention over its own state's halves (and its
     * chunk's own rows) give it its bits alone; gemma4's layers reading an earlier layer's caches through that layer's
     * pending rows of each sequence.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "gemma4"})
    void decodeRowsOfABatchAreExactlyEachSequenceAloneWithAnF16Cache(String model) throws Exception {
        decodeRowsExactly(model, F16_CACHE);
    }

    static final dev.cmf4j.model.AttentionMemory F16_CACHE = new dev.cmf4j.model.AttentionMemory(null, dev.cmf4j.backend.KvType.F16);

    private static void decodeRowsExactly(String model, dev.cmf4j.model.AttentionMemory memory) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve(model + "-rows.cmf"), TensorPolicy.Mode.F32);
        int[] ids = Golden.load(dir).inputIds();
        int n = 3, steps = 5, ctxLen = 32;
        int[] length = {5, 9, 3};
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b, List.of(), h -> memory)) {
            var g = m.graph();
            assertThat(g.device()).as("runs whole on the device").isNotNull();
            int V = g.vocab();
            var alone = new dev.cmf4j.model.graph.State[n];
            var together = new dev.cmf4j.model.graph.State[n];
            int[][] prompts = new int[n][];
            float[] buf = new float[16 * V];
            int[] next = new int[n];
            for (int i = 0; i < n; i++) {
                prompts[i] = new int[length[i]];
                for (int t = 0; t < length[i]; t++) prompts[i][t] = ids[(5 * i + t) % ids.length];
                alone[i] = g.newState(16, ctxLen);
                together[i] = g.newState(16, ctxLen);
                g.forward(alone[i], prompts[i], 0, length[i], buf, false, null);
                g.forward(together[i], prompts[i], 0, length[i], buf, false, null);
                next[i] = ids[(7 * i + 1) % ids.length];
            }
            var ws = g.newWorkspace(n, ctxLen);
            var batch = new dev.cmf4j.model.graph.Batch();
            float[] rows = new float[n * V];
            try {
                for (int step = 0; step < steps; step++) {
                    batch.clear();
                    for (int i = 0; i < n; i++) batch.add(together[i], new int[] {next[i]}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.ALL);
                    g.forward(batch, ws, rows, null);
                    for (int i = 0; i < n; i++) {
                        g.forward(alone[i], new int[] {next[i]}, 0, 1, buf, true, null);
                        float[] one = java.util.Arrays.copyOf(buf, V), inBatch = java.util.Arrays.copyOfRange(rows, batch.logitRow(i) * V, (batch.logitRow(i) + 1) * V);
                        assertThat(inBatch).as("step " + step + ", sequence " + i + ": its row in the batch, bit for bit").containsExactly(one);
                        int best = 0;
                        for (int v = 1; v < V; v++) if (one[v] > one[best]) best = v;
                        next[i] = best;
                    }
                }
            } finally {
                for (int i = 0; i < n; i++) { alone[i].close(); together[i].close(); }
            }
        }
    }

    /**
     * gemma4's last two layers read earlier layers' keys and values: a state holds caches for the other three only. Its
     * bytes grow with the context by less than every layer's caches would (a key and a value row a layer a position).
     */
    @org.junit.jupiter.api.Test
    void layersSharingKeysAndValuesHoldNoCaches() throws Exception {
        Path dir = Fixtures.require("models/gemma4");
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve("gemma4-caches.cmf"), TensorPolicy.Mode.F32);
        var om = new com.fasterxml.jackson.databind.ObjectMapper();
        var config = om.readTree(dir.resolve("config.json").toFile());
        int layers = config.get("num_hidden_layers").asInt(), shared = config.get("num_kv_shared_layers").asInt();
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            var g = m.graph();
            assertThat(g.device()).as("runs whole on the device").isNotNull();
            long every = 0, own = 0;   // bytes a position: every layer's key and value rows, those of the layers not sharing
            for (int l = 0; l < layers; l++) {
                int hd = config.at("/per_layer_config/" + l + "/head_dim").asInt(config.get("head_dim").asInt());
                long row = 2L * 4 * config.get("num_key_value_heads").asInt() * hd;
                every += row;
                if (l < layers - shared) own += row;
            }
            var small = g.newState(16, 1000);
            var large = g.newState(16, 2000);
            double perPosition = (large.heldBytes() - small.heldBytes()) / 1000.0;
            small.close();
            large.close();
            System.out.println("vulkan gemma4 state: " + perPosition + " bytes a position (caches of every layer: " + every
                    + ", of those not sharing: " + own + ")");
            assertThat(perPosition).isGreaterThanOrEqualTo(own).isLessThan(every);
        }
    }

    /**
     * Embryo's three fixture models (the reference's own files, float64 log-probabilities) whole on the device (anchors,
     * delta nets, the resonance-routed experts, the clustered head): whole prompt and token by token, within the CPU's
     * 1e-3.
     */
    @ParameterizedTest
    @ValueSource(strings = {"embryo_a", "embryo_b", "embryo_c"})
    void embryoMatchesItsGolden(String name) throws Exception {
        Path dir = Fixtures.require("embryo/" + name);
        Golden golden = Golden.load(dir);
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(dir.resolve("model.cmf"), null, b)) {
            assertThat(m.graph().device()).as("runs whole on the device").isNotNull();
            for (int chunk : new int[] {golden.inputIds().length, 1}) {
                Golden.Result r = golden.check(m.graph(), chunk, 1e-3);
                System.out.println("vulkan " + name + " chunk " + chunk + ": " + r);
                assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
                assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
                assertThat(r.greedyMatches()).as(r.toString()).isTrue();
            }
            assertThat(((VulkanMatMul) b.matmul()).deviceBytes()).as("the products ran on the device").isPositive();
        }
    }

    /**
     * A device without 64-bit floats in shaders (MoltenVK, some drivers; here the same device opened without them): no
     * embryo.comp, so an Embryo model runs hybrid and still meets its golden; a dense model stays resident.
     */
    @org.junit.jupiter.api.Test
    void withoutFloat64TheEmbryoModelsRunHybrid() throws Exception {
        Path dir = Fixtures.require("embryo/embryo_c");
        Golden golden = Golden.load(dir);
        try (VulkanContext noFloat64 = new VulkanContext(ctx.info().index(), false)) {
            assertThat(noFloat64.float64).isFalse();
            assertThat(noFloat64.ops[VulkanContext.OP_ANCHOR_ATTEND]).as("no embryo.comp pipelines").isZero();
            try (VulkanBackend b = new VulkanBackend(noFloat64); Model m = Model.open(dir.resolve("model.cmf"), null, b)) {
                assertThat(m.graph().device()).as("hybrid: the Embryo head and router need 64-bit floats").isNull();
                Golden.Result r = golden.check(m.graph(), golden.inputIds().length, 1e-3);
                System.out.println("vulkan embryo_c without 64-bit floats (hybrid): " + r);
                assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(1e-3);
                assertThat(r.greedyMatches()).as(r.toString()).isTrue();
            }
            Path llama = ConvertedGoldenTest.convert(Fixtures.require("models/llama"), tmp.resolve("llama-nof64.cmf"), TensorPolicy.Mode.F32);
            try (VulkanBackend b = new VulkanBackend(noFloat64); Model m = Model.open(llama, null, b)) {
                assertThat(m.graph().device()).as("a dense model needs no 64-bit floats").isNotNull();
            }
        }
    }

    /**
     * Quantized files against the CPU engine with its reference products ({@code CpuBackend.reference()}) on the same file
     * (the goldens are no quantized reference): the reference
     * converter's q8_2f, and our converter's q4_block, q4tp and (gemma4, which the reference converter has no file of)
     * q8_2f; whole on the device, and (llama q4_block) on the hybrid path. The MoE models' experts in each dtype moe.comp
     * reads (qwen3_moe's reference q8_2f file, gpt_oss at q8_2f, q8_row and f16, qwen3_moe at bf16, q4_block and q4tp: its
     * widths of 64 and 32 are whole groups), their stacks checked to hold that dtype.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama q8_2f", "qwen3 q8_2f", "llama q4_block hybrid", "qwen3 q4tp", "gemma4 q8_2f converted", "qwen3_moe q8_2f",
            "gpt_oss q8_2f", "gpt_oss q8_row", "qwen3_moe bf16", "gpt_oss f16", "gemma4_moe q8_2f", "qwen3_next q8_2f",
            "qwen3_moe q4_block", "qwen3_moe q4tp"})
    void quantizedMatchesTheCpuEngine(String run) throws Exception {
        String[] w = run.split(" ");
        String model = w[0];
        boolean hybrid = run.endsWith("hybrid");
        // the reference converter's q8_2f file where the fixtures have one (qwen3_moe's: 3-D expert tensors), else ours
        Path ref = Fixtures.root().resolve("cmf/refconv/" + model + "-Q8_2F.cmf");
        Path cmf = w[1].equals("q8_2f") && !run.endsWith("converted") && java.nio.file.Files.exists(ref) ? ref
                : ConvertedGoldenTest.convert(Fixtures.require("models/" + model), tmp.resolve(model + "-" + w[1] + ".cmf"), TensorPolicy.Mode.parse(w[1]));
        int[] ids = Golden.load(Fixtures.require("models/" + model)).inputIds();
        // the reference converter writes "moe": null for qwen3_moe: its top-k comes from the model's config (RefconvQuantTest)
        var overrides = cmf.equals(ref) && model.equals("qwen3_moe")
                ? new com.fasterxml.jackson.databind.ObjectMapper().readTree("{\"moe\": {\"top_k\": 2, \"norm_topk_prob\": true}}") : null;
        float[] want, got;
        float[][] wantSteps, gotSteps;
        try (var cpu = dev.cmf4j.backend.cpu.CpuBackend.reference(); Model m = Model.open(cmf, overrides, cpu)) {
            want = logits(m, ids);
            wantSteps = steps(m, ids);
        }
        VulkanMatMul mm = new VulkanMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul());
        mm.useResident(!hybrid);
        try (VulkanBackend b = new VulkanBackend(mm); Model m = Model.open(cmf, overrides, b)) {
            assertThat(m.graph().device() != null).as("runs whole on the device").isEqualTo(!hybrid);
            if (model.endsWith("moe") || model.equals("gpt_oss"))   // the experts read in the file's dtype
                assertThat(((VulkanResidentForward) m.graph().device()).expertKinds()).as("the experts' weight kinds")
                        .containsExactly(VulkanMatMul.kind(dev.cmf4j.format.DType.valueOf(w[1].toUpperCase(java.util.Locale.ROOT))));
            got = logits(m, ids);
            gotSteps = steps(m, ids);
            assertThat(mm.deviceBytes()).isPositive();
        }
        double d = 0, ds = 0;
        for (int i = 0; i < want.length; i++) d = Math.max(d, Math.abs(got[i] - want[i]));
        for (int s = 0; s < wantSteps.length; s++)
            for (int i = 0; i < wantSteps[s].length; i++) ds = Math.max(ds, Math.abs(gotSteps[s][i] - wantSteps[s][i]));
        System.out.println("vulkan " + run + " vs cpu: logits max|Δ| " + d + ", decode steps max|Δ| " + ds);
        assertThat(d).isLessThanOrEqualTo(1e-3);
        assertThat(ds).isLessThanOrEqualTo(1e-3);
    }

    /**
     * Input-major experts ([in, out] pieces; no fixture file has them): qwen3_moe's plan with every expert matrix
     * transposed into an input-major f32 piece, run by a resident forward of its own (moe.comp OPs 7 and 8), against the
     * plan as converted (output-major experts): a 40-token prompt in chunks of 16 and 8 decode steps, every row's logits.
     * The sums run in another order (a column at a time), so within 1e-4 of logits up to a few.
     */
    @org.junit.jupiter.api.Test
    void inputMajorExpertsMatchOutputMajorOnes() throws Exception {
        Path cmf = ConvertedGoldenTest.convert(Fixtures.require("models/qwen3_moe"), tmp.resolve("qwen3_moe-im.cmf"), TensorPolicy.Mode.F32);
        int[] ids = Golden.load(Fixtures.require("models/qwen3_moe")).inputIds();
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            VulkanResidentForward f = (VulkanResidentForward) m.graph().device();
            var plan = f.plan();
            List<dev.cmf4j.backend.DecoderPlan.Layer> layers = new java.util.ArrayList<>();
            for (var l : plan.layers()) {
                var moe = l.moe();
                var im = withComponent(moe, "gate", transposed(moe.gate()));
                im = withComponent(im, "up", transposed(moe.up()));
                im = withComponent(im, "down", transposed(moe.down()));
                layers.add(withComponent(l, "moe", im));
            }
            var imPlan = withComponent(plan, "layers", List.copyOf(layers));
            assertThat(VulkanResidentForward.unsupported(imPlan, dev.cmf4j.backend.KvType.F32)).isNull();
            VulkanMatMul mm = (VulkanMatMul) b.matmul();
            VulkanResidentForward g = new VulkanResidentForward(mm, imPlan);
            try {
                float[][] want = run(f, ids), got = run(g, ids);
                double d = 0, range = 0;
                for (int i = 0; i < want.length; i++)
                    for (int j = 0; j < want[i].length; j++) { d = Math.max(d, Math.abs(got[i][j] - want[i][j])); range = Math.max(range, Math.abs(want[i][j])); }
                System.out.println("vulkan qwen3_moe input-major experts vs output-major: max|Δ| " + d + " (logits up to " + range + ")");
                assertThat(range).isGreaterThan(0.1);
                assertThat(d).isLessThanOrEqualTo(1e-4);
            } finally {
                synchronized (mm) { g.closeOnOwner(); }
            }
        }
    }

    /** Logits of a prompt in chunks of 16 (all rows) then 8 decode steps of its first ids, on {@code f} alone. */
    private static float[][] run(VulkanResidentForward f, int[] ids) {
        int V = f.plan().vocab(), n = ids.length;
        Object st = f.newState(16, n + 9);
        try {
            float[][] out = new float[n + 8][V];
            float[] buf = new float[16 * V];
            for (int p = 0; p < n; p += 16) {
                int c = Math.min(16, n - p);
                f.forward(st, ids, p, c, p, buf, true);
                for (int t = 0; t < c; t++) System.arraycopy(buf, t * V, out[p + t], 0, V);
            }
            for (int i = 0; i < 8; i++) f.forward(st, ids, i, 1, n + i, out[n + i], false);
            return out;
        } finally {
            f.release(st);
        }
    }

    /** Each output-major f32 matrix as an input-major f32 piece of the same product (its transpose). */
    private static List<dev.cmf4j.backend.Matrix> transposed(List<dev.cmf4j.backend.Matrix> ms) {
        List<dev.cmf4j.backend.Matrix> out = new java.util.ArrayList<>();
        for (var w : ms) {
            assertThat(w.dtype()).isEqualTo(dev.cmf4j.format.DType.F32);
            int rows = w.rows(), cols = w.cols();
            float[] row = new float[cols];
            var seg = java.lang.foreign.MemorySegment.ofArray(new byte[4 * rows * cols]);
            for (int r = 0; r < rows; r++) {
                w.decodeRow(r, row, 0);
                for (int c = 0; c < cols; c++)
                    seg.set(java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN), 4L * ((long) c * rows + r), row[c]);
            }
            out.add(dev.cmf4j.backend.Matrix.of(w.name() + " (input-major)", dev.cmf4j.format.DType.F32, seg, cols, rows).slice(0, cols, true));
        }
        return out;
    }

    /** {@code rec} with its component {@code name} replaced by {@code value} (the records' canonical constructors). */
    @SuppressWarnings("unchecked")
    private static <R extends Record> R withComponent(R rec, String name, Object value) throws Exception {
        var comps = rec.getClass().getRecordComponents();
        Object[] args = new Object[comps.length];
        Class<?>[] types = new Class<?>[comps.length];
        for (int i = 0; i < comps.length; i++) {
            types[i] = comps[i].getType();
            args[i] = comps[i].getName().equals(name) ? value : comps[i].getAccessor().invoke(rec);
        }
        var ctor = rec.getClass().getDeclaredConstructor(types);
        ctor.setAccessible(true);
        return (R) ctor.newInstance(args);
    }

    /**
     * An expert stack larger than one buffer of the device is refused by name (the model then runs hybrid) rather than
     * failing when the forward uploads it: qwen3_moe's plan against a 4,096-byte range names its first layer's stack and
     * its size; against this device's range, nothing. The stacks count among the device's weight bytes until closed.
     */
    @org.junit.jupiter.api.Test
    void expertStacksPastABufferAreRefusedByName() throws Exception {
        Path cmf = ConvertedGoldenTest.convert(Fixtures.require("models/qwen3_moe"), tmp.resolve("qwen3_moe-stacks.cmf"), TensorPolicy.Mode.F32);
        VulkanMatMul mm = new VulkanMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul());
        long without;
        try (VulkanBackend b = new VulkanBackend(mm); Model m = Model.open(cmf, null, b)) {
            VulkanResidentForward f = (VulkanResidentForward) m.graph().device();
            assertThat(VulkanResidentForward.expertsTooLarge(f.plan(), 4096)).startsWith("layer 0: experts' ").contains(" bytes, more than one Vulkan buffer holds here (4096)");
            assertThat(VulkanResidentForward.expertsTooLarge(f.plan(), Math.min(VulkanMatMul.PART_CAP, ctx.info().maxStorageBufferRange()))).isNull();
            long stacks = 0;
            for (var l : f.plan().layers())
                for (var list : List.of(l.moe().gate(), l.moe().up(), l.moe().down())) for (var w : list) stacks += 4L * w.rows() * w.cols();
            without = mm.deviceBytes() - stacks;
            assertThat(without).as("the experts' f32 stacks among the weight bytes (" + mm.deviceBytes() + ")").isPositive();
        }
    }

    /**
     * Projection biases (qwen2's q/k/v, gpt-oss's o too) on the resident forward: models/llama with random q, k, v and o
     * biases added ({@code attention_bias}), converted at f32, against the CPU engine on the same file — no golden has
     * them — and against the file without them, which must differ (the biases were applied).
     */
    @org.junit.jupiter.api.Test
    void projectionBiasesMatchTheCpuEngine() throws Exception {
        Path src = Fixtures.require("models/llama"), dir = tmp.resolve("llama-biased");
        java.nio.file.Files.createDirectories(dir);
        var om = new com.fasterxml.jackson.databind.ObjectMapper();
        var config = (com.fasterxml.jackson.databind.node.ObjectNode) om.readTree(src.resolve("config.json").toFile());
        config.put("attention_bias", true);
        om.writeValue(dir.resolve("config.json").toFile(), config);
        int layers = config.get("num_hidden_layers").asInt(), hd = config.get("head_dim").asInt(), hidden = config.get("hidden_size").asInt();
        int q = config.get("num_attention_heads").asInt() * hd, kv = config.get("num_key_value_heads").asInt() * hd;
        java.util.Map<String, float[]> biases = new java.util.LinkedHashMap<>();
        java.util.SplittableRandom r = new java.util.SplittableRandom(2);
        for (int l = 0; l < layers; l++)
            for (var e : List.of(java.util.Map.entry("q", q), java.util.Map.entry("k", kv), java.util.Map.entry("v", kv), java.util.Map.entry("o", hidden))) {
                float[] b = new float[e.getValue()];
                for (int i = 0; i < b.length; i++) b[i] = (float) (0.2 * r.nextGaussian());
                biases.put("model.layers." + l + ".self_attn." + e.getKey() + "_proj.bias", b);
            }
        appendTensors(src.resolve("model.safetensors"), dir.resolve("model.safetensors"), biases);
        Path biased = ConvertedGoldenTest.convert(dir, tmp.resolve("llama-biased.cmf"), TensorPolicy.Mode.F32);
        Path plain = ConvertedGoldenTest.convert(src, tmp.resolve("llama-plain.cmf"), TensorPolicy.Mode.F32);
        int[] ids = Golden.load(src).inputIds();
        float[] want, got, without;
        float[][] wantSteps, gotSteps;
        try (Model m = Model.open(biased)) { want = logits(m, ids); wantSteps = steps(m, ids); }
        try (Model m = Model.open(plain)) { without = logits(m, ids); }
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(biased, null, b)) {
            assertThat(m.graph().device()).as("runs whole on the device").isNotNull();
            got = logits(m, ids);
            gotSteps = steps(m, ids);
        }
        double d = 0, ds = 0, moved = 0;
        for (int i = 0; i < want.length; i++) {
            d = Math.max(d, Math.abs(got[i] - want[i]));
            moved = Math.max(moved, Math.abs(want[i] - without[i]));
        }
        for (int st = 0; st < wantSteps.length; st++)
            for (int i = 0; i < wantSteps[st].length; i++) ds = Math.max(ds, Math.abs(gotSteps[st][i] - wantSteps[st][i]));
        System.out.println("vulkan llama with biases vs cpu: logits max|Δ| " + d + ", decode steps " + ds + " (the biases move logits by " + moved + ")");
        assertThat(moved).as("the biases change the model").isGreaterThan(1e-2);
        assertThat(d).isLessThanOrEqualTo(1e-3);
        assertThat(ds).isLessThanOrEqualTo(1e-3);
    }

    /**
     * A prompt of 70 tokens (the golden's ids over again) in one chunk, so every product of the prefill takes matmul.comp's
     * 64 × 64 tiles (from VulkanContext.gemmMinTokens), the head's too, and then in chunks of 40 and 30 (tiles, then
     * matvec.comp), against the CPU engine with its reference products on the same file: resident (llama; qwen3_moe, its
     * experts by moe.comp for 140 routed rows, a router over 70; gemma4, its per-layer products on the tiles and its last
     * layers' 70 rows over earlier layers' caches; gemma4_moe; qwen3_next, its delta nets and shared expert) and hybrid
     * (llama with the resident forward turned off: every product of the host graph on the tiles).
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3_moe", "gemma4", "gemma4_moe", "qwen3_next", "llama hybrid"})
    void longPromptsMatchTheCpuEngine(String run) throws Exception {
        String model = run.split(" ")[0];
        boolean hybrid = run.endsWith("hybrid");
        Path dir = Fixtures.require("models/" + model);
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve(run.replace(" ", "-") + "-long.cmf"), TensorPolicy.Mode.F32);
        int[] golden = Golden.load(dir).inputIds(), ids = new int[70];
        for (int i = 0; i < ids.length; i++) ids[i] = golden[i % golden.length];
        assertThat(ids.length).isGreaterThanOrEqualTo(ctx.gemmMinTokens);
        float[] want, got, gotChunked;
        try (var cpu = dev.cmf4j.backend.cpu.CpuBackend.reference(); Model m = Model.open(cmf, null, cpu)) { want = logits(m, ids); }
        VulkanMatMul mm = new VulkanMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul());
        mm.useResident(!hybrid);
        try (VulkanBackend b = new VulkanBackend(mm); Model m = Model.open(cmf, null, b)) {
            assertThat(m.graph().device() != null).as("runs whole on the device").isEqualTo(!hybrid && RESIDENT.contains(model));
            got = logits(m, ids);
            var g = m.graph();
            var st = g.newState(40, ids.length + 1);
            gotChunked = new float[ids.length * g.vocab()];
            float[] part = new float[40 * g.vocab()];
            for (int p = 0; p < ids.length; p += 40) {
                int n = Math.min(40, ids.length - p);
                g.forward(st, ids, p, n, part, true, null);
                System.arraycopy(part, 0, gotChunked, p * g.vocab(), n * g.vocab());
            }
        }
        double d = 0, dc = 0;
        for (int i = 0; i < want.length; i++) {
            d = Math.max(d, Math.abs(got[i] - want[i]));
            dc = Math.max(dc, Math.abs(gotChunked[i] - want[i]));
        }
        System.out.println("vulkan " + run + " 70-token prompt vs cpu: logits max|Δ| " + d + " in one chunk, " + dc + " in chunks of 40");
        assertThat(d).isLessThanOrEqualTo(1e-3);
        assertThat(dc).isLessThanOrEqualTo(1e-3);
    }

    /**
     * A decode of 150 steps after the golden prompt (a context of 200: 4 workgroups a head, keys past the first chunk;
     * gemma3's, gemma4's and gpt_oss's windows of 8 past it; gemma4's last two layers attending over earlier layers' caches;
     * gpt_oss's sinks in the combine) with the rotary, the cache append and the combine folded into the attention (OP 9)
     * against the same steps unfolded (OP 1, OP 4, OP 7, OP 8, -Dcmf.vulkan.foldAttention=false) and against the CPU
     * engine, every step's logits, the same tokens fed to all three (the CPU's greedy picks). The folded path
     * (attend_decode.comp) sums a key's dot product in 4 parts and the values by groups of keys, so the two device paths
     * differ by rounding, grown over 150 steps: within 1e-4 (lavapipe: 0 to 2.4e-5, each as close to the CPU as the
     * other, gemma4 8.7e-5 from it; the rotary, the cache row and the combine are held to float64 at 1e-5 and 1e-6 by the op checks). The CPU
     * within 1e-3.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "gemma4", "gpt_oss"})
    void foldedAttentionMatchesTheUnfolded(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve(model + "-fold.cmf"), TensorPolicy.Mode.F32);
        int[] prompt = Golden.load(dir).inputIds();
        int steps = 150;
        int[] ids = java.util.Arrays.copyOf(prompt, prompt.length + steps);
        float[][] cpu, folded, unfolded;
        try (var b = dev.cmf4j.backend.cpu.CpuBackend.reference(); Model m = Model.open(cmf, null, b)) { cpu = decode(m, ids, prompt.length, true); }
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            VulkanResidentForward f = (VulkanResidentForward) m.graph().device();
            assertThat(f.foldAttention).as("folded by default").isTrue();
            folded = decode(m, ids, prompt.length, false);
            f.foldAttention = false;
            unfolded = decode(m, ids, prompt.length, false);
        }
        double dFold = 0, dCpu = 0;
        for (int s = 0; s < steps; s++)
            for (int i = 0; i < cpu[s].length; i++) {
                dFold = Math.max(dFold, Math.abs(folded[s][i] - unfolded[s][i]));
                dCpu = Math.max(dCpu, Math.abs(folded[s][i] - cpu[s][i]));
            }
        System.out.println("vulkan " + model + " " + steps + " decode steps, folded attention: max|Δ| " + dFold + " vs unfolded, " + dCpu + " vs cpu");
        assertThat(dFold).isLessThanOrEqualTo(1e-4);
        assertThat(dCpu).isLessThanOrEqualTo(1e-3);
    }

    /**
     * Decode steps with their products chained (-Dcmf.vulkan.chain: a product phase's barrier left out, the next
     * products waiting on its counter of finished workgroups) against the same steps with every barrier: the same
     * kernels summing in the same order, so the same bits, 40 steps of each model and of llama with a feed-forward wider
     * than a tile (its direct down product signals the next layer's q/k/v and the head; chained again with gate and up
     * in one dispatch).
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "wide"})
    void chainedProductsGiveTheBarriersBits(String model) throws Exception {
        Path cmf = model.equals("wide") ? wideFeedForward("F32")
                : ConvertedGoldenTest.convert(Fixtures.require("models/" + model), tmp.resolve(model + "-chain.cmf"), TensorPolicy.Mode.F32);
        int[] prompt = Golden.load(Fixtures.require("models/" + (model.equals("wide") ? "llama" : model))).inputIds();
        int steps = 40;
        int[] ids = java.util.Arrays.copyOf(prompt, prompt.length + steps);
        float[][] barriers, chained;
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            VulkanResidentForward f = (VulkanResidentForward) m.graph().device();
            f.chain = false;
            barriers = decode(m, ids, prompt.length, false);
            assertThat(f.chainedWaits).isZero();
            f.chain = true;
            chained = decode(m, ids, prompt.length, false);
            // per layer: q/k/v after the previous down, gate/up after o; the head after the last down
            assertThat(f.chainedWaits).as("products recorded waiting instead of a barrier").isGreaterThan(0);
            if (model.equals("wide")) {
                // gate and up in one dispatch (waiting for o, counted for down's barrier): the same bits again
                f.gateUpTogether = true;
                float[][] together = decode(m, ids, prompt.length, false);
                assertThat(f.gateUpDispatches).as("gate and up recorded as one dispatch").isPositive();
                for (int s = 0; s < steps; s++) assertThat(together[s]).as("gate and up together, step " + s).isEqualTo(barriers[s]);
            }
        }
        double d = 0;
        for (int s = 0; s < steps; s++)
            for (int i = 0; i < barriers[s].length; i++) d = Math.max(d, Math.abs(chained[s][i] - barriers[s][i]));
        System.out.println("vulkan " + model + " " + steps + " decode steps, chained products: max|Δ| " + d + " vs barriers");
        assertThat(d).isZero();
    }

    /**
     * A chained wait that cannot end (each product made to wait for one workgroup more than its phase has, giving up
     * after 64 polls) fails its decode step with a message naming the cause, and the forward keeps every barrier from
     * then on: a new sequence decodes with no chained wait and the barriers' bits.
     */
    @org.junit.jupiter.api.Test
    void aChainedWaitThatGivesUpFailsItsStep() throws Exception {
        Path cmf = ConvertedGoldenTest.convert(Fixtures.require("models/llama"), tmp.resolve("llama-chain-gives-up.cmf"), TensorPolicy.Mode.F32);
        int[] prompt = Golden.load(Fixtures.require("models/llama")).inputIds();
        int[] ids = java.util.Arrays.copyOf(prompt, prompt.length + 8);
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            VulkanResidentForward f = (VulkanResidentForward) m.graph().device();
            f.chain = false;
            float[][] barriers = decode(m, ids, prompt.length, false);
            f.chain = true;
            f.chainWaitSlack = 1;
            f.chainSpins = 64;
            var g = m.graph();
            var st = g.newState(prompt.length, ids.length + 50);
            float[] last = new float[g.vocab()];
            g.forward(st, ids, 0, prompt.length, last, false, null);
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> g.forward(st, ids, prompt.length, 1, last, false, null))
                    .hasStackTraceContaining("waited for the one before it and gave up");
            st.close();
            assertThat(f.chain).as("barriers from then on").isFalse();
            f.chainWaitSlack = 0;
            f.chainSpins = 0;
            long waits = f.chainedWaits;
            float[][] after = decode(m, ids, prompt.length, false);
            assertThat(f.chainedWaits).isEqualTo(waits);
            for (int i = 0; i < after.length; i++) assertThat(after[i]).containsExactly(barriers[i]);
        }
    }

    /**
     * --kv f16 on the resident forward (issue 24): the golden prompt in two chunks (the second's attention, OP 2, reads
     * the first's keys and values as halves) and 80 decode steps (past a 64-key chunk), folded (OP 9) and unfolded (OP 1,
     * OP 4, OP 7, OP 8; gemma4's layers reading an earlier layer's caches always unfolded), against the CPU engine with
     * the same f16 cache (stored values rounded to f16, the chunk's own keys and values read unrounded), every step's
     * logits and greedy picks, the same tokens fed to all. Within 3e-3 and a fifth of the f16 cache's own effect (the
     * CPU's f16 logits against its f32 ones), greedy the same (gpt_oss: its sinks and windows over halves). Why looser
     * than the f32 cache's 1e-3 (lavapipe: llama 2.7e-4, qwen3 1.6e-3, gemma4 1.3e-3, gpt_oss 8.3e-4 to 9.6e-4 between runs against the f32
     * cache's 6.9e-6, 2.1e-5, 8.2e-5, 1.3e-5 over the same steps): where the
     * device's f32 key and the CPU's differ by a rounding and straddle a half's midpoint they round to neighbouring
     * halves, a whole f16 step (2^-11 relative) apart; the op checks hold each operator to float64 on the halves.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma4", "gpt_oss"})
    void f16KvCacheMatchesTheCpuEngine(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve(model + "-kv16.cmf"), TensorPolicy.Mode.F32);
        int[] prompt = Golden.load(dir).inputIds();
        int steps = 80;
        int[] ids = java.util.Arrays.copyOf(prompt, prompt.length + steps);
        java.util.function.Function<com.fasterxml.jackson.databind.JsonNode, dev.cmf4j.model.AttentionMemory> f16 =
                h -> new dev.cmf4j.model.AttentionMemory(null, dev.cmf4j.backend.KvType.F16);
        float[][] cpu, cpu32, folded, unfolded;
        try (var b = dev.cmf4j.backend.cpu.CpuBackend.reference(); Model m = Model.open(cmf, null, b, List.of(), f16)) {
            cpu = decode(m, ids, prompt.length, true, prompt.length / 2);
        }
        try (var b = dev.cmf4j.backend.cpu.CpuBackend.reference(); Model m = Model.open(cmf, null, b)) {
            cpu32 = decode(m, ids, prompt.length, false, prompt.length / 2);
        }
        float[][] dev32;
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) { dev32 = decode(m, ids, prompt.length, false, prompt.length / 2); }
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b, List.of(), f16)) {
            VulkanResidentForward f = (VulkanResidentForward) m.graph().device();
            assertThat(f).as("runs whole on the device with an f16 cache").isNotNull();
            folded = decode(m, ids, prompt.length, false, prompt.length / 2);
            f.foldAttention = false;
            unfolded = decode(m, ids, prompt.length, false, prompt.length / 2);
        }
        double dFold = 0, dUnfold = 0, dF32 = 0, dDev32 = 0;
        int greedyDiffers = 0;
        for (int s = 0; s < steps; s++) {
            for (int i = 0; i < cpu[s].length; i++) {
                dFold = Math.max(dFold, Math.abs(folded[s][i] - cpu[s][i]));
                dUnfold = Math.max(dUnfold, Math.abs(unfolded[s][i] - cpu[s][i]));
                dF32 = Math.max(dF32, Math.abs(cpu32[s][i] - cpu[s][i]));
                dDev32 = Math.max(dDev32, Math.abs(dev32[s][i] - cpu32[s][i]));
            }
            if (argmax(folded[s]) != argmax(cpu[s]) || argmax(unfolded[s]) != argmax(cpu[s])) greedyDiffers++;
        }
        System.out.println("vulkan " + model + " f16 KV cache, " + steps + " decode steps vs cpu f16: max|Δ| " + dFold + " folded, " + dUnfold
                + " unfolded (cpu f16 vs cpu f32: " + dF32 + "; f32 cache: device vs cpu " + dDev32 + ")");
        assertThat(Math.max(dFold, dUnfold)).isLessThanOrEqualTo(3e-3).isLessThan(dF32 / 5);
        assertThat(greedyDiffers).as("steps whose greedy pick differs from the CPU's").isZero();
    }

    /**
     * llama's state with an f16 KV cache: per position of context it holds exactly half of every layer's key and value
     * rows fewer bytes than with an f32 one (the scores buffer grows with the context the same in both).
     */
    @org.junit.jupiter.api.Test
    void anF16CacheHoldsHalfTheBytes() throws Exception {
        Path dir = Fixtures.require("models/llama");
        Path cmf = ConvertedGoldenTest.convert(dir, tmp.resolve("llama-kvbytes.cmf"), TensorPolicy.Mode.F32);
        var config = new com.fasterxml.jackson.databind.ObjectMapper().readTree(dir.resolve("config.json").toFile());
        int hd = config.get("head_dim").asInt();
        long rows = 2L * config.get("num_hidden_layers").asInt() * config.get("num_key_value_heads").asInt() * hd;   // elements a position
        double[] perPosition = new double[2];
        for (int k = 0; k < 2; k++) {
            dev.cmf4j.model.AttentionMemory memory = k == 0 ? dev.cmf4j.model.AttentionMemory.EXACT : F16_CACHE;
            try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b, List.of(), h -> memory)) {
                var g = m.graph();
                assertThat(g.device()).as("runs whole on the device").isNotNull();
                var small = g.newState(16, 200);
                var large = g.newState(16, 400);
                perPosition[k] = (large.heldBytes() - small.heldBytes()) / 200.0;
                small.close();
                large.close();
            }
        }
        System.out.println("vulkan llama state: " + perPosition[0] + " bytes a position with an f32 cache, " + perPosition[1] + " with f16");
        assertThat(perPosition[0] - perPosition[1]).isEqualTo(2.0 * rows);
    }

    private static int argmax(float[] x) {
        int best = 0;
        for (int i = 1; i < x.length; i++) if (x[i] > x[best]) best = i;
        return best;
    }

    /** As below, the prompt in two chunks: {@code split} tokens, then the rest (the second chunk reads the first from the caches). */
    private static float[][] decode(Model m, int[] ids, int promptLength, boolean greedy, int split) {
        var g = m.graph();
        var st = g.newState(promptLength, ids.length + 50);
        float[] last = new float[g.vocab()];
        g.forward(st, ids, 0, split, last, false, null);
        g.forward(st, ids, split, promptLength - split, last, false, null);
        float[][] out = new float[ids.length - promptLength][];
        for (int p = promptLength; p < ids.length; p++) {
            if (greedy) ids[p] = argmax(last);
            g.forward(st, ids, p, 1, last, false, null);
            out[p - promptLength] = last.clone();
        }
        st.close();
        return out;
    }

    /**
     * The logits of each one-token step after a prompt of {@code promptLength} of {@code ids}; with {@code greedy} the
     * later ids are overwritten with each step's argmax (so the other runs are fed the same tokens).
     */
    private static float[][] decode(Model m, int[] ids, int promptLength, boolean greedy) {
        var g = m.graph();
        var st = g.newState(promptLength, ids.length + 50);
        float[] last = new float[g.vocab()];
        g.forward(st, ids, 0, promptLength, last, false, null);
        float[][] out = new float[ids.length - promptLength][];
        for (int p = promptLength; p < ids.length; p++) {
            if (greedy) {
                int best = 0;
                for (int i = 1; i < last.length; i++) if (last[i] > last[best]) best = i;
                ids[p] = best;
            }
            g.forward(st, ids, p, 1, last, false, null);
            out[p - promptLength] = last.clone();
        }
        st.close();
        return out;
    }

    /** {@code src} (safetensors) with {@code extra} f32 tensors appended, written to {@code dst}. */
    /**
     * models/llama with a feed-forward 4,224 wide (random gate, up and down): the decode steps' down product has rows of
     * more than one tile (4,096 columns), which take act(gate)·up (with the column scales at q8_2f) made once, by the
     * gate and up products in one dispatch (VulkanResidentForward.gateUpTogether) or by the GLU operator after them, and
     * read from memory (VulkanResidentForward.DIRECT_DOWN). Resident, against the CPU engine with its reference products
     * on the same file, f32 and q8_2f, both ways.
     */
    @ParameterizedTest
    @ValueSource(strings = {"F32", "Q8_2F"})
    void wideFeedForwardMatchesTheCpuEngine(String mode) throws Exception {
        Path src = Fixtures.require("models/llama"), cmf = wideFeedForward(mode);
        int[] ids = Golden.load(src).inputIds();
        float[][] want, got;
        try (var cpu = dev.cmf4j.backend.cpu.CpuBackend.reference(); Model m = Model.open(cmf, null, cpu)) { want = steps(m, ids); }
        float[][] operator;
        try (VulkanBackend b = new VulkanBackend(ctx); Model m = Model.open(cmf, null, b)) {
            assertThat(m.graph().device()).as("runs whole on the device").isNotNull();
            VulkanResidentForward f = (VulkanResidentForward) m.graph().device();
            f.gateUpTogether = true;
            got = steps(m, ids);
            assertThat(f.gateUpDispatches).as("gate and up recorded as one dispatch").isPositive();
            f.gateUpTogether = false;
            int before = f.gateUpDispatches;
            operator = steps(m, ids);
            assertThat(f.gateUpDispatches).as("gate and up as two products").isEqualTo(before);
        }
        for (int st = 0; st < got.length; st++)
            assertThat(got[st]).as("step " + st + ": the same bits as the gate and up products and the GLU operator").isEqualTo(operator[st]);
        double ds = 0, range = 0;
        for (int st = 0; st < want.length; st++)
            for (int i = 0; i < want[st].length; i++) {
                ds = Math.max(ds, Math.abs(got[st][i] - want[st][i]));
                range = Math.max(range, Math.abs(want[st][i]));
            }
        System.out.println("vulkan llama with a " + (VulkanContext.DECODE_TILE + 128) + "-wide feed-forward (" + mode + ") vs cpu: decode steps max|Δ| " + ds
                + " (logits up to " + range + ")");
        assertThat(range).as("logits of some size").isGreaterThan(0.1);
        assertThat(ds).isLessThanOrEqualTo(1e-4 * Math.max(1, range));
    }

    /** models/llama with a random feed-forward 4,224 wide, converted at {@code mode} (once a mode). */
    private static Path wideFeedForward(String mode) throws Exception {
        Path src = Fixtures.require("models/llama"), dir = tmp.resolve("llama-wide-" + mode), cmf = tmp.resolve("llama-wide-" + mode + ".cmf");
        if (java.nio.file.Files.exists(cmf)) return cmf;
        java.nio.file.Files.createDirectories(dir);
        var om = new com.fasterxml.jackson.databind.ObjectMapper();
        var config = (com.fasterxml.jackson.databind.node.ObjectNode) om.readTree(src.resolve("config.json").toFile());
        int wide = VulkanContext.DECODE_TILE + 128, hidden = config.get("hidden_size").asInt(), layers = config.get("num_hidden_layers").asInt();
        config.put("intermediate_size", wide);
        om.writeValue(dir.resolve("config.json").toFile(), config);
        java.util.Map<String, float[]> mlp = new java.util.LinkedHashMap<>();
        java.util.Map<String, int[]> shapes = new java.util.HashMap<>();
        java.util.SplittableRandom r = new java.util.SplittableRandom(3);
        for (int l = 0; l < layers; l++)
            for (String t : List.of("gate", "up", "down")) {
                String name = "model.layers." + l + ".mlp." + t + "_proj.weight";
                float[] w = new float[wide * hidden];
                for (int i = 0; i < w.length; i++) w[i] = (float) (0.05 * r.nextGaussian());
                mlp.put(name, w);
                shapes.put(name, t.equals("down") ? new int[] {hidden, wide} : new int[] {wide, hidden});
            }
        appendTensors(src.resolve("model.safetensors"), dir.resolve("model.safetensors"), mlp, shapes);
        return ConvertedGoldenTest.convert(dir, cmf, TensorPolicy.Mode.valueOf(mode));
    }

    private static void appendTensors(Path src, Path dst, java.util.Map<String, float[]> extra) throws java.io.IOException {
        appendTensors(src, dst, extra, java.util.Map.of());
    }

    /** src's tensors and {@code extra} (replacing those of the same name), of the given shapes (else one dimension). */
    private static void appendTensors(Path src, Path dst, java.util.Map<String, float[]> extra, java.util.Map<String, int[]> shapes)
            throws java.io.IOException {
        byte[] all = java.nio.file.Files.readAllBytes(src);
        var bb = java.nio.ByteBuffer.wrap(all).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        int n = (int) bb.getLong(0);
        var om = new com.fasterxml.jackson.databind.ObjectMapper();
        var header = (com.fasterxml.jackson.databind.node.ObjectNode) om.readTree(new String(all, 8, n, java.nio.charset.StandardCharsets.UTF_8));
        int dataStart = 8 + n;
        var data = new java.io.ByteArrayOutputStream();
        data.write(all, dataStart, all.length - dataStart);
        for (var e : extra.entrySet()) {
            long start = data.size();
            var b = java.nio.ByteBuffer.allocate(4 * e.getValue().length).order(java.nio.ByteOrder.LITTLE_ENDIAN);
            for (float v : e.getValue()) b.putFloat(v);
            data.write(b.array());
            var t = header.putObject(e.getKey());
            t.put("dtype", "F32");
            var shape = t.putArray("shape");
            for (int d : shapes.getOrDefault(e.getKey(), new int[] {e.getValue().length})) shape.add(d);
            t.putArray("data_offsets").add(start).add((long) data.size());
        }
        byte[] h = om.writeValueAsBytes(header);
        int padded = (h.length + 7) / 8 * 8;
        var out = java.nio.ByteBuffer.allocate(8 + padded + data.size()).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        out.putLong(padded).put(h);
        for (int i = h.length; i < padded; i++) out.put((byte) ' ');
        out.put(data.toByteArray());
        java.nio.file.Files.write(dst, out.array());
    }

    /** The last logits after a prefill of all but the last 3 ids in chunks of 5, then after each of those 3 decoded alone. */
    private static float[][] steps(Model m, int[] ids) {
        var g = m.graph();
        var st = g.newState(5, ids.length + 1);
        int n = ids.length - 3;
        float[] last = new float[g.vocab()];
        for (int p = 0; p < n; p += 5) g.forward(st, ids, p, Math.min(5, n - p), last, false, null);
        float[][] out = new float[4][];
        out[0] = last.clone();
        for (int i = 0; i < 3; i++) {
            g.forward(st, ids, n + i, 1, last, false, null);
            out[i + 1] = last.clone();
        }
        assertThat(st.heldBytes()).as("the state's memory (on a device: its buffers)").isPositive();
        st.close();
        return out;
    }

    /** Every position's logits of one forward over {@code ids}. */
    private static float[] logits(Model m, int[] ids) {
        var g = m.graph();
        var st = g.newState(ids.length, ids.length + 1);
        float[] out = new float[ids.length * g.vocab()];
        g.forward(st, ids, 0, ids.length, out, true, null);
        return out;
    }

    /**
     * {@code --draft mtp} on the resident forward: the last layer's rows come back with the logits (a session's prompt
     * chunk, its recorded decode steps, an all-logits chunk; batched steps, a greedy one among them) as the CPU graph's,
     * and greedy drafting with a random head and with an oracle head (whose drafts are kept) is token for token plain
     * greedy decoding on the device, drafted and kept as on the CPU. The head runs on the hybrid path (its products
     * here, the rest on the CPU).
     */
    @org.junit.jupiter.api.Test
    void mtpDraftingOnTheResidentForward() throws Exception {
        Path cmf = ConvertedGoldenTest.convert(Fixtures.require("models/llama"), tmp.resolve("llama-mtp-src.cmf"), TensorPolicy.Mode.F32);
        int[] prompt = {5, 77, 300, 12, 901, 44, 3};
        int[] chain;
        try (Model m = Model.open(cmf)) { chain = LastLayerRows.greedy(m, prompt, 32); }
        Path random = dev.cmf4j.runtime.MtpHeads.withRandomHead(cmf, tmp.resolve("llama-mtp.cmf"), 7);
        Path oracle = dev.cmf4j.runtime.MtpHeads.withOracleHead(cmf, tmp.resolve("llama-oracle.cmf"), chain);
        try (Model cpu = Model.open(random); VulkanBackend b = new VulkanBackend(ctx); Model gpu = Model.open(random, null, b)) {
            assertThat(gpu.graph().device()).as("device-resident").isNotNull();
            LastLayerRows[] rows = new LastLayerRows[2];
            for (int i = 0; i < 2; i++) {
                Session s = new Session((i == 0 ? cpu : gpu).graph(), 64);
                rows[i] = new LastLayerRows();
                s.observeHidden(rows[i]);
                s.prefill(prompt);
                s.decode(9);
                s.decode(31);
                s.logitsAll(new int[] {2, 8, 400, 7});
            }
            LastLayerRows.assertClose(rows[1], rows[0], "session steps");
            assertThat(rows[1].at).hasSize(prompt.length + 6);
            LastLayerRows[][] batched = new LastLayerRows[2][3];
            int[][] picks = new int[2][];
            for (int i = 0; i < 2; i++) {
                var g = (i == 0 ? cpu : gpu).graph();
                dev.cmf4j.runtime.BatchDriver d = new dev.cmf4j.runtime.BatchDriver(g, 32, 64);
                Session[] ss = {new Session(g, 64), new Session(g, 64), new Session(g, 64)};
                for (int k = 0; k < 3; k++) {
                    batched[i][k] = new LastLayerRows();
                    ss[k].observeHidden(batched[i][k]);
                }
                d.prefill(new Session[] {ss[0], ss[1]}, new int[][] {prompt, {40, 41, 42}}, 8);
                d.step(new Session[] {ss[0], ss[1]}, new int[][] {{6}, {60}});
                d.step(new Session[] {ss[0], ss[1]}, new int[][] {{16}, {61}});   // the recorded batch step again
                d.step(new Session[] {ss[0], ss[1], ss[2]}, new int[][] {{7}, {62, 63, 64}, {3, 1, 4, 1, 5}}, new boolean[] {false, true, false});
                picks[i] = d.stepGreedy(new Session[] {ss[0], ss[1], ss[2]}, new int[][] {{8}, {65}, {9}}).clone();
            }
            assertThat(picks[1]).as("the greedy step's picks").containsExactly(picks[0]);
            for (int k = 0; k < 3; k++) LastLayerRows.assertClose(batched[1][k], batched[0][k], "batched, sequence " + k);
        }
        int n = 24;
        for (Path file : List.of(random, oracle)) {
            boolean isOracle = file == oracle;
            try (Model cpu = Model.open(file); VulkanBackend b = new VulkanBackend(ctx); Model gpu = Model.open(file, null, b)) {
                int[] want = LastLayerRows.greedy(gpu, prompt, n);
                assertThat(want).as("plain greedy on the device as on the CPU").containsExactly(LastLayerRows.greedy(cpu, prompt, n));
                for (int k : new int[] {1, 3}) {
                    dev.cmf4j.runtime.Speculation.Stats[] stats = new dev.cmf4j.runtime.Speculation.Stats[2];
                    for (int i = 0; i < 2; i++) {
                        Model on = i == 0 ? cpu : gpu;
                        var sp = new dev.cmf4j.runtime.Speculation(new dev.cmf4j.runtime.MtpDraft(on.mtpGraph(), 128), k, SamplingParams.GREEDY);
                        int[] got = sp.generate(new Generator(new Session(on.graph(), 128), new Sampler(SamplingParams.GREEDY), java.util.Set.of(), List.of()),
                                prompt, n, null, null).tokens();
                        assertThat(got).as((isOracle ? "oracle" : "random") + " head, k " + k + (i == 0 ? " (CPU)" : " (Vulkan)")).containsExactly(want);
                        stats[i] = sp.stats(got.length);
                    }
                    assertThat(stats[1].rounds()).as("drafting rounds ran").isPositive();
                    if (isOracle) {
                        assertThat(stats[1].accepted()).as("the oracle's drafts are kept").isPositive();
                        assertThat(stats[1]).as("drafted and kept as on the CPU").isEqualTo(stats[0]);
                    }
                }
            }
        }
    }
}
