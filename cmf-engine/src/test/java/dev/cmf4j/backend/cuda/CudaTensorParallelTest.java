package dev.cmf4j.backend.cuda;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.Backend;
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
import dev.cmf4j.model.graph.State;
import dev.cmf4j.model.graph.TensorParallelGraph;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Tensor parallelism on the GPU path through the mock driver (two mock GPUs, NCCL's all-reduce as the mock's
 * rendezvous of the ranks' owner threads): each rank's part of the model runs GPU-resident, its all-reduces on its
 * stream; the logits against transformers' and the model run whole on the CPU, and the collectives' sequence (how
 * many, how large, in which order per rank).
 */
class CudaTensorParallelTest {
    @TempDir static Path tmp;
    static Path lib;
    static CudaDriver cu;
    static final List<CudaContext> contexts = new ArrayList<>();
    static Nccl nccl;

    @BeforeAll static void build() throws Exception {
        lib = MockCuda.build(tmp);
        cu = CudaDriver.load(List.of(lib.toString()));
        mockInt("mock_devices", 2);
        for (int d = 0; d < 2; d++) contexts.add(new CudaContext(cu, d, List.of(lib.toString()), new KernelCache(tmp.resolve("cache"))));
        nccl = Nccl.load(List.of(lib.toString()));
    }

    @AfterAll static void close() {
        for (CudaContext c : contexts) c.close();
        mockInt("mock_devices", 1);
    }

    private static void mockInt(String fn, int v) {
        try {
            Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find(fn).orElseThrow(),
                    FunctionDescriptor.ofVoid(ValueLayout.JAVA_INT)).invoke(v);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    private static long log(int i, int field) {
        try {
            return (long) Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find("mock_nccl_log").orElseThrow(),
                    FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT)).invoke(i, field);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    private static int logCount() { return (int) MockCuda.read(lib, "mock_nccl_log_count", ValueLayout.JAVA_INT); }

    private static void clearLog() {
        try {
            Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(lib, Arena.global()).find("mock_nccl_log_clear").orElseThrow(),
                    FunctionDescriptor.ofVoid()).invoke();
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    private static List<CudaBackend> group(int gpus, List<String> notes) {
        List<CudaBackend> g = CudaBackend.group(gpus, contexts::get, () -> nccl);
        for (CudaBackend b : g) ((CudaMatMul) b.matmul()).notes(notes::add);
        return g;
    }

    @ParameterizedTest
    @ValueSource(strings = {"llama", "gemma3", "qwen3", "qwen3_moe", "gpt_oss"})
    void ranksRunGpuResidentWithTheirAllReducesOnTheDevice(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        ObjectNode header = JsonNodeFactory.instance.objectNode();
        header.set("arch", HfArch.fromConfig(HfConfig.read(dir.resolve("config.json"))));
        Golden gold = Golden.load(dir);
        int[] ids = gold.inputIds();
        int T = ids.length, chunk = 16, decode = 4;
        try (SafetensorsReader r = SafetensorsReader.open(dir.resolve("model.safetensors"))) {
            Weights w = TestFiles.weights(r);
            ModelSpec spec = SpecBuilder.build(header, w);
            int V = spec.vocab(), hidden = spec.hidden(), layers = spec.numLayers();
            // the model whole on the CPU, the reference's own steps: the prompt in chunks, then greedy tokens
            Graph whole = new Graph(spec, w, CpuBackend.reference());
            float[] want = run(whole, ids, chunk, decode, V);
            List<String> notes = new ArrayList<>();
            List<CudaBackend> backends = group(2, notes);
            try (TensorParallelGraph tp = TensorParallelGraph.of(spec, w, 2, backends::get)) {
                for (int rank = 0; rank < 2; rank++) assertThat(tp.rank(rank).device()).as("rank " + rank + " resident").isNotNull();
                assertThat(notes).hasSize(2).allSatisfy(n -> assertThat(n).contains("GPU-resident forward").contains("of 2, NCCL all-reduces"));
                clearLog();
                int before = (int) MockCuda.read(lib, "mock_nccl_allreduces", ValueLayout.JAVA_INT);
                TensorParallelGraph.Sequence s = tp.newSequence(chunk, T + decode + 1);
                float[] got = new float[(T + decode) * V], buf = new float[chunk * V];
                List<Integer> steps = new ArrayList<>();
                for (int p = 0; p < T; p += chunk) {
                    int n = Math.min(chunk, T - p);
                    tp.forward(s, ids, p, n, buf, true);
                    System.arraycopy(buf, 0, got, p * V, n * V);
                    steps.add(n);
                }
                for (int i = 0; i < decode; i++) {
                    int next = Golden.argmax(java.util.Arrays.copyOfRange(got, (T + i - 1) * V, (T + i) * V));
                    tp.forward(s, new int[] {next}, 0, 1, buf, false);
                    System.arraycopy(buf, 0, got, (T + i) * V, V);
                    steps.add(1);
                }
                // logits: the prompt's against transformers, every row against the model whole on the CPU
                double vsGolden = Golden.maxDiff(got, 0, gold.logits(), 0, T * V), vsWhole = Golden.maxDiff(got, 0, want, 0, want.length);
                System.out.printf("%s on 2 mock GPUs: logits max|Δ| %.3g vs transformers, %.3g vs the CPU whole%n", model, vsGolden, vsWhole);
                assertThat(vsGolden).isLessThanOrEqualTo(1e-3);
                assertThat(vsWhole).isLessThanOrEqualTo(1e-4);
                // the collectives: per rank and step, one all-reduce after o and one after the MLP or MoE of each layer, [rows, hidden]
                // floats, in step order; every one met by both ranks
                int calls = 2 * layers * steps.size();
                assertThat((int) MockCuda.read(lib, "mock_nccl_allreduces", ValueLayout.JAVA_INT) - before).isEqualTo(calls);
                assertThat(logCount()).isEqualTo(2 * calls);
                for (int rank = 0; rank < 2; rank++) {
                    List<Long> sizes = new ArrayList<>();
                    for (int i = 0; i < logCount(); i++) if (log(i, 1) == rank) sizes.add(log(i, 2));
                    List<Long> expected = new ArrayList<>();
                    for (int n : steps) for (int k = 0; k < 2 * layers; k++) expected.add((long) n * hidden);
                    assertThat(sizes).as("rank " + rank + "'s all-reduces").isEqualTo(expected);
                }
            } finally {
                for (CudaBackend b : backends) b.close();
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

    @Test
    void moreGpusThanTheMachineHasIsAClearError() {
        assertThatThrownBy(() -> CudaBackend.group(3, contexts::get, () -> nccl)).isInstanceOf(CudaUnavailableException.class)
                .hasMessage("--gpus 3: this machine has 2 GPUs");
        assertThatThrownBy(() -> CudaBackend.group(1, contexts::get, () -> nccl)).hasMessageContaining("2 or more GPUs");
        // serve --replicas: a whole copy per GPU, as many GPUs as there are at most
        assertThatThrownBy(() -> CudaBackend.replicas(3, contexts::get)).isInstanceOf(CudaUnavailableException.class)
                .hasMessage("--replicas 3: this machine has 2 GPUs (one replica per GPU)");
        List<CudaBackend> two = CudaBackend.replicas(2, contexts::get);
        assertThat(two).hasSize(2);
        assertThat(two.get(1).tensorRanks()).isEqualTo(1);
        for (CudaBackend b : two) b.close();
    }

    @Test
    void aWholeModelOnARankAndARankOnALoneGpuRunOnTheHostSaidSo() throws Exception {
        Path dir = Fixtures.require("models/llama");
        ObjectNode header = JsonNodeFactory.instance.objectNode();
        header.set("arch", HfArch.fromConfig(HfConfig.read(dir.resolve("config.json"))));
        try (SafetensorsReader r = SafetensorsReader.open(dir.resolve("model.safetensors"))) {
            Weights w = TestFiles.weights(r);
            ModelSpec spec = SpecBuilder.build(header, w);
            List<String> notes = new ArrayList<>();
            List<CudaBackend> backends = group(2, notes);
            try {
                Graph g = new Graph(spec, w, backends.get(0));
                assertThat(g.device()).isNull();
                assertThat(notes).anySatisfy(n -> assertThat(n).contains("a whole model on a device that is one rank of a tensor-parallel group of 2"));
            } finally {
                for (Backend b : backends) b.close();
            }
            // ranks on lone GPUs (no group): their all-reduces run on the host, and the step still gives the split's logits
            CudaMatMul m0 = new CudaMatMul(contexts.get(0), CpuBackend.newMatMul()), m1 = new CudaMatMul(contexts.get(1), CpuBackend.newMatMul());
            List<String> hostNotes = new ArrayList<>();
            m0.notes(hostNotes::add);
            m1.notes(hostNotes::add);
            CudaBackend[] lone = {new CudaBackend(m0), new CudaBackend(m1)};
            try (TensorParallelGraph tp = TensorParallelGraph.of(spec, w, 2, i -> lone[i])) {
                assertThat(tp.rank(0).device()).isNull();
                assertThat(hostNotes).anySatisfy(n -> assertThat(n).contains("one rank of a tensor-parallel split over 2 on a device of no group"));
                float[] logits = new float[tp.vocab()];
                tp.forward(tp.newSequence(4, 8), new int[] {1, 2, 3}, 0, 3, logits, false);
                float[] want = new float[spec.vocab()];
                Graph g = new Graph(spec, w, CpuBackend.reference());
                g.forward(g.newState(4, 8), new int[] {1, 2, 3}, 0, 3, want, false, null);
                assertThat(Golden.maxDiff(logits, 0, want, 0, want.length)).isLessThanOrEqualTo(1e-4);
            } finally {
                for (Backend b : lone) b.close();
            }
        }
    }
}
