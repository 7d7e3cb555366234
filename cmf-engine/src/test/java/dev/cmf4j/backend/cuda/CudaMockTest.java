package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.format.DType;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The whole binding layer (every driver and NVRTC call site, the owner thread, the weight upload layouts,
 * the kernel argument block) against a mock libcuda/libnvrtc built from {@code mockcuda.c} with the
 * system C compiler; the mock's cuLaunchKernel evaluates the kernels' definition from the params block.
 * Skipped (with the reason) where no C compiler exists. The real kernels run in {@code cmf selftest --device cuda}.
 */
class CudaMockTest {
    @TempDir static Path tmp;
    static Path lib;
    static CudaDriver cu;
    static CudaContext ctx;

    @BeforeAll static void build() throws Exception {
        lib = MockCuda.build(tmp);
        cu = CudaDriver.load(List.of(lib.toString()));
        ctx = new CudaContext(cu, 0, List.of(lib.toString()), new KernelCache(tmp.resolve("cache")));
    }

    @AfterAll static void close() { if (ctx != null) ctx.close(); }

    @Test void opensTheDeviceWithTheShippedKernels() {
        assertThat(ctx.info().name()).isEqualTo("Mock GPU");
        assertThat(ctx.info().arch()).isEqualTo("sm_90");
        assertThat(ctx.info().driverVersion()).isEqualTo(13000);
        // the committed fatbin (the mock driver accepts it when it holds sm_90 SASS or PTX <= compute_90);
        // a stale one falls back to the mock NVRTC here, and ShippedKernelsTest fails saying how to rebuild it
        boolean fresh = KernelSource.resource("kernels.cu").fatbinProblem() == null;
        assertThat(ctx.info().kernels()).startsWith(fresh ? "kernels.fatbin sm_90 (nvcc 13." : "NVRTC 13.0 (kernels.fatbin");
        assertThat(ctx.info().toString()).contains("kernels: " + ctx.info().kernels());
    }

    /** A context on the mock driver whose kernels.cu comes with {@code fatbin} and {@code stamp}; NVRTC only where given. */
    static CudaContext open(byte[] fatbin, Map<String, String> stamp, boolean withNvrtc, boolean force, Path cache) {
        String src = CudaContext.kernelSource();
        Function<String, KernelSource> sources = name -> new KernelSource(name, src, fatbin, stamp);
        return new CudaContext(cu, 0, List.of(withNvrtc ? lib.toString() : "/nonexistent/libnvrtc.so.13"), new KernelCache(cache),
                sources, force);
    }

    /** The stamp the build script would write for the real kernels.cu and {@code fatbin}. */
    static Map<String, String> stampFor(byte[] fatbin) {
        return Map.of("source-sha256", dev.cmf4j.backend.BuildStamp.sourceSha256(CudaContext.kernelSource()),
                "fatbin-sha256", dev.cmf4j.backend.BuildStamp.sha256(fatbin), "nvcc", "13.0.88");
    }

    static List<String> cached(Path dir) throws Exception {
        if (!Files.isDirectory(dir)) return List.of();
        try (var files = Files.list(dir)) { return files.map(p -> p.getFileName().toString()).toList(); }
    }

    @Test void aFreshFatbinIsLoadedWithoutNvrtc() throws Exception {
        byte[] fb = CudaBindingTest.fakeFatbin("sm_80", "sm_90", "sm_100", "compute_80");
        Path cache = tmp.resolve("cache-fresh");
        try (CudaContext c = open(fb, stampFor(fb), false, false, cache)) {   // NVRTC absent: not needed
            assertThat(c.info().kernels()).isEqualTo("kernels.fatbin sm_90 (nvcc 13.0.88)");
            assertThat(c.takeNotes()).isEmpty();
            assertThat(c.call(() -> c.driver().function(c.module(), "matvec_q8"))).isNotNull();
            assertThat(cached(cache)).isEmpty();
        }
        // only PTX fits this GPU: the driver compiles it
        byte[] ptx = CudaBindingTest.fakeFatbin("sm_80", "sm_100", "compute_80");
        try (CudaContext c = open(ptx, stampFor(ptx), false, false, cache)) {
            assertThat(c.info().kernels()).isEqualTo("kernels.fatbin compute_80 PTX, compiled by the driver (nvcc 13.0.88)");
        }
    }

    @Test void aStaleMissingOrUnfittingFatbinFallsBackToNvrtcWithANote() throws Exception {
        byte[] fb = CudaBindingTest.fakeFatbin("sm_90", "compute_80");
        Map<String, String> stale = new java.util.HashMap<>(stampFor(fb));
        stale.put("source-sha256", "0".repeat(64));
        Path cache = tmp.resolve("cache-stale");
        try (CudaContext c = open(fb, stale, true, false, cache)) {
            assertThat(c.info().kernels()).startsWith("NVRTC 13.0 (kernels.fatbin is stale (built from kernels.cu sha256 000000000000…");
            assertThat(c.takeNotes()).singleElement().asString().startsWith("kernels.fatbin is stale")
                    .endsWith("; compiled kernels.cu with NVRTC 13.0 instead (rebuild it with tools/build-cuda-kernels.sh)");
            assertThat(c.takeNotes()).isEmpty();   // each note is told once
            assertThat(cached(cache)).singleElement().asString().endsWith(".cubin");
        }
        try (CudaContext c = open(null, Map.of(), true, false, cache)) {
            assertThat(c.info().kernels()).isEqualTo("NVRTC 13.0 (no kernels.fatbin is shipped)");
        }
        byte[] other = CudaBindingTest.fakeFatbin("sm_80", "sm_100", "sm_120");   // no SASS of major 9, no PTX
        try (CudaContext c = open(other, stampFor(other), true, false, cache)) {
            assertThat(c.info().kernels()).isEqualTo("NVRTC 13.0 (kernels.fatbin holds no code for sm_90 (sm_80 sm_100 sm_120))");
            assertThat(c.takeNotes()).singleElement().asString().doesNotContain("rebuild");
        }
    }

    @Test void nvrtcCanBeForcedOverAFreshFatbin() throws Exception {
        byte[] fb = CudaBindingTest.fakeFatbin("sm_90", "compute_80");
        Path cache = tmp.resolve("cache-forced");
        try (CudaContext c = open(fb, stampFor(fb), true, true, cache)) {
            assertThat(c.info().kernels()).isEqualTo("NVRTC 13.0 (-Dcmf.cuda.nvrtc=force)");
            assertThat(c.takeNotes()).isEmpty();   // asked for: nothing to warn about
            assertThat(cached(cache)).hasSize(1);
        }
        assertThatThrownBy(() -> open(fb, stampFor(fb), false, true, cache)).isInstanceOf(CudaUnavailableException.class)
                .hasMessageStartingWith("kernels.cu: -Dcmf.cuda.nvrtc=force, and NVRTC");
    }

    @Test void neitherAFreshFatbinNorNvrtcIsAClearErrorAndAutoFallsBackToTheCpu() {
        byte[] fb = CudaBindingTest.fakeFatbin("sm_90");
        Map<String, String> stale = new java.util.HashMap<>(stampFor(fb));
        stale.put("source-sha256", "1".repeat(64));
        Path cache = tmp.resolve("cache-none");
        assertThatThrownBy(() -> open(fb, stale, false, false, cache)).isInstanceOf(CudaUnavailableException.class)
                .hasMessageStartingWith("kernels.cu: kernels.fatbin is stale (built from kernels.cu sha256 111111111111…")
                .hasMessageContaining("and NVRTC (libnvrtc.so.13").hasMessageContaining("/nonexistent/libnvrtc.so.13 (absent)")
                .hasMessageContaining("set CMF_NVRTC=/path/to/libnvrtc.so, rebuild the fatbin with tools/build-cuda-kernels.sh, or use --device cpu");
        try (Backend r = DeviceChoice.AUTO.open(() -> open(fb, stale, false, false, cache), CudaBindingTest.NO_VULKAN)) {
            assertThat(r.description()).startsWith("cpu").contains("kernels.fatbin is stale");
            assertThat(r.takeNotes()).singleElement().asString().startsWith("--device auto: no usable GPU (kernels.cu: kernels.fatbin is stale");
        }
        assertThatThrownBy(() -> DeviceChoice.CUDA.open(() -> open(null, Map.of(), false, false, cache), CudaBindingTest.NO_VULKAN))
                .isInstanceOf(CudaUnavailableException.class).hasMessageStartingWith("kernels.cu: no kernels.fatbin is shipped, and NVRTC");
    }

    @Test void everyCallIsCheckedAndNamed() {
        // the context is per OS thread: this test thread never bound one
        assertThatThrownBy(() -> cu.memAlloc(16)).isInstanceOf(CudaException.class)
                .hasMessageContaining("cuMemAlloc_v2").hasMessageContaining("CUDA_ERROR_INVALID_CONTEXT (201)")
                .hasMessageContaining("invalid device context");
        assertThatThrownBy(() -> ctx.call(() -> cu.function(ctx.module(), "no_such_kernel")))
                .isInstanceOf(CudaException.class).hasMessageContaining("no_such_kernel")
                .hasMessageContaining("CUDA_ERROR_NOT_FOUND (500): named symbol not found");
        Nvrtc nvrtc = Nvrtc.find(List.of(lib.toString()), new ArrayList<>());
        assertThatThrownBy(() -> nvrtc.compileToCubin("#error broken", "k.cu", CudaContext.compileOptions("sm_90")))
                .isInstanceOf(CudaException.class).hasMessageContaining("NVRTC_ERROR_COMPILATION (6)")
                .hasMessageContaining("mock compile error");
        assertThat(ctx.call(() -> { long p = cu.memAlloc(64); cu.memFree(p); return p != 0; })).isTrue();
    }

    static final Random R = new Random(11);

