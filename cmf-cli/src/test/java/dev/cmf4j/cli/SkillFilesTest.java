package dev.cmf4j.cli;

import dev.cmf4j.format.CmfAppend;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Skills grow a file in place and travel as standalone skill files: {@code skill add} appends (payload at the tail, new
 * header and directory, envelope last); an append stopped before its envelope, or cut in its tail, leaves a file that
 * opens with its earlier skills; {@code skill export/remove/apply} round trip to the same logits, a skill file is
 * refused on another base and is no model; {@code compact} drops the dead bytes.
 */
class SkillFilesTest {
    static final String IDS = "5,17,300,2,99,41,7,600,12,3";

    static float[] logits(Path model, String skill, Path tmp) throws Exception {
        Path out = tmp.resolve("l" + System.nanoTime() + ".npy");
        Run r = skill == null ? run("logits", model.toString(), "--ids", IDS, "--out", out.toString())
                : run("logits", model.toString(), "--skill", skill, "--ids", IDS, "--out", out.toString());
        assertThat(r.code()).as(r.err()).isZero();
        return SkillCommandTest.logits(out);
    }

    static double diff(float[] a, float[] b) {
        double d = 0;
        for (int i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
        return d;
    }

    static void verify(Path f) {
        Run r = run("info", f.toString(), "--verify");
        assertThat(r.code()).as(r.out().lines().filter(l -> l.contains("problem") || l.contains("error") || l.contains("hash")).limit(5).toList() + r.err()).isZero();
    }

    static List<String> skills(Path f) {
        try (CmfFile c = CmfFile.open(f)) { return c.header().skills().stream().map(SkillRecord::id).toList(); }
    }

    @Test void appendExportRemoveApplyCompact(@TempDir Path tmp) throws Exception {
        Path base = tmp.resolve("base.cmf"), donor = tmp.resolve("donor.cmf");
        Files.copy(Fixtures.require("cmf/refconv/qwen3-F32.cmf"), base);
        SkillCommandTest.donor(base, donor);
        float[] want = logits(donor, null, tmp), backbone = logits(base, null, tmp);
        long size0 = Files.size(base);
        // two appends in place
        assertThat(run("skill", "add", base.toString(), "--from", donor.toString(), "--id", "ft").code()).isZero();
        long size1 = Files.size(base);
        assertThat(size1).isGreaterThan(size0);
        assertThat(run("skill", "add", base.toString(), "--from", donor.toString(), "--id", "ft2", "--min-delta", "0.1").code()).isZero();
        assertThat(skills(base)).containsExactly("ft", "ft2");
        verify(base);
        assertThat(diff(logits(base, "ft", tmp), want)).isLessThanOrEqualTo(1e-5);
        assertThat(diff(logits(base, "ft2", tmp), want)).isLessThanOrEqualTo(1e-5);
        assertThat(diff(logits(base, null, tmp), backbone)).isLessThanOrEqualTo(1e-5);
        // export, remove, apply back
        Path ft = tmp.resolve("ft.skill.cmf");
        assertThat(run("skill", "export", base.toString(), "--id", "ft", "-o", ft.toString()).code()).isZero();
        try (CmfFile s = CmfFile.open(ft)) {
            assertThat(s.header().skills()).hasSize(1);
            assertThat(s.header().skills().getFirst().baseDirHash()).hasSize(16);
            assertThat(s.tensors()).allMatch(t -> t.name().startsWith("skill.ft."));
        }
        Run notAModel = run("logits", ft.toString(), "--ids", IDS, "--out", tmp.resolve("x.npy").toString());
        assertThat(notAModel.code()).isEqualTo(1);
        assertThat(notAModel.err()).contains("standalone skill file");
        assertThat(run("skill", "remove", base.toString(), "--id", "ft").code()).isZero();
        assertThat(skills(base)).containsExactly("ft2");
        assertThat(run("logits", base.toString(), "--skill", "ft", "--ids", IDS, "--out", tmp.resolve("x.npy").toString()).err())
                .contains("unknown skill 'ft'");
        Run apply = run("skill", "apply", base.toString(), ft.toString());
        assertThat(apply.code()).as(apply.err()).isZero();
        assertThat(skills(base)).containsExactly("ft2", "ft");
        assertThat(diff(logits(base, "ft", tmp), want)).isLessThanOrEqualTo(1e-5);
        Run other = run("skill", "apply", Fixtures.require("cmf/tiny/tiny-F32.cmf").toString(), ft.toString(), "-o", tmp.resolve("o.cmf").toString());
        assertThat(other.code()).isEqualTo(1);
        assertThat(other.err()).contains("another base");
        // compact: the dead bytes go, the content stays
        long grown = Files.size(base);
        assertThat(run("compact", base.toString()).code()).isZero();
        assertThat(Files.size(base)).isLessThan(grown);
        assertThat(skills(base)).containsExactly("ft2", "ft");
        assertThat(diff(logits(base, "ft", tmp), want)).isLessThanOrEqualTo(1e-5);
        verify(base);
    }

    @Test void anAppendStoppedMidwayLeavesTheFileWithItsEarlierSkills(@TempDir Path tmp) throws Exception {
        Path base = tmp.resolve("base.cmf"), donor = tmp.resolve("donor.cmf");
        Files.copy(Fixtures.require("cmf/refconv/qwen3-F32.cmf"), base);
        SkillCommandTest.donor(base, donor);
        assertThat(run("skill", "add", base.toString(), "--from", donor.toString(), "--id", "ft").code()).isZero();
        float[] ft = logits(base, "ft", tmp);
        byte[] committed = Files.readAllBytes(base);
        // a second skill written up to its envelope, then "killed": no commit
        List<CmfAppend.NewTensor> ts = new ArrayList<>();
        var header = (dev.cmf4j.format.CmfHeader) null;
        try (CmfFile f = CmfFile.open(base); CmfFile d = CmfFile.open(donor)) {
            for (String n : SkillCommandTest.CHANGED) {
                TensorEntry t = d.tensor(n);
                ts.add(new CmfAppend.NewTensor("skill.late." + n, t.dtype(), t.shape(), MemorySegment.ofArray(t.data().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE))));
            }
            List<SkillRecord> skills = new ArrayList<>(f.header().skills());
            skills.add(new SkillRecord("late", "late", List.of(0), null, null, null, null, null, null, null));
            header = f.header().withSkills(skills);
        }
        CmfAppend.Prepared p = CmfAppend.prepare(base, header, ts);
        assertThat(Files.size(base)).isGreaterThan(committed.length);
        assertThat(skills(base)).containsExactly("ft");
        assertThat(diff(logits(base, "ft", tmp), ft)).isLessThanOrEqualTo(1e-5);
        verify(base);
        // the tail cut in the middle of the new payload: still the earlier file
        try (FileChannel ch = FileChannel.open(base, StandardOpenOption.WRITE)) {
            ch.truncate(committed.length + 5000);
        }
        assertThat(skills(base)).containsExactly("ft");
        assertThat(diff(logits(base, "ft", tmp), ft)).isLessThanOrEqualTo(1e-5);
        // the same append run to its end commits
        Files.write(base, committed);
        CmfAppend.prepare(base, header, ts).commit();
        assertThat(skills(base)).containsExactly("ft", "late");
        assertThat(diff(logits(base, "late", tmp), ft)).isLessThanOrEqualTo(1e-5);
        assertThat(p).isNotNull();
    }
}
