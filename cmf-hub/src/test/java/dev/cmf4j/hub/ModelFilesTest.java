package dev.cmf4j.hub;

import dev.cmf4j.convert.TensorPolicy;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Which files of a repository are converted, from its file list alone. */
class ModelFilesTest {
    static RepoRevision repo(String... paths) {
        List<RepoFile> fs = new ArrayList<>();
        for (String p : paths) fs.add(new RepoFile(p, 10, "a".repeat(40), p.endsWith(".gguf") || p.endsWith(".safetensors") ? "b".repeat(64) : null));
        return new RepoRevision(HubUri.parse("hf://o/r"), "c".repeat(40), fs);
    }

    static String chosen(ModelFiles m) {
        return switch (m) {
            case ModelFiles.Checkpoint c -> "checkpoint " + c.weights().path() + " " + c.extras().stream().map(RepoFile::path).toList();
            case ModelFiles.Gguf g -> g.file().path();
        };
    }

    @Test void aCheckpointTakesItsWeightsAndTheFilesTheConverterReads() {
        RepoRevision r = repo("config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja", "README.md", "x-Q8_0.gguf",
                "merges.txt", "onnx/model.onnx");
        assertThat(chosen(ModelFiles.choose(r, null, null))).isEqualTo("checkpoint model.safetensors [tokenizer.json, chat_template.jinja]");
        assertThat(chosen(ModelFiles.choose(r, "q8_2f", null))).startsWith("checkpoint");
        assertThat(chosen(ModelFiles.choose(r, "Q8_0", null))).as("a GGUF type picks the GGUF").isEqualTo("x-Q8_0.gguf");
        assertThat(chosen(ModelFiles.choose(r, null, "x-Q8_0.gguf"))).isEqualTo("x-Q8_0.gguf");
        assertThat(ModelFiles.choose(r, null, null).cmfName(TensorPolicy.Mode.AUTO)).isEqualTo("model-auto");
        RepoRevision sharded = repo("config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model.safetensors");
        assertThat(chosen(ModelFiles.choose(sharded, null, null))).as("the index is preferred, as the converter prefers it")
                .startsWith("checkpoint model.safetensors.index.json");
        assertThatThrownBy(() -> ModelFiles.choose(r, null, "README.md")).hasMessageContaining("--file takes one of the repository's .gguf files");
    }

    @Test void aGgufIsChosenByFileByTypeOrAlone() {
        RepoRevision r = repo("m-Q4_K_M.gguf", "m-IQ4_K_M.gguf", "m-Q4_K_S.gguf", "m-F16.gguf", "sub/m-Q8_0.gguf", "mmproj-m-F16.gguf");
        assertThat(chosen(ModelFiles.choose(r, "Q4_K_M", null))).isEqualTo("m-Q4_K_M.gguf");
        assertThat(chosen(ModelFiles.choose(r, "q4_k_s", null))).isEqualTo("m-Q4_K_S.gguf");
        assertThat(chosen(ModelFiles.choose(r, "f16", null))).as("a cmf mode naming a GGUF type; mmproj is no model").isEqualTo("m-F16.gguf");
        assertThat(chosen(ModelFiles.choose(r, "Q8_0", null))).isEqualTo("sub/m-Q8_0.gguf");
        assertThat(ModelFiles.choose(r, "Q8_0", null).cmfName(TensorPolicy.Mode.AUTO)).isEqualTo("sub--m-Q8_0-auto");
        assertThatThrownBy(() -> ModelFiles.choose(r, null, null)).hasMessageContaining("several GGUF files")
                .hasMessageContaining("m-Q4_K_M.gguf").hasMessageNotContaining("mmproj");
        assertThatThrownBy(() -> ModelFiles.choose(r, "q8_row", null)).as("a cmf mode naming no file").hasMessageContaining("several GGUF files");
        assertThatThrownBy(() -> ModelFiles.choose(r, "Q4_K", null)).hasMessageContaining("no GGUF file of type Q4_K");
        assertThat(chosen(ModelFiles.choose(repo("only.gguf", "README.md"), "q8_row", null))).isEqualTo("only.gguf");
        assertThatThrownBy(() -> ModelFiles.choose(repo("m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf"), null, "m-Q4_K_M-00001-of-00002.gguf"))
                .hasMessageContaining("split GGUF");
    }

    @Test void nothingToConvertSaysWhatIsThere() {
        assertThatThrownBy(() -> ModelFiles.choose(repo("config.json", "pytorch_model.bin"), null, null)).hasMessageContaining("PyTorch pickles");
        assertThatThrownBy(() -> ModelFiles.choose(repo("config.json", "consolidated.safetensors"), null, null))
                .hasMessageContaining("not the model.safetensors");
        assertThatThrownBy(() -> ModelFiles.choose(repo("README.md"), null, null)).hasMessageContaining("there is no config.json");
        assertThatThrownBy(() -> ModelFiles.choose(repo("config.json", "model.safetensors"), "Q4_K_M", null))
                .hasMessageContaining("neither a cmf quantization");
    }

    @Test void unsafeListingsAreRefused() {
        for (String bad : new String[] {"../x", "/etc/passwd", "a/../../b", "a\\b", "a//b", "./a"})
            assertThatThrownBy(() -> new RepoFile(bad, 1, "a".repeat(40), null)).as(bad).isInstanceOf(HubException.class);
        assertThatThrownBy(() -> new RepoFile("a", 1, "xyz", null)).hasMessageContaining("git blob id");
        assertThatThrownBy(() -> new RepoFile("a", 1, "a".repeat(40), "../" + "b".repeat(61))).hasMessageContaining("sha256");
    }
}
