package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.backend.cpu.CpuInfo;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;


import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf bench}: runs both tests on a real (tiny) model and reports what it promises. */
class BenchCommandTest {
    @Test
    void jsonReportsPrefillAndDecodeSpeed() throws Exception {
        String cmf = Fixtures.require("cmf/refconv/llama-Q8_2F.cmf").toString();
        Run r = run("bench", cmf, "--threads", "2", "--prompt-tokens", "16", "--gen-tokens", "4", "--reps", "3", "--warmup", "0", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        JsonNode j = new ObjectMapper().readTree(r.out());
        assertThat(j.get("device").asText()).isEqualTo("cpu");
        assertThat(j.get("dtype").asText()).isEqualTo("q8_2f");
        assertThat(j.get("threads").asInt()).isEqualTo(2);
        assertThat(j.get("prefill_tokens_per_s").asDouble()).isPositive();
        assertThat(j.get("decode_tokens_per_s").asDouble()).isPositive();
        assertThat(j.get("decode_samples")).hasSize(3);
        assertThat(j.get("weight_bytes_per_token").asLong()).isPositive();
        CpuInfo host = CpuInfo.host();                 // the machine that ran it, so runs on other hosts are told apart
        assertThat(j.get("cpu").get("name").asText()).isEqualTo(host.name());
        assertThat(j.get("cpu").get("identity").asText()).isEqualTo(host.identity());
        assertThat(j.get("cpu").get("processors").asInt()).isEqualTo(host.processors());
        assertThat(j.get("cpu").get("features")).hasSize(host.features().size());
    }

    /**
     * {@code --device auto} without a usable GPU (none here or in CI; the test skips where one is) measures on
     * the CPU with the --threads pool and says "cpu", in the JSON and in the table, not "auto".
     */
    @Test
    void autoFallingBackToTheCpuHonoursThreadsAndReportsTheCpu() throws Exception {
        String cmf = Fixtures.require("cmf/refconv/llama-Q8_2F.cmf").toString();
        // a thread count the process-wide pool does not have: the fallback must not run on that pool
        int threads = dev.cmf4j.backend.cpu.CpuBackend.pool().threads() + 1;
        Run r = run("bench", cmf, "--device", "auto", "-t", Integer.toString(threads), "-p", "4", "-n", "2", "-r", "1",
                "--warmup", "0", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        org.junit.jupiter.api.Assumptions.assumeTrue(r.err().contains("no usable GPU"), "a GPU is usable here: " + r.err());
        JsonNode j = new ObjectMapper().readTree(r.out());
        assertThat(j.get("device").asText()).isEqualTo("cpu");
        assertThat(j.get("threads").asInt()).isEqualTo(threads);
        Run table = run("bench", cmf, "--device", "auto", "-t", "1", "-p", "4", "-n", "2", "-r", "1", "--warmup", "0");
        assertThat(table.code()).as(table.err()).isZero();
        assertThat(table.out()).contains("| device ").contains("| cpu ").doesNotContain("auto")
                .contains("host: " + CpuInfo.host().describe() + "; Java " + Runtime.version());
    }

    /** {@code --depth}: the decode test after D tokens of context, with an Embryo's constant state bytes at each depth. */
    @Test
    void depthMeasuresDecodeAfterAFilledContext() throws Exception {
        String cmf = Fixtures.require("embryo/embryo_a/model.cmf").toString();
        Run r = run("bench", cmf, "-t", "1", "-p", "0", "-n", "3", "-r", "2", "--warmup", "1", "--depth", "5,40", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        JsonNode d = new ObjectMapper().readTree(r.out()).get("depth");
        assertThat(d).hasSize(2);
        assertThat(d.get(1).get("depth").asInt()).isEqualTo(40);
        for (JsonNode x : d) {
            assertThat(x.get("decode_samples")).hasSize(2);
            assertThat(x.get("decode_tokens_per_s").asDouble()).isPositive();
            assertThat(x.get("state_bytes_per_sequence").asLong()).isEqualTo(11648);
        }
        Run table = run("bench", cmf, "-t", "1", "-p", "0", "-n", "2", "-r", "1", "--warmup", "0", "-d", "9");
        assertThat(table.code()).as(table.err()).isZero();
        assertThat(table.out()).contains("state B/sequence", "11,648");
        assertThat(run("bench", cmf, "-n", "0", "-d", "9").code()).isNotZero();
    }

    /** {@code --batch}: aggregate speeds of B concurrent sequences, in the JSON's batch[] and in a second table. */
    @Test
    void batchReportsAggregateSpeedPerSequenceCount() throws Exception {
        String cmf = Fixtures.require("cmf/refconv/llama-Q8_2F.cmf").toString();
        Run r = run("bench", cmf, "-t", "2", "-p", "6", "-n", "3", "-r", "2", "--warmup", "0", "--batch", "1,4", "--batch-rows", "8", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        JsonNode b = new ObjectMapper().readTree(r.out()).get("batch");
        assertThat(b).hasSize(2);
        assertThat(b.get(0).get("sequences").asInt()).isEqualTo(1);
        assertThat(b.get(1).get("sequences").asInt()).isEqualTo(4);
        for (JsonNode e : b) {
            assertThat(e.get("decode_tokens_per_s").asDouble()).isPositive();
            assertThat(e.get("prefill_tokens_per_s").asDouble()).isPositive();
            assertThat(e.get("decode_samples")).hasSize(2);
        }
        assertThat(r.err()).contains("bench: 4 sequences, rep 2/2");   // progress per batch size
        // --ctx: a longer context per sequence; the CPU's full caches start at 64 positions and grow as they are used,
        // so contexts of 200 and 400 hold the same at 10 positions
        assertThat(b.get(1).get("context").asInt()).isEqualTo(10);
        assertThat(b.get(1).get("held_bytes_per_sequence").asLong()).isPositive();
        long[] held = new long[2];
        for (int i = 0; i < 2; i++) {
            Run wide = run("bench", cmf, "-t", "2", "-p", "6", "-n", "3", "-r", "1", "--warmup", "0", "--batch", "4", "--ctx", 200 * (i + 1) + "",
                    "--json");
            assertThat(wide.code()).as(wide.err()).isZero();
            JsonNode w = new ObjectMapper().readTree(wide.out()).get("batch").get(0);
            assertThat(w.get("context").asInt()).isEqualTo(200 * (i + 1));
            held[i] = w.get("held_bytes_per_sequence").asLong();
        }
        assertThat(held[1]).isEqualTo(held[0]).isGreaterThan(b.get(1).get("held_bytes_per_sequence").asLong());
        assertThat(run("bench", cmf, "--ctx", "100").err()).contains("--ctx needs --batch");
        Run table = run("bench", cmf, "-t", "1", "-p", "4", "-n", "2", "-r", "1", "--warmup", "0", "--batch", "2");
        assertThat(table.code()).as(table.err()).isZero();
        assertThat(table.out()).contains("| sequences |").contains("MiB/sequence").containsPattern("\\|\\s+2 \\|");
        Run greedy = run("bench", cmf, "-t", "1", "-p", "4", "-n", "3", "-r", "1", "--warmup", "0", "--batch", "3", "--greedy", "--json");
        assertThat(greedy.code()).as(greedy.err()).isZero();
        assertThat(new ObjectMapper().readTree(greedy.out()).get("batch").get(0).get("decode_tokens_per_s").asDouble()).isPositive();
        assertThat(run("bench", cmf, "--greedy").err()).contains("--greedy needs --batch");
        Run bad = run("bench", cmf, "--batch", "0");
        assertThat(bad.code()).isEqualTo(1);
        assertThat(bad.err()).contains("--batch sizes must be in 1..4096");
    }

    /** {@code --skills}: a batch per mix (sequences round robin over its skills) and each skill's first and cached step. */
    @Test
    void skillMixesReportABatchPerMixAndEachSkillsSwitch(@org.junit.jupiter.api.io.TempDir java.nio.file.Path tmp) throws Exception {
        java.nio.file.Path cmf = tmp.resolve("llama.cmf"), lora = Fixtures.require("lora");
        java.nio.file.Files.copy(Fixtures.require("cmf/refconv/llama-Q8_2F.cmf"), cmf);
        for (String id : new String[] {"a", "b"}) {
            Run add = run("skill", "add", cmf.toString(), "--lora", lora.resolve("skill_" + id).toString(), "--id", id);
            assertThat(add.code()).as(add.err()).isZero();
        }
        Run r = run("bench", cmf.toString(), "-t", "1", "-p", "4", "-n", "2", "-r", "1", "--warmup", "0", "--batch", "3",
                "--skills", "a,b,none", "--skills", "none", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        JsonNode j = new ObjectMapper().readTree(r.out());
        assertThat(j.get("batch")).hasSize(2);
        assertThat(j.get("batch").get(0).get("skills").asText()).isEqualTo("a,b,none");
        assertThat(j.get("batch").get(1).get("skills").asText()).isEqualTo("none");
        for (JsonNode e : j.get("batch")) assertThat(e.get("decode_tokens_per_s").asDouble()).isPositive();
        JsonNode sw = j.get("skill_switch");
        assertThat(sw).hasSize(2);
        assertThat(sw.get(0).get("skill").asText()).isEqualTo("a");
        assertThat(sw.get(1).get("skill").asText()).isEqualTo("b");
        for (JsonNode e : sw) {
            assertThat(e.get("replaced_bytes").asLong()).isPositive();
            assertThat(e.get("first_step_ms").asDouble()).isPositive();
            assertThat(e.get("cached_step_ms").asDouble()).isPositive();
        }
        assertThat(r.err()).contains("bench: 3 sequences of skills a,b,none, rep 1/1");
        assertThat(run("bench", cmf.toString(), "--skills", "a").err()).contains("--skills needs --batch");
        assertThat(run("bench", cmf.toString(), "--batch", "2", "--skills", "zzz").err()).contains("unknown skill 'zzz'");
        assertThat(run("bench", cmf.toString(), "--batch", "2", "--skills", "a", "--skill", "b").err()).contains("not with --skill");
    }

    @Test
    void tableAndErrors() {
        String cmf = Fixtures.require("cmf/refconv/llama-Q8_2F.cmf").toString();
        Run r = run("bench", cmf, "-t", "1", "-p", "8", "-n", "2", "-r", "1", "--warmup", "0");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).contains("| pp8 ").contains("| tg2 ").contains("q8_2f");
        Run bad = run("bench", cmf, "--reps", "0");
        assertThat(bad.code()).isEqualTo(1);
        assertThat(bad.err()).contains("--reps must be >= 1");
        Run nothing = run("bench", cmf, "-p", "0", "-n", "0");
        assertThat(nothing.code()).isEqualTo(1);
        assertThat(nothing.out()).isEmpty();
        assertThat(nothing.err().strip()).isEqualTo("cmf: error: nothing to measure: --prompt-tokens and --gen-tokens are both 0");
        Run missing = run("bench", "/nonexistent/model.cmf");
        assertThat(missing.code()).isEqualTo(1);
        assertThat(missing.err()).startsWith("cmf: error:");
    }
}
