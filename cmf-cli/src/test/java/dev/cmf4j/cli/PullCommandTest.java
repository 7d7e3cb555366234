package dev.cmf4j.cli;

import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.DType;
import dev.cmf4j.testkit.FakeHub;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf pull} end to end against a local stand-in for the Hub (cmf-hub's HubPullTest covers the rest). */
class PullCommandTest {
    @TempDir Path tmp;

    @Test void pullsConvertsPrintsThePathAndReusesTheCache() throws Exception {
        Path model = Fixtures.require("models/llama");
        try (FakeHub hub = FakeHub.start()) {
            FakeHub.Repo repo = hub.repo("test/llama");
            for (String f : List.of("config.json", "generation_config.json", "model.safetensors")) repo.file(f, model.resolve(f));
            String[] common = {"--endpoint", hub.endpoint().toString(), "--cache-dir", tmp.resolve("cache").toString(), "-t", "2"};

            PrintStream err0 = System.err;
            ByteArrayOutputStream progress = new ByteArrayOutputStream();
            Run r;
            System.setErr(new PrintStream(progress, true));
            try {
                r = run(concat(new String[] {"pull", "hf://test/llama", "-q", "q8_row", "--progress", "lines"}, common));
            } finally {
                System.setErr(err0);
            }
            assertThat(r.code()).as(r.err()).isZero();
            Path cmf = Path.of(r.out().strip());
            assertThat(cmf).isEqualTo(tmp.resolve("cache/models--test--llama/cmf/" + repo.commit() + "/model-q8_row.cmf"));
            try (CmfFile f = CmfFile.open(cmf)) {
                assertThat(f.tensor("model.layers.0.mlp.up_proj.weight").dtype()).isEqualTo(DType.Q8_ROW);
            }
            assertThat(r.err()).contains("pulled hf://test/llama@" + repo.commit());
            assertThat(progress.toString()).contains("downloading hf://test/llama@" + repo.commit()).contains("MB/s").contains("converted");

            Path out = tmp.resolve("out/llama.cmf");
            Run again = run(concat(new String[] {"pull", "hf://test/llama", "-q", "q8_row", "-o", out.toString()}, common));
            assertThat(again.code()).as(again.err()).isZero();
            assertThat(again.err()).startsWith("cached hf://test/llama@" + repo.commit());
            assertThat(again.out().strip()).isEqualTo(out.toString());
            assertThat(out).hasSameBinaryContentAs(cmf);
            assertThat(run(concat(new String[] {"pull", "hf://test/llama", "-q", "q8_row", "-o", out.toString()}, common)).code())
                    .as("OUT exists, no --force").isEqualTo(2);

            Run bad = run(concat(new String[] {"pull", "hf://test/llama@nope"}, common));
            assertThat(bad.code()).isEqualTo(1);
            assertThat(bad.err()).startsWith("cmf: error: hf://test/llama@nope: no such revision (HTTP 404)");
            assertThat(run("pull", "test/llama").code()).as("not an hf:// name").isEqualTo(2);
        }
    }

    private static String[] concat(String[] a, String[] b) {
        String[] r = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, r, a.length, b.length);
        return r;
    }
}
