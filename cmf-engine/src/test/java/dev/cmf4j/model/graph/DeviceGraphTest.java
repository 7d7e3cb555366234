package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.DeviceForward;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.model.HfFixture;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A graph whose matmul offers a device forward: when the device takes the model, the graph builds none of its
 * CPU steps and a session allocates no CPU KV cache or activations; when the provider declines, the CPU steps
 * are there and run. No GPU: the device forward here is a recording stand-in.
 */
class DeviceGraphTest {

    /** The CPU's products, offering {@code device} (null = declines) for dense decoders. */
    record Provider(MatMul cpu, DeviceForward offered, List<String> cpuGraphs) implements Backend {
        @Override public String device() { return "test"; }

        @Override public String description() { return "test device"; }

        @Override public MatMul matmul() { return cpu; }

        @Override public WorkerPool hostPool() { return CpuBackend.pool(); }

        @Override public boolean runsWholeModels() { return true; }

        @Override public DeviceForward deviceForward(DecoderPlan model, dev.cmf4j.backend.KvType kv) { return offered; }

        @Override public void hostGraph(String label, String why) { cpuGraphs.add(why); }
    }

    /** Records each forward's chunk and position; fills the logits with the position. */
    static final class Recording implements DeviceForward {
        final List<int[]> calls = new ArrayList<>();
        int states;

        final int preferred;

        Recording() { this(16); }

        Recording(int preferred) { this.preferred = preferred; }

        @Override public int preferredChunk() { return preferred; }

        @Override public Object newState(int maxChunk, int maxContext) { states++; maxChunks.add(maxChunk); return new Object(); }

        final List<Integer> maxChunks = new ArrayList<>();

        @Override public void forward(Object state, int[] ids, int off, int tokens, int pos0, float[] logits, boolean allLogits) {
            calls.add(new int[] {tokens, pos0});
            if (logits != null) java.util.Arrays.fill(logits, pos0);
        }

        @Override public void release(Object state) {}
    }

