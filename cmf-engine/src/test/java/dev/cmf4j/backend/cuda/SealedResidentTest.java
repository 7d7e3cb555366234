package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.NystromGolden;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.graph.Batch;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.State;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code --o1} sealed layers on the resident forward through the mock driver's twins of {@code resident_o1.cu}: a
 * session's prompt, sealing at its first decode step past W + S + 8, decode steps that move keys into the far sums, a
 * sealed chunk; a second session sealed on request (State.seal) right after a short prompt; then batched steps of both
 * beside a third session still exact. Logits against the CPU engine's {@code --o1} forward of the same steps.
 */
class SealedResidentTest {
    @TempDir static Path tmp;
    static Path lib;
    static CudaContext ctx;

    @BeforeAll static void build() throws Exception {
        lib = MockCuda.build(tmp);
        ctx = new CudaContext(CudaDriver.load(List.of(lib.toString())), 0, List.of(lib.toString()), new KernelCache(tmp.resolve("cache")));
    }

    @AfterAll static void close() { if (ctx != null) ctx.close(); }

    /** Small enough that the fixtures' short sequences seal and evict: m 4, W 6, S 2 (exact up to 16 positions). */
    static final AttentionMemory O1 = new AttentionMemory(new AttentionMemory.Sealed("all", 4, 6, 2), dev.cmf4j.backend.KvType.F32);

    static int id(int i, int vocab) { return (int) ((i * 7919L + 13) % vocab); }

