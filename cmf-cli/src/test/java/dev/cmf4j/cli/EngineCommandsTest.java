package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.format.Npy;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.stream.Collectors;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf logits}, {@code cmf generate}, {@code cmf run} against the goldens and on bad input. */
class EngineCommandsTest {
    private static String csv(long[] ids) {
        return Arrays.stream(ids).mapToObj(Long::toString).collect(Collectors.joining(","));
    }

    @Test void logitsAndGenerateMatchTheGolden(@TempDir Path tmp) throws Exception {
        Path cmf = Fixtures.require("cmf/refconv/qwen3-F32.cmf");
        Path dir = Fixtures.require("models/qwen3");
        long[] ids, greedy;
        float[] want;
        try (SafetensorsReader g = SafetensorsReader.open(dir.resolve("golden.safetensors"))) {
            ids = g.readLongs("input_ids");
            greedy = g.readLongs("greedy_ids");
            want = g.readFloats("logits");
        }
        Path out = tmp.resolve("x.npy");
        Run r = run("logits", cmf.toString(), "--ids", csv(ids), "--out", out.toString());
        assertThat(r.code()).as(r.err()).isZero();
        Npy.Array a;
        try (InputStream in = Files.newInputStream(out)) { a = Npy.read(in); }
        assertThat(a.descr()).isEqualTo("<f4");
        assertThat(a.shape()).containsExactly(ids.length, 1024);
        float[] got = a.toFloats();
        double d = 0;
        for (int i = 0; i < got.length; i++) d = Math.max(d, Math.abs(got[i] - want[i]));
        assertThat(d).isLessThanOrEqualTo(1e-3);

        Run gen = run("generate", cmf.toString(), "--ids", csv(ids), "--greedy", "-n", String.valueOf(greedy.length), "--json");
        assertThat(gen.code()).as(gen.err()).isZero();
        JsonNode j = new ObjectMapper().readTree(gen.out());
        long[] gotIds = new long[j.get("ids").size()];
        for (int i = 0; i < gotIds.length; i++) gotIds[i] = j.get("ids").get(i).asLong();
        assertThat(gotIds).containsExactly(greedy);
        assertThat(j.get("stop_reason").asText()).isEqualTo("max_tokens");
    }

    @Test void seededSamplingIsReproducible() {
        String cmf = Fixtures.require("cmf/refconv/qwen3-F32.cmf").toString();
        Run a = run("generate", cmf, "--ids", "5,6,7", "-n", "8", "--temperature", "1.0", "--top-k", "50", "--seed", "42");
        Run b = run("generate", cmf, "--ids", "5,6,7", "-n", "8", "--temperature", "1.0", "--top-k", "50", "--seed", "42");
        assertThat(a.code()).as(a.err()).isZero();
        assertThat(a.out()).isEqualTo(b.out());
        assertThat(a.out().strip().split(",")).hasSize(8);
    }

    @Test void runStreamsTextFromTheFilesTokenizer() {
        String cmf = Fixtures.require("cmf/tiny/tiny-F32.cmf").toString();
        Run r = run("run", cmf, "-p", "Hello", "-n", "6", "--greedy");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out().strip()).isNotEmpty();
        assertThat(run("run", cmf, "-p", "Hello", "-n", "6", "--greedy").out()).isEqualTo(r.out());
    }

    @Test void chatKeepsTheConversationAndResets() {
        String cmf = Fixtures.require("cmf/tiny/tiny-F32.cmf").toString();
        java.io.InputStream old = System.in;
        try {
            System.setIn(new java.io.ByteArrayInputStream("Hello\n/reset\nHello\n/exit\nnever read\n".getBytes()));
            Run r = run("chat", cmf, "-n", "5", "--greedy");
            assertThat(r.code()).as(r.err()).isZero();
            String[] parts = r.out().split("\\(conversation reset\\)\n");
            assertThat(parts).hasSize(2);
            assertThat(parts[0].strip()).isNotEmpty().isEqualTo(parts[1].strip());   // same first turn after /reset
        } finally {
            System.setIn(old);
        }
    }

    @Test void badInputGivesOneClearLine() {
        String cmf = Fixtures.require("cmf/refconv/qwen3-F32.cmf").toString();
        Run r = run("generate", cmf, "--ids", "5,99999", "-n", "2");
        assertThat(r.code()).isEqualTo(1);
        assertThat(r.err()).startsWith("cmf: error: token id 99999").doesNotContain("Exception");
        Run e = run("logits", cmf, "--ids", "", "--out", "/tmp/none.npy");
        assertThat(e.code()).isEqualTo(1);
        assertThat(e.err()).contains("empty prompt");
        Run t = run("run", cmf, "-p", "hi");
        assertThat(t.code()).isEqualTo(1);
        assertThat(t.err()).contains("carries no tokenizer");
        Run m = run("generate", "/no/such/model.cmf", "--ids", "1", "-n", "1");
        assertThat(m.code()).isEqualTo(1);
        assertThat(m.err()).contains("/no/such/model.cmf");
    }

    @Test void missingDefaultModelIsExplained(@TempDir Path tmp) {
        String old = System.getProperty("cmf.home");
        System.setProperty("cmf.home", tmp.toString());
        try {
            Run r = run("run", "-p", "hi");
            assertThat(r.code()).isEqualTo(1);
            assertThat(r.err()).contains("bundled default model is missing").contains("models/default.cmf");
        } finally {
            if (old == null) System.clearProperty("cmf.home"); else System.setProperty("cmf.home", old);
        }
    }
}
