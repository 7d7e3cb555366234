package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Glu;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The real kernels of {@code matvec_q4.cu} and {@code resident_arch.cu} (not the mock's C twins) run on the CPU with
 * emulated warps and blocks ({@code kernel_emulator.cpp}: a fiber per GPU thread, barriers at each shuffle and
 * {@code __syncthreads}) inside the mock driver: the q4 products through {@link CudaMatMul}'s upload and launch path
 * against the CPU kernels, and the resident forward of gemma3 (sandwich norms, GeLU-tanh, sliding windows, local and
 * global rope) and qwen3_moe (device routing and experts) against the CPU engine, logits and greedy ids. The
 * resident.cu kernels run as the mock's C twins here, except its prefill attention (r_attn_prefill_D, always the real
 * kernel in this build) and, while a test asks, its products. Skipped where no C/C++ compiler exists.
 */
class CudaKernelEmulationTest {
    @TempDir static Path tmp;
    static Path lib;
    static CudaContext ctx;

    static int sh(Path dir, String... cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        int rc = p.waitFor(120, TimeUnit.SECONDS) ? p.exitValue() : -1;
        if (rc != 0) System.out.println(String.join(" ", cmd) + ": " + out);
        return rc;
    }

    @BeforeAll static void build() throws Exception {
        for (String r : List.of("mockcuda.c", "kernel_emulator.cpp", "matvec_q4.cu", "common.cuh", "q4.cuh", "resident.cuh", "resident_arch.cu", "resident_embryo.cu", "resident.cu",
                "resident_attn.cu", "resident_gemm.cu",
                "resident_mmvq.cu", "resident_o1.cu"))
            try (InputStream in = CudaKernelEmulationTest.class.getResourceAsStream(r)) { Files.write(tmp.resolve(r), in.readAllBytes()); }
        int rc;
        try {
            rc = sh(tmp, "cc", "-c", "-fPIC", "-O2", "-DMOCK_EMULATE", "mockcuda.c", "-o", "mock.o");
            if (rc == 0) rc = sh(tmp, "c++", "-c", "-fPIC", "-O2", "-std=c++17", "kernel_emulator.cpp", "-o", "emu.o");
            if (rc == 0) rc = sh(tmp, "c++", "-shared", "-pthread", "-o", "libemucuda.so", "mock.o", "emu.o");
        } catch (java.io.IOException e) {
            assumeTrue(false, "no C and C++ compiler (cc, c++) to build the kernel emulator");
            return;
        }
        // the compilers ran: a failure means a .cu (or the emulator) no longer builds for the CPU, which must fail
        if (rc != 0) throw new AssertionError("the kernel emulator does not build (rc " + rc + "); the compiler output is above");
        lib = tmp.resolve("libemucuda.so");
        ctx = new CudaContext(CudaDriver.load(List.of(lib.toString())), 0, List.of(lib.toString()), new KernelCache(tmp.resolve("cache")));
    }

    @AfterAll static void close() { if (ctx != null) ctx.close(); }