    /** The steps above; every step's last-row logits, concatenated; the sessions' sealed flags and state bytes appended. */
    static float[] steps(Graph g, long[] stateBytes) {
        int v = g.vocab(), n = 0;
        boolean o1 = g.memory().sealed() != null;
        List<float[]> out = new ArrayList<>();
        State a = g.newState(8, 64), b = g.newState(8, 64), c = g.newState(8, 64);
        float[] buf = new float[3 * v];
        for (int at = 0; at < 18; at += 6) {   // a: 18 prompt tokens in chunks of 6 (exact)
            int[] ids = new int[6];
            for (int i = 0; i < 6; i++) ids[i] = id(n++, v);
            g.forward(a, ids, 0, 6, buf, false, null);
            out.add(java.util.Arrays.copyOf(buf, v));
        }
        assertThat(a.sealed()).as("exact up to W + S + 8").isEqualTo(!o1);
        for (int i = 0; i < 9; i++) {   // decode: seals at the first, then every step evicts a key into the far sums
            g.forward(a, new int[] {id(n++, v)}, 0, 1, buf, false, null);
            out.add(java.util.Arrays.copyOf(buf, v));
        }
        assertThat(a.sealed()).isTrue();
        int[] chunk = new int[5];
        for (int i = 0; i < 5; i++) chunk[i] = id(n++, v);
        g.forward(a, chunk, 0, 5, buf, false, null);   // a sealed chunk: its rows in order, each evicting one key
        out.add(java.util.Arrays.copyOf(buf, v));
        int[] prompt = new int[6];
        for (int i = 0; i < 6; i++) prompt[i] = id(100 + i, v);
        g.forward(b, prompt, 0, 6, buf, false, null);
        b.seal();   // seals at the next step, a chunk of 4
        g.forward(b, chunk, 1, 4, buf, false, null);
        assertThat(b.sealed()).isTrue();
        out.add(java.util.Arrays.copyOf(buf, v));
        g.forward(c, prompt, 0, 3, buf, false, null);
        var ws = g.newWorkspace(16, 64);
        for (int s = 0; s < 10; s++) {   // batched: a and b decode rows (sealed) beside c's rows (exact, then sealing at its decode)
            Batch batch = new Batch().add(a, new int[] {id(200 + s, v)}, 0, 1, Batch.Logits.LAST)
                    .add(b, new int[] {id(300 + s, v)}, 0, 1, Batch.Logits.LAST);
            if (s < 5) batch.add(c, new int[] {id(400 + 3 * s, v), id(401 + 3 * s, v), id(402 + 3 * s, v)}, 0, 3, Batch.Logits.LAST);
            else batch.add(c, new int[] {id(500 + s, v)}, 0, 1, Batch.Logits.LAST);
            g.forward(batch, ws, buf, null);
            out.add(java.util.Arrays.copyOf(buf, 3 * v));
        }
        assertThat(c.sealed()).isTrue();
        if (o1)   // speculative decoding's marks: refused as on the CPU
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> a.mark(2)).isInstanceOf(UnsupportedOperationException.class)
                    .hasMessageContaining("--o1");
        stateBytes[0] = a.stateBytes();
        a.reset();   // a new conversation: exact again from position 0
        g.forward(a, prompt, 0, 6, buf, false, null);
        out.add(java.util.Arrays.copyOf(buf, v));
        assertThat(a.sealed()).isEqualTo(!o1);
        for (State s : new State[] {a, b, c}) s.close();
        int size = 0;
        for (float[] f : out) size += f.length;
        float[] all = new float[size];
        int at = 0;
        for (float[] f : out) { System.arraycopy(f, 0, all, at, f.length); at += f.length; }
        return all;
    }

    @Test void sealedLayersRunResidentAndMatchTheCpu() throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        // gpt-oss: sealed full layers with a sink logit, beside sliding layers that keep their window
        dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/gpt_oss"), tmp.resolve("gpt_oss.cmf"),
                dev.cmf4j.convert.TensorPolicy.Mode.F32);
        for (Path model : List.of(dir.resolve("llama-Q8_2F.cmf"), dir.resolve("qwen3-F32.cmf"), tmp.resolve("gpt_oss.cmf"))) {
            String file = model.getFileName().toString();
            long[] cpuBytes = new long[1], gpuBytes = new long[1];
            float[] want;
            long ringRows = 0;   // the device's sliding-layer rings hold a chunk (8) more than the CPU's window-long rings
            long cpuHash, exactHash = 0;   // what a state snapshot must come from
            try (var m = dev.cmf4j.model.Model.open(model, null, new CpuBackend(), List.of(), h -> O1)) {
                cpuHash = m.graph().operatorHash();
                want = steps(m.graph(), cpuBytes);
                for (var l : m.graph().spec().layers())
                    if (l.mixer() instanceof dev.cmf4j.model.Mixer.Attention att && att.window() > 0 && !att.sharesKv())
                        ringRows += 2L * Float.BYTES * att.kvDim() * 8;
            }
            float[] exact = null;
            if (file.startsWith("llama"))   // once: the sealed run is not the exact one
                try (var m = dev.cmf4j.model.Model.open(model)) { exactHash = m.graph().operatorHash(); exact = steps(m.graph(), new long[1]); }
            if (exactHash != 0) assertThat(cpuHash).as("--o1 in the snapshot hash").isNotEqualTo(exactHash);
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                List<String> notes = new ArrayList<>();
                gpu.notes(notes::add);
                gpu.useCublas(List.of(lib.toString()), 4);
                float[] got;
                int captured0 = CudaMockTest.counter(lib, 1);
                System.setProperty("cmf.cuda.o1Capacity", "8");   // the exact caches grow twice in the 18-token prompt
                try (var m = dev.cmf4j.model.Model.open(model, null, new CudaBackend(gpu), List.of(), h -> O1)) {
                    assertThat(m.graph().device()).as(file + " runs resident").isNotNull();
                    // a resident --o1 graph's snapshots are the CPU graph's, not an exact graph's
                    assertThat(m.graph().operatorHash()).as(file + " snapshot hash").isEqualTo(cpuHash);
                    got = steps(m.graph(), gpuBytes);
                } finally {
                    System.clearProperty("cmf.cuda.o1Capacity");
                }
                // a's decode step captured once sealed, then again after its reset (b's and c's steps: chunks and batches)
                assertThat(CudaMockTest.counter(lib, 1) - captured0).as("captured decode steps").isEqualTo(1);
                assertThat(notes.get(0)).contains("GPU-resident forward").contains("--o1");
                assertThat(got).hasSameSizeAs(want);
                double max = 0, offExact = 0;
                for (int i = 0; i < want.length; i++) {
                    max = Math.max(max, Math.abs(got[i] - want[i]));
                    if (exact != null) offExact = Math.max(offExact, Math.abs(want[i] - exact[i]));
                }
                System.out.printf("o1 %s: max %.3g, sealed vs exact %s, state bytes %d%n", file, max, exact == null ? "-" : String.format("%.3g", offExact), gpuBytes[0]);
                assertThat(max).as(file + ": GPU --o1 against the CPU's").isLessThan(1e-3);
                if (exact != null) assertThat(offExact).as(file + ": the sealed run is not the exact one").isGreaterThan(1e-2);
                // sealed layers as the CPU counts them; gpt-oss's sliding layers: rings on both (window + chunk rows on the device)
                if (file.startsWith("gpt_oss")) assertThat(ringRows).isPositive();
                assertThat(gpuBytes[0]).as("sealed state bytes as the CPU counts them, plus the rings' chunk rows")
                        .isEqualTo(cpuBytes[0] + ringRows).isPositive();
            }
        }
    }

    @Test void theGoldenReplaysThroughTheKernelTwins() throws Exception {
        Path file = dev.cmf4j.testkit.Fixtures.require("o1").resolve("nystrom_golden.json");
        var errors = SealedGolden.check(ctx, NystromGolden.load(file));
        for (var e : errors) assertThat(e.ok()).as(e.toString()).isTrue();
        assertThat(errors[0].max()).isLessThan(1e-5);
    }
}
