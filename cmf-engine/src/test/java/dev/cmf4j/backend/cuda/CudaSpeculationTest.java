package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.model.HfFixture;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.Speculation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.List;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Speculative decoding with the target GPU-resident (mock driver): the device's KV caches go back by position alone and
 * its recurrent states (qwen3_next's delta-net layers) through host copies; greedy output equals plain greedy decoding
 * on the device, with a draft on the device (the same model: every draft accepted) and one on the CPU (another
 * model: most rejected), and the session continues as plain decoding's does.
 */
class CudaSpeculationTest {
    @TempDir static Path tmp;
    static Path lib;
    static CudaContext ctx;

    @BeforeAll static void open() throws Exception {
        lib = MockCuda.build(tmp);
        ctx = new CudaContext(CudaDriver.load(List.of(lib.toString())), 0, List.of(lib.toString()), new KernelCache(tmp.resolve("cache")));
    }

    @AfterAll static void close() { if (ctx != null) ctx.close(); }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"llama", "qwen3_next"})
    void greedyOnTheDeviceIsTokenExact(String model) throws Exception {
        int[] prompt = {5, 77, 300, 12, 901, 44, 3, 618};
        int n = 24;
        try (HfFixture hf = HfFixture.open(model); HfFixture other = HfFixture.open(model.equals("llama") ? "qwen3" : "llama");
             CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(x -> {});
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new CudaBackend(gpu));
            assertThat(g.device()).as("GPU-resident").isNotNull();
            Session ps = new Session(g, 64);
            Generator.Result want = new Generator(ps, new Sampler(SamplingParams.GREEDY), Set.of(), List.of()).generate(prompt, n, null, null);
            float[] wantNext = ps.decode(want.tokens()[n - 1]).clone();
            for (Graph draft : List.of(g, other.graph())) {
                Session t = new Session(g, 64);
                Speculation sp = new Speculation(new Session(draft, 64), 4, SamplingParams.GREEDY);
                Generator.Result got = sp.generate(new Generator(t, new Sampler(SamplingParams.GREEDY), Set.of(), List.of()), prompt, n, null, null);
                Speculation.Stats st = sp.stats(got.tokens().length);
                System.out.printf("GPU (mock) %s, draft %s: acceptance %.2f, %.2f tokens per step%n", model,
                        draft == g ? "itself" : other.name() + " on the CPU", st.acceptance(), st.tokensPerStep());
                assertThat(got.tokens()).containsExactly(want.tokens());
                if (draft == g) assertThat(st.acceptance()).isEqualTo(1.0);
                assertThat(t.position()).isEqualTo(prompt.length + n - 1);
                float[] next = t.decode(want.tokens()[n - 1]);
                double worst = 0;
                for (int i = 0; i < next.length; i++) worst = Math.max(worst, Math.abs(next[i] - wantNext[i]));
                assertThat(worst).as("logits after the generation").isLessThan(2e-4);
            }
        }
    }

    /**
     * With cuBLAS, a verification chunk (K + 1 rows, every row's logits wanted) takes the products that read each weight
     * once, as a batched step of that many rows does, although it is below the prefill's 16 tokens; still token-exact.
     */
    @org.junit.jupiter.api.Test
    void verificationChunksReadEachWeightOnce() throws Exception {
        int[] prompt = {5, 77, 300, 12, 901, 44, 3, 618};
        int n = 16;
        try (HfFixture hf = HfFixture.open("llama"); CudaMatMul gpu = new CudaMatMul(ctx, CpuBackend.newMatMul())) {
            gpu.notes(x -> {});
            gpu.useCublas(List.of(lib.toString()), 16);
            Graph g = new Graph(hf.spec(), TestFiles.weights(hf.reader()), new CudaBackend(gpu));
            Generator.Result want = new Generator(new Session(g, 64, 4), new Sampler(SamplingParams.GREEDY), Set.of(), List.of())
                    .generate(prompt, n, null, null);   // prompt chunks of 4: below the prefill's GEMM threshold
            int before = gemms();
            assertThat(before).as("plain decoding with chunks of 4 runs no GEMM").isZero();
            Speculation sp = new Speculation(new Session(g, 64, 4), 3, SamplingParams.GREEDY);
            Generator.Result got = sp.generate(new Generator(new Session(g, 64, 4), new Sampler(SamplingParams.GREEDY), Set.of(), List.of()),
                    prompt, n, null, null);
            assertThat(got.tokens()).containsExactly(want.tokens());
            assertThat(sp.stats(got.tokens().length).acceptance()).isEqualTo(1.0);
            assertThat(gemms() - before).as("each verification of 4 rows through cuBLAS").isPositive();
        }
    }

    static int gemms() { return (int) MockCuda.read(lib, "mock_gemms", java.lang.foreign.ValueLayout.JAVA_INT); }
}
