package dev.cmf4j.cli;

import dev.cmf4j.format.Npy;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code --o1}, {@code --kv} and {@code cmf ppl} on the bundled model; the refusals. */
class MemoryCommandsTest {
    private static Path model;

    @BeforeAll static void locate() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve(ModelFile.DEFAULT))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above " + Path.of("").toAbsolutePath()).isNotNull();
        model = dir.resolve(ModelFile.DEFAULT);
    }

    private static float[] logits(Path tmp, String name, String... extra) throws Exception {
        Path out = tmp.resolve(name + ".npy");
        String[] args = new String[5 + extra.length];
        System.arraycopy(new String[] {"logits", model.toString(), "--ids", ids(40), "--out=" + out}, 0, args, 0, 5);
        System.arraycopy(extra, 0, args, 5, extra.length);
        Run r = run(args);
        assertThat(r.code()).as(r.err()).isZero();
        try (InputStream in = Files.newInputStream(out)) { return Npy.read(in).toFloats(); }
    }

    private static String ids(int n) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < n; i++) b.append(i == 0 ? "" : ",").append(100 + 37 * i % 9000);
        return b.toString();
    }

    private static double maxDiff(float[] a, float[] b) {
        double d = 0;
        for (int i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
        return d;
    }

    @Test
    void logitsWithSealedLayers(@TempDir Path tmp) throws Exception {
        float[] full = logits(tmp, "full");
        // 40 ids < W 48 + S 4: sealed after 20, nothing ever leaves the window: full attention
        assertThat(maxDiff(full, logits(tmp, "near", "--o1", "all", "--o1-window", "48", "--o1-prompt", "20"))).isLessThan(1e-3);
        // W 8: the far field stands in for most keys after the prompt
        assertThat(maxDiff(full, logits(tmp, "far", "--o1", "all", "--o1-window", "8", "--o1-sink", "2", "--o1-prompt", "20"))).isGreaterThan(1e-3);
    }

    @Test
    void pplScoresTheSameTokensWithAndWithoutO1(@TempDir Path tmp) throws Exception {
        Path text = tmp.resolve("text.txt");
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < 60; i++)
            b.append("The ls command lists the files of a directory; with -l it prints one file per line, with its size ")
                    .append("and the time of its last change (entry ").append(i).append(").\n");
        Files.writeString(text, b.toString());
        Run full = run("ppl", model.toString(), "--file", text.toString(), "--window-len", "256", "--windows", "2");
        Run o1 = run("ppl", model.toString(), "--file", text.toString(), "--window-len", "256", "--windows", "2", "--o1", "all");
        Run narrow = run("ppl", model.toString(), "--file", text.toString(), "--window-len", "256", "--windows", "2",
                "--o1", "all", "--o1-window", "32");
        Run q8 = run("ppl", model.toString(), "--file", text.toString(), "--window-len", "256", "--windows", "2", "--kv", "q8");
        for (Run r : new Run[] {full, o1, narrow, q8}) assertThat(r.code()).as(r.err()).isZero();
        double pf = ppl(full.out()), po = ppl(o1.out()), pn = ppl(narrow.out()), pq = ppl(q8.out());
        System.out.printf("ppl on a repetitive text: full %.4f, o1 W128 %.4f, o1 W32 %.4f, kv q8 %.4f%n", pf, po, pn, pq);
        assertThat(full.out()).contains("over 384 tokens in 2 windows of 256 (prompt 64); o1 off; kv f32");
        assertThat(o1.out()).contains("over 384 tokens").contains("o1 all (m 32, window 128, sink 4)");
        assertThat(pf).isGreaterThan(1.0).isLessThan(50.0);
        // the line repeats every ~40 tokens: a 128-key window still sees the last copy, a 32-key one must lean on the
        // far field's estimate, which blurs exactly the keys a copy needs
        assertThat(po).isNotEqualTo(pf).isLessThan(pf * 1.25);
        assertThat(pn).isGreaterThan(po * 2);
        assertThat(Math.abs(pq / pf - 1)).as("q8 KV costs little").isLessThan(0.02);
    }

    @Test
    void pplReportsTheKlDivergenceOfQ8KvFromF16(@TempDir Path tmp) throws Exception {
        Path text = tmp.resolve("text.txt");
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < 40; i++) b.append("Entry ").append(i).append(": the tar command packs files into one archive, gzip shrinks it.\n");
        Files.writeString(text, b.toString());
        Run q8 = run("ppl", model.toString(), "--file", text.toString(), "--window-len", "128", "--windows", "1", "--kv", "q8");
        Run kl = run("ppl", model.toString(), "--file", text.toString(), "--window-len", "128", "--windows", "1", "--kv", "q8",
                "--kl-base-kv", "f16");
        Run f16 = run("ppl", model.toString(), "--file", text.toString(), "--window-len", "128", "--windows", "1", "--kv", "f16");
        for (Run r : new Run[] {q8, kl, f16}) assertThat(r.code()).as(r.err()).isZero();
        System.out.print(kl.out());
        // the first line is the q8 run's own figure, the second the f16 run's and the divergence between them
        assertThat(ppl(kl.out())).isCloseTo(ppl(q8.out()), org.assertj.core.data.Offset.offset(1e-3));
        Matcher m = Pattern.compile("against kv f16: perplexity ([0-9.]+) \\(ΔPPL ([-+][0-9.]+)\\); KL divergence mean ([0-9.e-]+)"
                + " nats/token, max ([0-9.e-]+); same top token ([0-9.]+)%").matcher(kl.out());
        assertThat(m.find()).as(kl.out()).isTrue();
        assertThat(Double.parseDouble(m.group(1))).isCloseTo(ppl(f16.out()), org.assertj.core.data.Offset.offset(1e-3));
        double mean = Double.parseDouble(m.group(3));
        assertThat(mean).isGreaterThan(0).isLessThan(1e-2).isLessThanOrEqualTo(Double.parseDouble(m.group(4)));
        assertThat(Double.parseDouble(m.group(5))).isGreaterThan(90).isLessThanOrEqualTo(100);
        Run bad = run("ppl", model.toString(), "--file", text.toString(), "--kl-base-kv", "q4");
        assertThat(bad.code()).isEqualTo(1);
        assertThat(bad.err()).contains("--kl-base-kv must be f32, f16 or q8, got 'q4'");
    }

    private static double ppl(String out) {
        Matcher m = Pattern.compile("perplexity ([0-9.]+)").matcher(out);
        assertThat(m.find()).as(out).isTrue();
        return Double.parseDouble(m.group(1));
    }

    @Test
    void refusals() {
        Run bad = run("generate", model.toString(), "--ids", "5,6", "-n", "1", "--o1", "most");
        assertThat(bad.code()).isEqualTo(1);
        assertThat(bad.err()).contains("--o1 must be all, deepN or i,j,k, got 'most'");
        Run kv = run("generate", model.toString(), "--ids", "5,6", "-n", "1", "--kv", "q4");
        assertThat(kv.err()).contains("--kv must be f32, f16 or q8, got 'q4'");
        Run noO1 = run("generate", model.toString(), "--ids", "5,6", "-n", "1", "--o1-window", "64");
        assertThat(noO1.err()).contains("need --o1");
        Run layer = run("generate", model.toString(), "--ids", "5,6", "-n", "1", "--o1", "8");
        assertThat(layer.err()).contains("--o1 names layer 8 but the model has 8 layers");
        Path embryo = Fixtures.require("embryo/embryo_a").resolve("model.cmf");
        Run bounded = run("generate", embryo.toString(), "--ids", "5,6", "-n", "1", "--o1", "all");
        assertThat(bounded.code()).isEqualTo(1);
        assertThat(bounded.err()).contains("natively bounded");
    }

    /** run --state-out then run --state-in continues where the first stopped: the same text as one run of both prompts. */
    @Test
    void stateOutThenStateInContinuesTheSequence(@TempDir Path tmp) throws Exception {
        Path snap = tmp.resolve("s.cmfstate");
        String[] o1 = {"--greedy", "--o1", "all", "--o1-window", "8", "--o1-sink", "2"};
        Run first = run(concat(new String[] {"run", model.toString(), "-p", "The ls command", "-n", "0", "--state-out", snap.toString()}, o1));
        assertThat(first.code()).as(first.err()).isZero();
        assertThat(snap).exists();
        Run cont = run(concat(new String[] {"run", model.toString(), "-p", " lists the files", "-n", "24", "--state-in", snap.toString()}, o1));
        Run whole = run(concat(new String[] {"run", model.toString(), "-p", "The ls command lists the files", "-n", "24"}, o1));
        assertThat(cont.code()).as(cont.err()).isZero();
        assertThat(cont.out()).isNotBlank().isEqualTo(whole.out());
        // refused with other settings; a missing file is one clear line
        Run other = run("run", model.toString(), "-p", " x", "-n", "1", "--state-in", snap.toString());
        assertThat(other.code()).isEqualTo(1);
        assertThat(other.err()).contains("other --o1/--kv settings");
        Run missing = run("run", model.toString(), "-p", " x", "-n", "1", "--state-in", tmp.resolve("none").toString());
        assertThat(missing.err()).contains("no such state file");
    }

    /** An Embryo sequence saved by one run (rings and delta states) and continued by another: the text of one run of both prompts. */
    @Test
    void embryoStateOutThenStateInContinuesTheSequence(@TempDir Path tmp) throws Exception {
        String embryo = Fixtures.require("embryo/embryo_a").resolve("model.cmf").toString();
        Path snap = tmp.resolve("e.cmfstate");
        String head = "The ls command lists the files of a directory; with -l it prints", tail = " one file per line";
        Run first = run("run", embryo, "-p", head, "-n", "0", "--greedy", "--state-out", snap.toString());
        assertThat(first.code()).as(first.err()).isZero();
        Run cont = run("run", embryo, "-p", tail, "-n", "24", "--greedy", "--state-in", snap.toString());
        Run whole = run("run", embryo, "-p", head + tail, "-n", "24", "--greedy");
        assertThat(cont.code()).as(cont.err()).isZero();
        assertThat(cont.out()).isEqualTo(whole.out());
        Run o1 = run("run", embryo, "-p", tail, "-n", "1", "--state-in", snap.toString(), "--o1", "all");
        assertThat(o1.code()).isEqualTo(1);
        assertThat(o1.err()).contains("natively bounded");
    }

    /**
     * chat --state-out after one turn, then chat --state-in with the next: the replies of one chat of both turns; the
     * state carries the transcript, so a run state is refused, and --system cannot reopen a saved conversation.
     */
    @Test
    void chatStateOutThenStateInContinuesTheConversation(@TempDir Path tmp) throws Exception {
        Path snap = tmp.resolve("chat.cmfstate"), plain = tmp.resolve("run.cmfstate");
        Run whole = chat("What does ls do?\nAnd grep?\n", "--system", "Answer briefly.");
        Run first = chat("What does ls do?\n", "--system", "Answer briefly.", "--state-out", snap.toString());
        Run second = chat("And grep?\n", "--state-in", snap.toString(), "--state-out", snap.toString());
        for (Run r : new Run[] {whole, first, second}) assertThat(r.code()).as(r.err()).isZero();
        assertThat(whole.out().lines().filter(l -> !l.isBlank()).count()).isGreaterThanOrEqualTo(2);
        assertThat(first.out() + second.out()).isEqualTo(whole.out());
        assertThat(run("run", model.toString(), "-p", "x", "-n", "0", "--state-out", plain.toString()).code()).isZero();
        Run noTranscript = chat("hi\n", "--state-in", plain.toString());
        assertThat(noTranscript.code()).isEqualTo(1);
        assertThat(noTranscript.err()).contains("no chat transcript");
        Run system = chat("hi\n", "--state-in", snap.toString(), "--system", "x");
        assertThat(system.err()).contains("--system starts a new conversation");
    }

    private static Run chat(String input, String... extra) {
        java.io.InputStream old = System.in;
        try {
            System.setIn(new java.io.ByteArrayInputStream(input.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
            return run(concat(new String[] {"chat", model.toString(), "--greedy", "-n", "12"}, extra));
        } finally {
            System.setIn(old);
        }
    }

    private static String[] concat(String[] a, String[] b) {
        String[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
