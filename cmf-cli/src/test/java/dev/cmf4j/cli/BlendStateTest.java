package dev.cmf4j.cli;

import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A state saved through {@code --blend} carries the blend: continued under the same blend (in any order) it is the
 * one run of both prompts; under other weights it is refused, as under another skill.
 */
class BlendStateTest {
    @Test void aBlendsStateIsRefusedUnderAnotherBlend(@TempDir Path tmp) throws Exception {
        Path base = tmp.resolve("tiny.cmf"), da = tmp.resolve("a.cmf"), db = tmp.resolve("b.cmf"), snap = tmp.resolve("s.state");
        Files.copy(Fixtures.require("cmf/tiny/tiny-F32.cmf"), base);
        SkillBlendTest.moved(base, da, SkillBlendTest.A, SkillBlendTest::fa);
        SkillBlendTest.moved(base, db, SkillBlendTest.B, SkillBlendTest::fb);
        for (String[] s : new String[][] {{"a", da.toString()}, {"b", db.toString()}})
            assertThat(run("skill", "add", base.toString(), "--from", s[1], "--id", s[0]).code()).isZero();
        String m = base.toString();
        Run first = run("run", m, "--blend", "a:0.3,b:0.7", "--greedy", "-p", "Hello there", "-n", "0", "--state-out", snap.toString());
        assertThat(first.code()).as(first.err()).isZero();
        Run same = run("run", m, "--blend", "b:0.7,a:0.3", "--greedy", "-p", " friend", "-n", "6", "--state-in", snap.toString());
        assertThat(same.code()).as(same.err()).isZero();
        assertThat(same.out()).isEqualTo(run("run", m, "--blend", "a:0.3,b:0.7", "--greedy", "-p", "Hello there friend", "-n", "6").out());
        Run other = run("run", m, "--blend", "a:0.9,b:0.1", "--greedy", "-p", " friend", "-n", "1", "--state-in", snap.toString());
        assertThat(other.code()).isEqualTo(1);
        assertThat(other.err()).contains("another skill, blend, adapter or task");
        assertThat(run("run", m, "--skill", "a", "--greedy", "-p", " friend", "-n", "1", "--state-in", snap.toString()).err())
                .contains("another skill, blend, adapter or task");
    }
}
