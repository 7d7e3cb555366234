package dev.cmf4j.format;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Every golden CMF file opens, and its header, directory, masks and verify result equal info-*.json. */
class CmfFileFixturesTest {
    static final ObjectMapper JSON = new ObjectMapper();

    @ParameterizedTest
    @ValueSource(strings = {"F32", "F16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "VBIT"})
    void tinyMatchesInfo(String q) throws IOException {
        Path dir = TestFixtures.require("cmf/tiny");
        JsonNode info = JSON.readTree(dir.resolve("info-" + q + ".json").toFile());
        try (CmfFile f = CmfFile.open(dir.resolve("tiny-" + q + ".cmf"))) {
            // header: the file's JSON tree equals the golden one, and the typed view reads it
            CmfFile.Shard s = f.shards().getFirst();
            byte[] hb = s.bytes().asSlice(s.envelope().header().offset(), s.envelope().header().length())
                    .toArray(ValueLayout.JAVA_BYTE);
            assertThat(JSON.readTree(hb)).isEqualTo(info.get("header"));
            CmfHeader h = f.header();
            assertThat(h.quantType()).isEqualTo(q);
            assertThat(h.arch().hiddenSize()).isEqualTo(32);
            assertThat(h.arch().numLayers()).isEqualTo(2);
            assertThat(h.arch().layerTypes()).containsExactly("FullAttention", "FullAttention");
            assertThat(h.arch().normStyle()).isEqualTo("qwen");
            assertThat(h.arch().mtp().numLayers()).isEqualTo(1);
            assertThat(h.arch().extra()).isEmpty();
            assertThat(h.sectionHashes().masks()).isEqualTo(Long.parseUnsignedLong(info.at("/header/section_hashes/masks").asText(), 16));
            // directory
            JsonNode golden = info.get("tensors");
            assertThat(f.tensors()).hasSize(golden.size());
            List<String> names = new ArrayList<>();
            golden.fieldNames().forEachRemaining(names::add);
            assertThat(f.tensors().stream().map(TensorEntry::name)).containsExactlyElementsOf(names);
            for (TensorEntry t : f.tensors()) {
                JsonNode g = golden.get(t.name());
                assertThat(t.dtype().label).as(t.name()).isEqualTo(g.get("dtype").asText());
                long[] shape = JSON.convertValue(g.get("shape"), long[].class);
                assertThat(t.shape()).as(t.name()).isEqualTo(shape);
                assertThat(Hash64.hex(t.hash())).as(t.name()).isEqualTo(g.get("hash").asText());
                assertThat(t.data().byteSize()).isEqualTo(t.nbytes());
                assertThat(Hash64.of(t.data())).as(t.name()).isEqualTo(t.hash());
            }
            // masks
            Masks m = f.masks().orElseThrow();
            assertThat((JsonNode) m.meta().toJson()).isEqualTo(info.get("masks_meta"));
            Masks.TaskMask general = m.byName("general"), coding = m.byName("coding");
            assertThat(m.defaultMask()).isSameAs(general);
            for (int l = 0; l < 2; l++) {
                assertThat(general.layerActive(l)).isTrue();
                for (int i = 0; i < 64; i++) {
                    assertThat(general.ffnActive(l, i)).isTrue();
                    assertThat(coding.ffnActive(l, i)).isEqualTo(i % 2 == 0);
                }
                for (int hd = 0; hd < 4; hd++) assertThat(coding.headActive(l, hd)).isEqualTo(hd < 3);
            }
            // vocab and verify
            assertThat(f.vocab()).hasValueSatisfying(v -> assertThat(v).isEqualTo(read(dir.resolve("tokenizer.json"))));
            assertThat(f.verify()).isEqualTo(JSON.convertValue(info.get("verify_problems"), List.class));
            assertThat(f.index()).isPresent();
        }
    }

    @Test
    void masksMatchTheirSourceJson() throws IOException {
        Path dir = TestFixtures.require("cmf/tiny");
        try (CmfFile f = CmfFile.open(dir.resolve("tiny-F32.cmf"))) {
            Masks m = f.masks().orElseThrow();
            for (String src : List.of("0_general", "1_coding")) {
                JsonNode j = JSON.readTree(dir.resolve("masks/" + src + ".json").toFile());
                Masks.TaskMask t = m.byName(j.at("/metadata/task_name").asText());
                for (int l = 0; l < 2; l++) {
                    for (int i = 0; i < 64; i++) assertThat(t.ffnActive(l, i)).isEqualTo(j.at("/ffn_masks/" + l + "/" + i).asDouble() != 0);
                    for (int h = 0; h < 4; h++) assertThat(t.headActive(l, h)).isEqualTo(j.at("/head_masks/" + l + "/" + h).asDouble() != 0);
                    assertThat(t.layerActive(l)).isEqualTo(j.at("/layer_gates/" + l).asBoolean());
                }
            }
        }
    }

    @Test
    void shardSetMergesIntoOneDirectory() throws IOException {
        Path dir = TestFixtures.require("cmf/tiny");
        JsonNode info = JSON.readTree(dir.resolve("info-Q8_2F.json").toFile());
        for (int open = 1; open <= 4; open++) {
            Path p = dir.resolve(String.format("sharded/tiny-%05d-of-00004.cmf", open));
            try (CmfFile f = CmfFile.open(p); CmfFile whole = CmfFile.open(dir.resolve("tiny-Q8_2F.cmf"))) {
                assertThat(f.shards()).hasSize(4);
                assertThat(f.header().shard()).isEqualTo(new CmfHeader.ShardInfo(1, 4));
                assertThat(f.tensors()).hasSize(info.get("tensors").size());
                for (Iterator<Map.Entry<String, JsonNode>> it = info.get("tensors").properties().iterator(); it.hasNext(); ) {
                    var e = it.next();
                    TensorEntry t = f.tensor(e.getKey());
                    assertThat(Hash64.hex(t.hash())).isEqualTo(e.getValue().get("hash").asText());
                    assertThat(t.data().toArray(ValueLayout.JAVA_BYTE))
                            .isEqualTo(whole.tensor(e.getKey()).data().toArray(ValueLayout.JAVA_BYTE));
                }
                assertThat(f.vocab()).isPresent();
                assertThat(f.masks()).isEmpty();
                assertThat(f.verify()).isEmpty();
            }
        }
    }

    @Test
    void refconvModelsOpenAndVerify() throws IOException {
        Path dir = TestFixtures.require("cmf/refconv");
        List<Path> files;
        try (Stream<Path> s = Files.list(dir)) { files = s.filter(p -> p.toString().endsWith(".cmf")).sorted().toList(); }
        assertThat(files).isNotEmpty();
        for (Path p : files) {
            try (CmfFile f = CmfFile.open(p)) {
                assertThat(f.tensors()).as(p.toString()).isNotEmpty();
                assertThat(f.header().arch().archName()).isNotBlank();
                assertThat(f.verify()).as(p.toString()).isEmpty();
            }
        }
    }

    @Test
    void missingTensorIsNamed() {
        Path dir = TestFixtures.require("cmf/tiny");
        try (CmfFile f = CmfFile.open(dir.resolve("tiny-F16.cmf"))) {
            assertThat(f.find("nope.weight")).isEmpty();
            assertThatThrownBy(() -> f.tensor("nope.weight")).isInstanceOf(CmfException.MissingTensor.class)
                    .hasMessageContaining("nope.weight").hasMessageContaining("tiny-F16.cmf");
        }
    }

    @Test
    void payloadsAreUnusableAfterClose() {
        Path dir = TestFixtures.require("cmf/tiny");
        CmfFile f = CmfFile.open(dir.resolve("tiny-F16.cmf"));
        TensorEntry t = f.tensors().getFirst();
        f.close();
        assertThatThrownBy(() -> t.data().get(ValueLayout.JAVA_BYTE, 0)).isInstanceOf(IllegalStateException.class);
    }

    static byte[] read(Path p) {
        try { return Files.readAllBytes(p); } catch (IOException e) { throw new RuntimeException(e); }
    }
}
