package dev.cmf4j.model;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.Masks;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.model.graph.Batch;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.Overlay;
import dev.cmf4j.model.graph.State;
import dev.cmf4j.model.graph.Workspace;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Task masks at run time (CMF_FORMAT.md §1.6) against models built with the masked parts really removed: a mask that
 * turns off a layer, some heads and some FFN neurons gives the logits of the model whose o/down projection columns
 * (and the skipped layer's o and down projections) are zeroed; expert bits give the model with those experts removed
 * (router rows and experts dropped, the softmax over the rest); an all-ones mask changes nothing; masked and unmasked
 * rows share one step.
 */
public class TaskMaskTest {
    static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    @TempDir Path tmp;

    /** A blob of all-ones bits with the given ones cleared (§1.6 layout). */
    public static final class Blob {
        final int layers, ffn, heads, experts;
        final byte[] bits;

        public Blob(int layers, int ffn, int heads, int experts) {
            this.layers = layers; this.ffn = ffn; this.heads = heads; this.experts = experts;
            bits = new byte[layers * ((ffn + 7) / 8) + layers * ((heads + 7) / 8) + (layers + 7) / 8 + layers * ((experts + 7) / 8)];
            for (int l = 0; l < layers; l++) {
                for (int i = 0; i < ffn; i++) set(l * ((ffn + 7) / 8), i, true);
                for (int h = 0; h < heads; h++) set(headBase() + l * ((heads + 7) / 8), h, true);
                set(layerBase(), l, true);
                for (int e = 0; e < experts; e++) set(expertBase() + l * ((experts + 7) / 8), e, true);
            }
        }

        int headBase() { return layers * ((ffn + 7) / 8); }
        int layerBase() { return headBase() + layers * ((heads + 7) / 8); }
        int expertBase() { return layerBase() + (layers + 7) / 8; }

        void set(int base, int i, boolean on) {
            if (on) bits[base + i / 8] |= (byte) (1 << (i % 8));
            else bits[base + i / 8] &= (byte) ~(1 << (i % 8));
        }

        public Blob neuronOff(int l, int i) { set(l * ((ffn + 7) / 8), i, false); return this; }
        public Blob headOff(int l, int h) { set(headBase() + l * ((heads + 7) / 8), h, false); return this; }
        public Blob layerOff(int l) { set(layerBase(), l, false); return this; }
        public Blob expertOff(int l, int e) { set(expertBase() + l * ((experts + 7) / 8), e, false); return this; }
    }

    /** {@code base} with masks {@code names[i]} = {@code blobs[i]}. */
    public static Path withMasks(Path base, Path out, List<String> names, List<Blob> blobs, boolean experts) {
        try (CmfFile f = CmfFile.open(base); CmfWriter w = CmfWriter.create(out, f.header())) {
            for (TensorEntry t : f.tensors()) w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
            List<Masks.MaskMeta> metas = new ArrayList<>();
            List<Masks.TaskMask> ms = new ArrayList<>();
            for (int i = 0; i < names.size(); i++) {
                Masks.MaskMeta m = new Masks.MaskMeta(i, names.get(i), "test", 0.1, null, null, "Fallback", false, 0, 0,
                        experts ? true : null, Map.of());
                metas.add(m);
                ms.add(Masks.TaskMask.of(m, blobs.get(i).bits));
            }
            w.setMasks(new Masks(new Masks.Meta(names.getFirst(), metas, experts ? true : null, Map.of()), ms));
            w.finish();
        }
        return out;
    }

    /** An f32 copy of {@code t} with columns {@code cols} (all columns when null) set to zero. */
    static Tensor zeroColumns(Tensor t, Set<Integer> cols) {
        int rows = (int) t.rows(), n = (int) t.cols();
        MemorySegment m = MemorySegment.ofArray(new byte[rows * n * 4]);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < n; c++)
                m.setAtIndex(F32, (long) r * n + c, cols == null || cols.contains(c) ? 0f : t.data().getAtIndex(F32, (long) r * n + c));
        return new Tensor(t.name(), DType.F32, t.shape(), m);
    }

    static Weights replaced(Weights w, Map<String, Tensor> repl) {
        return new Weights() {
            @Override public Tensor find(String name) { return repl.containsKey(name) ? repl.get(name) : w.find(name); }

            @Override public Set<String> names() { return w.names(); }
        };
    }

    /** Logits of every position: the prompt in one chunk, then {@code extra} ids one at a time through the cache. */
    public static float[] run(Graph g, Overlay o, int[] prompt, int[] extra) {
        int V = g.vocab();
        State st = g.newState(64, prompt.length + extra.length + 1);
        st.useOverlay(o);
        float[] out = new float[(prompt.length + extra.length) * V];
        float[] buf = new float[prompt.length * V];
        g.forward(st, prompt, 0, prompt.length, buf, true, null);
        System.arraycopy(buf, 0, out, 0, prompt.length * V);
        for (int i = 0; i < extra.length; i++) {
            g.forward(st, extra, i, 1, buf, false, null);
            System.arraycopy(buf, 0, out, (prompt.length + i) * V, V);
        }
        return out;
    }

    @Test void layerHeadAndNeuronBitsGiveTheModelWithThoseWeightsZeroed() throws Exception {
        Path dir = Fixtures.require("models/llama");
        Path base = ConvertedGoldenTest.convert(dir, tmp.resolve("llama.cmf"), TensorPolicy.Mode.F32);
        int layers = 2, ffn = 256, heads = 4, hd = 32;
        Blob cut = new Blob(layers, ffn, heads, 0).layerOff(0).headOff(1, 1).headOff(1, 3);
        Set<Integer> neurons = Set.of(0, 5, 77, 200, 255);
        for (int i : neurons) cut.neuronOff(1, i);
        Path masked = withMasks(base, tmp.resolve("masked.cmf"), List.of("full", "cut"), List.of(new Blob(layers, ffn, heads, 0), cut), false);
        int[] ids = Golden.load(dir).inputIds();
        int[] prompt = Arrays.copyOf(ids, 24), extra = Arrays.copyOfRange(ids, 24, 30);
        try (Model m = Model.open(masked)) {
            Graph g = m.graph();
            assertThat(g.tasks()).containsExactly("full", "cut");
            // the model with the masked weights zeroed
            Set<Integer> headCols = new java.util.HashSet<>();
            for (int h : new int[] {1, 3}) for (int c = h * hd; c < (h + 1) * hd; c++) headCols.add(c);
            Weights w = new CmfWeights(m.file());
            Map<String, Tensor> zeroed = Map.of(
                    "model.layers.0.self_attn.o_proj.weight", zeroColumns(w.get("model.layers.0.self_attn.o_proj.weight"), null),
                    "model.layers.0.mlp.down_proj.weight", zeroColumns(w.get("model.layers.0.mlp.down_proj.weight"), null),
                    "model.layers.1.self_attn.o_proj.weight", zeroColumns(w.get("model.layers.1.self_attn.o_proj.weight"), headCols),
                    "model.layers.1.mlp.down_proj.weight", zeroColumns(w.get("model.layers.1.mlp.down_proj.weight"), neurons));
            Weights zw = replaced(w, zeroed);
            Graph zg = new Graph(SpecBuilder.build(m.file().header().toJson(), zw), zw, new CpuBackend());
            Overlay cutTask = g.withTask(Overlay.NONE, "cut");
            float[] want = run(zg, Overlay.NONE, prompt, extra), got = run(g, cutTask, prompt, extra);
            double d = Golden.maxDiff(got, 0, want, 0, want.length);
            System.out.printf("task mask vs zeroed weights: max |Δ| %.3g%n", d);
            assertThat(d).isLessThanOrEqualTo(1e-5);
            float[] backbone = run(g, Overlay.NONE, prompt, extra);
            assertThat(Golden.maxDiff(got, 0, backbone, 0, want.length)).isGreaterThan(0.1);
            // an all-ones mask is the backbone (the same products; 1e-5: the CPU kernels are not bit-reproducible from run to run)
            float[] full = run(g, g.withTask(Overlay.NONE, "full"), prompt, extra);
            assertThat(Golden.maxDiff(full, 0, backbone, 0, backbone.length)).isLessThanOrEqualTo(1e-5);
            // masked and unmasked rows in one step: each its single-run logits
            int V = g.vocab();
            State a = g.newState(64, 64), b = g.newState(64, 64);
            a.useOverlay(cutTask);
            Batch batch = new Batch().add(a, prompt, 0, prompt.length, Batch.Logits.ALL).add(b, prompt, 0, prompt.length, Batch.Logits.ALL);
            float[] both = new float[2 * prompt.length * V];
            Workspace ws = g.newWorkspace(2 * prompt.length, 64);
            g.forward(batch, ws, both, null);
            assertThat(Golden.maxDiff(both, 0, got, 0, prompt.length * V)).isLessThanOrEqualTo(1e-5);
            assertThat(Golden.maxDiff(both, prompt.length * V, backbone, 0, prompt.length * V)).isLessThanOrEqualTo(1e-5);
            assertThatThrownBy(() -> g.withTask(Overlay.NONE, "nope")).hasMessageContaining("unknown task 'nope'")
                    .hasMessageContaining("full, cut");
        }
    }

    @Test void expertBitsGiveTheModelWithThoseExpertsRemoved() throws Exception {
        Path dir = Fixtures.require("models/qwen3_moe");
        Path base = ConvertedGoldenTest.convert(dir, tmp.resolve("moe.cmf"), TensorPolicy.Mode.F32);
        int layers = 2, experts = 8;
        int[] off = {2, 5}, kept = {0, 1, 3, 4, 6, 7};
        Blob blob;
        int ffn, heads;
        try (CmfFile f = CmfFile.open(base)) {
            ffn = f.header().arch().intermediateSize();
            heads = f.header().arch().numAttentionHeads();
        }
        blob = new Blob(layers, ffn, heads, experts);
        for (int l = 0; l < layers; l++) for (int e : off) blob.expertOff(l, e);
        Path masked = withMasks(base, tmp.resolve("moe-masked.cmf"), List.of("six"), List.of(blob), true);
        int[] ids = Golden.load(dir).inputIds();
        int[] prompt = Arrays.copyOf(ids, 24), extra = Arrays.copyOfRange(ids, 24, 30);
        try (Model m = Model.open(masked)) {
            Graph g = m.graph();
            Weights w = new CmfWeights(m.file());
            // the defragged twin: kept experts renumbered 0..5, router rows gathered
            Map<String, Tensor> twin = new HashMap<>();
            for (String n : w.names()) if (!n.contains(".mlp.experts.") && !n.endsWith(".mlp.gate.weight")) twin.put(n, w.get(n));
            for (int l = 0; l < layers; l++) {
                String p = "model.layers." + l + ".mlp.";
                for (int k = 0; k < kept.length; k++)
                    for (String proj : List.of("gate_proj", "up_proj", "down_proj")) {
                        Tensor t = w.get(p + "experts." + kept[k] + "." + proj + ".weight");
                        String name = p + "experts." + k + "." + proj + ".weight";
                        twin.put(name, new Tensor(name, t.dtype(), t.shape(), t.data()));
                    }
                Tensor r = w.get(p + "gate.weight");
                int hidden = (int) r.cols();
                MemorySegment rows = MemorySegment.ofArray(new byte[kept.length * hidden * 4]);
                for (int k = 0; k < kept.length; k++)
                    MemorySegment.copy(r.data(), (long) kept[k] * hidden * 4, rows, (long) k * hidden * 4, hidden * 4L);
                twin.put(p + "gate.weight", new Tensor(p + "gate.weight", DType.F32, new long[] {kept.length, hidden}, rows));
            }
            Weights tw = new Weights() {
                @Override public Tensor find(String name) { return twin.get(name); }

                @Override public Set<String> names() { return twin.keySet(); }
            };
            var override = new ObjectMapper().readTree("{\"moe\": {\"num_experts\": 6}}");
            Graph tg = new Graph(SpecBuilder.build(m.file().header().toJson(), tw, override), tw, new CpuBackend());
            float[] want = run(tg, Overlay.NONE, prompt, extra), got = run(g, g.withTask(Overlay.NONE, "six"), prompt, extra);
            double d = Golden.maxDiff(got, 0, want, 0, want.length);
            System.out.printf("expert mask vs experts removed: max |Δ| %.3g%n", d);
            assertThat(d).isLessThanOrEqualTo(1e-5);
            assertThat(Golden.maxDiff(got, 0, run(g, Overlay.NONE, prompt, extra), 0, want.length)).isGreaterThan(1e-3);
        }
    }
}
