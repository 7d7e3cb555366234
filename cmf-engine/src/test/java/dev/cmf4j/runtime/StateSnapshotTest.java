package dev.cmf4j.runtime;

import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.convert.HfArch;
import dev.cmf4j.convert.HfConfig;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.SpecBuilder;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.model.Weights;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * State snapshots: {@code import(export(s))} is the same state byte for byte and continues with the same logits (exact,
 * sealed {@code --o1}, q8 and f16 KV, sliding and recurrent layers); a snapshot is refused on another model or other
 * settings, and when cut short.
 */
class StateSnapshotTest {
    interface Body { void run(Graph g) throws Exception; }

    static void withModel(String name, AttentionMemory memory, Body body) throws Exception {
        Path dir = Fixtures.require("models/" + name);
        var header = com.fasterxml.jackson.databind.node.JsonNodeFactory.instance.objectNode();
        header.set("arch", HfArch.fromConfig(HfConfig.read(dir.resolve("config.json"))));
        try (SafetensorsReader r = SafetensorsReader.open(dir.resolve("model.safetensors"))) {
            Weights w = TestFiles.weights(r);
            ModelSpec spec = SpecBuilder.build(header, w);
            body.run(new Graph(spec, w, new CpuBackend(new CpuMatMul(), CpuBackend.pool(), null), java.util.List.of(), memory));
        }
    }

    static int[] ids(int n, long seed) {
        Random r = new Random(seed);
        int[] ids = new int[n];
        for (int i = 0; i < n; i++) ids[i] = 3 + r.nextInt(1000);
        return ids;
    }

    static AttentionMemory memory(String o1, String kv) {
        return new AttentionMemory(o1.equals("off") ? null : new AttentionMemory.Sealed(o1, 8, 16, 2), KvType.parse(kv));
    }

    @ParameterizedTest(name = "{0}, o1 {1}, kv {2}")
    @CsvSource({"qwen3,off,f32", "qwen3,all,f32", "qwen3,all,q8", "gemma3,off,f16", "qwen3_next,off,f32"})
    void importOfExportContinuesWithIdenticalLogits(String model, String o1, String kv) throws Exception {
        withModel(model, memory(o1, kv), g -> {
            int[] prompt = ids(40, 1), next = ids(12, 2);
            Session a = new Session(g, 128, 16);
            a.prefill(prompt);
            a.decode(next[0]);   // a single-token step: sealed layers seal here
            if (!o1.equals("off")) assertThat(a.state().sealed()).isTrue();
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            a.exportState(bytes);
            Session b = new Session(g, 128, 16);
            b.importState(new ByteArrayInputStream(bytes.toByteArray()));
            assertThat(b.position()).isEqualTo(a.position());
            assertThat(b.history()).containsExactly(a.history());
            ByteArrayOutputStream again = new ByteArrayOutputStream();
            b.exportState(again);
            assertThat(again.toByteArray()).as("the restored state, exported again").isEqualTo(bytes.toByteArray());
            for (int i = 1; i < next.length; i++) {
                float[] la = a.decode(next[i]).clone(), lb = b.decode(next[i]);
                double md = 0;
                for (int j = 0; j < la.length; j++) md = Math.max(md, Math.abs(la[j] - lb[j]));
                // the same arithmetic on the same state; only the Vector API's lane-reduction order may change when the
                // JIT recompiles a kernel between the two calls (1e-6 seen), so float noise, not bit identity
                assertThat(md).as("step " + i).isLessThan(1e-5);
            }
        });
    }