    /** The mock's knob: whether products (and the other real kernels it can) run on the emulated warps (1) or as its C twins. */
    static void emulateProducts(int on) {
        var h = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find("mock_emulate_products").orElseThrow(),
                FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT));
        try { h.invokeExact(on); } catch (Throwable t) { throw new AssertionError(t); }
    }

    /** Kernel launches the emulator has run so far. */
    static long launches() {
        var h = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find("emu_launches").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.JAVA_LONG));
        try { return (long) h.invokeExact(); } catch (Throwable t) { throw new AssertionError(t); }
    }

    /**
     * Launches the mock took with programmatic stream serialization (its counter 8, as {@link CudaMockTest#counter}):
     * an emulated kernel so launched fails unless every block reached r_pdl_wait.
     */
    static int programmaticLaunches() {
        var h = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find("mock_counter").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
        try { return (int) h.invokeExact(8); } catch (Throwable t) { throw new AssertionError(t); }
    }

    /** The {@code --o1} golden through resident_o1.cu's real kernels on emulated warps (selftest --o1-golden's path). */
    @Test void sealedKernelsReplayTheO1Golden() throws Exception {
        Path file = dev.cmf4j.testkit.Fixtures.require("o1").resolve("nystrom_golden.json");
        var errors = SealedGolden.check(ctx, dev.cmf4j.backend.cpu.NystromGolden.load(file));
        for (var e : errors) assertThat(e.ok()).as(e.toString()).isTrue();
        assertThat(errors[0].max()).as("as close as the CPU's float32 kernel (1.15e-6)").isLessThan(1e-5);
        assertThat(errors[1].max()).isLessThan(1e-5);
    }

    @Test void theRealQ4KernelsOnEmulatedWarpsMatchTheCpu() throws Throwable {
        long before = launches();
        CudaMockTest.q4MatmulsMatchTheCpu(ctx);
        assertThat(launches() - before).as("launches of the emulated kernels").isGreaterThan(50);
    }

    /** All-position logits of a prompt (prefill chunks of 4), then greedy decoding from there: every step's logits and the ids. */
    record Run(float[] logits, int[] greedy) {}

    static Run run(dev.cmf4j.model.graph.Graph g, int[] prompt, int steps) {
        dev.cmf4j.runtime.Session s = new dev.cmf4j.runtime.Session(g, 64, 4);
        int v = g.vocab();
        float[] all = s.logitsAll(prompt);
        float[] out = java.util.Arrays.copyOf(all, all.length + (steps - 1) * v);
        int[] ids = new int[steps];
        float[] last = java.util.Arrays.copyOfRange(all, all.length - v, all.length);
        for (int i = 0; i < steps; i++) {
            if (i > 0) System.arraycopy(last, 0, out, all.length + (i - 1) * v, v);
            int best = 0;
            for (int j = 1; j < v; j++) if (last[j] > last[best]) best = j;
            ids[i] = best;
            if (i + 1 < steps) last = s.decode(best);
        }
        return new Run(out, ids);
    }

    /**
     * gemma3 (window 8: the prompt and the decode steps run past it) and qwen3_moe, converted from the fixture
     * folders at f32 and at q8_2f (pre-norms folded into the products, (1+w) for gemma; the expert kernels' int8
     * path and scale planes), qwen3_moe also at bf16 and f16 (every weight kind of the expert kernels), resident through the emulated kernels vs the CPU engine on the same file: logits
     * within 1e-3, greedy ids identical.
     */
    @ParameterizedTest
    @ValueSource(strings = {"gemma3:F32", "gemma3:Q8_2F", "gemma3:BF16", "gemma3:F16", "qwen3_moe:F32", "qwen3_moe:Q8_2F", "qwen3_moe:BF16", "qwen3_moe:F16", "gpt_oss:F32", "gpt_oss:Q8_2F"})
    void residentGemma3AndQwen3MoeOnTheRealKernelsMatchTheCpu(String which) throws Throwable {
        String model = which.split(":")[0];
        var mode = dev.cmf4j.convert.TensorPolicy.Mode.valueOf(which.split(":")[1]);
        residentMatchesTheCpu(which, model, mode, false, "launches of the emulated resident_arch.cu kernels");
    }

    /**
     * gemma4 resident (per-layer inputs, K/V shared by the last layers, v norm, head dims 16 and 32 by layer, layer
     * scalars, final soft-cap, window 8) and gemma4_moe (a dense MLP beside the MoE, the router's own norm and
     * per-expert scales, V as the K projection, kv heads by layer), and qwen3_next (gated delta net layers, the
     * attention output gate, a gated shared expert), at f32 (gemma4 also at q8_2f: norms folded into the products of a
     * layer that reads shared K/V): on the emulated resident_arch.cu kernels with the other kernels as the mock's twins;
     * logits within 1e-3 of the CPU engine, greedy ids identical. (Their batched steps: CudaMockTest, through the twins.)
     */
    @ParameterizedTest
    @ValueSource(strings = {"gemma4:F32", "gemma4:Q8_2F", "gemma4_moe:F32", "qwen3_next:F32"})
    void gemma4AndQwen3NextRunResidentOnTheRealKernelsAndMatchTheCpu(String which) throws Throwable {
        String[] w = which.split(":");
        var mode = dev.cmf4j.convert.TensorPolicy.Mode.valueOf(w[1]);
        residentMatchesTheCpu(which, w[0], mode, which.endsWith(":products"), "launches of the emulated kernels");
    }

    /**
     * Embryo on the real resident_embryo.cu kernels (ring attend and commit, resonance router, the hierarchical head's
     * cluster log-softmax, gated rows and per-cluster log-softmax) and resident_arch.cu's (delta net, experts), emulated:
     * embryo_b (window 12), a 13-token prompt as one chunk (its last 12 rows enter the ring, wrapping) and 2 decode steps
     * reading the ring; log-probabilities within 1e-3 of the CPU engine (kept short: emulated warps are slow).
     */
    @Test void embryoRunsResidentOnTheRealKernelsAndMatchesTheCpu() throws Throwable {
        Path file = dev.cmf4j.testkit.Fixtures.require("embryo/embryo_b").resolve("model.cmf");
        int[] prompt = {2, 5, 9, 200, 17, 3, 44, 101, 7, 12, 300, 8, 64};
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(file)) { want = prefillAndDecode(m.graph(), prompt); }
        List<String> notes = new ArrayList<>();
        long before = launches();
        float[] got;
        try (CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul())) {
            gpu.notes(notes::add);
            try (var m = dev.cmf4j.model.Model.open(file, null, new CudaBackend(gpu))) {
                assertThat(m.graph().device()).as("embryo_b: " + notes).isNotNull();
                got = prefillAndDecode(m.graph(), prompt);
            }
        }
        assertThat(launches() - before).as("launches of the emulated kernels").isGreaterThan(10);
        double max = 0;
        for (int i = 0; i < want.length; i++) max = Math.max(max, Math.abs(got[i] - want[i]));
        System.out.printf("emulated resident embryo_b: max|Δ| vs CPU %.3g over %d log-probabilities%n", max, want.length);
        assertThat(max).as("embryo_b max |Δ| vs the CPU").isLessThanOrEqualTo(1e-3);
    }

    /**
     * {@code --o1} on the real resident_o1.cu kernels (the query store, float64 means, prompt absorption, ring fill,
     * rope with qwen3's q/k norms, GQA attend, commit), emulated: qwen3 f32 with m 4, W 6, S 2, a 12-token prompt (exact),
     * sealed on request (State.seal) at a chunk of 3, then 2 decode steps, each row evicting a key into the far sums;
     * logits within 1e-3 of the CPU engine's --o1 forward (kept short: emulated warps are slow).
     */
    @Test void sealedLayersRunOnTheRealKernelsAndMatchTheCpu() throws Throwable {
        Path file = dev.cmf4j.testkit.Fixtures.require("cmf/refconv").resolve("qwen3-F32.cmf");
        float[] want, got;
        try (var m = dev.cmf4j.model.Model.open(file, null, new dev.cmf4j.backend.cpu.CpuBackend(), List.of(), h -> SealedResidentTest.O1)) {
            want = sealedSteps(m.graph());
        }
        long before = launches();
        try (CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(file, null, new CudaBackend(gpu), List.of(), h -> SealedResidentTest.O1)) {
                assertThat(m.graph().device()).isNotNull();
                got = sealedSteps(m.graph());
            }
        }
        assertThat(launches() - before).as("launches of the emulated kernels").isGreaterThan(10);
        double max = 0;
        for (int i = 0; i < want.length; i++) max = Math.max(max, Math.abs(got[i] - want[i]));
        System.out.printf("emulated resident --o1 qwen3: max|Δ| vs CPU %.3g over %d logits%n", max, want.length);
        assertThat(max).as("qwen3 --o1 max |Δ| vs the CPU").isLessThanOrEqualTo(1e-3);
    }

    /** The last row's logits of a 12-token prompt, a chunk of 3 (sealed on request before it) and 2 decode steps. */
    private static float[] sealedSteps(dev.cmf4j.model.graph.Graph g) {
        int v = g.vocab(), n = 0;
        var st = g.newState(12, 32);
        float[] out = new float[4 * v], buf = new float[v];
        int row = 0;
        for (int len : new int[] {12, 3, 1, 1}) {
            int[] ids = new int[len];
            for (int i = 0; i < len; i++) ids[i] = SealedResidentTest.id(n++, v);
            if (row == 1) st.seal();
            g.forward(st, ids, 0, len, buf, false, null);
            System.arraycopy(buf, 0, out, row++ * v, v);
        }
        assertThat(st.sealed()).isTrue();
        st.close();
        return out;
    }

    /** The prompt's last log-probabilities (one chunk), then those of two decode steps (ids 7 and 40). */
    private static float[] prefillAndDecode(dev.cmf4j.model.graph.Graph g, int[] prompt) {
        try (dev.cmf4j.runtime.Session s = new dev.cmf4j.runtime.Session(g, 32, 16)) {
            int v = g.vocab();
            float[] out = java.util.Arrays.copyOf(s.prefill(prompt), 3 * v);
            System.arraycopy(s.decode(7), 0, out, v, v);
            System.arraycopy(s.decode(40), 0, out, 2 * v, v);
            return out;
        }
    }

    /**
     * The fixture folder {@code model} converted at {@code mode}, run resident on the emulated kernels (the products
     * too when {@code realProducts}) and on the CPU engine over the same 11-token prompt (past gemma3's window of 8)
     * and 6 greedy steps: the note says GPU-resident, more than 10 emulated launches, logits within 1e-3, greedy ids
     * identical.
     */
    private void residentMatchesTheCpu(String label, String model, dev.cmf4j.convert.TensorPolicy.Mode mode,
                                       boolean realProducts, String launchesWhat) throws Throwable {
        Path cmf = dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/" + model),
                tmp.resolve(model + "-" + mode.label + (realProducts ? "-products" : "") + ".cmf"), mode);
        residentMatchesTheCpu(label, cmf, false, realProducts, launchesWhat);
    }

    /** As above on {@code cmf}; the CPU with its reference products ({@code CpuBackend.reference()}) when {@code reference}. */
    private void residentMatchesTheCpu(String label, Path cmf, boolean reference, boolean realProducts, String launchesWhat) throws Throwable {
        int[] prompt = {2, 5, 9, 200, 17, 3, 44, 101, 7, 12, 600};
        int steps = 6;
        Run want;
        if (reference) {
            try (var cpu = dev.cmf4j.backend.cpu.CpuBackend.reference(); var m = dev.cmf4j.model.Model.open(cmf, null, cpu)) {
                want = run(m.graph(), prompt, steps);
            }
        } else {
            try (var m = dev.cmf4j.model.Model.open(cmf)) { want = run(m.graph(), prompt, steps); }
        }
        List<String> notes = new ArrayList<>();
        long before = launches();
        int programmatic0 = programmaticLaunches();
        Run got;
        if (realProducts) emulateProducts(1);
        try (CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul())) {
            gpu.notes(notes::add);
            gpu.useProgrammaticLaunch(true);
            try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) {
                assertThat(m.graph().device()).as(label + ": " + notes).isNotNull();
                got = run(m.graph(), prompt, steps);
            }
        } finally {
            if (realProducts) emulateProducts(0);
        }
        assertThat(notes).singleElement().asString().contains("GPU-resident forward");
        assertThat(launches() - before).as(launchesWhat).isGreaterThan(10);
        // the decode step's products and attention, real, went out programmatically: the mock checked their waits
        if (realProducts) assertThat(programmaticLaunches() - programmatic0).as(label + ": programmatic launches").isPositive();
        double max = 0;
        for (int i = 0; i < want.logits().length; i++) max = Math.max(max, Math.abs(got.logits()[i] - want.logits()[i]));
        System.out.printf("emulated resident %s: max|Δ| vs CPU %.3g over %d logits, greedy %s%n", label, max,
                want.logits().length, java.util.Arrays.toString(got.greedy()));
        assertThat(max).as(label + " max |Δ| vs the CPU").isLessThanOrEqualTo(1e-3);
        assertThat(got.greedy()).as(label + " greedy ids").containsExactly(want.greedy());
    }

    /**
     * Decode steps on the real r_attn_partial (emulated warps), which norms and ropes q and key p's k and appends k and v
     * itself (no r_qk_rope_append in a decode step), with the real products: qwen3 (q/k norm), gemma3 ((1+w) q/k norm,
     * sliding window 8 on local layers: the prompt and the 5 decode steps run past it, local/global rope bases),
     * gpt-oss (sinks, sliding window) and llama, f32; prefill chunks of 4 write the first rows (r_qk_rope_append), each
     * decode step reads the rows the earlier ones appended. Logits within 1e-3 of the CPU engine, greedy ids identical.
     */
    @ParameterizedTest
    @ValueSource(strings = {"qwen3", "gemma3", "gpt_oss", "llama"})
    void decodeStepsOnTheRealFusedAttentionMatchTheCpu(String model) throws Throwable {
        residentMatchesTheCpu("fused decode attention " + model, model, dev.cmf4j.convert.TensorPolicy.Mode.F32, true,
                "launches of the emulated kernels");
    }

    /**
     * Models of 4-bit products resident on the real kernels (emulated warps): llama at q4tp and qwen3 at q4_block with
     * its embedding and tied head kept 4-bit, qwen3_moe at q4tp (resident_arch.cu's expert kernels), so the 4-bit
     * matvec, q/k/v, gate/up, expert and embedding kernels (and the prefill
     * chunks of 4 on the matvec kernels: no cuBLAS here) run their own code, against the CPU's reference products
     * (float activations, as the kernels: the default CPU kernels decode q4_block on int8 activations): logits within
     * 1e-3, greedy ids identical.
     */
    @ParameterizedTest
    @ValueSource(strings = {"llama:q4tp", "qwen3:q4_block+embed", "qwen3_moe:q4tp"})
    void q4ModelsRunResidentOnTheRealKernelsAndMatchTheCpu(String which) throws Throwable {
        int q4 = q4Resident();
        residentMatchesTheCpu("4-bit " + which, CudaMockTest.convertQ4(which, tmp), true, true, "launches of the emulated kernels");
        assertThat(q4Resident() - q4).as(which + ": 4-bit resident.cu kernels run").isPositive();
    }

    /** resident.cu's 4-bit kernels the mock has run (mock_q4_resident: products and embedding gathers). */
    static int q4Resident() {
        var h = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find("mock_q4_resident").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.JAVA_INT));
        try { return (int) h.invokeExact(); } catch (Throwable t) { throw new AssertionError(t); }
    }

    /**
     * {@code --kv q8} with the real prefill attention (emulated warps; the rope + append and decode kernels are the
     * mock's twins here, the real ones are checked by selftest --ops above: emulating the products too took 100 s): gemma3
     * (sliding window 8 on local layers, past which the 11-token prompt and the decode steps run) prefills in chunks of 4
     * through r_attn_prefill_q_D (the chunk's own rows as f32 from kch/vch, the earlier ones as codes × scales), against
     * the CPU engine's q8 cache: rows at float noise (1e-4), bar a near-tie code flip (CudaMockTest's bound, 2e-2).
     */
    @Test void aQ8CacheWithTheRealPrefillAttentionMatchesTheCpusQ8Cache() throws Throwable {
        Path cmf = dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/gemma3"),
                tmp.resolve("gemma3-q8kv.cmf"), dev.cmf4j.convert.TensorPolicy.Mode.F32);
        var q8 = new dev.cmf4j.model.AttentionMemory(null, dev.cmf4j.backend.KvType.Q8);
        int[] prompt = {2, 5, 9, 200, 17, 3, 44, 101, 7, 12, 600};
        Run want;
        try (var m = dev.cmf4j.model.Model.open(cmf, null, new dev.cmf4j.backend.cpu.CpuBackend(), List.of(), h -> q8)) {
            want = run(m.graph(), prompt, 4);
        }
        long before = launches();
        Run got;
        try (CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul())) {
            List<String> notes = new ArrayList<>();
            gpu.notes(notes::add);
            try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu), List.of(), h -> q8)) {
                assertThat(m.graph().device()).as(notes.toString()).isNotNull();
                got = run(m.graph(), prompt, 4);
            }
            assertThat(notes).singleElement().asString().contains("q8 KV cache");
        }
        assertThat(launches() - before).as("launches of the emulated kernels").isGreaterThan(10);
        double[] rows = CudaMockTest.rowDiffs(got.logits(), want.logits(), want.logits().length / (prompt.length + 3));
        double max = java.util.Arrays.stream(rows).max().orElseThrow();
        long noise = java.util.Arrays.stream(rows).filter(d -> d < 1e-4).count();
        System.out.printf("emulated q8 cache gemma3: max|Δ| vs the CPU's q8 cache %.3g, %d of %d rows below 1e-4%n", max, noise, rows.length);
        assertThat(noise).as("rows at float noise").isGreaterThanOrEqualTo(3L * rows.length / 4);
        assertThat(max).as("gemma3 q8 max |Δ| vs the CPU").isLessThan(2e-2);
    }

    /**
     * Batched steps ({@link CudaMockTest#batches}: prompt chunks beside decode rows, then a step of decode rows only,
     * which runs one r_attn_rows launch a layer, each row over its own session's caches) on the real kernels, products
     * included: qwen3 (q/k norm) and gpt-oss (sinks, sliding window 8), f32; logits within 1e-3 of the CPU engine's
     * same steps.
     */
    @ParameterizedTest
    @ValueSource(strings = {"qwen3", "gpt_oss"})
    void batchedStepsOnTheRealKernelsMatchTheCpu(String model) throws Throwable {
        Path cmf = dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/" + model),
                tmp.resolve(model + "-batch.cmf"), dev.cmf4j.convert.TensorPolicy.Mode.F32);
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(cmf)) { want = CudaMockTest.batches(m.graph()); }
        float[] got;
        long before = launches();
        emulateProducts(1);
        try (CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) {
                assertThat(m.graph().device()).isNotNull();
                got = CudaMockTest.batches(m.graph());
            }
        } finally {
            emulateProducts(0);
        }
        assertThat(launches() - before).as("launches of the emulated kernels").isGreaterThan(10);
        double max = 0;
        for (int i = 0; i < want.length; i++) max = Math.max(max, Math.abs(got[i] - want[i]));
        System.out.printf("emulated batched steps %s: max|Δ| vs CPU %.3g over %d logits%n", model, max, want.length);
        assertThat(got).hasSameSizeAs(want);
        assertThat(max).as(model + " batched max |Δ| vs the CPU").isLessThanOrEqualTo(1e-3);
    }

    /**
     * gpt-oss straight from its HF folder: the experts stay fused and input-major ([E, hidden, 2I] interleaved
     * gate/up, [E, I, hidden] down, as the checkpoint stores them), so the resident forward reads them through
     * ra_expert_col on the emulated kernels; logits within 1e-3 of the CPU graph on the same weights, greedy
     * ids identical.
     */
    @Test void inputMajorExpertsRunResidentAndMatchTheCpu() throws Throwable {
        try (var hf = dev.cmf4j.model.HfFixture.open("gpt_oss")) {
            var weights = dev.cmf4j.model.TestFiles.weights(hf.reader());
            var experts = ((dev.cmf4j.model.Ffn.Moe) hf.spec().layer(0).ffn()).experts();
            assertThat(experts.gateUp().inputMajor() && experts.down().inputMajor()).as("the HF checkpoint's experts are input-major").isTrue();
            int[] prompt = {2, 5, 9, 200, 17, 3, 44, 101, 7};
            int steps = 5;
            Run want = run(hf.graph(), prompt, steps);
            List<String> notes = new ArrayList<>();
            long before = launches();
            Run got;
            try (CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul())) {
                gpu.notes(notes::add);
                var g = new dev.cmf4j.model.graph.Graph(hf.spec(), weights, new CudaBackend(gpu));
                assertThat(g.device()).as("resident: " + notes).isNotNull();
                got = run(g, prompt, steps);
            }
            assertThat(notes).singleElement().asString().contains("GPU-resident forward");
            assertThat(launches() - before).as("launches of the emulated resident_arch.cu kernels").isGreaterThan(10);
            double max = 0;
            for (int i = 0; i < want.logits().length; i++) max = Math.max(max, Math.abs(got.logits()[i] - want.logits()[i]));
            assertThat(max).as("input-major gpt_oss max |Δ| vs the CPU").isLessThanOrEqualTo(1e-3);
            assertThat(got.greedy()).containsExactly(want.greedy());
        }
    }

    /**
     * Input-major experts (gpt-oss's HF layout [in, out], which the converted fixtures do not use): the real
     * ra_moe_glu_q8 (fused interleaved gate/up with biases, clamped SwiGLU) and ra_moe_down_q8 (biases, residual
     * add) on emulated blocks, int8 weights with f32 scales per stored row (= input) and per stored column
     * (= output), against a double-precision reference. Each expert a row window of one fused tensor.
     */
    @Test void inputMajorExpertKernelsMatchAReference() {
        int experts = 3, hidden = 40, inter = 20, topK = 2, tokens = 2, outs = 2 * inter;
        java.util.Random r = new java.util.Random(5);
        byte[] wgu = new byte[experts * hidden * outs], wd = new byte[experts * inter * hidden];
        r.nextBytes(wgu);
        r.nextBytes(wd);
        float[] rsgu = rnd(r, experts * hidden, 0.01f, 0.02f), cfgu = rnd(r, outs, 0.5f, 1.5f);
        float[] rsd = rnd(r, experts * inter, 0.01f, 0.02f), cfd = rnd(r, hidden, 0.5f, 1.5f);
        float[] bgu = rnd(r, experts * outs, -0.5f, 0.5f), bd = rnd(r, experts * hidden, -0.5f, 0.5f);
        float[] x = rnd(r, tokens * hidden, -1f, 1f), y0 = rnd(r, tokens * hidden, -1f, 1f);
        int[] idx = {2, 0, 1, 2};
        float[] wts = {0.7f, 0.3f, 0.45f, 0.55f};
        float alpha = 1.702f, limit = 1.5f;   // a small limit so the clamp matters
        float[] h = new float[tokens * topK * inter], y = y0.clone();
        ctx.call(() -> {
            CudaDriver cu = ctx.driver();
            try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                long dgu = up.apply(MemorySegment.ofArray(wgu)), drsgu = up.apply(MemorySegment.ofArray(rsgu)), dcfgu = up.apply(MemorySegment.ofArray(cfgu));
                long dd = up.apply(MemorySegment.ofArray(wd)), drsd = up.apply(MemorySegment.ofArray(rsd)), dcfd = up.apply(MemorySegment.ofArray(cfd));
                long[] gw = new long[experts], grs = new long[experts], gcf = new long[experts], dw = new long[experts], drs = new long[experts], dcf = new long[experts];
                for (int e = 0; e < experts; e++) {   // expert e = stored rows [e·in, (e+1)·in) of the fused tensor
                    gw[e] = dgu + (long) e * hidden * outs; grs[e] = drsgu + 4L * e * hidden; gcf[e] = dcfgu;
                    dw[e] = dd + (long) e * inter * hidden; drs[e] = drsd + 4L * e * inter; dcf[e] = dcfd;
                }
                long tgw = up.apply(MemorySegment.ofArray(gw)), tgrs = up.apply(MemorySegment.ofArray(grs)), tgcf = up.apply(MemorySegment.ofArray(gcf));
                long tdw = up.apply(MemorySegment.ofArray(dw)), tdrs = up.apply(MemorySegment.ofArray(drs)), tdcf = up.apply(MemorySegment.ofArray(dcf));
                long dbgu = up.apply(MemorySegment.ofArray(bgu)), dbd = up.apply(MemorySegment.ofArray(bd));
                long dx = up.apply(MemorySegment.ofArray(x)), dy = up.apply(MemorySegment.ofArray(y0)), didx = up.apply(MemorySegment.ofArray(idx));
                long dwts = up.apply(MemorySegment.ofArray(wts)), dh = up.apply(MemorySegment.ofArray(h));
                MemorySegment mod = ctx.module(ResidentForward.ARCH_CU);
                cu.launch(cu.function(mod, "ra_moe_glu_q8"), (inter + 255) / 256, tokens * topK, 1, 256, 1, 1, 0,
                        Kernels.named("ra_moe_glu_q8").pack(a, tgw, tgrs, tgcf, outs, 1, tgw, tgrs, tgcf, outs, 1, dbgu, dbgu, didx, dx, dh,
                                inter, hidden, topK, 2, 3, alpha, limit));
                cu.launch(cu.function(mod, "ra_moe_down_q8"), (hidden + 255) / 256, tokens, 1, 256, 1, 1, 0,
                        Kernels.named("ra_moe_down_q8").pack(a, tdw, tdrs, tdcf, hidden, 1, dbd, didx, dwts, dh, dy, hidden, inter, topK, 1));
                cu.synchronize();
                toHost(cu, a, dh, h);
                toHost(cu, a, dy, y);
            }
            return null;
        });
        var glu = new dev.cmf4j.backend.Glu.ClampedSwiglu(alpha, limit);
        double max = 0;
        int clamped = 0;
        double[] want = new double[tokens * hidden];
        for (int t = 0; t < tokens; t++) {
            for (int i = 0; i < hidden; i++) want[t * hidden + i] = y0[t * hidden + i];
            for (int j = 0; j < topK; j++) {
                int slot = t * topK + j, e = idx[slot];
                float[] hs = new float[inter];
                for (int q = 0; q < inter; q++) {
                    double g = 0, u = 0;
                    for (int c = 0; c < hidden; c++) {
                        long row = (long) e * hidden + c;
                        double xs = x[t * hidden + c] * rsgu[(int) row];
                        g += wgu[(int) (row * outs + 2 * q)] * xs;
                        u += wgu[(int) (row * outs + 2 * q + 1)] * xs;
                    }
                    g = g * cfgu[2 * q] + bgu[e * outs + 2 * q];
                    u = u * cfgu[2 * q + 1] + bgu[e * outs + 2 * q + 1];
                    if (g > limit || Math.abs(u) > limit) clamped++;
                    hs[q] = glu.apply((float) g, (float) u);
                    max = Math.max(max, Math.abs(h[slot * inter + q] - hs[q]));
                }
                for (int o = 0; o < hidden; o++) {
                    double v = 0;
                    for (int c = 0; c < inter; c++) {
                        long row = (long) e * inter + c;
                        v += wd[(int) (row * hidden + o)] * (double) hs[c] * rsd[(int) row];
                    }
                    want[t * hidden + o] += wts[slot] * (v * cfd[o] + bd[e * hidden + o]);
                }
            }
            for (int o = 0; o < hidden; o++) max = Math.max(max, Math.abs(y[t * hidden + o] - want[t * hidden + o]));
        }
        assertThat(max).as("input-major expert kernels vs the reference").isLessThan(1e-4);
        assertThat(clamped).as("gate/up values past the clamp limit").isPositive();
    }

    /**
     * resident.cu's decode products (r_matvec, r_glu, r_matvec3; their shared-memory path when cols % 4 = 0, the
     * warp-per-row path else) on emulated blocks against a double-precision reference, on ragged shapes: rows not a
     * multiple of the block's 8, cols past one 4096-column tile (4100), cols % 4 ≠ 0, tiny matrices; int8 with row
     * and column scales, the folded RMSNorm, bias and residual add; bf16 and f16 with and without column scales.
     */
    @ParameterizedTest
    @ValueSource(strings = {"13x4100", "9x36", "11x37", "3x8", "20x133"})
    void residentProductsOnRaggedShapesMatchAReference(String shape) {
        int rows = Integer.parseInt(shape.substring(0, shape.indexOf('x'))), cols = Integer.parseInt(shape.substring(shape.indexOf('x') + 1));
        int tokens = 2, gx = (rows + 7) / 8;
        java.util.Random r = new java.util.Random(rows * 31L + cols);
        byte[] wq = new byte[rows * cols], wq2 = new byte[rows * cols];
        r.nextBytes(wq);
        r.nextBytes(wq2);
        short[] wb = new short[rows * cols];
        float[] wbf = new float[rows * cols];
        for (int i = 0; i < wb.length; i++) {   // bf16 = the high half of an f32
            wb[i] = (short) (Float.floatToRawIntBits((float) r.nextGaussian()) >>> 16);
            wbf[i] = Float.intBitsToFloat(wb[i] << 16);
        }
        short[] wh = new short[rows * cols];
        float[] whf = new float[rows * cols];
        for (int i = 0; i < wh.length; i++) { wh[i] = Float.floatToFloat16((float) r.nextGaussian()); whf[i] = Float.float16ToFloat(wh[i]); }
        float[] rs = rnd(r, rows, 0.01f, 0.02f), rs2 = rnd(r, rows, 0.01f, 0.02f), cf = rnd(r, cols, 0.5f, 1.5f), cf2 = rnd(r, cols, 0.5f, 1.5f);
        float[] bias = rnd(r, rows, -0.5f, 0.5f), x = rnd(r, tokens * cols, -2f, 2f), y0 = rnd(r, tokens * rows, -1f, 1f);
        float eps = 1e-5f;
        int n = tokens * rows;
        // outputs: 0 q8 matvec (normed, bias, accumulate), 1 bf16 matvec (cf, plain), 2 f16 matvec (no cf), 3 q8 glu (normed),
        // 4..6 q8 matvec3 (q8 rows, rows, rows/2+1; normed; bias on the first)
        int rows3 = rows / 2 + 1;
        float[][] got = new float[7][];
        long before = launches();
        emulateProducts(1);
        ctx.call(() -> {
            CudaDriver cu = ctx.driver();
            try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                long dwq = up.apply(MemorySegment.ofArray(wq)), dwq2 = up.apply(MemorySegment.ofArray(wq2));
                long dwb = up.apply(MemorySegment.ofArray(wb)), dwh = up.apply(MemorySegment.ofArray(wh));
                long drs = up.apply(MemorySegment.ofArray(rs)), drs2 = up.apply(MemorySegment.ofArray(rs2));
                long dcf = up.apply(MemorySegment.ofArray(cf)), dcf2 = up.apply(MemorySegment.ofArray(cf2));
                long dbias = up.apply(MemorySegment.ofArray(bias)), dx = up.apply(MemorySegment.ofArray(x));
                long[] dy = new long[7];
                for (int o = 0; o < 7; o++) dy[o] = up.apply(MemorySegment.ofArray(o == 0 ? y0 : new float[tokens * rows]));
                MemorySegment mod = ctx.module(ResidentForward.RESIDENT_CU);
                cu.launch(cu.function(mod, "r_matvec_q8"), gx, tokens, 1, 256, 1, 1, 0,
                        Kernels.named("r_matvec_q8").pack(a, dwq, drs, dcf, dbias, dx, dy[0], rows, cols, 1, 1, eps));
                cu.launch(cu.function(mod, "r_matvec_bf16"), gx, tokens, 1, 256, 1, 1, 0,
                        Kernels.named("r_matvec_bf16").pack(a, dwb, 0L, dcf, 0L, dx, dy[1], rows, cols, 0, 0, 0f));
                cu.launch(cu.function(mod, "r_matvec_f16"), gx, tokens, 1, 256, 1, 1, 0,
                        Kernels.named("r_matvec_f16").pack(a, dwh, 0L, 0L, 0L, dx, dy[2], rows, cols, 0, 0, 0f));
                cu.launch(cu.function(mod, "r_glu_q8"), gx, tokens, 1, 256, 1, 1, 0,
                        Kernels.named("r_glu_q8").pack(a, dwq, drs, dcf, dwq2, drs2, dcf2, dx, dy[3], rows, cols, 1, eps));
                cu.launch(cu.function(mod, "r_matvec3_q8"), 2 * gx + (rows3 + 7) / 8, tokens, 1, 256, 1, 1, 0,
                        Kernels.named("r_matvec3_q8").pack(a, dwq, drs, dcf, dbias, dy[4], rows, dwq2, drs2, dcf2, 0L, dy[5], rows,
                                dwq, drs2, dcf2, 0L, dy[6], rows3, dx, cols, 1, eps));
                cu.synchronize();
                for (int o = 0; o < 7; o++) {
                    MemorySegment host = a.allocate(4L * n, 4);
                    cu.copyToHost(host, dy[o], host.byteSize());
                    got[o] = host.toArray(ValueLayout.JAVA_FLOAT);
                }
            } finally {
                emulateProducts(0);
            }
            return null;
        });
        assertThat(launches() - before).as("launches of the emulated resident.cu kernels").isEqualTo(5);
        double worst = 0;
        for (int t = 0; t < tokens; t++) {
            double ss = 0;
            for (int c = 0; c < cols; c++) ss += (double) x[t * cols + c] * x[t * cols + c];
            double inv = 1 / Math.sqrt(ss / cols + eps);
            for (int i = 0; i < rows; i++) {
                double q = 0, q2 = 0, q2b = 0, b = 0, h = 0, q1c2 = 0;
                for (int c = 0; c < cols; c++) {
                    double xv = x[t * cols + c];
                    q += wq[i * cols + c] * cf[c] * xv;
                    q2 += wq2[i * cols + c] * cf2[c] * xv;
                    q1c2 += wq[i * cols + c] * cf2[c] * xv;
                    b += wbf[i * cols + c] * cf[c] * xv;
                    h += whf[i * cols + c] * xv;
                }
                double g = q * inv * rs[i], u = q2 * inv * rs2[i];
                double[] want = {y0[t * rows + i] + q * inv * rs[i] + bias[i], b, h, g / (1 + Math.exp(-g)) * u,
                        q * inv * rs[i] + bias[i], u, i < rows3 ? q1c2 * inv * rs2[i] : Double.NaN};
                for (int o = 0; o < 7; o++) {
                    if (Double.isNaN(want[o])) continue;
                    double err = Math.abs(got[o][t * (o == 6 ? rows3 : rows) + i] - want[o]) / (1 + Math.abs(want[o]));
                    assertThat(err).as("output %d, token %d, row %d of %s", o, t, i, shape).isLessThan(2e-5);
                    worst = Math.max(worst, err);
                }
            }
        }
        System.out.printf("emulated resident products %s: worst relative error %.3g%n", shape, worst);
    }

    /**
     * resident.cu's 4-bit kernels (q4.cuh's decoding, shared with matvec_q4.cu) on emulated warps against the CPU's own
     * dequantization ({@code ReferenceKernels.dequantRow}), the matrices uploaded by CudaMatMul as the resident forward
     * reads them: r_matvec (bias, residual add), r_matvec3 (two matrices of {@code rows} rows and one of fewer), r_glu,
     * the products in double within 2e-5 relative; r_embed (3 ids, scaled by ½) and r_widen (the prefill's f32 copy)
     * bit for bit. q4_block on rows not a multiple of 8 and cols not a multiple of 32 (groups straddling rows: the
     * per-weight path), q4tp past one 256-column warp step, and both past 1,024 columns (the decode products' loop of
     * four steps' loads, then its remainder). Shape = dtype:rows x cols.
     */
    @ParameterizedTest
    @ValueSource(strings = {"q4_block:13x96", "q4_block:11x40", "q4_block:9x300", "q4_block:9x2080", "q4tp:13x96", "q4tp:9x288",
            "q4tp:3x544", "q4tp:5x2336"})
    void residentQ4KernelsMatchTheCpusWeights(String spec) {
        dev.cmf4j.format.DType dt = dev.cmf4j.format.DType.ofLabel(spec.substring(0, spec.indexOf(':')));
        String shape = spec.substring(spec.indexOf(':') + 1);
        int rows = Integer.parseInt(shape.substring(0, shape.indexOf('x'))), cols = Integer.parseInt(shape.substring(shape.indexOf('x') + 1));
        int tokens = 2, gx = (rows + 7) / 8, rows3 = rows / 2 + 1, kind = ResidentWeights.kind(dt);
        String k = Kernels.Q4_KINDS[kind - 4];
        java.util.Random r = new java.util.Random(rows * 37L + cols);
        float[] x = rnd(r, tokens * cols, -2f, 2f), bias = rnd(r, rows, -0.5f, 0.5f), y0 = rnd(r, tokens * rows, -1f, 1f);
        int[] ids = {rows - 1, 0, 5 % rows};
        float[][] got = new float[7][];
        float[][][] w = new float[3][][];
        long before = launches();
        try (Arena a = Arena.ofShared(); CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.reference().matmul())) {
            dev.cmf4j.backend.Matrix[] m = new dev.cmf4j.backend.Matrix[3];
            for (int i = 0; i < 3; i++) {
                int n = i == 2 ? rows3 : rows;
                m[i] = dev.cmf4j.backend.Matrix.of("w" + i, dt, CudaMockTest.payload(a, dt, n, cols), n, cols);
                w[i] = new float[n][cols];
                for (int row = 0; row < n; row++) dev.cmf4j.backend.cpu.kernel.ReferenceKernels.dequantRow(dt, m[i].data(), n, cols, row, w[i][row]);
            }
            emulateProducts(1);
            ctx.call(() -> {
                CudaDriver cu = ctx.driver();
                try (Uploads up = new Uploads(cu, a)) {
                    CudaMatMul.DeviceMatrix[] d = new CudaMatMul.DeviceMatrix[3];
                    for (int i = 0; i < 3; i++) d[i] = gpu.resident(m[i]);
                    long dx = up.apply(MemorySegment.ofArray(x)), dbias = up.apply(MemorySegment.ofArray(bias)), dids = up.apply(MemorySegment.ofArray(ids));
                    int[] sizes = {tokens * rows, tokens * rows, tokens * rows, tokens * rows3, tokens * rows, ids.length * cols, rows * cols};
                    long[] dy = new long[7];
                    for (int o = 0; o < 7; o++) dy[o] = up.apply(MemorySegment.ofArray(o == 0 ? y0 : new float[sizes[o]]));
                    MemorySegment mod = ctx.module(ResidentForward.RESIDENT_CU);
                    cu.launch(cu.function(mod, "r_matvec_" + k), gx, tokens, 1, 256, 1, 1, 0, Kernels.named("r_matvec_" + k).pack(a,
                            d[0].weights(), d[0].rowScales(), d[0].colField(), dbias, dx, dy[0], rows, cols, 1, 0, 0f));
                    cu.launch(cu.function(mod, "r_matvec3_" + k), 2 * gx + (rows3 + 7) / 8, tokens, 1, 256, 1, 1, 0,
                            Kernels.named("r_matvec3_" + k).pack(a, d[0].weights(), d[0].rowScales(), d[0].colField(), dbias, dy[1], rows,
                                    d[1].weights(), d[1].rowScales(), d[1].colField(), 0L, dy[2], rows,
                                    d[2].weights(), d[2].rowScales(), d[2].colField(), 0L, dy[3], rows3, dx, cols, 0, 0f));
                    cu.launch(cu.function(mod, "r_glu_" + k), gx, tokens, 1, 256, 1, 1, 0, Kernels.named("r_glu_" + k).pack(a,
                            d[0].weights(), d[0].rowScales(), d[0].colField(), d[1].weights(), d[1].rowScales(), d[1].colField(), dx, dy[4],
                            rows, cols, 0, 0f));
                    cu.launch(cu.function(mod, "r_embed_" + k), ids.length, 1, 1, 256, 1, 1, 0, Kernels.named("r_embed_" + k).pack(a,
                            d[0].weights(), d[0].rowScales(), d[0].colField(), dids, dy[5], cols, 0.5f));
                    cu.launch(cu.function(mod, "r_widen_" + k), rows, 1, 1, 256, 1, 1, 0, Kernels.named("r_widen_" + k).pack(a,
                            d[0].weights(), d[0].rowScales(), d[0].colField(), dy[6], rows, cols));
                    cu.synchronize();
                    for (int o = 0; o < 7; o++) {
                        MemorySegment host = a.allocate(4L * sizes[o], 4);
                        cu.copyToHost(host, dy[o], host.byteSize());
                        got[o] = host.toArray(ValueLayout.JAVA_FLOAT);
                    }
                }
                return null;
            });
        } finally {
            emulateProducts(0);
        }
        assertThat(launches() - before).as("launches of the emulated resident.cu kernels").isEqualTo(5);
        double worst = 0;
        for (int t = 0; t < tokens; t++)
            for (int i = 0; i < rows; i++) {
                double[] dot = new double[3];
                for (int j = 0; j < 3; j++)
                    if (j < 2 || i < rows3) for (int c = 0; c < cols; c++) dot[j] += (double) w[j][i][c] * x[t * cols + c];
                double g = dot[0], u = dot[1];
                double[] want = {y0[t * rows + i] + dot[0] + bias[i], dot[0] + bias[i], dot[1], i < rows3 ? dot[2] : Double.NaN,
                        g / (1 + Math.exp(-g)) * u};
                for (int o = 0; o < 5; o++) {
                    if (Double.isNaN(want[o])) continue;
                    double err = Math.abs(got[o][t * (o == 3 ? rows3 : rows) + i] - want[o]) / (1 + Math.abs(want[o]));
                    assertThat(err).as("%s output %d, token %d, row %d", spec, o, t, i).isLessThan(2e-5);
                    worst = Math.max(worst, err);
                }
            }
        for (int j = 0; j < ids.length; j++)
            for (int c = 0; c < cols; c++)
                assertThat(got[5][j * cols + c]).as("%s embedding of id %d, column %d", spec, ids[j], c).isEqualTo(w[0][ids[j]][c] * 0.5f);
        for (int i = 0; i < rows; i++)
            for (int c = 0; c < cols; c++) assertThat(got[6][i * cols + c]).as("%s widened [%d, %d]", spec, i, c).isEqualTo(w[0][i][c]);
        System.out.printf("emulated resident 4-bit kernels %s: worst relative error %.3g%n", spec, worst);
    }

    /**
     * resident_arch.cu's 4-bit expert kernels on emulated warps with experts that are row windows of fused tensors (the
     * table's addresses from {@code ResidentWeights.expertAddresses}, into each plane at the window's first row): gate
     * and up ({@code ra_moe_glu_*}, SwiGLU) and down ({@code ra_moe_down_*}, weighted over the picks) of 3 experts, 2
     * tokens × 2 picks, against the CPU's dequantized rows of the fused tensors in double (2e-5 relative). And which
     * 4-bit experts the kernels refuse: input-major, and a q4_block window that starts inside a group.
     */
    @ParameterizedTest
    @ValueSource(strings = {"q4_block", "q4tp"})
    void q4ExpertKernelsReadRowWindowsOfFusedTensors(String label) {
        dev.cmf4j.format.DType dt = dev.cmf4j.format.DType.ofLabel(label);
        int experts = 3, inter = 32, hidden = 64, tokens = 2, topK = 2, kind = ResidentWeights.kind(dt);
        int[] idx = {2, 0, 1, 2};
        float[] wts = {0.7f, 0.3f, 0.4f, 0.6f};
        java.util.Random r = new java.util.Random(kind);
        float[] x = rnd(r, tokens * hidden, -2f, 2f);
        float[] h = new float[tokens * topK * inter], y = new float[tokens * hidden];
        float[][][] w = new float[3][][];   // gate, up [experts·inter, hidden]; down [experts·hidden, inter]
        try (Arena a = Arena.ofShared(); CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.reference().matmul())) {
            dev.cmf4j.backend.Matrix[] fused = new dev.cmf4j.backend.Matrix[3];
            for (int i = 0; i < 3; i++) {
                int rows = experts * (i < 2 ? inter : hidden), cols = i < 2 ? hidden : inter;
                fused[i] = dev.cmf4j.backend.Matrix.of("fused" + i, dt, CudaMockTest.payload(a, dt, rows, cols), rows, cols);
                w[i] = new float[rows][cols];
                for (int row = 0; row < rows; row++) dev.cmf4j.backend.cpu.kernel.ReferenceKernels.dequantRow(dt, fused[i].data(), rows, cols, row, w[i][row]);
            }
            dev.cmf4j.backend.Matrix whole = fused[0];
            assertThat(ResidentWeights.supportsExpert(whole.slice(inter, inter, false))).as("a window on a group").isTrue();
            assertThat(ResidentWeights.supportsExpert(whole.slice(0, hidden, true))).as("input-major").isFalse();
            dev.cmf4j.backend.Matrix odd = dev.cmf4j.backend.Matrix.of("odd", dt, CudaMockTest.payload(a, dt, 6, dt == dev.cmf4j.format.DType.Q4TP ? 32 : 40),
                    6, dt == dev.cmf4j.format.DType.Q4TP ? 32 : 40);
            assertThat(ResidentWeights.supportsExpert(odd.slice(1, 3, false))).as("a window from row 1 of " + odd.cols() + " columns")
                    .isEqualTo(dt == dev.cmf4j.format.DType.Q4TP);
            ctx.call(() -> {
                CudaDriver cu = ctx.driver();
                try (Uploads up = new Uploads(cu, a)) {
                    long[][] tab = new long[3][];   // per fused tensor: its 3 tables' device addresses
                    for (int i = 0; i < 3; i++) {
                        int n = i < 2 ? inter : hidden;
                        long[][] t = new long[3][experts];
                        for (int e = 0; e < experts; e++) {
                            dev.cmf4j.backend.Matrix m = fused[i].slice((long) e * n, n, false);
                            long[] at = ResidentWeights.expertAddresses(m, gpu.resident(m));
                            for (int j = 0; j < 3; j++) t[j][e] = at[j];
                        }
                        tab[i] = new long[] {up.apply(MemorySegment.ofArray(t[0])), up.apply(MemorySegment.ofArray(t[1])), up.apply(MemorySegment.ofArray(t[2]))};
                    }
                    long dx = up.apply(MemorySegment.ofArray(x)), didx = up.apply(MemorySegment.ofArray(idx)), dwts = up.apply(MemorySegment.ofArray(wts));
                    long dh = up.apply(MemorySegment.ofArray(h)), dy = up.apply(MemorySegment.ofArray(y));
                    MemorySegment mod = ctx.module(Kernels.ARCH_CU);
                    String k = Kernels.Q4_KINDS[kind - 4];
                    cu.launch(cu.function(mod, "ra_moe_glu_" + k), (inter + 7) / 8, tokens * topK, 1, 256, 1, 1, 0,
                            Kernels.moeGlu(k).pack(a, tab[0][0], tab[0][1], tab[0][2], inter, 0, tab[1][0], tab[1][1], tab[1][2], inter, 0,
                                    0L, 0L, didx, dx, dh, inter, hidden, topK, 0, 0, 0f, 0f));
                    cu.launch(cu.function(mod, "ra_moe_down_" + k), (hidden + 7) / 8, tokens, 1, 256, 1, 1, 0,
                            Kernels.moeDown(k).pack(a, tab[2][0], tab[2][1], tab[2][2], hidden, 0, 0L, didx, dwts, dh, dy, hidden, inter, topK, 0));
                    cu.synchronize();
                    toHost(cu, a, dh, h);
                    toHost(cu, a, dy, y);
                }
                return null;
            });
        }
        double worst = 0;
        double[] want = new double[tokens * hidden];
        for (int t = 0; t < tokens; t++)
            for (int j = 0; j < topK; j++) {
                int slot = t * topK + j, e = idx[slot];
                double[] hs = new double[inter];
                for (int i = 0; i < inter; i++) {
                    double g = 0, u = 0;
                    for (int c = 0; c < hidden; c++) {
                        g += (double) w[0][e * inter + i][c] * x[t * hidden + c];
                        u += (double) w[1][e * inter + i][c] * x[t * hidden + c];
                    }
                    hs[i] = g / (1 + Math.exp(-g)) * u;
                    double err = Math.abs(h[slot * inter + i] - hs[i]) / (1 + Math.abs(hs[i]));
                    assertThat(err).as("%s gate/up of expert %d, slot %d, row %d", label, e, slot, i).isLessThan(2e-5);
                    worst = Math.max(worst, err);
                }
                for (int o = 0; o < hidden; o++) {
                    double d = 0;
                    for (int i = 0; i < inter; i++) d += (double) w[2][e * hidden + o][i] * h[slot * inter + i];
                    want[t * hidden + o] += wts[slot] * d;
                }
            }
        for (int i = 0; i < want.length; i++) {
            double err = Math.abs(y[i] - want[i]) / (1 + Math.abs(want[i]));
            assertThat(err).as("%s down, output %d", label, i).isLessThan(2e-5);
            worst = Math.max(worst, err);
        }
        System.out.printf("emulated 4-bit expert kernels %s on row windows: worst relative error %.3g%n", label, worst);
    }

    /**
     * resident_mmvq.cu's small-batch products on emulated blocks give every row of x the bits resident.cu's matvec
     * kernels (r_matvec_q8, r_matvec3_q8, r_glu_q8, a block row per row of x) give it: rows × cols × T with tiles of x'
     * of 2048, 1024 and 512 columns (cols past them: 4100, 1540), a last block of rows past the matrix, T = 3 (one
     * block row of 4) and 9 (two block rows of 8, the second of one); int8 with row and column scales, the folded
     * RMSNorm, bias and residual add; q/k/v in one launch; gate and up. Shape = rows x cols x T / weight rows a block
     * (8, or 16: the _r16 instances).
     */
    @ParameterizedTest
    @ValueSource(strings = {"13x4100x3/8", "5x1540x9/8", "17x516x3/16"})
    void smallBatchProductsGiveEveryRowTheMatvecKernelsBits(String shape) {
        String[] d = shape.split("[x/]");
        int rows = Integer.parseInt(d[0]), cols = Integer.parseInt(d[1]), tokens = Integer.parseInt(d[2]), rb = Integer.parseInt(d[3]);
        int gx = (rows + 7) / 8, nt = tokens <= 4 ? 4 : 8, gy = (tokens + nt - 1) / nt, rows3 = rows / 2 + 1, gx3 = 2 * gx + (rows3 + 7) / 8;
        int sx = (rows + rb - 1) / rb, sx3 = 2 * sx + (rows3 + rb - 1) / rb;
        java.util.Random r = new java.util.Random(rows * 131L + cols + tokens);
        byte[] wq = new byte[rows * cols], wq2 = new byte[rows * cols];
        r.nextBytes(wq);
        r.nextBytes(wq2);
        float[] rs = rnd(r, rows, 0.01f, 0.02f), rs2 = rnd(r, rows, 0.01f, 0.02f), cf = rnd(r, cols, 0.5f, 1.5f), cf2 = rnd(r, cols, 0.5f, 1.5f);
        float[] bias = rnd(r, rows, -0.5f, 0.5f), x = rnd(r, tokens * cols, -2f, 2f), y0 = rnd(r, tokens * rows, -1f, 1f);
        float eps = 1e-5f;
        // outputs 0..5 by the matvec kernels, 6..11 by the small-batch ones: matvec (normed, bias, accumulate), matvec
        // (plain, no scales), glu (normed), matvec3's q, k, v (normed; bias on q)
        float[][] got = new float[12][];
        long before = launches();
        emulateProducts(1);
        ctx.call(() -> {
            CudaDriver cu = ctx.driver();
            try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                long dwq = up.apply(MemorySegment.ofArray(wq)), dwq2 = up.apply(MemorySegment.ofArray(wq2));
                long drs = up.apply(MemorySegment.ofArray(rs)), drs2 = up.apply(MemorySegment.ofArray(rs2));
                long dcf = up.apply(MemorySegment.ofArray(cf)), dcf2 = up.apply(MemorySegment.ofArray(cf2));
                long dbias = up.apply(MemorySegment.ofArray(bias)), dx = up.apply(MemorySegment.ofArray(x));
                long[] dy = new long[12];
                for (int o = 0; o < 12; o++) dy[o] = up.apply(MemorySegment.ofArray(o % 6 == 0 ? y0 : new float[tokens * rows]));
                MemorySegment mod = ctx.module(ResidentForward.RESIDENT_CU), small = ctx.module(Kernels.MMVQ_CU);
                for (int k = 0; k < 2; k++) {
                    MemorySegment m = k == 0 ? mod : small;
                    String sfx = k == 0 ? "" : "_" + nt + (rb == 8 ? "" : "_r" + rb);
                    int o = 6 * k, y = k == 0 ? tokens : gy;
                    Object[][] args = {
                        {dwq, drs, dcf, dbias, dx, dy[o], rows, cols, 1, 1, eps},
                        {dwq2, 0L, 0L, 0L, dx, dy[o + 1], rows, cols, 0, 0, 0f},
                        {dwq, drs, dcf, dwq2, drs2, dcf2, dx, dy[o + 2], rows, cols, 1, eps},
                        {dwq, drs, dcf, dbias, dy[o + 3], rows, dwq2, drs2, dcf2, 0L, dy[o + 4], rows,
                                dwq, drs2, dcf2, 0L, dy[o + 5], rows3, dx, cols, 1, eps}};
                    String[] names = {"r_matvec_q8", "r_matvec_q8", "r_glu_q8", "r_matvec3_q8"};
                    for (int i = 0; i < 4; i++) {
                        String name = (k == 0 ? names[i] : names[i].replace("r_", "rq_")) + sfx;
                        Object[] ai = k == 0 ? args[i] : java.util.Arrays.copyOf(args[i], args[i].length + 1);
                        if (k == 1) ai[ai.length - 1] = tokens;
                        cu.launch(cu.function(m, name), k == 0 ? (i == 3 ? gx3 : gx) : (i == 3 ? sx3 : sx), y, 1, k == 0 ? 256 : 32 * rb, 1, 1, 0,
                                Kernels.named(name).pack(a, ai));
                    }
                }
                cu.synchronize();
                for (int o = 0; o < 12; o++) {
                    int n = tokens * (o % 6 == 5 ? rows3 : rows);
                    MemorySegment host = a.allocate(4L * n, 4);
                    cu.copyToHost(host, dy[o], host.byteSize());
                    got[o] = host.toArray(ValueLayout.JAVA_FLOAT);
                }
            } finally {
                emulateProducts(0);
            }
            return null;
        });
        assertThat(launches() - before).as("launches of the emulated kernels").isEqualTo(8);
        for (int o = 0; o < 6; o++) assertThat(got[6 + o]).as("output %d of %s", o, shape).containsExactly(got[o]);
        double ss = 0;   // and they are the products: the first output's first row against a double-precision reference
        for (int c = 0; c < cols; c++) ss += (double) x[c] * x[c];
        for (int i = 0; i < rows; i++) {
            double q = 0;
            for (int c = 0; c < cols; c++) q += wq[i * cols + c] * cf[c] * (double) x[c];
            double want = y0[i] + q / Math.sqrt(ss / cols + eps) * rs[i] + bias[i];
            assertThat(Math.abs(got[6][i] - want) / (1 + Math.abs(want))).as("row %d of %s", i, shape).isLessThan(2e-5);
        }
    }

    /**
     * resident.cu's prefill attention (r_attn_prefill_D, the real kernel on emulated blocks) against a double-precision
     * reference, on ragged shapes: shape = hd/heads/kvHeads/T/pos0/window/sinks. Chunks not a multiple of the query
     * tile, chunks after earlier keys (pos0 > 0), GQA group 1, 3, 4 and one larger than a block's rows (72 heads on
     * one kv head: two head groups), sliding windows smaller than the chunk, sinks on and off, head dims 128, 64,
     * 256, 40 and 13 (every bucket; odd and not a multiple of 4). Cache rows past the chunk hold NaN (a key read
     * past the causal end would show) and the output row after the chunk a sentinel (nothing written past it). Head
     * dims up to 128 run twice: the f32 SIMT kernel and the tensor-core one (r_attn_prefill_tc_D, its mma.sync emulated
     * from the PTX fragment layouts; Q, K and V are random and not symmetric, so a wrong layout would mix rows, keys or
     * columns), both to the same tolerance: 2e-6 of the row's honest scale, Σ p_j·max|v_j| / Σ p (what its outputs are
     * made of; the largest |v| the row sees would hide errors where keys of negligible weight hold huge values).
     */
    @ParameterizedTest
    @ValueSource(strings = {"128/8/2/37/0/0/0", "64/4/4/70/25/0/1", "13/8/2/21/9/6/1", "256/4/1/19/5/0/0", "256/2/2/11/30/4/1",
            "40/6/2/45/3/10/1", "20/72/1/3/4/0/0", "32/4/2/2/0/0/0"})
    void prefillAttentionOnRaggedShapesMatchesAReference(String shape) {
        String[] f = shape.split("/");
        int hd = Integer.parseInt(f[0]), heads = Integer.parseInt(f[1]), kvHeads = Integer.parseInt(f[2]), T = Integer.parseInt(f[3]);
        int pos0 = Integer.parseInt(f[4]), window = Integer.parseInt(f[5]);
        boolean withSinks = f[6].equals("1");
        int ctxLen = pos0 + T + 5, kvDim = kvHeads * hd, group = heads / kvHeads;
        java.util.Random r = new java.util.Random(shape.hashCode());
        float[] q = rnd(r, T * heads * hd, -1f, 1f), kc = rnd(r, ctxLen * kvDim, -1f, 1f), vc = rnd(r, ctxLen * kvDim, -1f, 1f);
        for (int i = (pos0 + T) * kvDim; i < ctxLen * kvDim; i++) kc[i] = vc[i] = Float.NaN;   // not yet written
        float[] sinks = rnd(r, heads, -1f, 2f);
        float scale = (float) (1.5 / Math.sqrt(hd));
        float[] out0 = new float[(T + 1) * heads * hd];
        java.util.Arrays.fill(out0, 7f);
        int bucket = ResidentLowering.prefillBucket(hd);
        for (boolean tc : bucket < ResidentLowering.PREFILL_TC_BUCKETS ? new boolean[] {false, true} : new boolean[] {false})
            prefillAttention(shape, tc, q, kc, vc, sinks, withSinks, out0, scale);
    }

    /**
     * The prefill attention kernels on operands far from 1, which the tensor-core kernel must scale before its f16
     * parts (f16 overflows above 65,504 and loses bits below 6e-5): shape = hd/heads/kvHeads/T/pos0/qmag/kmag/vgrow —
     * Q times qmag, K times kmag, value row j times 2^(j·vgrow) (rising: each O row's units rise from tile to tile and
     * the row is rescaled; within a tile a causal row must not lose its small values to the larger ones of later keys
     * it does not see — a build with one V scale per tile failed "40/3/3/50/0/1/1/1" by 3.6e-3; falling: small values
     * enter rows kept in larger units). Error relative to the row's honest scale, as above.
     */
    @ParameterizedTest
    @ValueSource(strings = {"128/4/2/40/30/1e-5/1e5/0", "64/4/1/33/40/1e6/1e-6/0.5", "128/2/1/20/60/3e-3/30/-0.3", "40/3/3/50/0/1/1/1", "128/4/1/45/20/1/1/-1"})
    void prefillAttentionScalesOperandsOfAnyMagnitude(String shape) {
        String[] f = shape.split("/");
        int hd = Integer.parseInt(f[0]), heads = Integer.parseInt(f[1]), kvHeads = Integer.parseInt(f[2]), T = Integer.parseInt(f[3]);
        int pos0 = Integer.parseInt(f[4]);
        float qmag = Float.parseFloat(f[5]), kmag = Float.parseFloat(f[6]), vgrow = Float.parseFloat(f[7]);
        int ctxLen = pos0 + T, kvDim = kvHeads * hd;
        java.util.Random r = new java.util.Random(shape.hashCode());
        float[] q = rnd(r, T * heads * hd, -qmag, qmag), kc = rnd(r, ctxLen * kvDim, -kmag, kmag), vc = rnd(r, ctxLen * kvDim, -1f, 1f);
        for (int j = 0; j < ctxLen; j++) for (int c = 0; c < kvDim; c++) vc[j * kvDim + c] *= (float) Math.pow(2, j * vgrow);
        float scale = (float) (1.0 / Math.sqrt(hd));
        float[] out0 = new float[(T + 1) * heads * hd];
        java.util.Arrays.fill(out0, 7f);
        String s = hd + "/" + heads + "/" + kvHeads + "/" + T + "/" + pos0 + "/0/0";
        for (boolean tc : new boolean[] {false, true}) prefillAttention(s, tc, q, kc, vc, new float[heads], false, out0, scale);
    }

    /**
     * A key whose weight is negligible but whose values are huge must not cost the other keys of the row their
     * precision (the tensor-core kernel keeps each O row in units fitted to what it holds): shape =
     * hd/heads/kvHeads/T/pos0/case/vlog2, key 0's values times 2^vlog2, scores shifted through Q's column 0 (1 in every
     * query row) and the keys' column 0. "tiny": key 0 scores 48 below the rest (p ≈ 1e-21), a build that raised a row's
     * units for any key with p > 0 lost everything else (0.99 off with 2^40). "early": key 0 is the largest of the first
     * 32-key tile (48 below the later keys, the rest of that tile 60 below), so a row's first tile sets units from key
     * 0's values and later tiles, whose keys carry the row, must lower them again (3e-3 off with 2^30 in a build that
     * never lowered them). Error relative to the row's honest scale, Σ p_j·max|v_j| / Σ p, for both kernels.
     */
    @ParameterizedTest
    @ValueSource(strings = {"64/1/1/40/0/tiny/40", "64/1/1/40/0/tiny/20", "64/1/1/64/0/early/30", "64/1/1/64/0/early/20",
            "128/4/2/50/7/tiny/40", "128/2/1/70/3/early/30", "40/2/2/45/20/early/25", "32/3/1/40/0/tiny/60"})
    void prefillAttentionKeepsPrecisionBesideHeavyNegligibleKeys(String shape) {
        String[] f = shape.split("/");
        int hd = Integer.parseInt(f[0]), heads = Integer.parseInt(f[1]), kvHeads = Integer.parseInt(f[2]), T = Integer.parseInt(f[3]);
        int pos0 = Integer.parseInt(f[4]), vlog2 = Integer.parseInt(f[6]);
        boolean early = f[5].equals("early");
        int ctxLen = pos0 + T, kvDim = kvHeads * hd;
        java.util.Random r = new java.util.Random(shape.hashCode());
        float scale = (float) (1.0 / Math.sqrt(hd));
        float[] q = rnd(r, T * heads * hd, -1f, 1f), kc = rnd(r, ctxLen * kvDim, -1f, 1f), vc = rnd(r, ctxLen * kvDim, -1f, 1f);
        for (int i = 0; i < T * heads; i++) q[i * hd] = 1f;
        for (int g = 0; g < kvHeads; g++) {
            kc[g * hd] = -48f / scale;
            for (int c = 0; c < hd; c++) vc[g * hd + c] *= (float) Math.pow(2, vlog2);
            if (early) for (int j = 1; j < 32 && j < ctxLen; j++) kc[j * kvDim + g * hd] = -60f / scale;
        }
        float[] out0 = new float[(T + 1) * heads * hd];
        java.util.Arrays.fill(out0, 7f);
        String s = hd + "/" + heads + "/" + kvHeads + "/" + T + "/" + pos0 + "/0/0";
        for (boolean tc : new boolean[] {false, true}) prefillAttention(s, tc, q, kc, vc, new float[heads], false, out0, scale);
    }

    /**
     * r_attn_chunk (a draft's verification: a chunk of at most 8 rows after r_qk_rope_append, its keys split over heads
     * × rows × splits blocks and merged by the last split of each head) against the same double-precision reference:
     * shape = hd/heads/kvHeads/T/pos0/window/sinks/splits/cache, cache f32 or f16 (the reference reads the f16-rounded
     * keys and values). Cache rows past the chunk's last key hold NaN (a key read past the causal end shows); more
     * splits than a row has keys leave splits empty; GQA groups 1, 2, 4; a window inside the chunk; one row; every head
     * dimension bucket (13, 40, 64, 128, 256). The per-head split counters must be back at 0 (the next step's launch
     * relies on it): launched twice, the second launch gives the same output.
     */
    @ParameterizedTest
    @ValueSource(strings = {"128/8/2/5/200/0/0/4/f32", "64/4/4/8/25/0/1/3/f32", "13/8/2/3/9/6/1/2/f32", "256/4/1/2/5/0/0/3/f16",
            "40/4/2/3/3/4/1/9/f16", "64/8/2/1/70/0/0/5/f32", "128/4/2/5/0/0/1/8/f16", "64/4/1/6/40/10/0/8/f32"})
    void chunkAttentionSplitsItsKeysAndMatchesAReference(String shape) {
        String[] f = shape.split("/");
        int hd = Integer.parseInt(f[0]), heads = Integer.parseInt(f[1]), kvHeads = Integer.parseInt(f[2]), T = Integer.parseInt(f[3]);
        int pos0 = Integer.parseInt(f[4]), window = Integer.parseInt(f[5]), splits = Integer.parseInt(f[7]);
        boolean withSinks = f[6].equals("1"), f16 = f[8].equals("f16");
        int ctxLen = pos0 + T + 5, kvDim = kvHeads * hd;
        java.util.Random r = new java.util.Random(shape.hashCode());
        float[] q = rnd(r, T * heads * hd, -1f, 1f), kc = rnd(r, ctxLen * kvDim, -1f, 1f), vc = rnd(r, ctxLen * kvDim, -1f, 1f);
        if (f16) for (int i = 0; i < kc.length; i++) {   // what an f16 cache holds
            kc[i] = Float.float16ToFloat(Float.floatToFloat16(kc[i]));
            vc[i] = Float.float16ToFloat(Float.floatToFloat16(vc[i]));
        }
        for (int i = (pos0 + T) * kvDim; i < ctxLen * kvDim; i++) kc[i] = vc[i] = Float.NaN;   // not yet written
        float[] sinks = rnd(r, heads, -1f, 2f);
        float scale = (float) (1.5 / Math.sqrt(hd));
        float[] out0 = new float[(T + 1) * heads * hd];
        java.util.Arrays.fill(out0, 7f);
        String fn = "r_attn_chunk" + (f16 ? "_h" : "");
        float[][] got = new float[2][out0.length];
        int[] done = new int[heads * T];
        long before = launches();
        emulateProducts(1);
        ctx.call(() -> {
            CudaDriver cu = ctx.driver();
            try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                MemorySegment kcs = MemorySegment.ofArray(kc), vcs = MemorySegment.ofArray(vc);
                if (f16) {
                    short[] kh = new short[kc.length], vh = new short[vc.length];
                    for (int i = 0; i < kc.length; i++) { kh[i] = Float.floatToFloat16(kc[i]); vh[i] = Float.floatToFloat16(vc[i]); }
                    kcs = MemorySegment.ofArray(kh);
                    vcs = MemorySegment.ofArray(vh);
                }
                long dq = up.apply(MemorySegment.ofArray(q)), dk = up.apply(kcs), dv = up.apply(vcs);
                long dout = up.apply(MemorySegment.ofArray(out0)), dpos = up.apply(MemorySegment.ofArray(new int[] {pos0}));
                long dsinks = withSinks ? up.apply(MemorySegment.ofArray(sinks)) : 0L;
                long partials = (long) T * heads * splits;
                long pm = up.apply(MemorySegment.ofArray(new float[(int) partials])), pl = up.apply(MemorySegment.ofArray(new float[(int) partials]));
                long pacc = up.apply(MemorySegment.ofArray(new float[(int) partials * hd])), dd = up.apply(MemorySegment.ofArray(done));
                for (int run = 0; run < 2; run++) {
                    cu.launch(cu.function(ctx.module(Kernels.ATTN_CU), fn), heads, T, splits, 128, 1, 1, 0,
                            Kernels.named(fn).pack(a, dq, dk, dv, pm, pl, pacc, heads, kvHeads, hd, scale, dpos, splits, window, dout,
                                    dd, dsinks, 0));
                    cu.synchronize();
                    MemorySegment host = a.allocate(4L * out0.length, 4);
                    cu.copyToHost(host, dout, host.byteSize());
                    MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, got[run], 0, out0.length);
                }
                MemorySegment counters = a.allocate(4L * done.length, 4);
                cu.copyToHost(counters, dd, counters.byteSize());
                MemorySegment.copy(counters, ValueLayout.JAVA_INT, 0, done, 0, done.length);
            } finally {
                emulateProducts(0);
            }
            return null;
        });
        assertThat(launches() - before).as("launches of the emulated %s", fn).isEqualTo(2);
        assertThat(done).as("every head's split counter back at 0").containsOnly(0);
        assertThat(got[1]).as("the second launch").isEqualTo(got[0]);
        assertAttentionMatchesAReference(fn, shape, q, kc, vc, sinks, withSinks, got[0], out0, scale);
    }

    private void prefillAttention(String shape, boolean tc, float[] q, float[] kc, float[] vc, float[] sinks, boolean withSinks,
                                  float[] out0, float scale) {
        String[] f = shape.split("/");
        int hd = Integer.parseInt(f[0]), heads = Integer.parseInt(f[1]), kvHeads = Integer.parseInt(f[2]), T = Integer.parseInt(f[3]);
        int pos0 = Integer.parseInt(f[4]), window = Integer.parseInt(f[5]);
        int kvDim = kvHeads * hd, group = heads / kvHeads;
        int[] grid = ResidentLowering.prefillGrid(T, heads, kvHeads, hd, tc);
        String fn = "r_attn_prefill_" + (tc ? "tc_" : "") + ResidentLowering.PREFILL_DIMS[ResidentLowering.prefillBucket(hd)];
        float[] got = new float[out0.length];
        long before = launches();
        emulateProducts(1);
        ctx.call(() -> {
            CudaDriver cu = ctx.driver();
            try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                long dq = up.apply(MemorySegment.ofArray(q)), dk = up.apply(MemorySegment.ofArray(kc)), dv = up.apply(MemorySegment.ofArray(vc));
                long dout = up.apply(MemorySegment.ofArray(out0)), dpos = up.apply(MemorySegment.ofArray(new int[] {pos0}));
                long dsinks = withSinks ? up.apply(MemorySegment.ofArray(sinks)) : 0L;
                cu.launch(cu.function(ctx.module(Kernels.ATTN_CU), fn), grid[0], grid[1], 1, 128, 1, 1, 0,
                        Kernels.named(fn).pack(a, dq, dk, dv, dout, T, heads, kvHeads, hd, scale, dpos, window, dsinks, 0L, 0L, 0));
                cu.synchronize();
                MemorySegment host = a.allocate(4L * got.length, 4);
                cu.copyToHost(host, dout, host.byteSize());
                MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, got, 0, got.length);
            } finally {
                emulateProducts(0);
            }
            return null;
        });
        assertThat(launches() - before).as("launches of the emulated %s", fn).isEqualTo(1);
        assertAttentionMatchesAReference(fn, shape, q, kc, vc, sinks, withSinks, got, out0, scale);
    }

    /**
     * got[t, h] (T rows of a chunk at pos0.., each head) against the double-precision causal attention over kc/vc (with the
     * window and sinks of shape = hd/heads/kvHeads/T/pos0/window/…), to 2e-6 of the row's honest scale; nothing
     * written past the chunk (out0's sentinel kept).
     */
    private static void assertAttentionMatchesAReference(String fn, String shape, float[] q, float[] kc, float[] vc, float[] sinks,
                                                         boolean withSinks, float[] got, float[] out0, float scale) {
        String[] f = shape.split("/");
        int hd = Integer.parseInt(f[0]), heads = Integer.parseInt(f[1]), kvHeads = Integer.parseInt(f[2]), T = Integer.parseInt(f[3]);
        int pos0 = Integer.parseInt(f[4]), window = Integer.parseInt(f[5]);
        int kvDim = kvHeads * hd, group = heads / kvHeads;
        double worst = 0;
        String at = "";
        for (int t = 0; t < T; t++)
            for (int h = 0; h < heads; h++) {
                int p = pos0 + t, first = window > 0 && p >= window ? p - window + 1 : 0, g = h / group;
                double[] w = weights(q, (t * heads + h) * hd, kc, kvDim, g * hd, hd, first, p, scale, withSinks ? sinks[h] : Double.NaN);
                double[] ref = new double[hd];
                double mag = 0;   // the row's honest scale: Σ p_j·max|v_j| / Σ p (what its outputs are made of)
                for (int j = first; j <= p; j++) {
                    double vj = 0;
                    for (int c = 0; c < hd; c++) {
                        ref[c] += w[j] * vc[j * kvDim + g * hd + c];
                        vj = Math.max(vj, Math.abs(vc[j * kvDim + g * hd + c]));
                    }
                    mag += w[j] * vj;
                }
                for (int c = 0; c < hd; c++) {
                    double want = ref[c];
                    double err = Math.abs(got[(t * heads + h) * hd + c] - want) / mag;
                    // the first NaN stays (worst NaN fails below): a later finite err must not overwrite it
                    if (!Double.isNaN(worst) && !(err <= worst)) { worst = err; at = String.format("token %d, head %d, column %d", t, h, c); }
                }
            }
        System.out.printf("emulated attention %s %s: max|Δ| / (Σ p·max|v| / Σ p) %.3g%n", fn, shape, worst);
        assertThat(worst).as("%s %s: %s", fn, shape, at).isLessThan(2e-6);
        for (int i = T * heads * hd; i < got.length; i++) assertThat(got[i]).as("%s: output past the chunk", shape).isEqualTo(7f);
    }

    /**
     * resident.cu's decode attention (r_attn_partial, the real kernel on emulated blocks), which also does the decode
     * step's q/k norm, rope and KV append: from the raw q, k and v rows, each split's partials, then the merge by the
     * last split of each head (an atomic counter per head), against a double-precision reference (q and k normed and
     * roped here); shape = hd/heads/kvHeads/pos/window/sinks/splits/norm/rotaryDim (norm: 0 none, 1 qwen3's w·x, 2
     * gemma's (1+w)·x; rotaryDim &lt; hd: partial rotary). Three decode steps at pos, pos+1, pos+2 (each a replayed
     * graph's launch twice: the same output, every counter back at 0), each appending its key and value row to the
     * caches (checked: the roped k row, the v row, no other row touched), so the later steps read the rows the kernel
     * appended. norm 3 and 4: a q norm or a k norm alone. Cache rows from the step's position on hold NaN before its first launch: a block that reads the cache
     * row of its own key (being written by another block) instead of the row it computed, or any row past it, fails.
     * Each warp takes groups of 4 keys: 128/4/2/45/0/0/1 (46 keys in one split) and 64/4/2/90/37/1/2 (a window of 37:
     * 18 and 19 keys) walk several groups per warp and end on a group with dead keys; 64/8/2/3/0/0/16/1/64 and
     * 64/4/2/5/0/1/16/0/64 (sinks) leave most of their 16 splits empty (m = −inf: the merge skips them, as on every
     * decode step below position 15); 64/4/2/20/6/0/4/3/64: a q norm alone over a window of 6 (several keys, so q's
     * norm shows in their weights: passing the launch a q-norm flag of 0 fails it, which a window of 1 — key p alone,
     * weight 1, the output v_p whatever q is — did not);
     * 32/4/2/12/20/1/3/4/0: no rope (rotary dim 0) with a k norm alone, p inside the window. The block that appends a kv
     * head's row is its group's last q head, which the emulator runs after the group's others (blocks one at a time, x
     * innermost): so a block reading cache row p instead of its own row meets NaN, except where a group has one head
     * (heads = kvHeads), whose reader is the writer.
     */
    @ParameterizedTest
    @ValueSource(strings = {"128/8/2/37/0/0/4/1/128", "64/4/4/70/16/1/7/2/32", "13/6/2/5/0/1/3/0/12", "256/2/1/9/4/0/2/1/256",
            "40/6/3/100/0/0/32/0/40", "32/4/2/0/0/1/1/2/16", "128/4/2/45/0/0/1/0/64", "64/4/2/90/37/1/2/1/64", "64/8/2/3/0/0/16/1/64",
            "64/4/2/5/0/1/16/0/64", "64/4/2/20/6/0/4/3/64", "32/4/2/12/20/1/3/4/0"})
    void decodeAttentionRopesAppendsAndMergesItsSplitsLikeAReference(String shape) {
        String[] f = shape.split("/");
        int hd = Integer.parseInt(f[0]), heads = Integer.parseInt(f[1]), kvHeads = Integer.parseInt(f[2]), p0 = Integer.parseInt(f[3]);
        int window = Integer.parseInt(f[4]), splits = Integer.parseInt(f[6]), norm = Integer.parseInt(f[7]), rot = Integer.parseInt(f[8]);
        boolean withSinks = f[5].equals("1");
        int qNorm = norm == 4 ? 0 : norm == 3 ? 1 : norm, kNorm = norm == 3 ? 0 : norm == 4 ? 1 : norm;   // 3: q only, 4: k only
        int steps = 3, ctxLen = p0 + steps + 2, kvDim = kvHeads * hd, group = heads / kvHeads;
        java.util.Random r = new java.util.Random(shape.hashCode());
        float[] kc = rnd(r, ctxLen * kvDim, -1f, 1f), vc = rnd(r, ctxLen * kvDim, -1f, 1f);
        for (int i = p0 * kvDim; i < ctxLen * kvDim; i++) kc[i] = vc[i] = Float.NaN;   // not yet written
        float[] sinks = rnd(r, heads, -1f, 2f), qw = rnd(r, hd, 0.5f, 1.5f), kw = rnd(r, hd, -0.5f, 0.5f);
        float[] invFreq = new float[Math.max(1, rot / 2)];
        for (int i = 0; i < rot / 2; i++) invFreq[i] = (float) Math.pow(10000, -2.0 * i / rot);
        float scale = (float) (1.5 / Math.sqrt(hd)), ropeScale = 1.125f, eps = 1e-5f;
        float[][] qs = new float[steps][], ks = new float[steps][], vs = new float[steps][];
        for (int st = 0; st < steps; st++) {
            qs[st] = rnd(r, heads * hd, -2f, 2f);
            ks[st] = rnd(r, kvDim, -2f, 2f);
            vs[st] = rnd(r, kvDim, -1f, 1f);
        }
        float[][][] got = new float[steps][2][heads * hd];
        float[][] kcAfter = new float[steps][], vcAfter = new float[steps][];
        int[] done = new int[heads];
        long before = launches();
        emulateProducts(1);
        ctx.call(() -> {
            CudaDriver cu = ctx.driver();
            try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                long dk = up.apply(MemorySegment.ofArray(kc)), dv = up.apply(MemorySegment.ofArray(vc));
                long dpm = up.apply(MemorySegment.ofArray(new float[heads * splits])), dpl = up.apply(MemorySegment.ofArray(new float[heads * splits]));
                long dacc = up.apply(MemorySegment.ofArray(new float[heads * splits * hd]));
                long dout = up.apply(MemorySegment.ofArray(new float[heads * hd])), ddone = up.apply(MemorySegment.ofArray(new int[heads]));
                long dsinks = withSinks ? up.apply(MemorySegment.ofArray(sinks)) : 0L;
                long dqw = norm > 0 ? up.apply(MemorySegment.ofArray(qw)) : 0L, dkw = norm > 0 ? up.apply(MemorySegment.ofArray(kw)) : 0L;
                long dinv = up.apply(MemorySegment.ofArray(invFreq));
                MemorySegment host = a.allocate(4L * Math.max(heads * hd, ctxLen * kvDim), 4);
                for (int st = 0; st < steps; st++) {
                    long dq = up.apply(MemorySegment.ofArray(qs[st])), dkr = up.apply(MemorySegment.ofArray(ks[st]));
                    long dvr = up.apply(MemorySegment.ofArray(vs[st])), dpos = up.apply(MemorySegment.ofArray(new int[] {p0 + st}));
                    for (int run = 0; run < 2; run++) {
                        cu.launch(cu.function(ctx.module(Kernels.ATTN_CU), "r_attn_partial"), heads, 1, splits, 128, 1, 1, 0,
                                Kernels.named("r_attn_partial").pack(a, dq, dkr, dvr, dk, dv, dqw, dkw, qNorm > 0 ? 1 : 0, kNorm > 0 ? 1 : 0, eps,
                                        norm == 2 ? 1 : 0, dinv, rot, ropeScale, dpm, dpl, dacc, heads, kvHeads, hd, scale, dpos,
                                        splits, window, dout, ddone, dsinks, 0));
                        cu.synchronize();
                        cu.copyToHost(host, dout, 4L * heads * hd);
                        MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, got[st][run], 0, heads * hd);
                    }
                    kcAfter[st] = new float[ctxLen * kvDim];
                    vcAfter[st] = new float[ctxLen * kvDim];
                    cu.copyToHost(host, dk, 4L * ctxLen * kvDim);
                    MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, kcAfter[st], 0, ctxLen * kvDim);
                    cu.copyToHost(host, dv, 4L * ctxLen * kvDim);
                    MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, vcAfter[st], 0, ctxLen * kvDim);
                }
                cu.copyToHost(host, ddone, 4L * heads);
                MemorySegment.copy(host, ValueLayout.JAVA_INT, 0, done, 0, heads);
            } finally {
                emulateProducts(0);
            }
            return null;
        });
        assertThat(launches() - before).as("launches of the emulated r_attn_partial").isEqualTo(2L * steps);
        assertThat(done).as("%s: every head's counter back at 0 for the next step", shape).containsOnly(0);
        double worst = 0;
        for (int st = 0; st < steps; st++) {
            int p = p0 + st;
            assertThat(got[st][1]).as("%s step %d: a second launch gives the same output", shape, st).containsExactly(got[st][0]);
            // the caches: row p is key p's normed, roped k row and its v row; every other row as before
            float[] kcWant = kc.clone(), q = new float[heads * hd];
            for (int g = 0; g < kvHeads; g++) {
                double[] kr = OpCheck.normRope(ks[st], g * hd, hd, kNorm, kw, eps, invFreq, rot, ropeScale, p);
                for (int c = 0; c < hd; c++) {
                    int i = p * kvDim + g * hd + c;
                    assertThat((double) kcAfter[st][i]).as("%s step %d: appended k, kv head %d, column %d", shape, st, g, c)
                            .isCloseTo(kr[c], org.assertj.core.data.Offset.offset(2e-6 * (1 + Math.abs(kr[c]))));
                    assertThat(vcAfter[st][i]).as("%s step %d: appended v", shape, st).isEqualTo(vs[st][g * hd + c]);
                    kc[i] = kcAfter[st][i];
                    vc[i] = vs[st][g * hd + c];
                }
            }
            for (int i = 0; i < ctxLen * kvDim; i++)
                if (i / kvDim != p) {
                    assertThat(Float.floatToRawIntBits(kcAfter[st][i])).as("%s step %d: k cache element %d untouched", shape, st, i)
                            .isEqualTo(Float.floatToRawIntBits(kcWant[i]));
                    assertThat(Float.floatToRawIntBits(vcAfter[st][i])).as("%s step %d: v cache element %d untouched", shape, st, i)
                            .isEqualTo(Float.floatToRawIntBits(vc[i]));
                }
            for (int h = 0; h < heads; h++) {
                double[] qr = OpCheck.normRope(qs[st], h * hd, hd, qNorm, qw, eps, invFreq, rot, ropeScale, p);
                for (int c = 0; c < hd; c++) q[h * hd + c] = (float) qr[c];
            }
            int first = window > 0 && p >= window ? p - window + 1 : 0;
            for (int h = 0; h < heads; h++) {
                int g = h / group;
                double[] ref = attention(q, h * hd, kc, vc, kvDim, g * hd, hd, first, p, scale, withSinks ? sinks[h] : Double.NaN);
                for (int c = 0; c < hd; c++) {
                    double err = Math.abs(got[st][0][h * hd + c] - ref[c]);
                    assertThat(err).as("%s step %d: head %d, column %d", shape, st, h, c).isLessThan(4e-6);
                    worst = Math.max(worst, err);
                }
            }
        }
        System.out.printf("emulated decode attention %s: max|Δ| %.3g%n", shape, worst);
    }

    /**
     * The cuBLAS prefill's own kernels, real, on emulated blocks: r_split's 16-bit parts of the normed, column-scaled
     * activations (f16: two parts of x/s with a per-token power-of-two s; bf16: three), then r_gemm_out and r_glu_out
     * recombining GEMM outputs computed here in double from those very parts, against a double-precision reference
     * of the whole product. shape = T/cols/rows/f16/magnitude: magnitudes up to 1e6 (an f16 part without the token
     * scale overflows at 65504) and down to 1e-6, widths not a multiple of 4 (the scalar paths), and rows of f32
     * subnormals (whose power-of-two scale is clamped so its inverse stays finite: no NaN).
     */
    @ParameterizedTest
    @ValueSource(strings = {"3/64/24/1/1", "5/40/12/1/1e6", "4/36/8/1/1e-6", "3/64/20/0/1", "2/13/7/1/300", "2/13/7/0/300",
            "2/16/5/1/3e-42"})
    void prefillSplitAndEpiloguesRebuildTheProduct(String shape) {
        String[] f = shape.split("/");
        int T = Integer.parseInt(f[0]), cols = Integer.parseInt(f[1]), rows = Integer.parseInt(f[2]);
        boolean f16 = f[3].equals("1");
        float mag = Float.parseFloat(f[4]), eps = 1e-5f;
        int parts = f16 ? 2 : 3;
        float step = f16 ? 1f / 2048 : 1f;
        java.util.Random r = new java.util.Random(shape.hashCode());
        float[] x = rnd(r, T * cols, -mag, mag), cf = rnd(r, cols, 0.5f, 1.5f), rs = rnd(r, rows, 0.5f, 2f), rs2 = rnd(r, rows, 0.5f, 2f);
        float[] bias = rnd(r, rows, -1f, 1f), y0 = rnd(r, T * rows, -1f, 1f);
        for (int t = 0; t < T; t++) for (int c = 0; c < cols; c++) x[t * cols + c] *= t + 1;   // a scale per token
        float[] w = new float[rows * cols];
        for (int i = 0; i < w.length; i++) w[i] = r.nextInt(255) - 127;   // int8 weights: exact in f16 and bf16
        short[] partsOut = new short[parts * T * cols];
        float[] ts = new float[T], y = new float[T * rows], g = new float[T * rows];
        long before = launches();
        emulateProducts(1);
        ctx.call(() -> {
            CudaDriver cu = ctx.driver();
            MemorySegment fn = null;
            try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                long dx = up.apply(MemorySegment.ofArray(x)), dcf = up.apply(MemorySegment.ofArray(cf));
                long dparts = up.apply(MemorySegment.ofArray(partsOut)), dts = up.apply(MemorySegment.ofArray(ts));
                cu.launch(cu.function(ctx.module(Kernels.GEMM_CU), "r_split"), T, 1, 1, 256, 1, 1, 0,
                        Kernels.named("r_split").pack(a, dx, dcf, 1, eps, dparts, T, cols, f16 ? 1 : 0, parts, dts));
                cu.synchronize();
                MemorySegment host = a.allocate(Math.max(2L * partsOut.length, 4L * T), 4);
                cu.copyToHost(host, dparts, 2L * partsOut.length);
                MemorySegment.copy(host, ValueLayout.JAVA_SHORT, 0, partsOut, 0, partsOut.length);
                cu.copyToHost(host, dts, 4L * T);
                MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, ts, 0, T);
                // the GEMM cuBLAS would do, in double: C[r, j·T + t] = Σ_c w[r, c]·part_j[t, c], column-major
                float[] C = new float[rows * parts * T];
                for (int j = 0; j < parts; j++)
                    for (int t = 0; t < T; t++)
                        for (int i = 0; i < rows; i++) {
                            double acc = 0;
                            for (int c = 0; c < cols; c++) acc += (double) w[i * cols + c] * half(partsOut[(j * T + t) * cols + c], f16);
                            C[(j * T + t) * rows + i] = (float) acc;
                        }
                long dC = up.apply(MemorySegment.ofArray(C)), dy = up.apply(MemorySegment.ofArray(y0)), dg = up.apply(MemorySegment.ofArray(g));
                long drs = up.apply(MemorySegment.ofArray(rs)), drs2 = up.apply(MemorySegment.ofArray(rs2)), db = up.apply(MemorySegment.ofArray(bias));
                long tsp = f16 ? dts : 0L;
                cu.launch(cu.function(ctx.module(Kernels.GEMM_CU), "r_gemm_out"), (rows + 1023) / 1024, T, 1, 256, 1, 1, 0,
                        Kernels.named("r_gemm_out").pack(a, dC, drs, db, dy, rows, T, parts, 1, tsp, step));
                cu.launch(cu.function(ctx.module(Kernels.GEMM_CU), "r_glu_out"), (rows + 1023) / 1024, T, 1, 256, 1, 1, 0,
                        Kernels.named("r_glu_out").pack(a, dC, dC, drs, drs2, dg, rows, T, parts, tsp, tsp, step));
                cu.synchronize();
                MemorySegment out = a.allocate(4L * T * rows, 4);
                cu.copyToHost(out, dy, out.byteSize());
                MemorySegment.copy(out, ValueLayout.JAVA_FLOAT, 0, y, 0, y.length);
                cu.copyToHost(out, dg, out.byteSize());
                MemorySegment.copy(out, ValueLayout.JAVA_FLOAT, 0, g, 0, g.length);
            } finally {
                emulateProducts(0);
            }
            return null;
        });
        assertThat(launches() - before).as("launches of the emulated split and epilogues").isEqualTo(3);
        double worstPart = 0, worstY = 0;
        for (int t = 0; t < T; t++) {
            double ss = 0, vmax = 0;
            for (int c = 0; c < cols; c++) ss += (double) x[t * cols + c] * x[t * cols + c];
            double inv = 1 / Math.sqrt(ss / cols + eps);
            double[] v = new double[cols];
            for (int c = 0; c < cols; c++) { v[c] = x[t * cols + c] * inv * cf[c]; vmax = Math.max(vmax, Math.abs(v[c])); }
            if (f16) assertThat(ts[t]).as("%s: token %d's scale is the power of two just above its max", shape, t)
                    .isEqualTo((float) Math.scalb(1.0, Math.max(-125, Math.min(127, Math.getExponent(vmax) + 1))));
            for (int c = 0; c < cols && vmax > 1e-30; c++) {   // the parts rebuild the activation to f32 level (normal f32s)
                double back = 0, fj = 1;
                for (int j = 0; j < parts; j++, fj *= step) back += half(partsOut[(j * T + t) * cols + c], f16) * fj;
                if (f16) back *= ts[t];
                double err = Math.abs(back - v[c]) / vmax;
                assertThat(err).as("%s: token %d column %d rebuilt from its parts", shape, t, c).isLessThan(f16 ? 5e-7 : 2.5e-7);   // 2^-22 (f16 parts); the kernel's own f32 rounding of x·inv·cf (bf16)
                worstPart = Math.max(worstPart, err);
            }
            for (int i = 0; i < rows; i++) {
                double dot = 0, size = 0;
                for (int c = 0; c < cols; c++) { dot += w[i * cols + c] * v[c]; size += Math.abs(w[i * cols + c] * v[c]); }
                double want = y0[t * rows + i] + dot * rs[i] + bias[i];
                assertThat(y[t * rows + i]).as("%s: r_gemm_out token %d row %d", shape, t, i).isFinite();
                double err = Math.abs(y[t * rows + i] - want) / (1 + Math.abs(y0[t * rows + i]) + size * rs[i] + Math.abs(bias[i]));
                assertThat(err).as("%s: r_gemm_out token %d row %d", shape, t, i).isLessThan(1e-6);
                double gv = dot * rs[i], uv = dot * rs2[i], glu = gv / (1 + Math.exp(-gv)) * uv;
                double errG = Math.abs(g[t * rows + i] - glu) / (1 + Math.abs(glu) + size * size * rs[i] * rs2[i] * 1e-6);
                assertThat(errG).as("%s: r_glu_out token %d row %d", shape, t, i).isLessThan(1e-5);
                worstY = Math.max(worstY, err);
            }
        }
        System.out.printf("emulated prefill split/epilogues %s: parts %.3g, product %.3g (relative)%n", shape, worstPart, worstY);
    }

    /**
     * The prefill's fused kernels, real, on emulated blocks, against the unfused kernels they stand for, value for
     * value: r_split3 of three matrices (distinct column scales, the third none) against r_split per matrix (each its
     * own parts and token scale: one written from another's scales shows), r_gemm_out3 against three r_gemm_out
     * (ragged row counts: the block ranges; f16: each its own token scales), r_glu_split_N against r_glu_out then r_split of the result (the down
     * product's parts and scale). shape = T/cols/f16/parts/N (N: r_glu_split_N, cols ≤ N·2048; cols % 4 != 0 only
     * splits, the scalar path).
     */
    @ParameterizedTest
    @ValueSource(strings = {"3/64/1/2/1", "2/40/0/3/1", "2/13/1/1/1", "2/4100/1/2/4", "3/36/0/2/4", "2/48/1/1/2", "1/16384/1/2/8"})
    void fusedPrefillKernelsMatchTheUnfusedOnes(String shape) {
        String[] f = shape.split("/");
        int T = Integer.parseInt(f[0]), cols = Integer.parseInt(f[1]), parts = Integer.parseInt(f[3]), N = Integer.parseInt(f[4]);
        boolean f16 = f[2].equals("1"), glu = cols % 4 == 0;
        float step = f16 ? 1f / 2048 : 1f, eps = 1e-5f;
        java.util.Random r = new java.util.Random(shape.hashCode());
        float[] x = rnd(r, T * cols, -3f, 3f), cf0 = rnd(r, cols, 0.5f, 1.5f), cf1 = rnd(r, cols, 0.01f, 100f);
        for (int t = 0; t < T; t++) for (int c = 0; c < cols; c++) x[t * cols + c] *= 1 << (3 * t);   // a scale per token
        int[] rows = {cols, cols / 2 + 1, 7};
        float[][] C = new float[3][], rs = new float[3][], bias = new float[3][];
        for (int i = 0; i < 3; i++) { C[i] = rnd(r, rows[i] * parts * T, -50f, 50f); rs[i] = rnd(r, rows[i], 0.5f, 2f); bias[i] = rnd(r, rows[i], -1f, 1f); }
        float[] tsIn = {0.25f, 4f, 1f / 64};
        // got[0..2]: parts from r_split3, [3..5] from r_split; scales likewise; outputs of r_gemm_out3 / r_gemm_out
        short[][] partsGot = new short[8][];
        float[][] tsGot = new float[8][], yGot = new float[6][];
        long before = launches();
        emulateProducts(1);
        ctx.call(() -> {
            CudaDriver cu = ctx.driver();
            MemorySegment mod = ctx.module(Kernels.GEMM_CU);
            try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                long dx = up.apply(MemorySegment.ofArray(x)), dcf0 = up.apply(MemorySegment.ofArray(cf0)), dcf1 = up.apply(MemorySegment.ofArray(cf1));
                long[] dp = new long[8], dts = new long[8], dy = new long[6], dC = new long[3], drs = new long[3], db = new long[3];
                for (int i = 0; i < 8; i++) {
                    dp[i] = up.apply(MemorySegment.ofArray(new short[parts * T * cols]));
                    dts[i] = up.apply(MemorySegment.ofArray(new float[T]));
                }
                for (int i = 0; i < 3; i++) {
                    dC[i] = up.apply(MemorySegment.ofArray(C[i]));
                    drs[i] = up.apply(MemorySegment.ofArray(rs[i]));
                    db[i] = up.apply(MemorySegment.ofArray(bias[i]));
                    dy[i] = up.apply(MemorySegment.ofArray(new float[T * rows[i]]));
                    dy[3 + i] = up.apply(MemorySegment.ofArray(new float[T * rows[i]]));
                }
                // each matrix its own token scales (tsIn rotated by i: 0.25, 4, 1/64 / 4, 1/64, 0.25 / ...), so an
                // epilogue reading another matrix's scales fails
                long[] dts3 = new long[3];
                for (int i = 0; i < 3; i++) {
                    float[] tsi = new float[Math.max(T, 3)];
                    for (int t = 0; t < tsi.length; t++) tsi[t] = t < 3 ? tsIn[(t + i) % 3] : 1f;
                    dts3[i] = up.apply(MemorySegment.ofArray(tsi));
                }
                long[] cfs = {dcf0, dcf1, 0L};
                cu.launch(cu.function(mod, "r_split3"), T, 1, 1, 256, 1, 1, 0, Kernels.named("r_split3").pack(a, dx, 1, eps, T, cols, f16 ? 1 : 0, parts, 3,
                        cfs[0], dp[0], dts[0], cfs[1], dp[1], dts[1], cfs[2], dp[2], dts[2]));
                for (int i = 0; i < 3; i++)
                    cu.launch(cu.function(mod, "r_split"), T, 1, 1, 256, 1, 1, 0,
                            Kernels.named("r_split").pack(a, dx, cfs[i], 1, eps, dp[3 + i], T, cols, f16 ? 1 : 0, parts, dts[3 + i]));
                long[] ts = new long[3];
                for (int i = 0; i < 3; i++) ts[i] = f16 ? dts3[i] : 0L;
                int blocks = 0;
                for (int i = 0; i < 3; i++) blocks += (rows[i] + 1023) / 1024;
                cu.launch(cu.function(mod, "r_gemm_out3"), blocks, T, 1, 256, 1, 1, 0, Kernels.named("r_gemm_out3").pack(a,
                        dC[0], drs[0], db[0], dy[0], rows[0], ts[0], dC[1], 0L, db[1], dy[1], rows[1], ts[1], dC[2], drs[2], 0L, dy[2], rows[2], ts[2],
                        T, parts, step));
                for (int i = 0; i < 3; i++)
                    cu.launch(cu.function(mod, "r_gemm_out"), (rows[i] + 1023) / 1024, T, 1, 256, 1, 1, 0, Kernels.named("r_gemm_out").pack(a,
                            dC[i], i == 1 ? 0L : drs[i], i == 2 ? 0L : db[i], dy[3 + i], rows[i], T, parts, 0, ts[i], step));
                if (glu) {   // gate = C[0], up its own rows, row scales and token scales: h = silu(g)·u, then down's parts (cf1)
                    long dCu = up.apply(MemorySegment.ofArray(rnd(r, cols * parts * T, -50f, 50f))), dh = up.apply(MemorySegment.ofArray(new float[T * cols]));
                    long drsu = up.apply(MemorySegment.ofArray(rnd(r, cols, 0.5f, 2f)));
                    float[] tsUp = new float[Math.max(T, 3)];
                    for (int t = 0; t < tsUp.length; t++) tsUp[t] = t < 3 ? tsIn[2 - t] : 1f;   // 1/64, 4, 0.25: not gate's
                    long tsu = f16 ? up.apply(MemorySegment.ofArray(tsUp)) : 0L;
                    cu.launch(cu.function(mod, "r_glu_split_" + N), T, 1, 1, 512, 1, 1, 0, Kernels.named("r_glu_split_" + N).pack(a,
                            dC[0], dCu, drs[0], drsu, ts[0], tsu, step, parts, cols, T, dcf1, dp[6], f16 ? 1 : 0, parts, dts[6]));
                    cu.launch(cu.function(mod, "r_glu_out"), (cols + 1023) / 1024, T, 1, 256, 1, 1, 0, Kernels.named("r_glu_out").pack(a,
                            dC[0], dCu, drs[0], drsu, dh, cols, T, parts, ts[0], tsu, step));
                    cu.launch(cu.function(mod, "r_split"), T, 1, 1, 256, 1, 1, 0,
                            Kernels.named("r_split").pack(a, dh, dcf1, 0, 0f, dp[7], T, cols, f16 ? 1 : 0, parts, dts[7]));
                }
                cu.synchronize();
                MemorySegment host = a.allocate(Math.max(2L * parts * T * cols, 4L * T * cols) + 16, 8);
                for (int i = 0; i < 8; i++) {
                    cu.copyToHost(host, dp[i], 2L * parts * T * cols);
                    partsGot[i] = host.asSlice(0, 2L * parts * T * cols).toArray(ValueLayout.JAVA_SHORT);
                    cu.copyToHost(host, dts[i], 4L * T);
                    tsGot[i] = host.asSlice(0, 4L * T).toArray(ValueLayout.JAVA_FLOAT);
                }
                for (int i = 0; i < 6; i++) {
                    long n = 4L * T * rows[i % 3];
                    cu.copyToHost(host, dy[i], n);
                    yGot[i] = host.asSlice(0, n).toArray(ValueLayout.JAVA_FLOAT);
                }
            } finally {
                emulateProducts(0);
            }
            return null;
        });
        assertThat(launches() - before).as("launches of the emulated kernels").isEqualTo(glu ? 11 : 8);
        for (int i = 0; i < 3; i++) {
            assertThat(partsGot[i]).as("%s: r_split3's parts of matrix %d", shape, i).containsExactly(partsGot[3 + i]);
            if (f16) assertThat(tsGot[i]).as("%s: r_split3's token scales of matrix %d", shape, i).containsExactly(tsGot[3 + i]);
            assertThat(yGot[i]).as("%s: r_gemm_out3's output %d", shape, i).containsExactly(yGot[3 + i]);
        }
        // the three matrices' column scales differ, so do their parts (and, f16, their scales): a mix-up would show above
        assertThat(partsGot[0]).as("%s: matrices 0 and 1 have different parts", shape).isNotEqualTo(partsGot[1]);
        if (f16) assertThat(tsGot[1]).as("%s: matrix 1's scales (cf up to 100) are not matrix 2's", shape).isNotEqualTo(tsGot[2]);
        if (glu) {
            assertThat(partsGot[6]).as("%s: r_glu_split_%d's parts", shape, N).containsExactly(partsGot[7]);
            if (f16) assertThat(tsGot[6]).as("%s: r_glu_split_%d's token scales", shape, N).containsExactly(tsGot[7]);
        }
    }

    /**
     * llama through the cuBLAS prefill (the mock's GEMM) with every kernel real on emulated blocks: the fused launches
     * (r_split3 for q/k/v and gate/up, r_gemm_out3, r_glu_split_N) give the logits of the unfused ones exactly, and
     * both stay within 1e-3 of the CPU engine; q8_2f (each matrix its own column scales) and bf16 (shared parts).
     */
    @ParameterizedTest
    @ValueSource(strings = {"Q8_2F", "BF16"})
    void fusedCublasPrefillOnTheRealKernelsMatchesTheUnfusedOne(String which) throws Throwable {
        var mode = dev.cmf4j.convert.TensorPolicy.Mode.valueOf(which);
        Path cmf = dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/llama"),
                tmp.resolve("llama-gemm-" + mode.label + ".cmf"), mode);
        int[] prompt = {2, 5, 9, 200, 17, 3};   // chunks of 4 (cuBLAS) and 2 (cuBLAS: gemmMinTokens 2)
        // then 2 decode steps: the real products and attention, launched programmatically (the mock checks each
        // block reached r_pdl_wait)
        Run want;
        try (var m = dev.cmf4j.model.Model.open(cmf)) { want = run(m.graph(), prompt, 3); }
        java.util.Map<Boolean, Run> got = new java.util.HashMap<>();
        emulateProducts(1);
        try {
            for (boolean fused : new boolean[] {true, false})
                try (CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul())) {
                    gpu.notes(n -> {});
                    gpu.useCublas(List.of(lib.toString()), 2);
                    gpu.usePrefillFusion(fused);
                    gpu.useProgrammaticLaunch(true);
                    int programmatic0 = programmaticLaunches();
                    try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) { got.put(fused, run(m.graph(), prompt, 3)); }
                    assertThat(programmaticLaunches() - programmatic0).as(which + " fused " + fused + ": programmatic launches").isPositive();
                }
        } finally {
            emulateProducts(0);
        }
        assertThat(got.get(true).logits()).as(which + ": fused = unfused").containsExactly(got.get(false).logits());
        double max = 0;
        for (int i = 0; i < want.logits().length; i++) max = Math.max(max, Math.abs(got.get(true).logits()[i] - want.logits()[i]));
        System.out.printf("emulated cuBLAS prefill llama %s, fused: max|Δ| vs CPU %.3g%n", which, max);
        assertThat(max).as(which + " max |Δ| vs the CPU").isLessThanOrEqualTo(1e-3);
    }

    private static double half(short h, boolean f16) {
        return f16 ? Float.float16ToFloat(h) : Float.intBitsToFloat((h & 0xffff) << 16);
    }

    /**
     * Attention of the query at q[qOff..] over cache rows first..p (kv head at column kvOff of rows kvDim wide), in
     * double: softmax of the scaled scores, the sink logit (NaN: none) in the denominator only.
     */
    private static double[] attention(float[] q, int qOff, float[] kc, float[] vc, int kvDim, int kvOff, int hd, int first, int p,
                                      float scale, double sink) {
        double[] w = weights(q, qOff, kc, kvDim, kvOff, hd, first, p, scale, sink), out = new double[hd];
        for (int c = 0; c < hd; c++) for (int j = first; j <= p; j++) out[c] += w[j] * vc[j * kvDim + kvOff + c];
        return out;
    }

    /** Keys first..p's softmax weights (index j), normalized; a sink (not NaN) in the denominator only. */
    private static double[] weights(float[] q, int qOff, float[] kc, int kvDim, int kvOff, int hd, int first, int p,
                                    float scale, double sink) {
        double[] sc = new double[p + 1];
        double max = Double.isNaN(sink) ? Double.NEGATIVE_INFINITY : sink, sum = 0;
        for (int j = first; j <= p; j++) {
            double d = 0;
            for (int c = 0; c < hd; c++) d += (double) q[qOff + c] * kc[j * kvDim + kvOff + c];
            sc[j] = d * scale;
            max = Math.max(max, sc[j]);
        }
        for (int j = first; j <= p; j++) sum += sc[j] = Math.exp(sc[j] - max);
        if (!Double.isNaN(sink)) sum += Math.exp(sink - max);
        for (int j = first; j <= p; j++) sc[j] /= sum;
        return sc;
    }

    private static float[] rnd(java.util.Random r, int n, float lo, float hi) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = lo + (hi - lo) * r.nextFloat();
        return v;
    }

    /** Copies {@code out.length} floats at device address {@code d} into {@code out} (owner thread, after a synchronize). */
    static void toHost(CudaDriver cu, Arena a, long d, float[] out) {
        MemorySegment host = a.allocate(4L * out.length, 4);
        cu.copyToHost(host, d, host.byteSize());
        MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, out, 0, out.length);
    }

    /** Device copies of host arrays for one test, all freed at close; used on the context's owner thread. */
    /** selftest --ops on the real kernels (products, embedding rows and the architecture kernels on emulated warps). */
    @Test void operatorChecksPassOnTheRealKernels() {
        emulateProducts(1);
        try (CudaBackend gpu = new CudaBackend(ctx)) {
            var results = gpu.checkOperators(true);
            for (var r : results) System.out.printf("emulated op %s %s: error %.2e (bound %.1e)%n", r.op(), r.shape(), r.error(), r.bound());
            assertThat(results).allSatisfy(r -> assertThat(r.ok()).as(r.toString()).isTrue());
        } finally {
            emulateProducts(0);
        }
    }

    /**
     * ra_argmax_rows on emulated warps: each row's first largest value, with ties placed in other threads' shares and
     * warps, negative rows, a row whose maximum is its last element, and widths below and above the block.
     */
    /**
     * Skills, an un-merged adapter and a task mask per row on the real kernels (issue 19): the llama fixture in q8_2f
     * with fixtures/lora's skill_a merged as skill "a" and a mask "cut" (layer 0 off, two heads and five neurons of
     * layer 1), skill_b applied un-merged; one step of five prompts (backbone, a, the adapter, the mask, all three),
     * then two decode steps of those rows in other orders, give the CPU engine's logits (1e-3): products over row
     * groups, q8_2f o and down under a mask's column scales, the adapter's f32 A with the folded norm.
     */
    @Test void skillsAdaptersAndMasksPerRowOnTheRealKernelsMatchTheCpu() throws Throwable {
        Path file = CudaSkillsTest.overlayFile(tmp);
        var adapters = CudaSkillsTest.overlayAdapters();
        float[] want, got;
        try (var m = dev.cmf4j.model.Model.open(file, null, new dev.cmf4j.backend.cpu.CpuBackend(), adapters)) { want = overlaySteps(m.graph()); }
        long before = launches();
        emulateProducts(1);
        try (CudaMatMul gpu = new CudaMatMul(ctx, dev.cmf4j.backend.cpu.CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(file, null, new CudaBackend(gpu), adapters)) {
                assertThat(m.graph().device()).isNotNull();
                got = overlaySteps(m.graph());
            }
        } finally {
            emulateProducts(0);
        }
        assertThat(launches() - before).as("launches of the emulated kernels").isGreaterThan(10);
        double max = dev.cmf4j.model.Golden.maxDiff(got, 0, want, 0, want.length);
        System.out.printf("emulated skills, adapter and mask per row: max|Δ| vs CPU %.3g over %d logits%n", max, want.length);
        assertThat(max).isLessThanOrEqualTo(1e-3);
    }

    /**
     * Five sequences (backbone, skill a, adapter skill_b, task cut, all three): their prompts (2–3 tokens) in one step,
     * then one decode step in a scrambled order (kept this small: every emulated row costs seconds in CI).
     */
    private static float[] overlaySteps(dev.cmf4j.model.graph.Graph g) throws Exception {
        var B = dev.cmf4j.model.graph.Batch.Logits.LAST;
        dev.cmf4j.model.graph.Overlay none = dev.cmf4j.model.graph.Overlay.NONE;
        dev.cmf4j.model.graph.Overlay[] os = {none, g.overlay("a", null, 1f), g.overlay(null, "skill_b", 1f), g.withTask(none, "cut"),
                g.withTask(g.overlay("a", "skill_b", 1f), "cut")};
        int[] ids = dev.cmf4j.model.Golden.load(dev.cmf4j.testkit.Fixtures.require("models/llama")).inputIds();
        var st = new dev.cmf4j.model.graph.State[os.length];
        var step = new dev.cmf4j.model.graph.Batch();
        for (int i = 0; i < os.length; i++) {
            st[i] = g.newState(8, 16);
            st[i].useOverlay(os[i]);
            step.add(st[i], ids, i, 2 + i % 2, B);
        }
        var ws = g.newWorkspace(32, 16);
        int v = g.vocab();
        float[] out = new float[2 * os.length * v], buf = new float[os.length * v];
        g.forward(step, ws, buf, null);
        System.arraycopy(buf, 0, out, 0, os.length * v);
        int[][] orders = {{4, 2, 0, 3, 1}};
        for (int k = 0; k < orders.length; k++) {
            var b = new dev.cmf4j.model.graph.Batch();
            for (int i : orders[k]) b.add(st[i], ids, 20 + k, 1, B);
            g.forward(b, ws, buf, null);
            for (int r = 0; r < os.length; r++) System.arraycopy(buf, r * v, out, ((k + 1) * os.length + orders[k][r]) * v, v);
        }
        for (var s : st) s.close();
        return out;
    }

    /**
     * The emulator's own barriers on purpose-made kernels (kernel_emulator.cpp's emu_selftest_barriers): a __syncthreads
     * only one warp of two reaches and a shuffle only odd lanes make fail the launch (2) instead of hanging; a block
     * that meets at both sees its neighbours' shared-memory writes and shuffled values.
     */
    @Test void divergentBarriersFailTheLaunchAndConvergentOnesMeet() {
        var h = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find("emu_selftest_barriers").orElseThrow(),
                FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS));
        int[][] out = new int[3][64];
        int[] rc = new int[3];
        ctx.call(() -> {
            try (Arena a = Arena.ofConfined()) {
                for (int k = 0; k < 3; k++) {
                    MemorySegment o = a.allocate(4L * 64, 4);
                    o.fill((byte) 0x7f);
                    try { rc[k] = (int) h.invokeExact(k, o); } catch (Throwable t) { throw new AssertionError(t); }
                    MemorySegment.copy(o, ValueLayout.JAVA_INT, 0, out[k], 0, 64);
                }
            }
            return null;
        });
        assertThat(rc[0]).as("__syncthreads reached by one warp of two: a deadlock").isEqualTo(2);
        assertThat(out[0][0]).as("the waiting warp never passed its barrier").isEqualTo(0x7f7f7f7f);
        assertThat(out[0][63]).as("the other warp ran to its end").isEqualTo(1);
        assertThat(rc[1]).as("a shuffle only odd lanes make: a deadlock").isEqualTo(2);
        assertThat(rc[2]).isZero();
        for (int t = 0; t < 64; t++) assertThat(out[2][t]).as("thread " + t).isEqualTo(63 - t + 100 * (t ^ 1));
    }

    @Test void argmaxRowsOnTheRealKernelPicksTheFirstLargest() {
        java.util.Random r = new java.util.Random(5);
        for (int vocab : new int[] {7, 256, 1000, 4099}) {
            int rows = 5;
            float[] l = new float[rows * vocab];
            for (int i = 0; i < l.length; i++) l[i] = (float) r.nextGaussian();
            for (int i = 0; i < vocab; i++) l[vocab + i] = -1f - i % 13;        // row 1: all negative, ties at -1
            l[2 * vocab + vocab - 1] = 9f;                                     // row 2: the last element
            for (int c : new int[] {vocab / 3, vocab / 2, vocab - 2}) l[3 * vocab + c] = 7f;   // row 3: three equal maxima
            l[4 * vocab + vocab / 5] = 5f;
            l[4 * vocab + Math.min(vocab - 1, vocab / 5 + 257)] = 5f;          // row 4: a tie a block-stride apart
            int[] got = new int[rows];
            ctx.call(() -> {
                CudaDriver cu = ctx.driver();
                try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                    long dl = up.apply(MemorySegment.ofArray(l)), dids = up.apply(MemorySegment.ofArray(new int[rows]));
                    cu.launch(cu.function(ctx.module(Kernels.ARCH_CU), "ra_argmax_rows"), rows, 1, 1, 256, 1, 1, 0,
                            Kernels.ARGMAX_ROWS.pack(a, dl, dids, vocab));
                    cu.synchronize();
                    MemorySegment host = a.allocate(4L * rows, 4);
                    cu.copyToHost(host, dids, host.byteSize());
                    MemorySegment.copy(host, ValueLayout.JAVA_INT, 0, got, 0, rows);
                }
                return null;
            });
            for (int row = 0; row < rows; row++)
                assertThat(got[row]).as("vocab " + vocab + " row " + row)
                        .isEqualTo(dev.cmf4j.backend.cpu.VectorMath.argmaxScalar(l, row * vocab, vocab));
        }
    }

    /**
     * re_resonance_route on emulated warps against the CPU's ResonanceRouter (double): the synthetic 56M Embryo's geometry
     * (4 experts, rank 16, 384 wide) and 37 experts of rank 3 (more experts than the block's warps); the last expert an
     * exact copy of expert 1, so a token on expert 1's centre ties them and the lower id must win; weights exactly 1.
     */
    @Test void resonanceRouterOnTheRealKernelPicksTheCpusWinner() {
        java.util.Random r = new java.util.Random(11);
        for (int[] g : new int[][] {{4, 16, 384}, {37, 3, 40}}) {
            int experts = g[0], rank = g[1], dim = g[2], tokens = 6;
            float[] mu = rnd(r, experts * dim, -1f, 1f), u = rnd(r, experts * rank * dim, -0.2f, 0.2f), bias = rnd(r, experts, -1f, 1f);
            float[] y = rnd(r, tokens * dim, -1f, 1f);
            System.arraycopy(mu, dim, mu, (experts - 1) * dim, dim);
            System.arraycopy(u, rank * dim, u, (experts - 1) * rank * dim, rank * dim);
            bias[experts - 1] = bias[1];
            System.arraycopy(mu, dim, y, 0, dim);   // token 0 on expert 1's centre
            int[] idx = new int[tokens];
            float[] wts = new float[tokens];
            ctx.call(() -> {
                CudaDriver cu = ctx.driver();
                try (Arena a = Arena.ofConfined(); Uploads up = new Uploads(cu, a)) {
                    long dy = up.apply(MemorySegment.ofArray(y)), dmu = up.apply(MemorySegment.ofArray(mu)), du = up.apply(MemorySegment.ofArray(u));
                    long db = up.apply(MemorySegment.ofArray(bias)), di = up.apply(MemorySegment.ofArray(idx)), dw = up.apply(MemorySegment.ofArray(wts));
                    cu.launch(cu.function(ctx.module(Kernels.EMBRYO_CU), "re_resonance_route"), tokens, 1, 1, 256, 1, 1, 0,
                            Kernels.RESONANCE_ROUTE.pack(a, dy, dmu, du, db, di, dw, experts, rank, dim));
                    cu.synchronize();
                    MemorySegment host = a.allocate(4L * tokens, 4);
                    cu.copyToHost(host, di, host.byteSize());
                    MemorySegment.copy(host, ValueLayout.JAVA_INT, 0, idx, 0, tokens);
                    cu.copyToHost(host, dw, host.byteSize());
                    MemorySegment.copy(host, ValueLayout.JAVA_FLOAT, 0, wts, 0, tokens);
                }
                return null;
            });
            var ref = new dev.cmf4j.backend.cpu.ResonanceRouter(experts, rank, dim, mu, u, bias, null);
            double[] err = new double[experts], score = new double[experts], res = new double[dim];
            for (int t = 0; t < tokens; t++) {
                assertThat(idx[t]).as(experts + " experts, token " + t).isEqualTo(ref.route(y, t * dim, err, score, res));
                assertThat(wts[t]).isEqualTo(1f);
            }
            assertThat(idx[0]).as("the tie on expert 1's centre goes to the lower id").isEqualTo(1);
        }
    }

    private static final class Uploads implements AutoCloseable {
        private final CudaDriver cu;
        private final Arena arena;
        private final List<Long> mem = new ArrayList<>();

        Uploads(CudaDriver cu, Arena arena) { this.cu = cu; this.arena = arena; }

        /** A device copy of {@code seg} (at least 16 bytes, so empty arrays still get an address). */
        long apply(MemorySegment seg) {
            long d = cu.memAlloc(Math.max(16, seg.byteSize()));
            mem.add(d);
            MemorySegment tmp = arena.allocate(Math.max(16, seg.byteSize()), 16);
            tmp.copyFrom(seg);
            cu.copyToDevice(d, tmp, seg.byteSize());
            return d;
        }

        @Override public void close() { for (long d : mem) cu.memFree(d); }
    }
}
