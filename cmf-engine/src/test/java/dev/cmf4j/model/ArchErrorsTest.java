package dev.cmf4j.model;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfHeader;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.ModelArch;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Models the engine cannot run fail when opened, with a message naming what and where. */
class ArchErrorsTest {

    /** refconv qwen3-F32.cmf rewritten with {@code edit} applied to its arch block. */
    static Path rewritten(Path tmp, Consumer<ObjectNode> edit) {
        Path src = Fixtures.require("cmf/refconv/qwen3-F32.cmf");
        Path out = tmp.resolve("edited.cmf");
        try (CmfFile f = CmfFile.open(src)) {
            ObjectNode arch = f.header().arch().toJson();
            edit.accept(arch);
            CmfHeader h = CmfHeader.of(ModelArch.fromJson(arch), f.header().quantType());
            try (CmfWriter w = CmfWriter.create(out, h)) {
                for (TensorEntry t : f.tensors()) w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
                w.finish();
            }
        }
        return out;
    }

    @Test void unsupportedLayerTypeInAFile(@TempDir Path tmp) {
        Path bad = rewritten(tmp, a -> ((ArrayNode) a.get("layer_types")).set(1, "ShortConv"));
        assertThatThrownBy(() -> Model.open(bad)).isInstanceOf(ModelException.class)
                .hasMessageContaining("edited.cmf").hasMessageContaining("layer 1").hasMessageContaining("ShortConv")
                .hasMessageContaining("cannot run");
    }

    @Test void rotaryDimWiderThanTheHead(@TempDir Path tmp) {
        Path bad = rewritten(tmp, a -> a.put("partial_rotary_factor", 2.0));
        assertThatThrownBy(() -> Model.open(bad)).isInstanceOf(ModelException.class)
                .hasMessageContaining("layer 0").hasMessageContaining("rotary dim 64 exceeds the head dim 32");
    }

    @Test void unsupportedLinearCore(@TempDir Path tmp) {
        Path bad = rewritten(tmp, a -> {
            ((ArrayNode) a.get("layer_types")).set(0, "LinearAttention");
            a.putObject("linear_core").put("kind", "vmf_phase");
            a.put("linear_num_key_heads", 2).put("linear_num_value_heads", 2).put("linear_key_head_dim", 16)
                    .put("linear_value_head_dim", 16);
        });
        assertThatThrownBy(() -> Model.open(bad)).isInstanceOf(ModelException.class).hasMessageContaining("vmf_phase");
    }

    static Weights without(Weights w, String name) {
        Map<String, Tensor> m = new HashMap<>();
        for (String n : w.names()) if (!n.equals(name)) m.put(n, w.find(n));
        return new Weights() {
            @Override public Tensor find(String n) { return m.get(n); }

            @Override public Set<String> names() { return m.keySet(); }
        };
    }

    @Test void specErrorsNameTheirCause() throws Exception {
        try (HfFixture q = HfFixture.open("qwen3"); HfFixture moe = HfFixture.open("qwen3_moe")) {
            ObjectNode header = com.fasterxml.jackson.databind.node.JsonNodeFactory.instance.objectNode();
            ObjectNode arch = header.putObject("arch");
            arch.setAll(dev.cmf4j.convert.HfArch.fromConfig(dev.cmf4j.convert.HfConfig.read(q.dir().resolve("config.json"))));
            Weights w = TestFiles.weights(q.reader());
            // a missing tensor
            assertThatThrownBy(() -> new dev.cmf4j.model.graph.Graph(SpecBuilder.build(header, w),
                    without(w, "model.layers.1.mlp.up_proj.weight"), new dev.cmf4j.backend.cpu.CpuBackend()))
                    .isInstanceOf(ModelException.class).hasMessageContaining("model.layers.1.mlp.up_proj.weight");
            // an unknown rope type
            ObjectNode h2 = header.deepCopy();
            ((ObjectNode) h2.get("arch")).putObject("rope").putObject("FullAttention").put("rope_type", "wobbly");
            assertThatThrownBy(() -> SpecBuilder.build(h2, w)).isInstanceOf(ModelException.class).hasMessageContaining("wobbly");
            // a mis-shaped tensor: q_proj rows that fit neither plain nor gated heads
            ObjectNode h3 = header.deepCopy();
            ((ObjectNode) h3.get("arch")).put("num_attention_heads", 3);
            assertThatThrownBy(() -> SpecBuilder.build(h3, w)).isInstanceOf(ModelException.class).hasMessageContaining("q_proj");
            // no arch block at all
            assertThatThrownBy(() -> SpecBuilder.build(com.fasterxml.jackson.databind.node.JsonNodeFactory.instance.objectNode(), w))
                    .isInstanceOf(ModelException.class).hasMessageContaining("no arch block");
            // an MoE whose arch gives no top-k
            ObjectNode h4 = com.fasterxml.jackson.databind.node.JsonNodeFactory.instance.objectNode();
            ObjectNode a4 = h4.putObject("arch");
            a4.setAll(dev.cmf4j.convert.HfArch.fromConfig(dev.cmf4j.convert.HfConfig.read(moe.dir().resolve("config.json"))));
            ((ObjectNode) a4.get("moe")).remove("top_k");
            assertThatThrownBy(() -> SpecBuilder.build(h4, TestFiles.weights(moe.reader()))).isInstanceOf(ModelException.class)
                    .hasMessageContaining("top-k");
        }
    }
}