    @Test
    void refusedOnAnotherModelOrOtherSettingsAndWhenTruncated() throws Exception {
        byte[][] snap = new byte[1][];
        withModel("qwen3", AttentionMemory.EXACT, g -> {
            Session s = new Session(g, 128, 16);
            s.prefill(ids(20, 3));
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            s.exportState(bytes);
            snap[0] = bytes.toByteArray();
            Session t = new Session(g, 128, 16);
            byte[] cut = java.util.Arrays.copyOf(snap[0], snap[0].length / 2);
            assertThatThrownBy(() -> t.importState(new ByteArrayInputStream(cut))).isInstanceOf(IOException.class).hasMessageContaining("truncated");
            assertThat(t.position()).isZero();
            assertThatThrownBy(() -> t.importState(new ByteArrayInputStream(new byte[] {1, 2, 3, 4, 5, 6, 7, 8})))
                    .hasMessageContaining("not a cmf state snapshot");
        });
        withModel("qwen3_moe", AttentionMemory.EXACT, g -> {
            Session s = new Session(g, 128, 16);
            assertThatThrownBy(() -> s.importState(new ByteArrayInputStream(snap[0]))).isInstanceOf(IOException.class)
                    .hasMessageContaining("another model");
        });
        withModel("qwen3", memory("all", "f32"), g -> {
            Session s = new Session(g, 128, 16);
            assertThatThrownBy(() -> s.importState(new ByteArrayInputStream(snap[0]))).hasMessageContaining("other --o1/--kv settings");
        });
    }

    /**
     * Embryo (anchor rings, delta-rule states, no KV cache): a snapshot taken mid-conversation, restored into a fresh
     * model instance, continues with the logits of the sequence that never stopped; the state part of the snapshot does
     * not grow with the conversation (only the ids do, 4 bytes each).
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"embryo_a", "embryo_b", "embryo_c"})
    void embryoStateRestoredInAFreshModelContinuesAsIfNeverStopped(String name) throws Exception {
        Path file = Fixtures.require("embryo/" + name).resolve("model.cmf");
        int[] prompt, next;
        byte[] snap, later;
        float[][] want;
        int pos, laterPos;
        try (dev.cmf4j.model.Model m = dev.cmf4j.model.Model.open(file)) {
            int v = m.graph().vocab();
            Random r = new Random(7);
            prompt = r.ints(100, 0, v).toArray();   // past every fixture's window: the rings have wrapped
            next = r.ints(24, 0, v).toArray();
            Session a = new Session(m.graph(), 256, 16);
            a.prefill(prompt);
            a.decode(next[0]);
            long bytes = a.state().stateBytes();
            assertThat(bytes).isEqualTo(m.spec().fixedStateBytes());
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            a.exportState(out);
            snap = out.toByteArray();
            pos = a.position();
            want = new float[next.length][];
            for (int i = 1; i < next.length; i++) {
                want[i] = a.decode(next[i]).clone();
                assertThat(a.state().stateBytes()).isEqualTo(bytes);
            }
            out.reset();
            a.exportState(out);
            later = out.toByteArray();
            laterPos = a.position();
        }
        assertThat(later.length - snap.length).as("snapshot growth: the ids only").isEqualTo(4 * (laterPos - pos));
        try (dev.cmf4j.model.Model m = dev.cmf4j.model.Model.open(file)) {
            Session b = new Session(m.graph(), 256, 16);
            b.importState(new ByteArrayInputStream(snap));
            assertThat(b.position()).isEqualTo(pos);
            assertThat(b.state().stateBytes()).isEqualTo(m.spec().fixedStateBytes());
            ByteArrayOutputStream again = new ByteArrayOutputStream();
            b.exportState(again);
            assertThat(again.toByteArray()).as("the restored state, bit for bit").isEqualTo(snap);
            for (int i = 1; i < next.length; i++) {
                float[] got = b.decode(next[i]);
                double md = 0;
                for (int j = 0; j < got.length; j++) md = Math.max(md, Math.abs(got[j] - want[i][j]) / Math.max(1, Math.abs(want[i][j])));
                // the outputs are log-probabilities (|x| up to ~20): the 1e-5 float noise above, relative to them
                assertThat(md).as(name + " step " + i).isLessThan(1e-5);
            }
        }
    }
}
