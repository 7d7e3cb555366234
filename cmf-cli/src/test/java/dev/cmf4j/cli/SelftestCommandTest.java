package dev.cmf4j.cli;

import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code cmf selftest} on the CPU: the fixture goldens pass (all logits, then greedy steps from the same cache), and
 * so does each model's batch check (8 sequences in mixed steps against each alone).
 */
class SelftestCommandTest {
    @Test
    void cpuPassesTheGoldensOfTwoFixtureModels() {
        Path models = Fixtures.require("models/llama").getParent();
        Fixtures.require("models/gpt_oss");
        Run r = run("selftest", "--device", "cpu", "--fixtures", models.getParent().toString(), "--models", "llama,gpt_oss", "--no-q8");
        assertThat(r.code()).as(r.out() + r.err()).isZero();
        assertThat(r.out()).contains("selftest: 4 checks, 0 failed");
        assertThat(r.out()).containsPattern("ok +llama +batch of 8").containsPattern("ok +gpt_oss +batch of 8");
    }

    /**
     * A {@code --quant} check says where the device ran the quantized model: the CPU runs its host graph (a GPU says
     * device-resident, or host graph on the hybrid path: what to look for on the H200).
     */
    @Test
    void aQuantCheckSaysWhereTheModelRan() {
        Path models = Fixtures.require("models/llama").getParent();
        Run r = run("selftest", "--device", "cpu", "--fixtures", models.getParent().toString(), "--models", "llama", "--quant", "q4tp");
        assertThat(r.code()).as(r.out() + r.err()).isZero();
        assertThat(r.out()).containsPattern("ok +llama +q4tp vs cpu .*, host graph");
    }

    /** The Embryo fixtures are CMF files with a float64 reference: checked as they are, golden and batch. */
    /** {@code --ops} compares a GPU's operators with the CPU's: on the CPU itself it is a clear error, not an empty pass. */
    @Test
    void opsOnTheCpuSaysItNeedsAGpu() {
        Run r = run("selftest", "--ops", "--device", "cpu");
        assertThat(r.code()).isEqualTo(1);
        assertThat(r.err()).contains("--ops checks a GPU's operators against the CPU's; this device is the CPU (use --device cuda or --device vulkan)");
    }

    @Test
    void cpuPassesTheEmbryoGoldens() {
        Path embryo = Fixtures.require("embryo/embryo_a").getParent();
        Run r = run("selftest", "--device", "cpu", "--fixtures", embryo.getParent().toString(), "--models", "embryo_a,embryo_c", "--no-q8");
        assertThat(r.code()).as(r.out() + r.err()).isZero();
        assertThat(r.out()).contains("selftest: 4 checks, 0 failed");
        assertThat(r.out()).containsPattern("ok +embryo_a +f32 vs golden").containsPattern("ok +embryo_c +batch of 8");
    }

    /** {@code --o1-golden}: the streaming kernel within the README bounds; a golden whose outputs were moved fails. */
    @Test
    void o1GoldenPassesAndAMovedOutputFails(@org.junit.jupiter.api.io.TempDir Path tmp) throws Exception {
        Path golden = Fixtures.require("o1/nystrom_golden.json");
        Run r = run("selftest", "--o1-golden", golden.toString());
        assertThat(r.code()).as(r.out() + r.err()).isZero();
        assertThat(r.out()).containsPattern("ok +out +max").containsPattern("ok +out_sink0 +max")
                .contains("selftest --o1-golden: 2 checks, 0 failed");

        var mapper = new com.fasterxml.jackson.databind.ObjectMapper();
        var json = (com.fasterxml.jackson.databind.node.ObjectNode) mapper.readTree(golden.toFile());
        var row = (com.fasterxml.jackson.databind.node.ArrayNode) json.get("out").get(80);
        row.set(3, row.get(3).asDouble() + 0.01);
        Path moved = tmp.resolve("moved.json");
        mapper.writeValue(moved.toFile(), json);
        r = run("selftest", "--o1-golden", moved.toString());
        assertThat(r.code()).isEqualTo(1);
        assertThat(r.out()).containsPattern("FAIL +out +max").containsPattern("ok +out_sink0").contains("2 checks, 1 failed");
    }
}
