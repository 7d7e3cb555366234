package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A Qwen3-Next checkpoint's MTP head (top-level {@code mtp.*}, as Hugging Face stores it) converts to {@code model.mtp.*}
 * with {@code arch.mtp} from the config's {@code mtp_num_hidden_layers}; a checkpoint without one gets no block.
 */
class ConvertMtpTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    @TempDir Path tmp;

    /**
     * models/qwen3_next with an MTP head added: fc, the three norms, and layer 0 a copy of decoder layer 3 (the full
     * attention one) under {@code mtp.layers.0.}; {@code config} edited by {@code editConfig}.
     */
    private Path withHead(java.util.function.Consumer<ObjectNode> editConfig) throws IOException {
        Path src = Fixtures.require("models/qwen3_next");
        Path dir = Files.createDirectory(tmp.resolve("qwen3_next_mtp"));
        ObjectNode config = (ObjectNode) JSON.readTree(src.resolve("config.json").toFile());
        editConfig.accept(config);
        Files.writeString(dir.resolve("config.json"), config.toString());
        SafetensorsFiles w = new SafetensorsFiles();
        try (SafetensorsReader st = SafetensorsReader.open(src)) {
            for (SafetensorsReader.Tensor t : st.tensors()) {
                byte[] b = st.bytes(t.name()).toArray(ValueLayout.JAVA_BYTE);
                w.add(t.name(), t.dtypeName(), t.shape(), b);
                if (t.name().startsWith("model.layers.3."))
                    w.add("mtp.layers.0." + t.name().substring("model.layers.3.".length()), t.dtypeName(), t.shape(), b);
                if (t.name().equals("model.norm.weight"))
                    for (String n : List.of("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"))
                        w.add(n, t.dtypeName(), t.shape(), b);
            }
        }
        int h = config.get("hidden_size").asInt();
        float[] fc = new float[2 * h * h];
        for (int i = 0; i < fc.length; i++) fc[i] = (i % 7) * 0.01f;
        w.f32("mtp.fc.weight", new long[] {h, 2L * h}, fc);
        w.write(dir.resolve("model.safetensors"));
        return dir;
    }

    private static Path convert(Path src, Path out) {
        try (ModelSource s = Sources.open(src)) {
            Converter.convert(s, out, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.F32, List.of())));
        }
        return out;
    }

    @Test void theHeadConvertsToModelMtpWithItsArchBlock() throws IOException {
        Path dir = withHead(c -> c.put("mtp_num_hidden_layers", 1));
        Path out = convert(dir, tmp.resolve("m.cmf"));
        try (CmfFile f = CmfFile.open(out); SafetensorsReader st = SafetensorsReader.open(dir)) {
            Map<String, TensorEntry> byName = new TreeMap<>();
            for (TensorEntry t : f.tensors()) byName.put(t.name(), t);
            assertThat(byName.keySet()).noneMatch(n -> n.startsWith("mtp."));
            for (SafetensorsReader.Tensor t : st.tensors()) {
                if (!t.name().startsWith("mtp.")) continue;
                TensorEntry e = byName.get("model." + t.name());
                assertThat(e).as("model." + t.name()).isNotNull();
                assertThat(e.shape()).isEqualTo(t.shape());
                assertThat(e.data().toArray(ValueLayout.JAVA_BYTE)).as(t.name()).isEqualTo(st.bytes(t.name()).toArray(ValueLayout.JAVA_BYTE));
            }
            assertThat(byName).containsKey("model.mtp.layers.0.mlp.experts.7.down_proj.weight");
            JsonNode mtp = f.header().arch().toJson().get("mtp");
            assertThat(mtp.get("num_layers").asInt()).isEqualTo(1);
            assertThat(mtp.get("share_lm_head").asBoolean()).isTrue();
            assertThat(mtp.get("share_embed").asBoolean()).isTrue();
            JsonNode dropped = f.header().provenance().path("dropped_tensors");
            for (JsonNode d : dropped) assertThat(d.asText()).doesNotContain("mtp");
        }
    }

    @Test void theLayerCountComesFromTheTensorsWhenTheConfigHasNone() throws IOException {
        Path dir = withHead(c -> { c.remove("mtp_num_hidden_layers"); c.remove("num_nextn_predict_layers"); });
        try (CmfFile f = CmfFile.open(convert(dir, tmp.resolve("n.cmf")))) {
            assertThat(f.header().arch().toJson().get("mtp").get("num_layers").asInt()).isEqualTo(1);
        }
    }

    @Test void aCheckpointWithoutAHeadGetsNoMtpBlock() {
        try (CmfFile f = CmfFile.open(convert(Fixtures.require("models/qwen3_next"), tmp.resolve("plain.cmf")))) {
            JsonNode mtp = f.header().arch().toJson().get("mtp");
            assertThat(mtp == null || mtp.isNull()).isTrue();
        }
    }
}
