package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code cmf bench --gpus 2} on two mock GPUs, in a JVM of its own (the engine's mock driver, {@code mockcuda.c}, as
 * the process's CUDA driver and NCCL through {@code -Dcmf.cuda.driver} and {@code -Dcmf.nccl}, two devices through
 * {@code MOCK_CUDA_DEVICES}): which split it takes and why, in its table and in {@code --json}; the default takes tensor
 * parallelism where the model splits so and the layer split where it is refused (qwen3_next's gated delta nets).
 */
class GpusSplitTest {
    @TempDir static Path tmp;
    static Path lib;

    @BeforeAll static void buildMock() throws Exception {
        lib = dev.cmf4j.testkit.MockCudaLibrary.build(tmp);
    }

    record Result(int code, String out, String err) {}

    /** {@code cmf ARGS} in a JVM of its own on two mock GPUs. */
    static Result cmf(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--add-modules", "jdk.incubator.vector", "--enable-native-access=ALL-UNNAMED", "-Dcmf.relaunched=true",
                "-Dcmf.cuda.driver=" + lib, "-Dcmf.nccl=" + lib, "-cp", System.getProperty("java.class.path"), "dev.cmf4j.cli.Cmf"));
        cmd.addAll(List.of(args));
        Path out = tmp.resolve("out.txt"), err = tmp.resolve("err.txt");
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(err.toFile());
        pb.environment().put("MOCK_CUDA_DEVICES", "2");
        pb.environment().put("CMF_NVRTC", lib.toString());   // the mock stands in for NVRTC too, should a fatbin be stale
        Process p = pb.start();
        if (!p.waitFor(300, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("cmf " + String.join(" ", args) + " did not finish in 300 s");
        }
        return new Result(p.exitValue(), Files.readString(out), Files.readString(err));
    }

    static String model(String name) { return Fixtures.require("cmf/refconv/" + name).toString(); }

    static final String[] SHORT = {"-p", "8", "-n", "3", "-r", "1", "--warmup", "0", "--gpus", "2", "--device", "cuda"};

    static String[] args(String... head) {
        List<String> a = new ArrayList<>(List.of(head));
        a.addAll(List.of(SHORT));
        return a.toArray(String[]::new);
    }

    @Test void benchSaysWhichSplitItTakesAndWhy() throws Exception {
        Result tensor = cmf(args("bench", model("llama-Q8_2F.cmf")));
        assertThat(tensor.code()).as(tensor.err()).isZero();
        assertThat(tensor.out()).contains("split: tensor over 2 GPUs (the model splits by heads, MLP rows and vocabulary")
                .contains("cuda×2").contains("pp8").contains("tg3");

        Result layers = cmf(args("bench", model("qwen3_next-F32.cmf"), "--json"));
        assertThat(layers.code()).as(layers.err()).isZero();
        JsonNode j = new ObjectMapper().readTree(layers.out());
        assertThat(j.get("gpus").asInt()).isEqualTo(2);
        assertThat(j.get("split").asText()).isEqualTo("layers");
        assertThat(j.get("split_reason").asText()).startsWith("tensor parallel is refused for this model: ").contains("gated delta net");
        assertThat(j.get("prefill_tokens_per_s").asDouble()).isPositive();
        assertThat(j.get("decode_tokens_per_s").asDouble()).isPositive();

        Result asked = cmf(args("bench", model("llama-Q8_2F.cmf"), "--split", "layers", "--json"));
        assertThat(asked.code()).as(asked.err()).isZero();
        JsonNode a = new ObjectMapper().readTree(asked.out());
        assertThat(a.get("split").asText()).isEqualTo("layers");
        assertThat(a.get("split_reason").asText()).isEqualTo("--split layers");
    }

    /** The bundled model (it has a tokenizer), found above the working directory. */
    static String bundled() {
        for (Path d = Path.of("").toAbsolutePath(); d != null; d = d.getParent())
            if (Files.isRegularFile(d.resolve("models/default.cmf"))) return d.resolve("models/default.cmf").toString();
        throw new IllegalStateException("models/default.cmf not found above " + Path.of("").toAbsolutePath());
    }

    /** {@code run --greedy} over two GPUs prints what it prints on the CPU, either split, and says which split it took. */
    @Test void runOverTwoGpusGivesTheCpusGreedyText() throws Exception {
        String[] plain = {"run", bundled(), "-p", "The ls command", "--greedy", "-n", "8"};
        Run cpu = Run.run(plain);
        assertThat(cpu.code()).as(cpu.err()).isZero();
        assertThat(cpu.out().strip()).isNotEmpty();
        for (String split : new String[] {"tensor", "layers"}) {
            List<String> a = new ArrayList<>(List.of(plain));
            a.addAll(List.of("--gpus", "2", "--device", "cuda", "--split", split));
            Result gpus = cmf(a.toArray(String[]::new));
            assertThat(gpus.code()).as(gpus.err()).isZero();
            assertThat(gpus.out()).as(split).isEqualTo(cpu.out());
            assertThat(gpus.err()).contains("cmf: --gpus 2: split by " + split + " (--split " + split + ")");
        }
    }

    @Test void tensorAskedOfAModelItRefusesIsOneLine() throws Exception {
        Result r = cmf(args("bench", model("qwen3_next-F32.cmf"), "--split", "tensor"));
        assertThat(r.code()).isNotZero();
        assertThat(r.err()).contains("cmf: error: ").contains("gated delta net");
        assertThat(r.err().lines().filter(l -> l.startsWith("cmf: error")).count()).isEqualTo(1);
    }
}
