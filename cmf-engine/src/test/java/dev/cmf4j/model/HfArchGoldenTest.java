package dev.cmf4j.model;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.convert.HfArch;
import dev.cmf4j.convert.HfConfig;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The engine on the HF fixture weights as they are (HF tensor names and layouts: fused qwen3_next
 * projections, 3-D gpt-oss / gemma4 experts) with the arch block the converter derives from config.json.
 */
class HfArchGoldenTest {

    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "qwen3_moe", "gemma3", "gemma4", "gemma4_moe", "gpt_oss", "qwen3_next"})
    void matchesTransformers(String model) throws Exception {
        Path dir = Fixtures.require("models/" + model);
        ObjectNode header = JsonNodeFactory.instance.objectNode();
        header.set("arch", HfArch.fromConfig(HfConfig.read(dir.resolve("config.json"))));
        Golden.Result r;
        try (SafetensorsReader st = SafetensorsReader.open(dir.resolve("model.safetensors"))) {
            Weights w = TestFiles.weights(st);
            ModelSpec spec = SpecBuilder.build(header, w);
            r = Golden.load(dir).check(new Graph(spec, w, new CpuBackend(new CpuMatMul(), CpuBackend.pool(), null)), 64);
        }
        System.out.println(model + ": " + r);
        double tol = model.equals("qwen3_next") ? 2e-3 : 1e-3;
        assertThat(r.logitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        assertThat(r.stepLogitsMaxDiff()).as(r.toString()).isLessThanOrEqualTo(tol);
        assertThat(r.greedyMatches()).as(r.toString()).isTrue();
    }
}
