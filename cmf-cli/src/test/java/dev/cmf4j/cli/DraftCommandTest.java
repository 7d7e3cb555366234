package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code --draft} on run, generate and bench with the bundled model (and {@code --draft mtp} with the bundled model
 * given a head): the same output as without, and the refusals.
 */
class DraftCommandTest {
    private static Path model;

    @BeforeAll static void locate() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve(ModelFile.DEFAULT))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above " + Path.of("").toAbsolutePath()).isNotNull();
        model = dir.resolve(ModelFile.DEFAULT);
    }

    @Test void runAndGenerateGiveThePlainGreedyOutput() throws Exception {
        String[] base = {"run", model.toString(), "-p", "The manual page for tar says", "-n", "40", "--greedy"};
        Run plain = Run.run(base);
        assertThat(plain.code()).as(plain.err()).isZero();
        String[] withDraft = java.util.Arrays.copyOf(base, base.length + 5);
        System.arraycopy(new String[] {"--draft", model.toString(), "--draft-max", "5", "-v"}, 0, withDraft, base.length, 5);
        Run drafted = Run.run(withDraft);
        assertThat(drafted.code()).as(drafted.err()).isZero();
        assertThat(drafted.out()).isEqualTo(plain.out());
        assertThat(drafted.err()).contains("[draft: ").contains("accepted (100.0%)");

        ObjectMapper om = new ObjectMapper();
        String ids = "1,20,300,4000,50,600,70";
        Run g = Run.run("generate", model.toString(), "--ids", ids, "-n", "30", "--json");
        Run gd = Run.run("generate", model.toString(), "--ids", ids, "-n", "30", "--json", "--draft", model.toString(), "--draft-max", "3",
                "--rep-penalty", "1.0");
        assertThat(gd.code()).as(gd.err()).isZero();
        JsonNode a = om.readTree(g.out()), b = om.readTree(gd.out());
        assertThat(b.get("ids")).isEqualTo(a.get("ids"));
        assertThat(b.at("/draft/acceptance").asDouble()).isEqualTo(1.0);
        assertThat(b.at("/draft/drafted").asLong()).isGreaterThan(0);
    }

    @Test void benchMeasuresGenerationWithAndWithoutTheDraft() throws Exception {
        Run r = Run.run("bench", model.toString(), "-p", "8", "-n", "24", "-r", "1", "--warmup", "0", "-t", "2", "--json",
                "--draft", model.toString(), "--draft-max", "4");
        assertThat(r.code()).as(r.err()).isZero();
        JsonNode s = new ObjectMapper().readTree(r.out()).get("speculative");
        assertThat(s.get("acceptance").asDouble()).isEqualTo(1.0);
        assertThat(s.get("tokens_per_step").asDouble()).isGreaterThan(3.0);   // 4 drafts + the target's own per step
        assertThat(s.get("draft_tokens_per_s").asDouble()).isPositive();
        assertThat(s.get("plain_tokens_per_s").asDouble()).isPositive();
        // where a round's time went (the last drafted generation): every round drafted and verified, no plain step
        assertThat(s.get("rounds").asLong()).isPositive();
        assertThat(s.get("plain_steps").asLong()).isZero();
        assertThat(s.get("drafting_ms_per_round").asDouble()).isPositive();
        assertThat(s.get("verifying_ms_per_round").asDouble()).isPositive();
        assertThat(s.get("ms_per_plain_step").asDouble()).isZero();
        assertThat(s.get("speedup").asDouble()).as("generation with the draft over plain generation")
                .isCloseTo(s.get("draft_tokens_per_s").asDouble() / s.get("plain_tokens_per_s").asDouble(), org.assertj.core.data.Offset.offset(1e-3));
    }

    @Test void draftsOfAnotherVocabularyOrNoFileAreRefused() {
        Run missing = Run.run("run", model.toString(), "-p", "hi", "-n", "2", "--draft", "/nonexistent/draft.cmf");
        assertThat(missing.code()).isNotZero();
        assertThat(missing.err()).contains("/nonexistent/draft.cmf");
        Run range = Run.run("run", model.toString(), "-p", "hi", "-n", "2", "--draft", model.toString(), "--draft-max", "0");
        assertThat(range.code()).isNotZero();
        assertThat(range.err()).contains("--draft-max must be 1..32");
        Path other = Fixtures.require("cmf/refconv/qwen3-F32.cmf");
        Run foreign = Run.run("run", model.toString(), "-p", "hi", "-n", "2", "--draft", other.toString());
        assertThat(foreign.code()).isNotZero();
        assertThat(foreign.err()).contains("cannot draft for this model");
    }

    /**
     * The bundled model with an MTP head: its layer a copy of the model's last layer (same tensors and dtypes), the
     * norms copies of its final norm, fc random; written with the repo's writer (the tokenizer too).
     */
    private static Path withHead(Path dir) throws Exception {
        Path out = dir.resolve("default-mtp.cmf");
        try (dev.cmf4j.format.CmfFile f = dev.cmf4j.format.CmfFile.open(model)) {
            var arch = f.header().arch().toJson();
            int layers = arch.get("num_layers").asInt(), h = arch.get("hidden_size").asInt();
            arch.putObject("mtp").put("num_layers", 1).put("share_lm_head", true).put("share_embed", true);
            var h0 = f.header();
            var header = new dev.cmf4j.format.CmfHeader(h0.format(), h0.version(), dev.cmf4j.format.ModelArch.fromJson(arch), h0.quantType(),
                    h0.tokenizerConfig(), java.util.List.of(), null, h0.provenance(), null, null, null, null, null, null, null, java.util.Map.of());
            try (dev.cmf4j.format.CmfWriter w = dev.cmf4j.format.CmfWriter.create(out, header)) {
                String last = "model.layers." + (layers - 1) + ".";
                for (var t : f.tensors()) {
                    w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
                    if (t.name().startsWith(last))
                        w.addTensor("model.mtp.layers.0." + t.name().substring(last.length()), t.dtype(), t.shape(), t.data());
                    if (t.name().equals("model.norm.weight"))
                        for (String n : new String[] {"pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"})
                            w.addTensor("model.mtp." + n + ".weight", t.dtype(), t.shape(), t.data());
                }
                w.setVocab(f.vocab().orElseThrow());
                java.util.Random r = new java.util.Random(1);
                java.nio.ByteBuffer fc = java.nio.ByteBuffer.allocate(2 * h * h * 4).order(java.nio.ByteOrder.LITTLE_ENDIAN);
                for (int i = 0; i < 2 * h * h; i++) fc.putFloat((float) (r.nextGaussian() / Math.sqrt(2 * h)));
                w.addTensor("model.mtp.fc.weight", dev.cmf4j.format.DType.F32, new long[] {h, 2L * h}, fc.array());
                w.finish();
            }
        }
        return out;
    }

    @Test void draftMtpDraftsWithTheFilesOwnHead(@org.junit.jupiter.api.io.TempDir Path tmp) throws Exception {
        Path withHead = withHead(tmp);
        String[] base = {"run", withHead.toString(), "-p", "The manual page for tar says", "-n", "24", "--greedy"};
        Run plain = Run.run(base);
        assertThat(plain.code()).as(plain.err()).isZero();
        String[] drafted = java.util.Arrays.copyOf(base, base.length + 5);
        System.arraycopy(new String[] {"--draft", "mtp", "--draft-max", "3", "-v"}, 0, drafted, base.length, 5);
        Run d = Run.run(drafted);
        assertThat(d.code()).as(d.err()).isZero();
        assertThat(d.out()).isEqualTo(plain.out());
        assertThat(d.err()).contains("[draft: ");

        ObjectMapper om = new ObjectMapper();
        String ids = "1,20,300,4000,50,600,70";
        Run g = Run.run("generate", withHead.toString(), "--ids", ids, "-n", "20", "--json");
        Run gd = Run.run("generate", withHead.toString(), "--ids", ids, "-n", "20", "--json", "--draft", "mtp", "--draft-max", "2");
        assertThat(gd.code()).as(gd.err()).isZero();
        assertThat(om.readTree(gd.out()).get("ids")).isEqualTo(om.readTree(g.out()).get("ids"));
        assertThat(om.readTree(gd.out()).at("/draft/drafted").asLong()).isPositive();

        Run b = Run.run("bench", withHead.toString(), "-p", "8", "-n", "12", "-r", "1", "--warmup", "0", "-t", "2", "--draft", "mtp");
        assertThat(b.code()).as(b.err()).isZero();
        assertThat(b.out()).contains("with --draft the MTP head");
    }

    @Test void draftMtpWithoutAHeadIsRefused() {
        Run r = Run.run("run", model.toString(), "-p", "hi", "-n", "2", "--draft", "mtp");
        assertThat(r.code()).isNotZero();
        assertThat(r.err()).contains("has no MTP head (no model.mtp.* tensors)");
        assertThat(r.err().strip().lines().count()).as(r.err()).isLessThanOrEqualTo(2);
        Run serve = Run.run("serve", model.toString(), "--draft", "mtp", "--port", "0");
        assertThat(serve.code()).isNotZero();
        assertThat(serve.err()).contains("has no MTP head");
    }

    /**
     * Two chat turns with {@code --draft mtp} answer as without it; so does the same conversation saved after the first
     * turn and restored for the second (the head has no hidden states of the restored positions and starts over).
     */
    @Test void chatWithTheHeadAnswersAsWithout(@org.junit.jupiter.api.io.TempDir Path tmp) throws Exception {
        Path withHead = withHead(tmp);
        Run plain = chat(withHead, "What does ls do?\nAnd grep?\n");
        assertThat(plain.code()).as(plain.err()).isZero();
        Run drafted = chat(withHead, "What does ls do?\nAnd grep?\n", "--draft", "mtp", "--draft-max", "3");
        assertThat(drafted.code()).as(drafted.err()).isZero();
        assertThat(drafted.out()).isEqualTo(plain.out());
        Path snap = tmp.resolve("chat.state");
        Run first = chat(withHead, "What does ls do?\n", "--draft", "mtp", "--state-out", snap.toString());
        Run second = chat(withHead, "And grep?\n", "--draft", "mtp", "--state-in", snap.toString());
        assertThat(first.code()).as(first.err()).isZero();
        assertThat(second.code()).as(second.err()).isZero();
        assertThat(first.out() + second.out()).isEqualTo(plain.out());
    }

    private static Run chat(Path file, String input, String... extra) {
        java.io.InputStream old = System.in;
        try {
            System.setIn(new java.io.ByteArrayInputStream(input.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
            String[] args = {"chat", file.toString(), "--greedy", "-n", "12"};
            String[] all = java.util.Arrays.copyOf(args, args.length + extra.length);
            System.arraycopy(extra, 0, all, args.length, extra.length);
            return Run.run(all);
        } finally {
            System.setIn(old);
        }
    }
}
