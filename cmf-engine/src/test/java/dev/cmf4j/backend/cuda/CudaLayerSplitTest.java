package dev.cmf4j.backend.cuda;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.convert.HfArch;
import dev.cmf4j.convert.HfConfig;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.SpecBuilder;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.model.Weights;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.LayerSplitGraph;
import dev.cmf4j.model.graph.SplitGraph;
import dev.cmf4j.model.graph.State;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The split by layers ({@code --split layers}) on two mock GPUs: each stage GPU-resident on its own GPU, the first
 * embedding the ids, the second starting from the first's last layer rows (brought over through the host) and running
 * the head; a 40-token prompt in chunks of 16 and 4 greedy decode steps (the captured decode graphs: the first stage's
 * without a head), logits against transformers' and against the model run whole on the CPU. qwen3_next's first stage
 * (two gated delta nets, no attention layer) takes the hybrid path: the stages need not take the same one.
 */
class CudaLayerSplitTest {
    @TempDir static Path tmp;
    static Path lib;
    static final List<CudaContext> contexts = new ArrayList<>();

    @BeforeAll static void build() throws Exception {
        lib = MockCuda.build(tmp);
        CudaDriver cu = CudaDriver.load(List.of(lib.toString()));
        MockCuda.set(lib, "mock_devices", 2);
        for (int d = 0; d < 2; d++) contexts.add(new CudaContext(cu, d, List.of(lib.toString()), new KernelCache(tmp.resolve("cache"))));
    }

    @AfterAll static void close() {
        for (CudaContext c : contexts) c.close();
        MockCuda.set(lib, "mock_devices", 1);
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "qwen3_moe", "gpt_oss", "qwen3_next", "llama+cublas", "qwen3+cublas"})
    void stagesRunGpuResidentEachOnItsGpu(String variant) throws Exception {
        // +cublas: every prompt chunk's products as GEMMs (the mock's cuBLAS), else the kernels' own products
        boolean cublas = variant.endsWith("+cublas");
        String model = variant.replace("+cublas", "");
        Path dir = Fixtures.require("models/" + model);
        ObjectNode header = JsonNodeFactory.instance.objectNode();
        header.set("arch", HfArch.fromConfig(HfConfig.read(dir.resolve("config.json"))));
        Golden gold = Golden.load(dir);
        int[] ids = gold.inputIds();
        int T = ids.length, chunk = 16, decode = 4;
        try (SafetensorsReader r = SafetensorsReader.open(dir.resolve("model.safetensors"))) {
            Weights w = TestFiles.weights(r);
            ModelSpec spec = SpecBuilder.build(header, w);
            int V = spec.vocab();
            float[] want = run(new Graph(spec, w, CpuBackend.reference()), ids, chunk, decode, V);
            List<CudaBackend> gpus = CudaBackend.replicas(2, contexts::get);
            List<String> notes = new ArrayList<>();
            for (CudaBackend b : gpus) {
                ((CudaMatMul) b.matmul()).notes(notes::add);
                if (cublas) ((CudaMatMul) b.matmul()).useCublas(List.of(lib.toString()), 2);
            }
            long whole;   // the model's weights on one GPU
            try (CudaBackend one = new CudaBackend(contexts.get(0))) {
                ((CudaMatMul) one.matmul()).notes(n -> {});
                new Graph(spec, w, one);
                whole = ((CudaMatMul) one.matmul()).deviceBytes();
            }
            try (LayerSplitGraph pipe = LayerSplitGraph.of(spec, w, 2, gpus::get)) {
                // qwen3_next's first stage holds only gated delta nets (layers 0-1), which the resident forward does not take
                // without an attention layer: it runs the hybrid path (GPU products, host graph), and says so
                boolean deltaOnly = model.equals("qwen3_next");
                for (int s = deltaOnly ? 1 : 0; s < 2; s++) assertThat(pipe.part(s).device()).as("stage " + s + " resident: " + notes).isNotNull();
                if (deltaOnly) assertThat(notes).anySatisfy(n -> assertThat(n).contains("hybrid path").contains("no attention layers"));
                // the stages hold the model's weights once between them: the first no head, the last no embedding (a
                // tied table, one upload on one GPU, is on both ends: the embedding's on the first, the head's on the last)
                long split = 0;
                for (CudaBackend b : gpus) split += ((CudaMatMul) b.matmul()).deviceBytes();
                var table = w.get(spec.embedding());
                long tied = spec.embedding().equals(spec.head()) ? table.data().byteSize() : 0;
                System.out.printf("%s: weights %d bytes on one GPU, %d over the stages (tied table %d)%n", variant, whole, split, tied);
                assertThat(split).isLessThanOrEqualTo(whole + tied + 4L * spec.hidden());   // and the final norm's vector on both
                SplitGraph.Sequence seq = pipe.newSequence(chunk, T + decode + 1);
                float[] got = new float[(T + decode) * V], buf = new float[chunk * V];
                for (int p = 0; p < T; p += chunk) {
                    int n = Math.min(chunk, T - p);
                    pipe.forward(seq, ids, p, n, buf, true);
                    System.arraycopy(buf, 0, got, p * V, n * V);
                }
                for (int i = 0; i < decode; i++) {
                    int next = Golden.argmax(java.util.Arrays.copyOfRange(got, (T + i - 1) * V, (T + i) * V));
                    pipe.forward(seq, new int[] {next}, 0, 1, buf, false);
                    System.arraycopy(buf, 0, got, (T + i) * V, V);
                }
                double vsGolden = Golden.maxDiff(got, 0, gold.logits(), 0, T * V), vsWhole = Golden.maxDiff(got, 0, want, 0, want.length);
                System.out.printf("%s in 2 stages on 2 mock GPUs: logits max|Δ| %.3g vs transformers, %.3g vs the CPU whole%n",
                        variant, vsGolden, vsWhole);
                assertThat(vsGolden).isLessThanOrEqualTo(1e-3);
                assertThat(vsWhole).isLessThanOrEqualTo(1e-4);
                assertThat(seq.position()).isEqualTo(T + decode);
            } finally {
                for (CudaBackend b : gpus) b.close();
            }
        }
    }

    private static float[] run(Graph g, int[] ids, int chunk, int decode, int V) {
        int T = ids.length;
        State st = g.newState(chunk, T + decode + 1);
        float[] out = new float[(T + decode) * V], buf = new float[chunk * V];
        for (int p = 0; p < T; p += chunk) {
            int n = Math.min(chunk, T - p);
            g.forward(st, ids, p, n, buf, true, null);
            System.arraycopy(buf, 0, out, p * V, n * V);
        }
        for (int i = 0; i < decode; i++) {
            int next = Golden.argmax(java.util.Arrays.copyOfRange(out, (T + i - 1) * V, (T + i) * V));
            g.forward(st, new int[] {next}, 0, 1, buf, false, null);
            System.arraycopy(buf, 0, out, (T + i) * V, V);
        }
        return out;
    }
}