    /** A random [rows, cols] tensor of {@code dt} in its stored layout. */
    static MemorySegment payload(Arena a, DType dt, int rows, int cols) {
        ValueLayout.OfShort u16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        ValueLayout.OfFloat f32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
        long n = (long) rows * cols;
        return switch (dt) {
            case F32 -> { MemorySegment s = a.allocate(4 * n); for (long i = 0; i < n; i++) s.setAtIndex(f32, i, (float) R.nextGaussian()); yield s; }
            case BF16 -> { MemorySegment s = a.allocate(2 * n); for (long i = 0; i < n; i++) s.setAtIndex(u16, i, (short) (Float.floatToRawIntBits((float) R.nextGaussian()) >>> 16)); yield s; }
            case F16 -> { MemorySegment s = a.allocate(2 * n); for (long i = 0; i < n; i++) s.setAtIndex(u16, i, Float.floatToFloat16((float) R.nextGaussian())); yield s; }
            case Q8_ROW, Q8_2F -> {
                boolean two = dt == DType.Q8_2F;
                MemorySegment s = a.allocate(n + 2L * rows + (two ? 2L * cols : 0));
                for (long i = 0; i < n; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) (R.nextInt(255) - 127));
                for (int r = 0; r < rows; r++) s.set(u16, n + 2L * r, Float.floatToFloat16(0.01f + R.nextFloat() * 0.02f));
                if (two) for (int c = 0; c < cols; c++) s.set(u16, n + 2L * rows + 2L * c, Float.floatToFloat16(0.5f + R.nextFloat()));
                yield s;
            }
            case Q4_BLOCK -> {   // random nibbles (the last group's padding too: it must never be read), f16 scales
                long groups = (n + 31) / 32;
                MemorySegment s = a.allocate(groups * 18);
                for (long i = 0; i < groups * 16; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) R.nextInt(256));
                for (long g = 0; g < groups; g++) s.set(u16, groups * 16 + 2 * g, Float.floatToFloat16(0.01f + R.nextFloat() * 0.02f));
                yield s;
            }
            case Q4TP -> {       // random nibbles and 5-bit codes, a per-row ladder of scales around 2^-6
                long gpr = (cols + 31) / 32, plane = rows * gpr * 16, codes = dev.cmf4j.format.quant.TpLadder.codeStride(gpr);
                MemorySegment s = a.allocate(plane + 4L * rows + rows * codes);
                for (long i = 0; i < plane; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) R.nextInt(256));
                for (int r = 0; r < rows; r++) {
                    s.set(u16, plane + 4L * r, Float.floatToFloat16(-7.5f + R.nextFloat()));
                    s.set(u16, plane + 4L * r + 2, Float.floatToFloat16(0.02f + R.nextFloat() * 0.08f));
                }
                for (long i = 0; i < rows * codes; i++) s.set(ValueLayout.JAVA_BYTE, plane + 4L * rows + i, (byte) R.nextInt(256));
                yield s;
            }
            default -> throw new IllegalArgumentException(dt.label);
        };
    }

    @Test void q4MatmulsMatchTheCpuOnRaggedShapes() { q4MatmulsMatchTheCpu(ctx); }

    /**
     * q4_block and q4tp products on {@code c} against the CPU's reference products ({@link CpuBackend#reference}), on
     * ragged shapes, windows and 1 or 3 tokens.
     */
    static void q4MatmulsMatchTheCpu(CudaContext c) {
        MatMul cpu = CpuBackend.reference().matmul();
        try (Arena a = Arena.ofShared(); CudaMatMul gpu = new CudaMatMul(c, cpu)) {
            // q4_block groups run over the flattened tensor: cols not a multiple of 32 straddle rows (q4tp needs cols % 32 == 0)
            for (DType dt : List.of(DType.Q4_BLOCK, DType.Q4TP))
                for (int cols : dt == DType.Q4TP ? new int[] {32, 96, 288, 512} : new int[] {12, 13, 32, 40, 96, 300, 512}) {
                    int rows = 19;
                    Matrix whole = Matrix.of("w." + dt.label, dt, payload(a, dt, rows, cols), rows, cols);
                    assertThat(CudaMatMul.supports(whole)).isTrue();
                    for (Matrix m : List.of(whole, whole.slice(3, 11, false), whole.slice(18, 1, false)))
                        for (int tokens : new int[] {1, 3}) assertGpuMatchesCpu(cpu, gpu, m, tokens, dt.label + " cols " + cols);
                }
            // uploaded as stored (q4tp plus 8 bytes per row of ladder steps), freed on close
            long before = gpu.deviceBytes();
            Matrix q = Matrix.of("q", DType.Q4TP, payload(a, DType.Q4TP, 4, 64), 4, 64);
            gpu.apply(q, new float[64], 1, new float[4]);
            assertThat(gpu.deviceBytes() - before).isEqualTo(q.data().byteSize() + 8 * 4);
            Matrix b = Matrix.of("b", DType.Q4_BLOCK, payload(a, DType.Q4_BLOCK, 3, 40), 3, 40);
            gpu.apply(b, new float[40], 1, new float[3]);
            assertThat(gpu.deviceBytes() - before).isEqualTo(q.data().byteSize() + 8 * 4 + b.data().byteSize());
        }
    }

    @Test void matmulMatchesTheCpuForEveryDtypeWindowAndChunk() {
        MatMul cpu = CpuBackend.reference().matmul();
        try (Arena a = Arena.ofShared(); CudaMatMul gpu = new CudaMatMul(ctx, cpu)) {
            for (DType dt : List.of(DType.F32, DType.BF16, DType.F16, DType.Q8_ROW, DType.Q8_2F))
                for (int cols : new int[] {12, 13, 256}) {
                    int rows = 21;
                    Matrix whole = Matrix.of("w." + dt.label, dt, payload(a, dt, rows, cols), rows, cols);
                    for (Matrix m : List.of(whole, whole.slice(5, 9, false)))
                        for (int tokens : new int[] {1, 3}) assertGpuMatchesCpu(cpu, gpu, m, tokens, dt.label + " cols " + cols);
                }
            assertThat(gpu.deviceBytes()).isPositive();
            // input-major matrices go to the CPU fallback
            Matrix im = Matrix.of("im", DType.F32, payload(a, DType.F32, 6, 4), 6, 4).slice(0, 6, true);
            assertThat(CudaMatMul.supports(im)).isFalse();
            float[] x = {1, 2, 3, 4, 5, 6}, want = new float[4], got = new float[4];
            cpu.apply(im, x, 1, want);
            gpu.apply(im, x, 1, got);
            assertThat(got).containsExactly(want);
        }
    }

    @Test void sharedProductsMatchOneByOneIncludingFallbackMembersAndConcurrentSubmitters() throws Exception {
        MatMul cpu = CpuBackend.newMatMul();
        try (Arena a = Arena.ofShared(); CudaMatMul gpu = new CudaMatMul(ctx, cpu)) {
            int cols = 13;
            Matrix q = Matrix.of("q", DType.Q8_2F, payload(a, DType.Q8_2F, 21, cols), 21, cols);
            Matrix kv = Matrix.of("kv", DType.BF16, payload(a, DType.BF16, 10, cols), 10, cols);
            // an input-major [in=13, out=6] matrix: not for the GPU, must still land in its own output
            Matrix im = Matrix.of("im", DType.F32, payload(a, DType.F32, cols, 6), cols, 6).slice(0, cols, true);
            Matrix[] ws = {q, kv.slice(0, 5, false), im, kv.slice(5, 5, false)};
            for (int tokens : new int[] {1, 3}) {
                float[] x = new float[tokens * cols];
                for (int i = 0; i < x.length; i++) x[i] = (float) R.nextGaussian();
                float[][] want = new float[ws.length][], got = new float[ws.length][];
                for (int i = 0; i < ws.length; i++) {
                    want[i] = new float[tokens * ws[i].outDim()];
                    got[i] = new float[want[i].length];
                    cpu.apply(ws[i], x, tokens, want[i]);
                }
                gpu.applyShared(ws, x, tokens, got);
                for (int i = 0; i < ws.length; i++)
                    for (int j = 0; j < want[i].length; j++)
                        assertThat((double) got[i][j]).as(ws[i].name() + " t " + tokens + " j " + j)
                                .isCloseTo(want[i][j], org.assertj.core.data.Offset.offset(1e-4 * (1 + Math.abs(want[i][j]))));
            }
            assertThatThrownBy(() -> gpu.applyShared(new Matrix[] {q}, new float[cols], 1, new float[0][]))
                    .isInstanceOf(IllegalArgumentException.class);
            // the owner-thread hand-off under several submitting threads: every result lands with its caller
            float[] x = new float[cols];
            for (int i = 0; i < cols; i++) x[i] = i - 6;
            float[] want = new float[21];
            cpu.apply(q, x, 1, want);
            List<Thread> ts = new java.util.ArrayList<>();
            java.util.concurrent.atomic.AtomicInteger bad = new java.util.concurrent.atomic.AtomicInteger();
            for (int t = 0; t < 4; t++) ts.add(Thread.ofPlatform().start(() -> {
                float[] y = new float[21];
                for (int it = 0; it < 200; it++) {
                    gpu.apply(q, x, 1, y);
                    for (int i = 0; i < 21; i++) if (Math.abs(y[i] - want[i]) > 1e-4 * (1 + Math.abs(want[i]))) bad.incrementAndGet();
                }
            }));
            for (Thread t : ts) t.join();
            assertThat(bad.get()).isZero();
        }
    }

    @Test void aCopyFromAClosedMappingIsNeverReusedAtTheSameAddress() {
        MatMul cpu = CpuBackend.newMatMul();
        try (Arena base = Arena.ofShared(); CudaMatMul gpu = new CudaMatMul(ctx, cpu)) {
            MemorySegment mem = payload(base, DType.F32, 8, 16);
            float[] x = new float[16];
            java.util.Arrays.fill(x, 1f);
            float[] first = new float[8], second = new float[8], want = new float[8];
            Arena mapA = Arena.ofShared();
            gpu.apply(Matrix.of("w", DType.F32, MemorySegment.ofAddress(mem.address()).reinterpret(mem.byteSize(), mapA, null), 8, 16), x, 1, first);
            mapA.close(); // "unmapped"; a new mapping lands at the same address with other contents
            mem.copyFrom(payload(base, DType.F32, 8, 16));
            try (Arena mapB = Arena.ofShared()) {
                Matrix again = Matrix.of("w", DType.F32, MemorySegment.ofAddress(mem.address()).reinterpret(mem.byteSize(), mapB, null), 8, 16);
                gpu.apply(again, x, 1, second);
                cpu.apply(again, x, 1, want);
            }
            for (int i = 0; i < 8; i++) assertThat((double) second[i]).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-4));
            assertThat(second).isNotEqualTo(first);
        }
    }

    /**
     * Reads one of the mock's counters: 0 kernels launched directly, 1 graphs captured, 2 graph replays, 3 nodes
     * replayed, 4 streams alive, 5 device allocations alive, 6 graphs alive, 7 executable graphs alive, 8 launches
     * with programmatic stream serialization (cuLaunchKernelEx).
     */
    static int counter(int which) { return counter(lib, which); }

    /** The mock library {@code lib}'s counter {@code which} (mock_counter). */
    static int counter(Path lib, int which) {
        try {
            var h = java.lang.foreign.Linker.nativeLinker().downcallHandle(
                    java.lang.foreign.SymbolLookup.libraryLookup(lib, Arena.global()).find("mock_counter").orElseThrow(),
                    java.lang.foreign.FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
            return (int) h.invokeExact(which);
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    static int gemms() { return mockCount("mock_gemms"); }

    /** cublasGemmStridedBatchedEx calls (gate and up as one; each also counts once in {@link #gemms}). */
    static int stridedGemms() { return mockCount("mock_strided_gemms"); }

    /** r_residual_split3 launches (o's and down's residual epilogues fused with the split after them). */
    static int residualSplits() { return mockCount("mock_residual_splits"); }

    static int mockCount(String fn) { return (int) MockCuda.read(lib, fn, ValueLayout.JAVA_INT); }

    /** A session's logits for a prompt (prefill chunks of 4, all logits) and a few decode steps, concatenated. */
    static float[] run(dev.cmf4j.model.graph.Graph g, int[] prompt, int[] next) {
        try (dev.cmf4j.runtime.Session s = new dev.cmf4j.runtime.Session(g, 64, 4)) {
            float[] all = s.logitsAll(prompt);
            int v = g.vocab();
            float[] out = java.util.Arrays.copyOf(all, all.length + (next.length + 1) * v);
            s.reset();
            float[] last = s.prefill(prompt);   // chunks of 4 and a last chunk of 1, last-token logits only
            System.arraycopy(last, 0, out, all.length, v);
            for (int i = 0; i < next.length; i++) System.arraycopy(s.decode(next[i]), 0, out, all.length + (i + 1) * v, v);
            return out;
        }
    }

    @Test void denseModelsRunGpuResidentAndMatchTheCpuWithGraphsOnAndOff() {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8, 300};
        for (String file : List.of("llama-Q8_2F.cmf", "qwen3-F32.cmf", "qwen3-Q8_2F.cmf"))
            for (boolean graphs : new boolean[] {true, false})
            for (boolean pdl : new boolean[] {true, false}) {
                // graphs on: prefill chunks of 4 go through the mock cuBLAS; off: through the matvec kernels
                float[] want;
                try (var m = dev.cmf4j.model.Model.open(dir.resolve(file))) { want = run(m.graph(), prompt, next); }
                List<String> notes = new ArrayList<>();
                try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                    gpu.notes(notes::add);
                    gpu.useGraphs(graphs);
                    gpu.useProgrammaticLaunch(pdl);
                    if (graphs) gpu.useCublas(List.of(lib.toString()), 2);
                    int gemms0 = gemms();
                    int direct0 = counter(0), captured0 = counter(1), replays0 = counter(2), programmatic0 = counter(8);
                    float[] got;
                    int layers;
                    try (var m = dev.cmf4j.model.Model.open(dir.resolve(file), null, new CudaBackend(gpu))) {
                        assertThat(m.graph().device()).as(file).isNotNull();
                        layers = m.graph().numLayers();
                        got = run(m.graph(), prompt, next);
                    }
                    assertThat(notes).singleElement().asString().contains("GPU-resident forward");
                    for (int i = 0; i < want.length; i++)
                        assertThat((double) got[i]).as(file + " graphs " + graphs + " pdl " + pdl + " logit " + i)
                                .isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
                    // prefill chunks of 4 and 2 launch kernel by kernel (the all-logits ones too: a chunk shape is captured
                    // from its second use); the decode steps replay one graph
                    if (graphs) {
                        assertThat(counter(1) - captured0).as("one graph per session").isEqualTo(1);
                        assertThat(counter(2) - replays0).as("a replay per one-token step").isEqualTo(next.length);
                    } else {
                        assertThat(counter(1) - captured0).isZero();
                        assertThat(counter(2) - replays0).isZero();
                    }
                    assertThat(counter(0)).isGreaterThan(direct0);
                    // the mock has cuLaunchKernelEx and its functions report PTX version 90 (mock_ptx_version): a decode
                    // step's kernels that wait (ResidentForward.waits) go out as programmatic launches when a kernel
                    // precedes them. These fixtures are dense SiLU decoders, q/k/v of one kind: per layer r_matvec3
                    // (q, k, v), r_attn_partial, r_matvec (o + residual), r_glu (gate/up), r_matvec (down + residual),
                    // then the head's r_matvec: 5 per layer + 1; the embedding (first) and qwen3-F32's unfolded
                    // RMSNorm kernels launch plainly. Counted at each cuLaunchKernelEx: graphs on, once (the capture;
                    // replays do not launch again); off, every decode step (next.length; the prefill chunks of 4 and
                    // 2 launch plainly)
                    if (pdl)
                        assertThat(counter(8) - programmatic0).as("programmatic dependent launches in the decode steps")
                                .isEqualTo((5 * layers + 1) * (graphs ? 1 : next.length));
                    else
                        assertThat(counter(8) - programmatic0).as("-Dcmf.cuda.pdl=false: plain launches only").isZero();
                    assertThat(notes.get(0).contains("programmatic dependent launch")).as("the note says whether").isEqualTo(pdl);
                    if (graphs) assertThat(gemms() - gemms0).as("prefill products as cuBLAS GEMMs").isPositive();
                    else assertThat(gemms()).isEqualTo(gemms0);
                }
            }
    }

    /**
     * One session's own prefill, then four batched steps of four sequences (prompt chunks beside decode rows; spans
     * asking for no logits, the last row's or all rows'; then decode rows only, twice) on the resident GPU forward,
     * against the same steps on the CPU engine.
     */
    static float[] batches(dev.cmf4j.model.graph.Graph g) {
        var st = new dev.cmf4j.model.graph.State[4];
        for (int i = 0; i < 4; i++) st[i] = g.newState(8, 32);
        var ws = g.newWorkspace(16, 32);
        int v = g.vocab();
        // first one session alone (its prefill takes the GEMMs without the head's), then the batched steps (whose head
        // GEMM then gets the head's f16 copy made once)
        float[] first = new float[v];
        g.forward(st[0], new int[] {1, 5, 9, 200, 17}, 0, 5, first, false, null);
        float[] out = first, buf = new float[16 * v];
        var steps = List.<java.util.function.Supplier<dev.cmf4j.model.graph.Batch>>of(
                () -> new dev.cmf4j.model.graph.Batch()
                        .add(st[1], new int[] {4, 6, 8}, 0, 3, dev.cmf4j.model.graph.Batch.Logits.ALL)
                        .add(st[2], new int[] {11}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST),
                () -> new dev.cmf4j.model.graph.Batch().add(st[0], new int[] {7}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                        .add(st[3], new int[] {2, 3}, 0, 2, dev.cmf4j.model.graph.Batch.Logits.NONE)
                        .add(st[1], new int[] {300}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                        .add(st[2], new int[] {12, 13, 14, 15}, 0, 4, dev.cmf4j.model.graph.Batch.Logits.LAST),
                () -> new dev.cmf4j.model.graph.Batch().add(st[2], new int[] {16}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                        .add(st[0], new int[] {8}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                        .add(st[3], new int[] {21}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                        .add(st[1], new int[] {22}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST),
                // decode rows again, in another order: the captured step of 4 rows replays with new tables
                () -> new dev.cmf4j.model.graph.Batch().add(st[1], new int[] {30}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                        .add(st[3], new int[] {31}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                        .add(st[2], new int[] {32}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                        .add(st[0], new int[] {33}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST));
        for (var make : steps) {
            var b = make.get();
            g.forward(b, ws, buf, null);
            int n = b.logitRows() * v, at = out.length;
            out = java.util.Arrays.copyOf(out, at + n);
            System.arraycopy(buf, 0, out, at, n);
        }
        for (var s : st) s.close();
        return out;
    }

    @Test void batchedStepsOfSeveralSessionsMatchTheCpu() {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        for (String file : List.of("llama-Q8_2F.cmf", "qwen3-F32.cmf"))
            for (boolean cublas : new boolean[] {true, false}) {
                float[] want;
                try (var m = dev.cmf4j.model.Model.open(dir.resolve(file))) { want = batches(m.graph()); }
                try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                    gpu.notes(n -> {});
                    // with cuBLAS from 2 rows every step's products are GEMMs; without, the matvec kernels with a row dimension
                    if (cublas) gpu.useCublas(List.of(lib.toString()), 2);
                    int gemms0 = gemms(), captured0 = counter(1), replays0 = counter(2), small0 = counter(9);
                    float[] got;
                    try (var m = dev.cmf4j.model.Model.open(dir.resolve(file), null, new CudaBackend(gpu))) {
                        assertThat(m.graph().device()).as(file).isNotNull();
                        got = batches(m.graph());
                    }
                    assertThat(counter(9)).as("the small-batch products are off by default").isEqualTo(small0);
                    // the two steps of 4 decode rows: captured once (with the GEMMs as graph nodes), replayed twice
                    assertThat(counter(1) - captured0).as("captured batch steps").isEqualTo(1);
                    assertThat(counter(2) - replays0).as("replayed batch steps").isEqualTo(2);
                    assertThat(got).hasSameSizeAs(want);
                    for (int i = 0; i < want.length; i++)
                        assertThat((double) got[i]).as(file + " cublas " + cublas + " logit " + i)
                                .isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
                    if (cublas) assertThat(gemms() - gemms0).as("batched products as GEMMs").isPositive();
                    else assertThat(gemms()).isEqualTo(gemms0);
                }
            }
    }

    /**
     * Models quantized to q4_block and q4tp run GPU-resident, not on the hybrid path (issue 17): the fixtures' llama and
     * qwen3 through the converter, as the quantizers keep them (embeddings and head q8_row) and with the embedding (and
     * qwen3's tied head) kept 4-bit too ({@code --keep}), and qwen3_moe (4-bit experts), so every 4-bit kernel kind runs:
     * the products (q/k/v in one launch, gate/up with SwiGLU, o and down with the residual), the experts' gate/up and
     * down, the embedding gather, and for the prefill chunks
     * through cuBLAS the widening to f32 before each GEMM; without cuBLAS the chunks take the matvec kernels with a
     * row dimension. One session's prefill (chunks of 4, every position's logits) and decode steps, then the batched
     * steps of several sessions, against the CPU engine's reference products on the same file. Both read the same
     * weights ((q − 8)·scale is exact in f32 for q4_block, one f32 rounding for q4tp's f32 rungs) and differ only in
     * summation order (the twins sum in double): measured 3.3e-6 … 7.6e-6, so 1e-4 (the other resident tests' 1e-3 would
     * let a wrong scale on one small row pass).
     */
    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(strings = {"llama:q4_block", "llama:q4tp", "qwen3:q4_block+embed", "qwen3:q4tp+embed",
            "qwen3_moe:q4_block", "qwen3_moe:q4tp"})
    void q4ModelsRunGpuResidentAndMatchTheCpu(String which) throws Exception {
        Path cmf = convertQ4(which, tmp);
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8, 300};
        float[] want, wantBatches;
        try (var cpu = CpuBackend.reference(); var m = dev.cmf4j.model.Model.open(cmf, null, cpu)) {
            assertThat(m.graph().numLayers()).isPositive();
            want = run(m.graph(), prompt, next);
            wantBatches = batches(m.graph());
        }
        for (boolean cublas : new boolean[] {true, false}) {
            List<String> notes = new ArrayList<>();
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(notes::add);
                if (cublas) gpu.useCublas(List.of(lib.toString()), 2);
                int gemms0 = gemms(), q40 = mockCount("mock_q4_resident"), widen0 = mockCount("mock_q4_widenings");
                float[] got, gotBatches;
                try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) {
                    assertThat(m.graph().device()).as(which + ": resident").isNotNull();
                    got = run(m.graph(), prompt, next);
                    gotBatches = batches(m.graph());
                }
                String what = which + (cublas ? ", cuBLAS prefill" : ", matvec prefill");
                assertThat(notes).as(what).singleElement().asString().contains("GPU-resident forward").doesNotContain("hybrid");
                assertThat(mockCount("mock_q4_resident") - q40).as(what + ": 4-bit resident kernels run").isPositive();
                if (cublas) {
                    assertThat(gemms() - gemms0).as(what + ": prefill products as GEMMs").isPositive();
                    assertThat(mockCount("mock_q4_widenings") - widen0).as(what + ": 4-bit matrices widened for them").isPositive();
                } else {
                    assertThat(gemms()).as(what).isEqualTo(gemms0);
                    assertThat(mockCount("mock_q4_widenings")).as(what).isEqualTo(widen0);
                }
                double worst = 0;
                for (float[][] pair : new float[][][] {{want, got}, {wantBatches, gotBatches}}) {
                    assertThat(pair[1]).hasSameSizeAs(pair[0]);
                    for (int i = 0; i < pair[0].length; i++) worst = Math.max(worst, Math.abs(pair[1][i] - pair[0][i]));
                }
                System.out.printf("resident %s vs the CPU: max|Δ| %.3g%n", what, worst);
                assertThat(worst).as(what + ": max |Δ| of the session's and the batches' logits").isLessThanOrEqualTo(1e-4);
            }
        }
    }

    /**
     * The fixture folder of {@code which} = "MODEL:DTYPE" (q4_block or q4tp; "+embed": the embedding, and a tied head,
     * kept in that dtype too, where the quantizers keep them q8_row) converted into {@code dir}.
     */
    static Path convertQ4(String which, Path dir) throws Exception {
        String model = which.substring(0, which.indexOf(':')), quant = which.substring(which.indexOf(':') + 1).replace("+embed", "");
        boolean embed = which.endsWith("+embed");
        Path cmf = dir.resolve(model + "-" + quant + (embed ? "-embed" : "") + ".cmf");
        List<dev.cmf4j.convert.TensorPolicy.Keep> keeps = embed
                ? List.of(dev.cmf4j.convert.TensorPolicy.Keep.parse("model.embed_tokens.weight=" + quant)) : List.of();
        try (var src = dev.cmf4j.convert.Sources.open(dev.cmf4j.testkit.Fixtures.require("models/" + model))) {
            dev.cmf4j.convert.Converter.convert(src, cmf, dev.cmf4j.convert.Converter.Options.of(
                    new dev.cmf4j.convert.TensorPolicy(dev.cmf4j.convert.TensorPolicy.Mode.parse(quant), keeps)).withThreads(2));
        }
        return cmf;
    }

    /**
     * With the small-batch products on (-Dcmf.cuda.smallBatchRows=8), decode steps of B = 2…8 sequences of different
     * lengths on an int8 model take them (resident_mmvq.cu, not cuBLAS, though cuBLAS is on from 2 rows), and every
     * sequence's logits are those of running alone, bit for bit: the kernels keep the matvec kernels' numbers row for
     * row (here their twins; the real kernels' bits: CudaKernelEmulationTest). Blocks of 8 weight rows for even B, 16
     * for odd (-Dcmf.cuda.smallBatchBlockRows): the launch shapes the twins check.
     */
    @Test void smallBatchDecodeStepsGiveEachSequenceItsLogitsAlone() {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        for (int blockRows : new int[] {8, 16})
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            gpu.useCublas(List.of(lib.toString()), 2);
            gpu.useSmallBatchRows(8, blockRows);
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                var g = m.graph();
                assertThat(g.device()).isNotNull();
                int v = g.vocab();
                for (int b = blockRows == 8 ? 2 : 3; b <= 8; b += 2) {
                    var batched = new dev.cmf4j.model.graph.State[b];
                    var alone = new dev.cmf4j.model.graph.State[b];
                    float[] buf = new float[b * v], one = new float[v];
                    for (int i = 0; i < b; i++) {   // prompts of 1 … b tokens
                        int[] prompt = new int[i + 1];
                        for (int k = 0; k <= i; k++) prompt[k] = 3 + 17 * k + 5 * i;
                        batched[i] = g.newState(16, 16);
                        alone[i] = g.newState(16, 16);
                        g.forward(batched[i], prompt, 0, prompt.length, one, false, null);
                        g.forward(alone[i], prompt, 0, prompt.length, one, false, null);
                    }
                    var ws = g.newWorkspace(16, 16);
                    int small0 = counter(9), gemms0 = gemms();
                    for (int step = 0; step < 2; step++) {
                        var batch = new dev.cmf4j.model.graph.Batch();
                        for (int i = 0; i < b; i++) batch.add(batched[i], new int[] {40 + 7 * i + step}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST);
                        g.forward(batch, ws, buf, null);
                        for (int i = 0; i < b; i++) {
                            g.forward(alone[i], new int[] {40 + 7 * i + step}, 0, 1, one, false, null);
                            assertThat(java.util.Arrays.copyOfRange(buf, i * v, (i + 1) * v)).as("B " + b + ", step " + step + ", sequence " + i + ", blocks of " + blockRows)
                                    .containsExactly(one);
                        }
                    }
                    assertThat(counter(9) - small0).as("small-batch products in B = " + b + "'s steps").isPositive();
                    assertThat(gemms() - gemms0).as("no GEMM in B = " + b + "'s steps").isZero();
                    for (int i = 0; i < b; i++) { batched[i].close(); alone[i].close(); }
                }
            }
        }
    }

    /**
     * {@code --kv f16} and {@code --kv q8} on the resident forward: one session's prefill and decode steps, then the
     * batched steps, with f16 / q8 KV caches on the device against the CPU engine's caches of the type. The CPU keeps a
     * step's own rows in f32 until the step ends. f16: the GPU's prefill reads a chunk's own keys back from the cache, so
     * every row differs by f16 roundings of the chunk's keys and values (bound 5e-3). q8: the chunk's own rows are read
     * as f32 too and the rows are quantized by the same rule, so rows agree to float noise (1e-4), except after a key or
     * value element the two engines compute a float apart fell on the other side of a code's rounding boundary: that
     * element is one code step apart from there on (gemma4's batches: 2 of 16 rows, 7.7e-3). At least 3/4 of the rows
     * at float noise, none past 2e-2; q8 also on gemma4 (sliding windows, K/V shared by later layers, head dims by layer).
     * Each differs from the f32 run.
     */
    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(strings = {"F16", "Q8"})
    void aReducedKvCacheRunsResidentAndMatchesTheCpusCacheOfItsType(String type) throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8, 300};
        var kv = dev.cmf4j.backend.KvType.valueOf(type);
        boolean q8 = kv == dev.cmf4j.backend.KvType.Q8;
        var memory = new dev.cmf4j.model.AttentionMemory(null, kv);
        List<Path> files = new ArrayList<>(List.of(dir.resolve("llama-Q8_2F.cmf"), dir.resolve("qwen3-F32.cmf")));
        if (q8)
            files.add(dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/gemma4"),
                    tmp.resolve("gemma4-kv.cmf"), dev.cmf4j.convert.TensorPolicy.Mode.F32));
        for (Path file : files) {
            String name = file.getFileName().toString();
            float[] want, wantBatches;
            int vocab;
            try (var m = dev.cmf4j.model.Model.open(file, null, new CpuBackend(), List.of(), h -> memory)) {
                want = run(m.graph(), prompt, next);
                wantBatches = batches(m.graph());
                vocab = m.graph().vocab();
            }
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                List<String> notes = new ArrayList<>();
                gpu.notes(notes::add);
                gpu.useCublas(List.of(lib.toString()), 2);
                float[] got, gotBatches, f32;
                try (var m = dev.cmf4j.model.Model.open(file, null, new CudaBackend(gpu), List.of(), h -> memory)) {
                    assertThat(m.graph().device()).as(name).isNotNull();
                    got = run(m.graph(), prompt, next);
                    gotBatches = batches(m.graph());
                }
                try (var m = dev.cmf4j.model.Model.open(file, null, new CudaBackend(gpu))) { f32 = run(m.graph(), prompt, next); }
                assertThat(notes.get(0)).contains("GPU-resident forward").contains(kv.label() + " KV cache");
                assertThat(gotBatches).hasSameSizeAs(wantBatches);
                double[] rows = rowDiffs(got, want, vocab), batchRows = rowDiffs(gotBatches, wantBatches, vocab);
                double max = 0, maxF32 = 0;
                int noise = 0;
                for (double[] rs : List.of(rows, batchRows))
                    for (double d : rs) {
                        max = Math.max(max, d);
                        if (d < 1e-4) noise++;
                    }
                for (int i = 0; i < want.length; i++) maxF32 = Math.max(maxF32, Math.abs(got[i] - f32[i]));
                System.out.printf("%s %s: GPU against CPU max |d| %.2e, %d of %d rows below 1e-4; against the f32 cache %.2e%n", name, type,
                        max, noise, rows.length + batchRows.length, maxF32);
                if (q8) {
                    assertThat(noise).as(name + ": rows at float noise").isGreaterThanOrEqualTo(3 * (rows.length + batchRows.length) / 4);
                    assertThat(max).as(name + ": GPU q8 cache against the CPU's").isLessThan(2e-2);
                } else assertThat(max).as(name + ": GPU f16 cache against the CPU's").isLessThan(5e-3);
                assertThat(maxF32).as(name + ": the " + type + " cache is not the f32 one").isGreaterThan(q8 ? 3e-2 : 1e-6);
            }
        }
    }

    /** Each logits row's largest |got − want|. */
    static double[] rowDiffs(float[] got, float[] want, int vocab) {
        double[] d = new double[want.length / vocab];
        for (int i = 0; i < want.length; i++) d[i / vocab] = Math.max(d[i / vocab], Math.abs(got[i] - want[i]));
        return d;
    }

    /**
     * The batched steps on gemma4 (K/V shared by later layers, per-layer inputs, head dims by layer), gemma4_moe (a dense
     * MLP beside the MoE) and qwen3_next (recurrent layers: launched per span, never replayed from a capture), each
     * through cuBLAS and through the matvec kernels: logits within 1e-3 of the CPU engine's same steps.
     */
    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(strings = {"gemma4", "gemma4_moe", "qwen3_next"})
    void batchedStepsOfTheGemma4AndQwen3NextFamiliesMatchTheCpu(String model, @org.junit.jupiter.api.io.TempDir Path tmp) throws Exception {
        Path cmf = dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/" + model),
                tmp.resolve(model + ".cmf"), dev.cmf4j.convert.TensorPolicy.Mode.F32);
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(cmf)) { want = batches(m.graph()); }
        for (boolean cublas : new boolean[] {true, false})
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(n -> {});
                if (cublas) gpu.useCublas(List.of(lib.toString()), 2);
                int captured0 = counter(1);
                float[] got;
                try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) {
                    assertThat(m.graph().device()).as(model).isNotNull();
                    got = batches(m.graph());
                }
                if (model.equals("qwen3_next")) assertThat(counter(1) - captured0).as("no batch capture of a recurrent model").isZero();
                assertThat(got).hasSameSizeAs(want);
                for (int i = 0; i < want.length; i++)
                    assertThat((double) got[i]).as(model + " cublas " + cublas + " logit " + i)
                            .isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
            }
    }

    /**
     * Greedy batched steps pick on the device (ra_argmax_rows' twin) what the host picks from the same model's logits:
     * two GPU models of one file step the same sessions, one copying back every logit row, one only the ids.
     */
    @Test void greedyStepsPickOnTheDeviceWhatTheHostPicksFromTheLogits() {
        Path file = dev.cmf4j.testkit.Fixtures.require("cmf/refconv").resolve("llama-Q8_2F.cmf");
        try (CudaBackend ga = new CudaBackend(ctx); CudaBackend gb = new CudaBackend(ctx);
             var ma = dev.cmf4j.model.Model.open(file, null, ga); var mb = dev.cmf4j.model.Model.open(file, null, gb)) {
            var a = ma.graph();
            var b = mb.graph();
            assertThat(a.device()).isNotNull();
            int v = a.vocab(), n = 5;
            var sa = new dev.cmf4j.model.graph.State[n];
            var sb = new dev.cmf4j.model.graph.State[n];
            for (int i = 0; i < n; i++) { sa[i] = a.newState(8, 32); sb[i] = b.newState(8, 32); }
            var wa = a.newWorkspace(16, 32);
            var wb = b.newWorkspace(16, 32);
            float[] logits = new float[16 * v];
            int[] picks = new int[16];
            for (int step = 0; step < 5; step++) {
                // step 0: prompts of 1..5 tokens, then decode rows; step 2 mixes a longer span in after the rows
                var ba = new dev.cmf4j.model.graph.Batch();
                var bb = new dev.cmf4j.model.graph.Batch();
                for (int i = 0; i < n; i++) {
                    int len = step == 0 ? i + 1 : step == 2 && i == n - 1 ? 3 : 1;
                    int[] ids = new int[len];
                    for (int k = 0; k < len; k++) ids[k] = step == 0 || (step == 2 && i == n - 1) ? 7 + 31 * i + k : picks[i];
                    ba.add(sa[i], ids, 0, len, dev.cmf4j.model.graph.Batch.Logits.LAST);
                    bb.add(sb[i], ids, 0, len, dev.cmf4j.model.graph.Batch.Logits.LAST);
                }
                b.forward(bb, wb, logits, null);
                a.forwardArgmax(ba, wa, picks);
                for (int i = 0; i < n; i++)
                    assertThat(picks[i]).as("step " + step + " sequence " + i).isEqualTo(dev.cmf4j.backend.cpu.VectorMath.argmaxScalar(logits, i * v, v));
            }
            for (int i = 0; i < n; i++) { sa[i].close(); sb[i].close(); }
        }
    }

    /** selftest --ops through the mock's C twins: every operator check passes, and a wrong twin would fail its line. */
    @Test void operatorChecksPassOnTheTwins() {
        try (CudaBackend gpu = new CudaBackend(ctx)) {
            var results = gpu.checkOperators(true);
            assertThat(results).hasSizeGreaterThan(40);
            assertThat(results).allSatisfy(r -> assertThat(r.ok()).as(r.toString()).isTrue());
        }
    }

    @Test void int8PrefillMatchesTheCpuWithAndWithoutKeptF16Copies() {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8};
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"))) { want = run(m.graph(), prompt, next); }
        java.util.Map<String, Long> kept = new java.util.HashMap<>();   // device bytes the model holds after its sessions closed
        for (String cache : List.of("true", "false")) {   // f16 copies made once, or each int8 matrix widened per chunk
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(n -> {});
                gpu.useCublas(List.of(lib.toString()), 2);
                gpu.usePrefillCache(cache);
                int gemms0 = gemms(), strided0 = stridedGemms(), fused0 = residualSplits();
                float[] got;
                int layers;
                try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                    layers = m.graph().numLayers();
                    got = run(m.graph(), prompt, next);
                    kept.put(cache, deviceUsed());
                }
                assertThat(gemms() - gemms0).as("prefill through cuBLAS").isPositive();
                // gate and up, and k and v, each as one strided-batched GEMM when their copies lie one matrix apart:
                // two per layer of each of run()'s 4 GEMM chunks (4 and 2 tokens, twice; the 1-token ones take the
                // matvec kernels); per chunk widening has one matrix's scratch, so separate GEMMs then
                assertThat(stridedGemms() - strided0).as("gate/up and k/v strided GEMMs, prefillCache " + cache)
                        .isEqualTo(cache.equals("true") ? 2 * 4 * layers : 0);
                // o's residual epilogue runs with the gate/up split, down's with the next layer's q/k/v split (the
                // last layer's alone, before the head): 2·layers − 1 fused launches per GEMM chunk
                assertThat(residualSplits() - fused0).as("fused residual epilogues and splits").isEqualTo(4 * (2 * layers - 1));
                for (int i = 0; i < want.length; i++)
                    assertThat((double) got[i]).as("prefillCache " + cache + " logit " + i)
                            .isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
            }
        }
        // the copies (2 bytes per int8 weight) outweigh the one-matrix widening scratch they replace
        assertThat(kept.get("true")).as("device bytes with the f16 copies kept").isGreaterThan(kept.get("false"));
    }

    /** Fast prefill: q8_2f and f16 weights take 1 scaled f16 part, bf16 weights 2 bf16 parts (was 3). */
    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(strings = {"q8_2f", "f16", "bf16"})
    void fastPrefillStaysCloseToTheCpuAndDiffersFromExact(String dtype) {
        Path model = dtype.equals("q8_2f") ? dev.cmf4j.testkit.Fixtures.require("cmf/refconv").resolve("llama-Q8_2F.cmf")
                : dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/llama"),
                        tmp.resolve("llama-fast-" + dtype + ".cmf"), dev.cmf4j.convert.TensorPolicy.Mode.parse(dtype));
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8};
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(model)) { want = run(m.graph(), prompt, next); }
        java.util.Map<String, float[]> got = new java.util.HashMap<>();
        for (String mode : List.of("exact", "fast")) {
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(n -> {});
                gpu.useCublas(List.of(lib.toString()), 2);
                gpu.usePrefillPrecision(mode);
                try (var m = dev.cmf4j.model.Model.open(model, null, new CudaBackend(gpu))) { got.put(mode, run(m.graph(), prompt, next)); }
            }
        }
        int v = want.length / (prompt.length + next.length + 1);
        double exact = 0, fast = 0, fastDecode = 0;
        for (int i = 0; i < want.length; i++) {
            exact = Math.max(exact, Math.abs(got.get("exact")[i] - want[i]));
            fast = Math.max(fast, Math.abs(got.get("fast")[i] - want[i]));
            if (i >= prompt.length * v + v) fastDecode = Math.max(fastDecode, Math.abs(got.get("fast")[i] - got.get("exact")[i]));
        }
        assertThat(exact).as(dtype + ": exact prefill against the CPU").isLessThan(1e-3);
        // 11 (f16) or 16 (2 bf16 parts) significant bits move the logits by more than the exact parts do, but stay near the CPU's
        assertThat(fast).as(dtype + ": fast prefill against the CPU").isGreaterThan(exact).isLessThan(0.05);
        assertThat(fastDecode).as(dtype + ": decode after a fast prefill (its KV cache came from the fast prefill)").isLessThan(0.05);
    }

    /**
     * q8_row weights have no column scales (no norm folded into them either), so gate and up, and k and v, take one
     * set of parts: their strided GEMMs read B with a stride of 0. Checked against the CPU engine.
     */
    @Test void pairedGemmsOfSharedPartsMatchTheCpu() throws Exception {
        Path cmf = dev.cmf4j.model.ConvertedGoldenTest.convert(dev.cmf4j.testkit.Fixtures.require("models/llama"),
                tmp.resolve("llama-pairs-q8_row.cmf"), dev.cmf4j.convert.TensorPolicy.Mode.Q8_ROW);
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8};
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(cmf)) { want = run(m.graph(), prompt, next); }
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            gpu.useCublas(List.of(lib.toString()), 2);
            gpu.usePrefillCache("true");
            int strided0 = stridedGemms();
            float[] got;
            int layers;
            try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) {
                layers = m.graph().numLayers();
                got = run(m.graph(), prompt, next);
            }
            assertThat(stridedGemms() - strided0).as("gate/up and k/v strided GEMMs").isEqualTo(2 * 4 * layers);
            for (int i = 0; i < want.length; i++)
                assertThat((double) got[i]).as("q8_row logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
        }
    }

    @Test void theSecondGemmOutputStaysAlignedForAnyRowsAndChunk() {
        // sC2 = sC1 + gemmOutputBytes: a vocabulary of 32,002 rows (an all-logits head) and 7 tokens gave 8 mod 16
        for (long rows : new long[] {32002, 32001, 151936, 1024, 3})
            for (int t : new int[] {1, 2, 7, 64, 511})
                assertThat(PrefillWorkspace.gemmOutputBytes(rows, t) % 256).as(rows + " rows, " + t + " tokens").isZero();
        assertThat(PrefillWorkspace.gemmOutputBytes(32002, 7)).isGreaterThanOrEqualTo(4L * 32002 * 3 * 7 + 256);
    }

    @Test void prefillPrecisionRejectsUnknownModes() {
        assertThatThrownBy(() -> ResidentForward.prefillPrecisionMode("f16"))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("exact or fast");
    }

    /**
     * The fused prefill launches (q, k and v's parts from one pass, their epilogues as one launch; gate and up's
     * parts; the SwiGLU epilogue writing the down product's parts) give the very logits of the unfused launches, with
     * fewer launches, for every weight kind of the GEMM path: q8_2f (each matrix its own column scales, so its own
     * parts and token scale: a fused split handing a matrix another's parts or scale changes the logits), bf16 and
     * f16 (the folded norm's weight one vector, q, k and v sharing one set of parts), exact and fast; and stay within
     * 1e-3 (exact) of the CPU engine.
     */
    @Test void fusedPrefillGivesTheUnfusedLogitsForEveryWeightKind() throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("models/llama");
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8};
        for (var mode : List.of(dev.cmf4j.convert.TensorPolicy.Mode.Q8_2F, dev.cmf4j.convert.TensorPolicy.Mode.BF16,
                dev.cmf4j.convert.TensorPolicy.Mode.F16)) {
            Path cmf = dev.cmf4j.model.ConvertedGoldenTest.convert(dir, tmp.resolve("llama-fusion-" + mode.label + ".cmf"), mode);
            float[] want;
            try (var m = dev.cmf4j.model.Model.open(cmf)) { want = run(m.graph(), prompt, next); }
            for (String precision : List.of("exact", "fast")) {
                java.util.Map<Boolean, float[]> got = new java.util.HashMap<>();
                java.util.Map<Boolean, Integer> launched = new java.util.HashMap<>();
                for (boolean fused : new boolean[] {true, false}) {
                    try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                        gpu.notes(n -> {});
                        gpu.useCublas(List.of(lib.toString()), 2);
                        gpu.usePrefillPrecision(precision);
                        gpu.usePrefillFusion(fused);
                        int direct0 = counter(0), gemms0 = gemms();
                        try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) { got.put(fused, run(m.graph(), prompt, next)); }
                        launched.put(fused, counter(0) - direct0);
                        assertThat(gemms() - gemms0).as("prefill through cuBLAS").isPositive();
                    }
                }
                String what = mode.label + " " + precision;
                assertThat(got.get(true)).as(what + ": fused logits = unfused logits").containsExactly(got.get(false));
                assertThat(launched.get(true)).as(what + ": fewer launches fused").isLessThan(launched.get(false));
                if (precision.equals("exact"))
                    for (int i = 0; i < want.length; i++)
                        assertThat((double) got.get(true)[i]).as(what + " logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
            }
        }
    }

    /**
     * Code built from the compute_80 PTX (a GPU major without SASS in the fatbin, or CUDA_FORCE_PTX_JIT) has no
     * griddepcontrol.wait: its decode steps launch plainly, whatever the device's compute capability, and still match.
     * compute_90 code launches them programmatically, unless told not to ({@code -Dcmf.cuda.pdl=false}). A driver that
     * cannot say which code it loaded (cuFuncGetAttribute failing) gets plain launches, not a failed model.
     */
    @Test void codeWithoutTheWaitsLaunchesPlainly() {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8};
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"))) { want = run(m.graph(), prompt, next); }
        java.util.Map<String, Integer> programmatic = new java.util.HashMap<>();
        java.util.Map<String, String> said = new java.util.HashMap<>();
        for (String which : List.of("80", "90", "90 pdl off", "-1")) {   // -1: the mock's cuFuncGetAttribute(PTX_VERSION) fails
            int ptx = Integer.parseInt(which.split(" ")[0]);
            mockSet("mock_ptx_version", ValueLayout.JAVA_INT, ptx);
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(n -> said.merge(which, n, String::concat));
                gpu.useProgrammaticLaunch(!which.endsWith("off"));
                int before = counter(8);
                float[] got;
                try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) { got = run(m.graph(), prompt, next); }
                programmatic.put(which, counter(8) - before);
                for (int i = 0; i < want.length; i++)
                    assertThat((double) got[i]).as("ptx " + which + " logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
            } finally {
                mockSet("mock_ptx_version", ValueLayout.JAVA_INT, 90);
            }
        }
        assertThat(programmatic.get("80")).as("compute_80 code: no programmatic launches").isZero();
        assertThat(said.get("80")).doesNotContain("programmatic dependent launch");
        assertThat(programmatic.get("90")).as("compute_90 code: the decode step's").isPositive();
        assertThat(said.get("90")).as("the model's note says so").contains("programmatic dependent launch");
        assertThat(programmatic.get("90 pdl off")).as("compute_90 code, -Dcmf.cuda.pdl=false").isZero();
        assertThat(said.get("90 pdl off")).doesNotContain("programmatic dependent launch");
        assertThat(programmatic.get("-1")).as("PTX version unknown: plain launches").isZero();
        assertThat(said.get("-1")).contains("GPU-resident forward").doesNotContain("programmatic dependent launch");
    }

    @Test void unreachableSessionsGiveTheirDeviceMemoryBack() throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                int before = counter(4);
                for (int i = 0; i < 6; i++) new dev.cmf4j.runtime.Session(m.graph(), 16, 4).decode(1 + i);
                assertThat(counter(4) - before).as("a stream per session while reachable").isBetween(1, 6);
                long deadline = System.nanoTime() + 5_000_000_000L;
                while (counter(4) > before && System.nanoTime() < deadline) {
                    System.gc();
                    Thread.sleep(20);
                }
                assertThat(counter(4)).as("every dropped session's stream and memory freed by the cleaner").isEqualTo(before);
            }
        }
    }

    /**
     * Sliding-window layers keep rings on the device (window + chunk rows, resident.cu's r_kv_ring): gemma3 and gpt-oss
     * (window 8) at f32 match their transformers goldens with prompt chunks of 3 (rings of 11 rows, which the 40-token
     * prompt and the 24 greedy steps wrap several times), and a session's device memory grows only by the full layers'
     * caches: with KV pages by the rows of the positions it has used (its context costs nothing up front), with caches
     * allocated whole (a device without virtual memory management) by a row per position of its context.
     */
    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(strings = {"gemma3", "gpt_oss"})
    void slidingLayersKeepRingsAndMatchTheGoldens(String name) throws Exception {
        Path src = dev.cmf4j.testkit.Fixtures.require("models/" + name);
        Path cmf = dev.cmf4j.model.ConvertedGoldenTest.convert(src, tmp.resolve(name + "-rings.cmf"), dev.cmf4j.convert.TensorPolicy.Mode.F32);
        var golden = dev.cmf4j.model.Golden.load(src);
        long fullRowBytes;
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) {
                var g = m.graph();
                assertThat(g.device()).as(name + " resident").isNotNull();
                var r = golden.check(g, 3);
                assertThat(r.logitsMaxDiff()).as(name + ": " + r).isLessThanOrEqualTo(1e-3);
                assertThat(r.stepLogitsMaxDiff()).as(name + ": " + r).isLessThanOrEqualTo(1e-3);
                assertThat(r.greedyMatches()).as(name + ": " + r).isTrue();
                fullRowBytes = 0;
                int sliding = 0;
                for (var l : g.spec().layers())
                    if (l.mixer() instanceof dev.cmf4j.model.Mixer.Attention a && !a.sharesKv()) {
                        if (a.window() > 0) sliding++;
                        else fullRowBytes += 2L * Float.BYTES * a.kvDim();   // a key and a value row, f32
                    }
                assertThat(sliding).as(name + " has sliding layers").isPositive();
                var small = g.newState(3, 1024);
                var large = g.newState(3, 2048);
                try (var s = new dev.cmf4j.runtime.Session(g, 2048, 3)) {
                    assertThat(large.heldBytes()).as(name + ": a longer context takes no memory before it is used").isEqualTo(small.heldBytes());
                    long before = s.state().heldBytes();
                    int used = 40;
                    s.prefill(java.util.stream.IntStream.range(0, used).map(i -> 3 + i).toArray());
                    long pages = 0;   // each full layer's key and value cache: its used rows, rounded up to the mock's 4 KiB pages
                    for (var l : g.spec().layers())
                        if (l.mixer() instanceof dev.cmf4j.model.Mixer.Attention a && !a.sharesKv() && a.window() == 0)
                            pages += 2 * ((used * Float.BYTES * (long) a.kvDim() + 4095) / 4096 * 4096);
                    assertThat(s.state().heldBytes() - before).as(name + ": " + used + " positions cost the full layers' pages of them only")
                            .isEqualTo(pages);
                } finally {
                    small.close();
                    large.close();
                }
            }
            mockSet("mock_vmm", ValueLayout.JAVA_INT, 0);   // a device without virtual memory management: caches allocated whole
            try (var m = dev.cmf4j.model.Model.open(cmf, null, new CudaBackend(gpu))) {
                var small = m.graph().newState(3, 1024);
                var large = m.graph().newState(3, 2048);
                assertThat(large.heldBytes() - small.heldBytes()).as(name + ": 1,024 more positions cost the full layers' rows only")
                        .isEqualTo(1024 * fullRowBytes);
                small.close();
                large.close();
            } finally {
                mockSet("mock_vmm", ValueLayout.JAVA_INT, 1);
            }
        }
    }

    @Test void closingASessionGivesItsDeviceMemoryBackAtOnce() throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                int before = counter(4);
                var s = new dev.cmf4j.runtime.Session(m.graph(), 16, 4);
                s.decode(1);
                assertThat(counter(4)).as("the session holds a stream").isGreaterThan(before);
                s.close();
                assertThat(counter(4)).as("freed by close, no GC needed").isEqualTo(before);
                s.close();
                assertThat(counter(4)).as("a second close frees nothing twice").isEqualTo(before);
                assertThatThrownBy(() -> s.decode(2)).isInstanceOf(IllegalStateException.class).hasMessageContaining("closed");
            }
        }
    }

    /** Without KV pages (a device without virtual memory management) a session's caches are allocated whole, at once. */
    @Test void aSessionThatDoesNotFitGivesBackWhatItTook() throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        mockSet("mock_vmm", ValueLayout.JAVA_INT, 0);
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                var probe = new dev.cmf4j.runtime.Session(m.graph(), 1 << 20, 4);   // context capped by the model
                int ctxLen = probe.maxContext();
                probe.close();   // weights uploaded, nothing per session left
                var attn = (dev.cmf4j.model.Mixer.Attention) m.spec().layer(0).mixer();
                long kvBytes = 4L * ctxLen * attn.kvDim();
                int streams = counter(4), allocs = counter(5);
                failAllocsAbove(kvBytes - 1);   // a layer's KV cache no longer fits: fails after the stream and small buffers
                try {
                    assertThatThrownBy(() -> new dev.cmf4j.runtime.Session(m.graph(), ctxLen, 4))
                            .hasMessageContaining("OUT_OF_MEMORY");
                } finally {
                    failAllocsAbove(-1);
                }
                assertThat(counter(5)).as("device buffers taken before the failure given back").isEqualTo(allocs);
                assertThat(counter(4)).as("the session's stream destroyed").isEqualTo(streams);
            }
        } finally {
            mockSet("mock_vmm", ValueLayout.JAVA_INT, 1);
        }
    }

    /**
     * KV pages: a session's full-layer caches are address ranges reserved whole and backed as its positions reach them.
     * When the device has no memory for the next page, that step fails with a clear error and changes nothing: the
     * session goes on from where it was once memory is back, with the logits of a session that never failed; closing
     * it unmaps and releases every page and range.
     */
    @Test void aSequenceWhosePagesDoNotFitFailsThatStepAndGoesOnLater() throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        int kvDim = 64, rowsPerPage = 4096 / (Float.BYTES * kvDim);
        int[] prompt = java.util.stream.IntStream.range(0, rowsPerPage).map(i -> 5 + 3 * i).toArray();   // fills the first page exactly
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf")); var s = new dev.cmf4j.runtime.Session(m.graph(), 64, 8)) {
            assertThat(((dev.cmf4j.model.Mixer.Attention) m.spec().layer(0).mixer()).kvDim()).isEqualTo(kvDim);
            s.prefill(prompt);
            want = s.decode(7).clone();
        }
        long handles = mockLong("mock_vmm_handles"), ranges = mockLong("mock_vmm_reserved");
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                var s = new dev.cmf4j.runtime.Session(m.graph(), 64, 8);
                int layers = m.spec().layers().size();
                assertThat(mockLong("mock_vmm_reserved") - ranges).as("a key and a value range per layer").isEqualTo(2L * layers);
                assertThat(mockLong("mock_vmm_handles")).as("nothing mapped before the first step").isEqualTo(handles);
                s.prefill(prompt);
                assertThat(mockLong("mock_vmm_handles") - handles).as("one page per cache").isEqualTo(2L * layers);
                mockSet("mock_device_budget", ValueLayout.JAVA_LONG, deviceUsed());   // the device is full
                try {
                    assertThatThrownBy(() -> s.decode(7)).hasMessageContaining("the KV cache of positions up to " + (rowsPerPage + 1))
                            .hasMessageContaining("OUT_OF_MEMORY");
                } finally {
                    mockSet("mock_device_budget", ValueLayout.JAVA_LONG, -1L);
                }
                assertThat(s.position()).as("the failed step changed nothing").isEqualTo(rowsPerPage);
                float[] got = s.decode(7);
                for (int i = 0; i < want.length; i++)
                    assertThat((double) got[i]).as("logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
                assertThat(mockLong("mock_vmm_handles") - handles).as("a second page per cache").isEqualTo(4L * layers);
                s.close();
                assertThat(mockLong("mock_vmm_handles") - handles).as("a closed session's pages kept for the next").isEqualTo(4L * layers);
                long buffers;
                try (var again = new dev.cmf4j.runtime.Session(m.graph(), 64, 8)) {   // the same shape: takes them, maps nothing
                    assertThat(again.state().heldBytes()).as("the kept pages are the new session's").isGreaterThanOrEqualTo(4L * layers * 4096);
                    again.prefill(prompt);
                    float[] first = again.decode(7);
                    for (int i = 0; i < want.length; i++)
                        assertThat((double) first[i]).as("reused pages, logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
                    assertThat(mockLong("mock_vmm_handles") - handles).isEqualTo(4L * layers);
                    assertThat(mockLong("mock_vmm_reserved") - ranges).isEqualTo(2L * layers);
                    buffers = again.state().heldBytes() - 4L * layers * 4096;
                }
                // room for a session's buffers only, the kept pages idle
                mockSet("mock_device_budget", ValueLayout.JAVA_LONG, deviceUsed() + buffers);
                try (var other = new dev.cmf4j.runtime.Session(m.graph(), 32, 8)) {   // another shape: the idle pages give way
                    other.prefill(prompt);
                    assertThat(mockLong("mock_vmm_handles") - handles).as("only the new session's pages").isEqualTo(2L * layers);
                } finally {
                    mockSet("mock_device_budget", ValueLayout.JAVA_LONG, -1L);
                }
            }
        }
        assertThat(mockLong("mock_vmm_handles")).as("every page released with the device's copy of the model").isEqualTo(handles);
        assertThat(mockLong("mock_vmm_reserved")).as("every range freed").isEqualTo(ranges);
    }

    static long mockLong(String fn) { return MockCuda.read(lib, fn, ValueLayout.JAVA_LONG); }

    /**
     * The device runs out of memory while one request is generating: the request that needed the memory fails with
     * the driver's error, the running one finishes with exactly the tokens it gets alone, and the next one is served.
     */
    @Test void outOfDeviceMemoryMidRequestFailsThatRequestAndTheOthersGoOn() throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                int[] promptA = {1, 5, 9, 2}, promptB = {3, 4}, promptC = {7};
                var cfg = new dev.cmf4j.runtime.Scheduler.Config(2, 64, 4, 64, 16, 0);
                int[] want;
                try (var alone = new dev.cmf4j.runtime.Session(m.graph(), cfg.maxContext())) {
                    want = new dev.cmf4j.runtime.Generator(alone, new dev.cmf4j.runtime.Sampler(dev.cmf4j.runtime.SamplingParams.GREEDY),
                            java.util.Set.of(), List.of()).generate(promptA, 24, null, null).tokens();
                }
                int ctxLen;
                try (var probe = new dev.cmf4j.runtime.Session(m.graph(), cfg.maxContext())) { ctxLen = probe.maxContext(); }
                long kvBytes = 4L * ctxLen * ((dev.cmf4j.model.Mixer.Attention) m.spec().layer(0).mixer()).kvDim();
                int allocs = counter(5);
                try (var sched = new dev.cmf4j.runtime.Scheduler(m.graph(), null, cfg)) {
                    var b = new java.util.concurrent.CompletableFuture<dev.cmf4j.runtime.Completion>();
                    dev.cmf4j.runtime.TokenSink sinkB = c -> {
                        failAllocsAbove(-1);   // the memory comes back once B has failed
                        b.complete(c);
                    };
                    var a = new java.util.concurrent.CompletableFuture<dev.cmf4j.runtime.Completion>();
                    int[] seen = {0};
                    dev.cmf4j.runtime.TokenSink sinkA = new dev.cmf4j.runtime.TokenSink() {
                        @Override public void token(int id, dev.cmf4j.runtime.TokenLogprobs lp) {
                            if (++seen[0] == 3) {   // A is mid-generation: the device fills up and B arrives
                                failAllocsAbove(kvBytes - 1);
                                sched.submit(dev.cmf4j.runtime.GenerationRequest.of(promptB, 8, dev.cmf4j.runtime.SamplingParams.GREEDY, java.util.Set.of(), sinkB));
                            }
                        }

                        @Override public void finished(dev.cmf4j.runtime.Completion c) { a.complete(c); }
                    };
                    try {
                        sched.submit(dev.cmf4j.runtime.GenerationRequest.of(promptA, 24, dev.cmf4j.runtime.SamplingParams.GREEDY, java.util.Set.of(), sinkA));
                        var doneB = b.get(60, TimeUnit.SECONDS);
                        assertThat(doneB.finish()).isEqualTo(dev.cmf4j.runtime.Completion.Finish.ERROR);
                        assertThat(doneB.error()).contains("OUT_OF_MEMORY");
                        var doneA = a.get(60, TimeUnit.SECONDS);
                        assertThat(doneA.finish()).isEqualTo(dev.cmf4j.runtime.Completion.Finish.LENGTH);
                        assertThat(doneA.tokens()).as("the running request is undisturbed").containsExactly(want);
                    } finally {
                        failAllocsAbove(-1);
                    }
                    var c = new java.util.concurrent.CompletableFuture<dev.cmf4j.runtime.Completion>();
                    sched.submit(dev.cmf4j.runtime.GenerationRequest.of(promptC, 4, dev.cmf4j.runtime.SamplingParams.GREEDY, java.util.Set.of(), c::complete));
                    assertThat(c.get(60, TimeUnit.SECONDS).tokens()).hasSize(4);
                }
                assertThat(counter(5)).as("every device buffer of the three requests given back").isEqualTo(allocs);
            }
        }
    }

    @Test void aFailedGraphInstantiationLeaksNothingAndTheNextStepCapturesAfresh() throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"));
             var s = new dev.cmf4j.runtime.Session(m.graph(), 16, 4)) {
            want = s.decode(1).clone();
        }
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            gpu.useGraphs(true);
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                int graphs = counter(6), execs = counter(7);
                var s = new dev.cmf4j.runtime.Session(m.graph(), 16, 4);
                failInstantiates(1);
                try {
                    assertThatThrownBy(() -> s.decode(1)).hasMessageContaining("cuGraphInstantiateWithFlags");
                } finally {
                    failInstantiates(0);
                }
                assertThat(counter(6)).as("the captured graph destroyed when its instantiation failed").isEqualTo(graphs);
                assertThat(counter(7)).isEqualTo(execs);
                s.reset();
                float[] got = s.decode(1);   // captures again: no half-made graph reused
                for (int i = 0; i < want.length; i++)
                    assertThat((double) got[i]).as("logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
                assertThat(counter(6)).as("one graph while the session lives").isEqualTo(graphs + 1);
                assertThat(counter(7)).isEqualTo(execs + 1);
                s.close();
                assertThat(counter(6)).as("graph freed with the session").isEqualTo(graphs);
                assertThat(counter(7)).isEqualTo(execs);
            }
        }
    }

    /**
     * Between hand-offs the owner thread spins only briefly before parking: 20 hand-offs 5 ms apart (a caller
     * sampling, a server between requests) cost the owner thread a few ms of CPU at most, not 2 ms per gap.
     */
    @Test void theOwnerThreadParksSoonAfterEachHandOff() throws Exception {
        var threads = (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
        assumeTrue(threads.isThreadCpuTimeSupported() && threads.isThreadCpuTimeEnabled(), "no per-thread CPU time");
        Thread owner = ctx.call(Thread::currentThread);
        Thread.sleep(20);   // parked by now
        long cpu0 = threads.getThreadCpuTime(owner.threadId());
        for (int i = 0; i < 20; i++) {
            ctx.call(() -> null);
            Thread.sleep(5);
        }
        long spentMs = (threads.getThreadCpuTime(owner.threadId()) - cpu0) / 1_000_000;
        assertThat(spentMs).as("owner CPU ms over 20 idle gaps of 5 ms").isLessThan(15);
    }

    @Test void aChunkLargerThanTheGpuTakesIsAClearErrorAtTheSession() {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                int live = counter(5);
                assertThatThrownBy(() -> new dev.cmf4j.runtime.Session(m.graph(), ResidentForward.MAX_CHUNK + 2, ResidentForward.MAX_CHUNK + 1))
                        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("the GPU takes at most 65535");
                assertThat(counter(5)).as("nothing allocated for it").isEqualTo(live);
                try (var s = new dev.cmf4j.runtime.Session(m.graph(), 64, 4)) { assertThat(s.decode(1)).hasSize(m.graph().vocab()); }
            }
        }
    }

    @Test void theKeptF16CopiesGiveWayToANewSessionsKvCache() {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        int[] prompt = {1, 5, 9, 200, 17, 3};
        float[] want;
        try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf")); var s = new dev.cmf4j.runtime.Session(m.graph(), 16, 4)) {
            want = s.prefill(prompt);
        }
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            gpu.useCublas(List.of(lib.toString()), 2);
            gpu.usePrefillCache("true");
            try (var m = dev.cmf4j.model.Model.open(dir.resolve("llama-Q8_2F.cmf"), null, new CudaBackend(gpu))) {
                long base = deviceUsed();
                try (var a = new dev.cmf4j.runtime.Session(m.graph(), 16, 4)) {
                    long session = deviceUsed() - base;
                    float[] first = a.prefill(prompt);   // the first prefill makes the f16 copies
                    long withCopies = deviceUsed();
                    assertThat(withCopies - base - session).as("copies and scratch kept after the first prefill").isPositive();
                    mockSet("mock_device_budget", ValueLayout.JAVA_LONG, withCopies + session - 1);   // a second session fits only without them
                    try (var b = new dev.cmf4j.runtime.Session(m.graph(), 16, 4)) {
                        assertThat(deviceUsed()).as("the copies gave way").isLessThan(withCopies + session - 1);
                        float[] again = b.prefill(prompt);   // now widened per chunk
                        for (int i = 0; i < want.length; i++) {
                            assertThat((double) first[i]).as("with copies, logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
                            assertThat((double) again[i]).as("without, logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
                        }
                    } finally {
                        mockSet("mock_device_budget", ValueLayout.JAVA_LONG, -1L);
                    }
                }
            }
        }
    }

    static long deviceUsed() { return MockCuda.read(lib, "mock_device_used", ValueLayout.JAVA_LONG); }

    static void failInstantiates(int n) { mockSet("mock_fail_instantiates", ValueLayout.JAVA_INT, n); }

    static void failAllocsAbove(long bytes) { mockSet("mock_fail_allocs_above", ValueLayout.JAVA_LONG, bytes); }

    /** Calls the mock's {@code void fn(arg)} test knob. */
    private static void mockSet(String fn, ValueLayout argLayout, Object arg) {
        try {
            java.lang.foreign.Linker.nativeLinker().downcallHandle(
                    java.lang.foreign.SymbolLookup.libraryLookup(lib, Arena.global()).find(fn).orElseThrow(),
                    java.lang.foreign.FunctionDescriptor.ofVoid(argLayout)).invokeWithArguments(arg);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /**
     * Embryo (bounded anchors, gated delta nets, resonance-routed MoE, hierarchical head) runs resident: with graphs and
     * the cuBLAS prefill, and launch by launch with the matvec kernels (the head's gated rows kernel), against the float64
     * goldens (log-probabilities ≤ 1e-3, greedy ids exact; prompt chunks of 7 cut every window and the rings wrap), and
     * BatchConformance's 8 sequences in mixed steps = each alone; the device's state is the model's fixed state.
     */
    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(strings = {"embryo_a", "embryo_b", "embryo_c"})
    void embryoRunsResidentAndMatchesTheGoldens(String name) throws Exception {
        Path dir = dev.cmf4j.testkit.Fixtures.require("embryo/" + name);
        var golden = dev.cmf4j.model.Golden.load(dir);
        for (boolean graphs : new boolean[] {true, false}) {
            List<String> notes = new ArrayList<>();
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(notes::add);
                gpu.useGraphs(graphs);
                if (graphs) gpu.useCublas(List.of(lib.toString()), 2);
                int gemms0 = gemms();
                try (var m = dev.cmf4j.model.Model.open(dir.resolve("model.cmf"), null, new CudaBackend(gpu))) {
                    var g = m.graph();
                    assertThat(g.device()).as(name + ": " + notes).isNotNull();
                    var r = golden.check(g, 7);
                    assertThat(r.logitsMaxDiff()).as(name + " graphs " + graphs + ": " + r).isLessThanOrEqualTo(1e-3);
                    assertThat(r.stepLogitsMaxDiff()).as(name + " graphs " + graphs + ": " + r).isLessThanOrEqualTo(1e-3);
                    assertThat(r.greedyMatches()).as(name + " graphs " + graphs + ": " + r).isTrue();
                    var b = dev.cmf4j.model.graph.BatchConformance.run(g, golden.inputIds());
                    assertThat(b.maxDiff()).as(name + " batch vs alone at " + b.worstAt()).isLessThanOrEqualTo(2e-4);
                    assertThat(b.greedySame()).as(name + " batch greedy").isTrue();
                    var st = g.newState(8, 64);
                    assertThat(st.stateBytes()).as(name + " state bytes").isEqualTo(g.spec().fixedStateBytes()).isPositive();
                    st.close();
                }
                if (graphs) assertThat(gemms() - gemms0).as("prefill chunks as GEMMs").isPositive();
            }
            assertThat(notes).singleElement().asString().contains("GPU-resident forward");
        }
    }

    /**
     * The hierarchical head's gate on the device: a session gated for top-p 0.5 beside an ungated one, each alone and in
     * batched steps of both (a gate per logit row), gives the CPU graph's log-probabilities (dropped clusters' tokens
     * their spread mass) within 1e-3; and the gate drops clusters (the two sessions' rows differ).
     */
    @Test void embryoHeadGatesPerSequenceMatchTheCpu() {
        Path file = dev.cmf4j.testkit.Fixtures.require("embryo/embryo_a").resolve("model.cmf");
        float[][] want;
        try (var m = dev.cmf4j.model.Model.open(file)) { want = gatedSteps(m.graph()); }
        float[][] got;
        try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(n -> {});
            try (var m = dev.cmf4j.model.Model.open(file, null, new CudaBackend(gpu))) {
                assertThat(m.graph().device()).isNotNull();
                got = gatedSteps(m.graph());
            }
        }
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < want[k].length; i++)
                assertThat((double) got[k][i]).as((k == 0 ? "gated" : "ungated") + " log p " + i)
                        .isCloseTo(want[k][i], org.assertj.core.data.Offset.offset(1e-3));
        double apart = 0;
        for (int i = 0; i < got[0].length; i++) apart = Math.max(apart, Math.abs(got[0][i] - got[1][i]));
        assertThat(apart).as("the gated session's dropped clusters").isGreaterThan(0.1);
    }

    /**
     * A device session's state snapshot is the CPU graph's (rings and delta states in their layouts): a GPU snapshot
     * taken after a prompt continues on the CPU, and a CPU snapshot on the GPU, with the log-probabilities of the
     * uninterrupted run within 1e-3; a resident model with a KV cache refuses to snapshot, saying why.
     */
    @Test void embryoStateSnapshotsMoveBetweenTheGpuAndTheCpu() throws Exception {
        Path file = dev.cmf4j.testkit.Fixtures.require("embryo/embryo_c").resolve("model.cmf");
        int[] prompt = {3, 77, 256, 9, 140, 301, 12, 60, 33, 100, 7, 19, 250, 4, 88, 91, 5, 2, 300, 41}, next = {6, 7, 8};
        try (CudaMatMul gpu = quiet(); var mc = dev.cmf4j.model.Model.open(file);
             var mg = dev.cmf4j.model.Model.open(file, null, new CudaBackend(gpu))) {
            var cpu = mc.graph();
            var dev = mg.graph();
            assertThat(dev.device()).isNotNull();
            for (boolean fromGpu : new boolean[] {true, false}) {
                var src = (fromGpu ? dev : cpu).newState(8, 64);
                var dst = (fromGpu ? cpu : dev).newState(8, 64);
                float[] buf = new float[8 * cpu.vocab()];
                for (int p = 0; p < prompt.length; p += 8)
                    (fromGpu ? dev : cpu).forward(src, prompt, p, Math.min(8, prompt.length - p), buf, false, null);
                var bytes = new java.io.ByteArrayOutputStream();
                src.exportTo(new java.io.DataOutputStream(bytes));
                dst.importFrom(new java.io.DataInputStream(new java.io.ByteArrayInputStream(bytes.toByteArray())));
                assertThat(dst.position()).isEqualTo(prompt.length);
                for (int id : next) {
                    float[] a = new float[cpu.vocab()], b = new float[cpu.vocab()];
                    (fromGpu ? dev : cpu).forward(src, new int[] {id}, 0, 1, a, false, null);
                    (fromGpu ? cpu : dev).forward(dst, new int[] {id}, 0, 1, b, false, null);
                    for (int i = 0; i < a.length; i++)
                        assertThat((double) b[i]).as((fromGpu ? "gpu → cpu" : "cpu → gpu") + " token " + id + " log p " + i)
                                .isCloseTo(a[i], org.assertj.core.data.Offset.offset(1e-3));
                }
                src.close();
                dst.close();
            }
        }
        Path llama = dev.cmf4j.testkit.Fixtures.require("cmf/refconv").resolve("llama-Q8_2F.cmf");
        try (CudaMatMul gpu = quiet(); var m = dev.cmf4j.model.Model.open(llama, null, new CudaBackend(gpu))) {
            var st = m.graph().newState(8, 32);
            assertThatThrownBy(() -> st.exportTo(new java.io.DataOutputStream(new java.io.ByteArrayOutputStream())))
                    .isInstanceOf(UnsupportedOperationException.class).hasMessageContaining("KV cache");
            st.close();
        }
    }

    /** A GPU matmul on the mock whose path notes go nowhere. */
    private static CudaMatMul quiet() {
        CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul());
        gpu.notes(n -> {});
        return gpu;
    }

    /** Two sessions fed the same tokens, one gated for top-p 0.5: {gated rows, ungated rows} of 3 solo and 6 batched steps. */
    private static float[][] gatedSteps(dev.cmf4j.model.graph.Graph g) {
        int v = g.vocab();
        var gated = g.newState(8, 64);
        var full = g.newState(8, 64);
        gated.gateHeadForTopP(0.5);
        var ws = g.newWorkspace(16, 64);
        int[] prompt = {3, 77, 256, 9, 140, 501, 12, 60, 33, 400, 7};
        float[][] out = {new float[0], new float[0]};
        float[] buf = new float[16 * v];
        var sts = new dev.cmf4j.model.graph.State[] {gated, full};
        for (int k = 0; k < 2; k++) {   // alone: the prompt in chunks of 8 (all logits), then two decode steps
            for (int p = 0; p < prompt.length; p += 8) {
                int n = Math.min(8, prompt.length - p);
                g.forward(sts[k], prompt, p, n, buf, true, null);
                out[k] = append(out[k], buf, n * v);
            }
            for (int id : new int[] {5, 6}) {
                g.forward(sts[k], new int[] {id}, 0, 1, buf, false, null);
                out[k] = append(out[k], buf, v);
            }
        }
        for (int step = 0; step < 6; step++) {   // batched: both as decode rows, a gate per row
            var b = new dev.cmf4j.model.graph.Batch().add(gated, new int[] {20 + step}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST)
                    .add(full, new int[] {20 + step}, 0, 1, dev.cmf4j.model.graph.Batch.Logits.LAST);
            g.forward(b, ws, buf, null);
            out[0] = append(out[0], java.util.Arrays.copyOfRange(buf, 0, v), v);
            out[1] = append(out[1], java.util.Arrays.copyOfRange(buf, v, 2 * v), v);
        }
        gated.close();
        full.close();
        return out;
    }

    private static float[] append(float[] a, float[] b, int n) {
        float[] r = java.util.Arrays.copyOf(a, a.length + n);
        System.arraycopy(b, 0, r, a.length, n);
        return r;
    }

    /** qwen3_next (gated delta net layers, the attention output gate, a gated shared expert) runs resident, the refconv file. */
    @Test void qwen3NextRunsResidentAndMatchesTheCpu() {
        Path dir = dev.cmf4j.testkit.Fixtures.require("cmf/refconv");
        int[] prompt = {1, 5, 9, 200, 17, 3}, next = {7, 8, 300};
        for (String file : List.of("qwen3_next-F32.cmf", "qwen3_next-Q8_2F.cmf")) {
            float[] want;
            try (var m = dev.cmf4j.model.Model.open(dir.resolve(file))) { want = run(m.graph(), prompt, next); }
            List<String> notes = new ArrayList<>();
            float[] got;
            try (CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
                gpu.notes(notes::add);
                try (var m = dev.cmf4j.model.Model.open(dir.resolve(file), null, new CudaBackend(gpu))) {
                    assertThat(m.graph().device()).as(file + ": " + notes).isNotNull();
                    got = run(m.graph(), prompt, next);
                }
            }
            assertThat(notes).singleElement().asString().contains("GPU-resident forward");
            for (int i = 0; i < want.length; i++)
                assertThat((double) got[i]).as(file + " logit " + i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-3));
        }
    }

    /** W·x on the GPU equals the CPU kernels' within 1e-4 relative, for random x of {@code tokens} rows. */
    static void assertGpuMatchesCpu(MatMul cpu, MatMul gpu, Matrix m, int tokens, String what) {
        float[] x = new float[tokens * m.inDim()];
        for (int i = 0; i < x.length; i++) x[i] = (float) R.nextGaussian();
        float[] want = new float[tokens * m.outDim()], got = new float[want.length];
        cpu.apply(m, x, tokens, want);
        gpu.apply(m, x, tokens, got);
        for (int i = 0; i < want.length; i++)
            assertThat((double) got[i]).as(what + " rows " + m.firstRow() + "+" + m.rows() + " t " + tokens + " i " + i)
                    .isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-4 * (1 + Math.abs(want[i]))));
    }
}
