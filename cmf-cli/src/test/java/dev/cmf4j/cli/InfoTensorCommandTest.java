package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.format.CmfHeader;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.ModelArch;
import dev.cmf4j.format.Npy;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.testkit.Fixtures;
import dev.cmf4j.testkit.Npz;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf info} and {@code cmf tensor} against the golden CMF fixtures. */
class InfoTensorCommandTest {
    @TempDir Path tmp;

    @Test
    void infoTextShowsHeaderTensorsMasksAndTotals() {
        Path f = Fixtures.require("cmf/tiny/tiny-Q8_2F.cmf");
        Run r = run("info", f.toString(), "--verify");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).contains("CMF v2", "QUANT_2F", "BINARY_MASKS", "tiny-qwen", "hidden 32", "layers 2",
                "FullAttention x2", "tokenizer.json 1,662 bytes", "masks      2 (default general)", "coding",
                "skills     none", "model.layers.0.mlp.down_proj.weight", "q8_2f", "[32, 64]", "2,240", "e01ffd252f584110",
                "total      34 tensors", "verify     OK");
    }

    /** An Embryo file: BOUNDED_STATE accepted, the anchor core shown, and the fixed state per sequence of golden.json. */
    @Test
    void infoShowsAnEmbryosFixedStateBytes() throws IOException {
        for (String name : List.of("embryo_a", "embryo_b", "embryo_c")) {
            Path dir = Fixtures.require("embryo/" + name);
            long bytes = new ObjectMapper().readTree(dir.resolve("golden.json").toFile()).get("state_bytes_per_sequence").asLong();
            Run r = run("info", dir.resolve("model.cmf").toString(), "--verify");
            assertThat(r.code()).as(r.err()).isZero();
            assertThat(r.out()).contains("BOUNDED_STATE", "anchor core swa_sink_v1",
                    String.format("state      %,d bytes per sequence", bytes), "verify     OK");
            Run j = run("info", dir.resolve("model.cmf").toString(), "--json");
            assertThat(new ObjectMapper().readTree(j.out()).get("state_bytes_per_sequence").asLong()).isEqualTo(bytes);
        }
        // a model whose KV cache grows prints no fixed state
        assertThat(run("info", Fixtures.require("cmf/tiny/tiny-F32.cmf").toString()).out()).doesNotContain("bytes per sequence");
    }

    @Test
    void infoJsonMatchesTheGoldenInfo() throws IOException {
        Path dir = Fixtures.require("cmf/tiny");
        ObjectMapper m = new ObjectMapper();
        for (String q : List.of("F32", "F16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "VBIT")) {
            Run r = run("info", dir.resolve("tiny-" + q + ".cmf").toString(), "--json", "--verify");
            assertThat(r.code()).as(r.err()).isZero();
            JsonNode got = m.readTree(r.out()), golden = m.readTree(dir.resolve("info-" + q + ".json").toFile());
            assertThat(got.get("header")).isEqualTo(golden.get("header"));
            assertThat(got.get("masks_meta")).isEqualTo(golden.get("masks_meta"));
            assertThat(got.get("verify_problems")).isEqualTo(golden.get("verify_problems"));
            assertThat(got.get("tensors")).hasSize(golden.get("tensors").size());
            for (JsonNode t : got.get("tensors")) {
                JsonNode g = golden.get("tensors").get(t.get("name").asText());
                assertThat(t.get("dtype")).isEqualTo(g.get("dtype"));
                assertThat(t.get("shape")).isEqualTo(g.get("shape"));
                assertThat(t.get("hash")).isEqualTo(g.get("hash"));
            }
        }
    }

    @Test
    void infoOnAShardShowsTheSet() {
        Path f = Fixtures.require("cmf/tiny/sharded/tiny-00003-of-00004.cmf");
        Run r = run("info", f.toString(), "--verify");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).contains("in 4 files", "tiny-00001-of-00004.cmf: 6 tensors", "total      34 tensors", "verify     OK");
    }

    @Test
    void verifyListsEveryProblemAndFails() throws IOException {
        byte[] b = Files.readAllBytes(Fixtures.require("cmf/tiny/tiny-F16.cmf"));
        long dataOff = java.nio.ByteBuffer.wrap(b).order(java.nio.ByteOrder.LITTLE_ENDIAN).getLong(0x30);
        b[(int) dataOff + 3] ^= 1;          // first tensor
        b[b.length - 200] ^= 1;             // vocab section
        Path bad = Files.write(tmp.resolve("bad.cmf"), b);
        Run r = run("info", bad.toString(), "--verify");
        assertThat(r.code()).isEqualTo(1);
        assertThat(r.out()).contains("verify     2 problems", "tensor 'model.embed_tokens.weight'", "vocab section hash64");
        Run plain = run("info", bad.toString());
        assertThat(plain.code()).as("without --verify only the container is checked").isZero();
        Run garbage = run("info", Files.writeString(tmp.resolve("x.cmf"), "nope").toString());
        assertThat(garbage.code()).isEqualTo(1);
        assertThat(garbage.err()).contains("cmf: error:", "x.cmf", "magic");
    }

    @Test
    void tensorWritesTheDequantizedGolden() throws IOException {
        Path dir = Fixtures.require("cmf/tiny");
        for (String q : List.of("Q8_2F", "Q4_BLOCK", "VBIT", "F16")) {
            Map<String, Npy.Array> golden = Npz.read(dir.resolve("dequant-" + q + ".npz"));
            for (String name : List.of("model.layers.1.mlp.gate_proj.weight", "model.norm.weight")) {
                Path out = tmp.resolve(q + name + ".npy");
                Run r = run("tensor", dir.resolve("tiny-" + q + ".cmf").toString(), name, "--out", out.toString());
                assertThat(r.code()).as(r.err()).isZero();
                Npy.Array got = read(out), want = golden.get(name);
                assertThat(got.descr()).isEqualTo("<f4");
                assertThat(got.shape()).isEqualTo(want.shape());
                assertThat(got.data()).as(q + " " + name).isEqualTo(want.data());
            }
        }
        Run missing = run("tensor", dir.resolve("tiny-F16.cmf").toString(), "no.such", "--out", tmp.resolve("n.npy").toString());
        assertThat(missing.code()).isEqualTo(1);
        assertThat(missing.err()).contains("no.such");
        assertThat(tmp.resolve("n.npy")).doesNotExist();
    }

    @Test
    void tensorResolvesSkillFirst() throws IOException {
        Path f = tmp.resolve("skilled.cmf");
        ModelArch arch = ModelArch.fromJson(new ObjectMapper().createObjectNode().put("arch_name", "t").put("num_layers", 1));
        SkillRecord s = new SkillRecord("code", "Coding", List.of(0), null, null, null, null, null, null, Map.of());
        CmfHeader h = CmfHeader.of(arch, "F32").withSkills(List.of(s));
        try (CmfWriter w = CmfWriter.create(f, h)) {
            w.addTensor("w", DType.F32, new long[] {2}, floats(1f, 2f));
            w.addTensor("v", DType.F32, new long[] {2}, floats(5f, 6f));
            w.addTensor("skill.code.w", DType.F32, new long[] {2}, floats(3f, 4f));
            w.finish();
        }
        Path o = tmp.resolve("o.npy");
        assertThat(run("tensor", f.toString(), "w", "--out", o.toString()).code()).isZero();
        assertThat(read(o).toFloats()).containsExactly(1f, 2f);
        assertThat(run("tensor", f.toString(), "w", "--skill", "code", "--out", o.toString()).code()).isZero();
        assertThat(read(o).toFloats()).containsExactly(3f, 4f);
        assertThat(run("tensor", f.toString(), "v", "--skill", "code", "--out", o.toString()).code()).isZero();
        assertThat(read(o).toFloats()).as("backbone when the skill does not replace it").containsExactly(5f, 6f);
        Run unknown = run("tensor", f.toString(), "w", "--skill", "nope", "--out", o.toString());
        assertThat(unknown.code()).isNotZero();
        assertThat(unknown.err()).contains("no skill 'nope'", "[code]");
        Run info = run("info", f.toString());
        assertThat(info.out()).contains("skills     1", "code", "Coding, 1 tensors");
    }

    static byte[] floats(float... v) {
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(v.length * 4).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        for (float x : v) b.putFloat(x);
        return b.array();
    }

    static Npy.Array read(Path p) throws IOException {
        try (InputStream in = Files.newInputStream(p)) { return Npy.read(in); }
    }
}
