package dev.cmf4j.backend.cpu;

import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/** The streaming Nyström kernel against the reference's float64 golden (fixtures/o1/README.md: max < 1e-3, mean < 1e-4). */
class NystromGoldenTest {
    @Test
    void streamingKernelMatchesTheFloat64Golden() throws Exception {
        Path file = Fixtures.require("o1/nystrom_golden.json");
        NystromGolden g = NystromGolden.load(file);
        NystromGolden.Error[] errors = g.check();
        assertThat(errors).hasSize(2);
        for (NystromGolden.Error e : errors) {
            System.out.printf("o1 golden %s: max %.3g mean %.3g%n", e.set(), e.max(), e.mean());
            assertThat(e.max()).as(e.set() + " max").isLessThan(NystromGolden.MAX_TOL);
            assertThat(e.mean()).as(e.set() + " mean").isLessThan(NystromGolden.MEAN_TOL);
        }
    }

    @Test
    void ridgePseudoInverseOfAWellConditionedMatrixIsItsInverse() {
        double[] m = NystromHead.ridgePinv(new double[] {2, 1, 0, 4}, 2);   // inverse of [[2,1],[0,4]] = [[.5,-.125],[0,.25]]
        assertThat(m[0]).isCloseTo(0.5, org.assertj.core.data.Offset.offset(1e-5));
        assertThat(m[1]).isCloseTo(-0.125, org.assertj.core.data.Offset.offset(1e-5));
        assertThat(m[2]).isCloseTo(0.0, org.assertj.core.data.Offset.offset(1e-5));
        assertThat(m[3]).isCloseTo(0.25, org.assertj.core.data.Offset.offset(1e-5));
    }
}
