package dev.cmf4j.backend.cpu.kernel;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The q8 decode products give the same bits in every JIT tier: a child JVM interpreting the kernels (-Xint), one with C1
 * only and one compiling them with C2 at once ({@code -Xbatch}, several rounds) all print exactly the products this JVM
 * computes after many rounds, and every token of a several-token product equals its own single-token product in each.
 * Also at 256-bit vectors (AVX2's width, forced with {@code -XX:MaxVectorSize=32}) with the token pairs forced on there.
 * A lane sum whose order depends on the tier (the Vector API's {@code reduceLanes}) fails this: the same tokens then
 * give different logits on a session's first call and later ones.
 */
class KernelTierTest {
    @Test
    void q8ProductsAreTheSameInterpretedAndCompiled() throws Exception {
        String here = KernelTierProbe.products(300);
        assertThat(here).as("several-token products against single-token ones, and rounds against the first")
                .doesNotContain("alone").doesNotContain("differs");
        assertThat(child("-Xint")).isEqualTo(here);
        assertThat(child("-Xint", "-Dcmf.q8.coldTwin=false")).isEqualTo(here);   // the vector and pair loops interpreted
        assertThat(child("-XX:TieredStopAtLevel=1")).isEqualTo(here);
        assertThat(child("-XX:-TieredCompilation", "-Xbatch", "-XX:CompileThreshold=100", "REPS=20")).isEqualTo(here);

        String narrowInterpreted = child("-XX:MaxVectorSize=32", "-Dcmf.q8.tokenPairs=true", "-Xint");
        assertThat(narrowInterpreted).doesNotContain("alone").doesNotContain("differs");
        assertThat(child("-XX:MaxVectorSize=32", "-Dcmf.q8.tokenPairs=true", "-Dcmf.q8.coldTwin=false", "-Xint")).isEqualTo(narrowInterpreted);
        assertThat(child("-XX:MaxVectorSize=32", "-Dcmf.q8.tokenPairs=true", "-XX:-TieredCompilation", "-Xbatch",
                "-XX:CompileThreshold=100", "REPS=20")).isEqualTo(narrowInterpreted);
    }

    /** The probe's report from a child JVM with these options ({@code REPS=n}: rounds, else 1). */
    private static String child(String... options) throws Exception {
        List<String> jvm = new ArrayList<>();
        String reps = "1";
        for (String o : options) if (o.startsWith("REPS=")) reps = o.substring(5); else jvm.add(o);
        return ChildJvm.output(KernelTierProbe.class, jvm, reps);
    }
}
