package dev.cmf4j.api;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.convert.Converter;
import dev.cmf4j.convert.ModelSource;
import dev.cmf4j.convert.Sources;
import dev.cmf4j.convert.TensorPolicy;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Every fixture model through the API, ids in, transformers' greedy ids out: each folder under {@code models/}
 * (converted here at f32), and the reference converter's f32 files under {@code cmf/refconv/}.
 */
class FixtureModelsTest {
    @TempDir static Path tmp;

    /** Every fixture model folder (a new one is picked up without a change here). */
    static Stream<String> models() throws IOException {
        try (Stream<Path> dirs = Files.list(Fixtures.require("models"))) {
            List<String> names = dirs.filter(d -> Files.isRegularFile(d.resolve("golden.json")) && Files.isRegularFile(d.resolve("model.safetensors")))
                    .map(d -> d.getFileName().toString()).sorted().toList();
            assertThat(names).as("the fixture models").hasSizeGreaterThanOrEqualTo(9);
            return names.stream();
        }
    }

    @ParameterizedTest
    @MethodSource("models")
    void greedyIdsEqualTransformers(String name) throws Exception {
        Path dir = Fixtures.require("models/" + name);
        Path cmf = tmp.resolve(name + ".cmf");
        try (ModelSource s = Sources.open(dir)) {
            Converter.convert(s, cmf, Converter.Options.of(new TensorPolicy(TensorPolicy.Mode.F32, List.of())).withThreads(2));
        }
        try (CmfModel m = Cmf.open(cmf, ModelOptions.defaults().withContextLength(128))) {
            checkGreedy(m, dir, name);
            if (!m.hasTokenizer())
                assertThatThrownBy(() -> m.newChat().complete(List.of(Message.user("hi")), Sampling.greedy()))
                        .isInstanceOf(InferenceException.class).hasMessageContaining("carries no tokenizer");
        }
    }

    /** The files the reference converter (cortiq-engine) wrote, opened as they are. */
    @ParameterizedTest
    @ValueSource(strings = {"qwen3", "qwen3_next"})
    void referenceConverterFilesGiveTransformersGreedyIds(String name) throws Exception {
        try (CmfModel m = Cmf.open(Fixtures.require("cmf/refconv/" + name + "-F32.cmf"), ModelOptions.defaults().withContextLength(128))) {
            checkGreedy(m, Fixtures.require("models/" + name), name);
        }
    }

    /**
     * {@code withDevice("vulkan")}: the weight products on the Vulkan device (lavapipe in CI, which .ci/run installs; the
     * test skips where there is none unless CMF_CI=1), transformers' greedy ids still.
     */
    @Test
    void vulkanDeviceGivesTransformersGreedyIds() throws Exception {
        try {
            dev.cmf4j.backend.vulkan.VulkanContext.get();
        } catch (dev.cmf4j.backend.vulkan.VulkanUnavailableException e) {
            if ("1".equals(System.getenv("CMF_CI"))) throw e;
            org.junit.jupiter.api.Assumptions.abort("no Vulkan device: " + e.getMessage());
        }
        try (CmfModel m = Cmf.open(Fixtures.require("cmf/refconv/qwen3-F32.cmf"), ModelOptions.defaults().withDevice("vulkan").withContextLength(128))) {
            checkGreedy(m, Fixtures.require("models/qwen3"), "qwen3 on vulkan");
        }
    }

    static void checkGreedy(CmfModel m, Path dir, String name) throws IOException {
        JsonNode golden = new ObjectMapper().readTree(dir.resolve("golden.json").toFile());
        int[] prompt = ints(golden.get("input_ids")), expected = ints(golden.get("greedy_ids"));
        Reply r = m.generate(prompt, Sampling.greedy().withMaxTokens(expected.length).withIgnoreEos(true), null);
        assertThat(r.tokens()).as(name).containsExactly(expected);
    }

    static int[] ints(JsonNode a) {
        return StreamSupport.stream(a.spliterator(), false).mapToInt(JsonNode::asInt).toArray();
    }
}