    @Test void aDeviceGraphBuildsNoCpuStepsAndItsSessionsNoCpuState() {
        try (HfFixture hf = HfFixture.open("qwen3")) {
            Recording device = new Recording();
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new Provider(new CpuMatMul(), device, new ArrayList<>()));
            assertThat(g.device()).isSameAs(device);
            for (int l = 0; l < g.numLayers(); l++) {
                assertThat(g.mixer(l)).as("layer " + l + " mixer step").isNull();
                assertThat(g.ffn(l)).as("layer " + l + " ffn step").isNull();
            }
            State st = g.newState(8, 64);
            assertThat(device.states).isEqualTo(1);
            assertThat(st.kvCache(0)).as("no CPU KV cache").isNull();
            Workspace ws = g.newWorkspace(8, 64);
            assertThat(ws.x).as("no CPU activations").isNull();
            assertThat(ws.mixerScratch(0)).isNull();
            float[] logits = new float[g.vocab()];
            g.forward(st, new int[] {1, 2, 3}, 0, 3, logits, false, null);
            g.forward(st, new int[] {4}, 0, 1, logits, false, null);
            assertThat(device.calls).containsExactly(new int[] {3, 0}, new int[] {1, 3});
            assertThat(logits[0]).isEqualTo(3f);
            st.reset();   // nothing on the CPU to clear
            assertThat(st.position()).isZero();
            st.close();
        }
    }

    @Test void aSessionOnADeviceGraphPrefillsInTheDevicesChunksNoLongerThanItsContext() {
        try (HfFixture hf = HfFixture.open("qwen3")) {
            Recording device = new Recording();
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new Provider(new CpuMatMul(), device, new ArrayList<>()));
            int[] ids = new int[40];
            for (int i = 0; i < ids.length; i++) ids[i] = i + 1;
            try (Session s = new Session(g, 100)) {
                s.prefill(ids);
            }
            assertThat(device.calls).containsExactly(new int[] {16, 0}, new int[] {16, 16}, new int[] {8, 32});
            device.calls.clear();
            try (Session s = new Session(g, 10)) {   // a 10-position session takes chunks of at most 10
                s.prefill(java.util.Arrays.copyOf(ids, 9));
            }
            assertThat(device.calls).containsExactly(new int[] {9, 0});
            assertThat(device.maxChunks).containsExactly(16, 10);
        }
    }

    @Test void allLogitsOnADeviceGoAtMostTheCpuChunkPerCall() {
        // every row of logits costs vocab floats on the device twice and in pinned memory: a session's 100-token
        // prompt chunk still returns all logits 64 rows per call
        try (HfFixture hf = HfFixture.open("qwen3")) {
            Recording device = new Recording(100);
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new Provider(new CpuMatMul(), device, new ArrayList<>()));
            int[] ids = new int[150];
            for (int i = 0; i < ids.length; i++) ids[i] = i + 1;
            try (Session s = new Session(g, 1000)) {
                s.prefill(java.util.Arrays.copyOf(ids, 120));
                s.reset();
                float[] all = s.logitsAll(ids);
                assertThat(all).hasSize(150 * g.vocab());
                assertThat(all[149 * g.vocab()]).as("the last row's logits: position 128 of the last call").isEqualTo(128f);
            }
            assertThat(device.calls).containsExactly(new int[] {100, 0}, new int[] {20, 100},
                    new int[] {64, 0}, new int[] {64, 64}, new int[] {22, 128});
        }
    }

    @Test void aSessionOnTheCpuGraphKeepsTheDefaultChunk() {
        try (HfFixture hf = HfFixture.open("qwen3")) {
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new Provider(new CpuMatMul(), null, new ArrayList<>()));
            try (Session s = new Session(g, 1000)) {
                assertThat(s.state().maxChunk).isEqualTo(Session.DEFAULT_CHUNK);
            }
        }
    }

    @Test void aDeclinedDeviceKeepsTheCpuSteps() {
        try (HfFixture hf = HfFixture.open("qwen3")) {
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new Provider(new CpuMatMul(), null, new ArrayList<>()));
            assertThat(g.device()).isNull();
            assertThat(g.mixer(0)).isNotNull();
            assertThat(g.ffn(0)).isNotNull();
            State st = g.newState(8, 64);
            assertThat(st.kvCache(0)).isNotNull();
            float[] want = new float[g.vocab()], got = new float[g.vocab()];
            hf.graph().forward(hf.graph().newState(8, 64), new int[] {1, 2, 3}, 0, 3, want, false, null);
            g.forward(st, new int[] {1, 2, 3}, 0, 3, got, false, null);
            // the same products; the last bits may differ while the JIT has not yet compiled a kernel for one of them
            // (docs/ENGINE.md, Numerics: a full suite's run order decides which forward comes first)
            assertThat(got).containsExactly(want, org.assertj.core.data.Offset.offset(1e-5f));
        }
    }

    /** Takes the device plan it is handed and declines it (the CPU steps then run). */
    record Capturing(List<DecoderPlan> plans) implements Backend {
        @Override public String device() { return "test"; }

        @Override public String description() { return "capturing device"; }

        @Override public MatMul matmul() { return new CpuMatMul(); }

        @Override public WorkerPool hostPool() { return CpuBackend.pool(); }

        @Override public boolean runsWholeModels() { return true; }

        @Override public DeviceForward deviceForward(DecoderPlan model, dev.cmf4j.backend.KvType kv) { plans.add(model); return null; }

        @Override public void hostGraph(String label, String why) { throw new AssertionError("refused: " + why); }
    }

    /**
     * The device plan is the graph's op list lowered, layer by layer: gemma4's sandwich norms, per-layer inputs, layer
     * scalars, K/V sources and softcap where its ops have them, the tensors the ops name.
     */
    @Test void theDevicePlanIsTheOpListLowered() {
        for (String name : List.of("gemma4", "qwen3_next", "llama")) {
            try (HfFixture hf = HfFixture.open(name)) {
                var plans = new ArrayList<DecoderPlan>();
                Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new Capturing(plans));
                assertThat(plans).as(name).hasSize(1);
                DecoderPlan dp = plans.getFirst();
                dev.cmf4j.model.Plan plan = g.plan();
                Loader loader = new Loader(TestFiles.weights(hf.reader()));
                assertThat(dp.layers()).as(name).hasSize(g.numLayers());
                assertThat(dp.perLayerEmbedding() != null).as(name).isEqualTo(plan.ops().get(1) instanceof dev.cmf4j.model.Plan.PerLayerTable);
                for (int l = 0; l < g.numLayers(); l++) {
                    var ops = plan.layer(l);
                    DecoderPlan.Layer layer = dp.layers().get(l);
                    String where = name + " layer " + l;
                    var norms = new java.util.HashMap<String, float[]>();
                    for (var o : ops)
                        if (o instanceof dev.cmf4j.model.Plan.Normalize n) norms.put(n.role(), loader.normOp(n.norm()).w());
                    assertThat(layer.attnNorm().w()).as(where).containsExactly(norms.get("pre-mixer"));
                    assertThat(layer.ffnNorm().w()).as(where).containsExactly(norms.get("pre-ffn"));
                    assertThat(layer.postAttnNorm() == null ? null : layer.postAttnNorm().w()).as(where).isEqualTo(norms.get("post-mixer"));
                    assertThat(layer.postFfnNorm() == null ? null : layer.postFfnNorm().w()).as(where).isEqualTo(norms.get("post-ffn"));
                    assertThat(layer.perLayerInput() != null).as(where)
                            .isEqualTo(ops.stream().anyMatch(dev.cmf4j.model.Plan.PerLayerInput.class::isInstance));
                    boolean scaled = ops.stream().anyMatch(dev.cmf4j.model.Plan.ScaleLayer.class::isInstance);
                    assertThat(layer.layerScalar() != 1f || !scaled).as(where).isTrue();
                    var mix = (dev.cmf4j.model.Plan.Mix) ops.get(2);
                    assertThat(layer.deltaNet() != null).as(where).isEqualTo(mix.mixer() instanceof dev.cmf4j.model.Mixer.GatedDeltaNet);
                    if (mix.mixer() instanceof dev.cmf4j.model.Mixer.Attention a) {
                        assertThat(layer.kvSource()).as(where).isEqualTo(a.kvSource());
                        assertThat(layer.q().name()).as(where).isEqualTo(a.qProj());
                    }
                }
                var head = (dev.cmf4j.model.Plan.Head) plan.ops().getLast();
                assertThat(dp.finalSoftcap()).as(name).isEqualTo(head.softcap());
                assertThat(dp.head().name()).as(name).isEqualTo(head.weight());
                assertThat(dp.embedScale()).as(name).isEqualTo(((dev.cmf4j.model.Plan.Embed) plan.ops().getFirst()).scale());
            }
        }
    }
}
