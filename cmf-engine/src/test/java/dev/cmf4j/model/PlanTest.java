package dev.cmf4j.model;

import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The op list of a spec: its order for the fixture families, and specs whose parts do not fit refused by name. */
class PlanTest {
    @TempDir static Path tmp;

    private static ModelSpec llama() {
        try (Model m = Model.open(Fixtures.require("cmf/refconv/llama-Q8_2F.cmf"))) {
            return m.spec();
        }
    }

    private static ModelSpec converted(String name) {
        Path cmf = ConvertedGoldenTest.convert(Fixtures.require("models/" + name), tmp.resolve(name + ".cmf"), TensorPolicy.Mode.F32);
        try (Model m = Model.open(cmf)) {
            return m.spec();
        }
    }

    @Test void aLlamaLayerReadsLikeTheForwardPass() {
        ModelSpec spec = llama();
        Plan plan = Plan.of(spec);
        assertThat(plan.ops()).hasSize(1 + 8 * spec.numLayers() + 2);
        assertThat(plan.ops().getFirst()).isEqualTo(new Plan.Embed(spec.embedding(), 1f));
        assertThat(plan.ops().getLast()).isInstanceOf(Plan.Head.class);
        assertThat(plan.layer(1).stream().map(Plan::line).toList()).containsExactly(
                "layer 1 {",
                "  h = norm(x) pre-mixer model.layers.1.input_layernorm.weight",
                "  m = attention(h)",
                "  x += m",
                "  h = norm(x) pre-ffn model.layers.1.post_attention_layernorm.weight",
                "  m = mlp(h)",
                "  x += m",
                "}");
        for (var op : plan.ops()) if (op instanceof Plan.Mix m) assertThat(m.sealed()).isNull();
    }

    @Test void sealedLayersAreMarkedOnTheirMixOps() {
        ModelSpec spec = llama();
        var o1 = new AttentionMemory.Sealed("0", 8, 16, 2);
        Plan plan = Plan.of(spec, new AttentionMemory(o1, dev.cmf4j.backend.KvType.F32));
        List<Plan.Mix> mixes = plan.ops().stream().filter(Plan.Mix.class::isInstance).map(Plan.Mix.class::cast).toList();
        assertThat(mixes.getFirst().sealed()).isEqualTo(o1);
        assertThat(mixes.subList(1, mixes.size())).allSatisfy(m -> assertThat(m.sealed()).isNull());
        assertThat(Plan.line(mixes.getFirst())).isEqualTo("  m = sealed attention(h)");
        assertThat(plan.sealedLayers()[0]).isTrue();
    }

    @Test void gemma4HasPerLayerInputsScalarsSandwichNormsAndSharedKv() {
        ModelSpec spec = converted("gemma4");
        Plan plan = Plan.of(spec);
        assertThat(plan.ops().get(1)).isInstanceOf(Plan.PerLayerTable.class);
        long pli = plan.ops().stream().filter(Plan.PerLayerInput.class::isInstance).count();
        long scalars = plan.ops().stream().filter(Plan.ScaleLayer.class::isInstance).count();
        assertThat(pli).isEqualTo(spec.numLayers());
        assertThat(scalars).isEqualTo(spec.numLayers());
        List<String> last = plan.layer(spec.numLayers() - 1).stream().map(Plan::line).toList();
        assertThat(last.get(2)).contains("over layer").contains("K/V");   // the fixture's last layers share K/V
        assertThat(last).filteredOn(s -> s.contains("post-mixer") || s.contains("post-ffn")).hasSize(2);
        assertThat(last.get(last.size() - 3)).startsWith("  x += norm(model.layers.");
        assertThat(last.get(last.size() - 2)).startsWith("  x *= model.layers.");
        assertThat(plan.toString()).contains("logits = softcap(");
    }

    @Test void aSpecWhosePartsDoNotFitIsRefusedNamingTheLayer() {
        ModelSpec spec = llama();
        LayerSpec l1 = spec.layer(1);
        // a per-layer input without the model's per-layer embedding
        var pli = new LayerSpec.PerLayerInput("g", "p", null, dev.cmf4j.backend.Activation.SILU);
        assertThatThrownBy(() -> Plan.of(withLayer(spec, new LayerSpec(1, l1.mixer(), l1.ffn(), l1.preMixer(), l1.postMixer(),
                l1.preFfn(), l1.postFfn(), pli, null))))
                .isInstanceOf(ModelException.class).hasMessageContaining("layer 1 has per-layer inputs");
        // K/V shared with a later layer
        Mixer.Attention a = (Mixer.Attention) l1.mixer();
        var later = new Mixer.Attention(a.heads(), a.kvHeads(), a.headDim(), a.qProj(), null, null, a.oProj(), a.qBias(), null, null,
                a.oBias(), a.qNorm(), null, null, a.outputGate(), a.scale(), a.softcap(), a.window(), a.sinks(), a.rope(), 2);
        assertThatThrownBy(() -> Plan.of(withLayer(spec, new LayerSpec(1, later, l1.ffn(), l1.preMixer(), null, l1.preFfn(), null,
                null, null))))
                .isInstanceOf(ModelException.class).hasMessageContaining("layer 1 shares the K/V of layer 2");
        // no pre-FFN norm
        assertThatThrownBy(() -> Plan.of(withLayer(spec, new LayerSpec(1, l1.mixer(), l1.ffn(), l1.preMixer(), null, null, null,
                null, null))))
                .isInstanceOf(ModelException.class).hasMessageContaining("layer 1 has no pre-FFN norm");
        // --o1 naming a layer the model does not have
        assertThatThrownBy(() -> Plan.of(spec, new AttentionMemory(new AttentionMemory.Sealed("99", 8, 16, 2),
                dev.cmf4j.backend.KvType.F32))).isInstanceOf(ModelException.class).hasMessageContaining("layer 99");
    }

    private static ModelSpec withLayer(ModelSpec s, LayerSpec l) {
        List<LayerSpec> layers = new ArrayList<>(s.layers());
        layers.set(l.index(), l);
        return new ModelSpec(s.archName(), s.hidden(), s.vocab(), s.maxPositions(), s.embedding(), s.embedScale(),
                s.perLayerEmbedding(), layers, s.finalNorm(), s.head(), s.finalSoftcap(), s.headClusters());
    }
}
