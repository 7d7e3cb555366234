package dev.cmf4j.model;

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
import java.util.Set;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** An Embryo file with a missing tensor or a bad field fails at open, naming it (fixtures/embryo/embryo_a rewritten). */
class EmbryoErrorsTest {

    /** embryo_a with {@code edit} applied to its arch block and the tensors in {@code drop} left out. */
    static Path rewritten(Path tmp, Consumer<ObjectNode> edit, Set<String> drop) {
        Path src = Fixtures.require("embryo/embryo_a/model.cmf");
        Path out = tmp.resolve("edited.cmf");
        try (CmfFile f = CmfFile.open(src)) {
            ObjectNode arch = f.header().arch().toJson();
            edit.accept(arch);
            try (CmfWriter w = CmfWriter.create(out, CmfHeader.of(ModelArch.fromJson(arch), f.header().quantType()))) {
                for (TensorEntry t : f.tensors()) if (!drop.contains(t.name())) w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
                w.finish();
            }
        }
        return out;
    }

    private static void fails(Path file, String... parts) {
        var a = assertThatThrownBy(() -> Model.open(file).close()).isInstanceOf(ModelException.class).hasMessageContaining("edited.cmf");
        for (String p : parts) a.hasMessageContaining(p);
    }

    @Test void theUnchangedRewriteOpens(@TempDir Path tmp) {
        Model.open(rewritten(tmp, a -> {}, Set.of())).close();
    }

    /** The envelope's BOUNDED_STATE bit (12) cleared on a file with bounded layers: the reader refuses it (no hash covers it). */
    @Test void boundedLayersWithoutTheirFeatureBit(@TempDir Path tmp) throws Exception {
        byte[] b = java.nio.file.Files.readAllBytes(Fixtures.require("embryo/embryo_a/model.cmf"));
        java.nio.ByteBuffer env = java.nio.ByteBuffer.wrap(b).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        org.assertj.core.api.Assertions.assertThat(env.getInt(12)).isEqualTo(0x1001);
        env.putInt(12, 0x0001);
        Path cleared = tmp.resolve("cleared.cmf");
        java.nio.file.Files.write(cleared, b);
        assertThatThrownBy(() -> Model.open(cleared).close()).isInstanceOf(dev.cmf4j.format.CmfException.class)
                .hasMessageContaining("BOUNDED_STATE");
    }

    @Test void missingSinkTensor(@TempDir Path tmp) {
        fails(rewritten(tmp, a -> {}, Set.of("model.layers.2.self_attn.sink_v.weight")), "bounded layer 2",
                "model.layers.2.self_attn.sink_v.weight");
    }

    @Test void missingClusterMatrix(@TempDir Path tmp) {
        fails(rewritten(tmp, a -> {}, Set.of("lm_head.clusters.weight")), "head_clusters", "lm_head.clusters.weight");
    }

    @Test void missingExpertDescriptor(@TempDir Path tmp) {
        fails(rewritten(tmp, a -> {}, Set.of("model.layers.3.mlp.experts.2.desc.bias")), "model.layers.3.mlp.experts.2.desc.bias");
    }

    @Test void missingDescriptorsAltogether(@TempDir Path tmp) {
        fails(rewritten(tmp, a -> {}, Set.of("model.layers.1.mlp.experts.0.desc.mu")), "resonance layer 1", "desc.mu");
    }

    @Test void boundedLayersWithoutAnchorCore(@TempDir Path tmp) {
        fails(rewritten(tmp, a -> a.remove("anchor_core"), Set.of()), "BoundedAttention", "anchor_core");
    }

    @Test void anchorCoreFieldsAreChecked(@TempDir Path tmp) {
        fails(rewritten(tmp, a -> ((ObjectNode) a.get("anchor_core")).put("window", 158), Set.of()), "sink 4 + window 158");
        fails(rewritten(tmp, a -> ((ObjectNode) a.get("anchor_core")).put("rope", "absolute"), Set.of()), "anchor_core.rope", "absolute");
        fails(rewritten(tmp, a -> ((ObjectNode) a.get("anchor_core")).put("sink_scores", "rope"), Set.of()), "anchor_core.sink_scores");
        fails(rewritten(tmp, a -> ((ObjectNode) a.get("anchor_core")).putObject("far").put("landmarks", 8), Set.of()), "anchor_core.far");
        fails(rewritten(tmp, a -> ((ObjectNode) a.get("anchor_core")).remove("window"), Set.of()), "anchor_core", "window");
        fails(rewritten(tmp, a -> ((ObjectNode) a.get("anchor_core")).putArray("train_windows").add(4).add(9), Set.of()),
                "train_windows entry 9");
    }

    @Test void clustersMustDivideTheVocabulary(@TempDir Path tmp) {
        fails(rewritten(tmp, a -> a.put("head_clusters", 7), Set.of()), "head_clusters = 7", "512");
    }

    @Test void resonanceRoutingPicksOneExpert(@TempDir Path tmp) {
        fails(rewritten(tmp, a -> ((ObjectNode) a.get("moe")).put("top_k", 2), Set.of()), "top_k is 2");
    }
}
