package dev.cmf4j.model.graph;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.convert.HfArch;
import dev.cmf4j.convert.HfConfig;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.model.Golden;
import dev.cmf4j.model.LayerSplit;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.Plan;
import dev.cmf4j.model.SpecBuilder;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.model.Weights;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The split by layers (a pipeline, {@code --split layers}) checked from outside: the fixture models in 2 and 3 stages,
 * each stage's layers on its own CPU backend with the last layer's rows handed on, against transformers' logits, step
 * logits and greedy ids and against the model run whole (the same operators on the same rows); what the split
 * refuses.
 */
class LayerSplitTest {
    private static final int CHUNK = 16;   // 40-token prompts in three chunks: each stage's cache is read back too

    private record Fixture(SafetensorsReader reader, Weights weights, ModelSpec spec, Golden golden) implements AutoCloseable {
        static Fixture open(String name) throws Exception {
            Path dir = Fixtures.require("models/" + name);
            ObjectNode header = JsonNodeFactory.instance.objectNode();
            header.set("arch", HfArch.fromConfig(HfConfig.read(dir.resolve("config.json"))));
            SafetensorsReader r = SafetensorsReader.open(dir.resolve("model.safetensors"));
            Weights w = TestFiles.weights(r);
            return new Fixture(r, w, SpecBuilder.build(header, w), Golden.load(dir));
        }

        @Override public void close() { reader.close(); }
    }

    /** Every logit row of the prompt through {@code g}, chunk by chunk. */
    static float[] allLogits(SplitGraph g, int[] ids) {
        int V = g.vocab();
        SplitGraph.Sequence s = g.newSequence(CHUNK, ids.length + 1);
        float[] all = new float[ids.length * V], buf = new float[CHUNK * V];
        for (int p = 0; p < ids.length; p += CHUNK) {
            int n = Math.min(CHUNK, ids.length - p);
            g.forward(s, ids, p, n, buf, true);
            System.arraycopy(buf, 0, all, p * V, n * V);
        }
        return all;
    }

    static float[] allLogits(Graph g, int[] ids) {
        int V = g.vocab();
        State s = g.newState(CHUNK, ids.length + 1);
        float[] all = new float[ids.length * V], buf = new float[CHUNK * V];
        for (int p = 0; p < ids.length; p += CHUNK) {
            int n = Math.min(CHUNK, ids.length - p);
            g.forward(s, ids, p, n, buf, true, null);
            System.arraycopy(buf, 0, all, p * V, n * V);
        }
        return all;
    }

    @ParameterizedTest
    @CsvSource({"llama,2", "qwen3,2", "gemma3,2", "gemma3,3", "qwen3_moe,2", "gpt_oss,2", "gpt_oss,3", "qwen3_next,2", "qwen3_next,3"})
    void stagesInTurnMatchTransformersAndTheWholeModel(String model, int stages) throws Exception {
        try (Fixture f = Fixture.open(model);
             LayerSplitGraph pipe = LayerSplitGraph.of(f.spec(), f.weights(), stages, s -> CpuBackend.reference())) {
            Golden gold = f.golden();
            int V = pipe.vocab(), T = gold.inputIds().length;
            assertThat(pipe.kind()).isEqualTo("layers");
            // each stage holds its contiguous layers, together every layer once
            int next = 0;
            for (int s = 0; s < stages; s++) {
                LayerSplit.Stage st = pipe.stage(s);
                assertThat(st.from()).isEqualTo(next);
                assertThat(pipe.part(s).numLayers()).isEqualTo(st.to() - st.from()).isPositive();
                assertThat(pipe.part(s).plan().takesInputRows()).isEqualTo(s > 0);
                next = st.to();
            }
            assertThat(next).isEqualTo(f.spec().numLayers());
            float[] split = allLogits(pipe, gold.inputIds());
            float[] whole = allLogits(new Graph(f.spec(), f.weights(), CpuBackend.reference()), gold.inputIds());
            double vsGolden = Golden.maxDiff(split, 0, gold.logits(), 0, T * V), vsWhole = Golden.maxDiff(split, 0, whole, 0, T * V);
            // greedy decoding through every stage's cache: transformers' ids and step logits
            SplitGraph.Sequence seq = pipe.newSequence(CHUNK, T + gold.greedyIds().length + 1);
            float[] last = new float[V];
            for (int p = 0; p < T; p += CHUNK) pipe.forward(seq, gold.inputIds(), p, Math.min(CHUNK, T - p), last, false);
            int[] got = new int[gold.greedyIds().length];
            double steps = 0;
            for (int i = 0; i < got.length; i++) {
                steps = Math.max(steps, Golden.maxDiff(last, 0, gold.stepLogits(), i * V, V));
                got[i] = Golden.argmax(last);
                if (i + 1 < got.length) pipe.forward(seq, new int[] {got[i]}, 0, 1, last, false);
            }
            System.out.printf("%s in %d stages: logits max|Δ| %.3g vs transformers, %.3g vs the whole model; steps %.3g%n",
                    model, stages, vsGolden, vsWhole, steps);
            assertThat(vsGolden).isLessThanOrEqualTo(1e-3);
            assertThat(steps).isLessThanOrEqualTo(1e-3);
            assertThat(got).isEqualTo(gold.greedyIds());
            // nothing is cut or summed across devices: the stages run the whole model's operators on the same rows (0 for
            // most; llama 4.2e-6 and qwen3_next 1.0e-5 in 2 stages, where a product or scan's host partition differs)
            assertThat(vsWhole).isLessThanOrEqualTo(5e-5);
            assertThat(seq.position()).isEqualTo(T + got.length - 1);
        }
    }

    @Test
    void stagePlansStartFromTheRowsHandedInAndOnlyTheLastRunsTheHead() throws Exception {
        try (Fixture f = Fixture.open("gemma3")) {
            List<LayerSplit.Stage> stages = LayerSplit.split(f.spec(), f.weights(), 2);
            assertThat(stages).extracting(LayerSplit.Stage::from).containsExactly(0, 2);   // 3 layers: 2 + 1
            Plan first = stages.get(0).plan(), second = stages.get(1).plan();
            assertThat(first.ops().getFirst()).isInstanceOf(Plan.Embed.class);
            assertThat(second.ops().getFirst()).isInstanceOf(Plan.InputRows.class);
            assertThat(first.runsHead()).isFalse();
            assertThat(second.runsHead()).isTrue();
            assertThat(second.spec().layer(0).index()).isZero();
            assertThat(second.toString()).startsWith("x = the rows handed in");
        }
    }

    @Test
    void refusedWithTheReason() throws Exception {
        try (Fixture f = Fixture.open("gemma4")) {   // per-layer inputs, KV shared across layers
            assertThatThrownBy(() -> LayerSplit.split(f.spec(), f.weights(), 2)).isInstanceOf(ModelException.class)
                    .hasMessageContaining("per-layer inputs");
        }
        try (Fixture f = Fixture.open("llama")) {
            assertThatThrownBy(() -> LayerSplit.split(f.spec(), f.weights(), 3)).isInstanceOf(ModelException.class)
                    .hasMessage("--split layers: 3 stages for a model of 2 layers");
        }
    }
}
