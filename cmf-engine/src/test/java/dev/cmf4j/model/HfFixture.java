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

import java.nio.file.Path;

/**
 * A fixture model run straight from its HF folder (weights read in place from model.safetensors, arch
 * block derived by the converter's {@link HfArch}): for tests of runtime behaviour that do not need a
 * CMF file. Close it to unmap.
 */
public record HfFixture(String name, Path dir, SafetensorsReader reader, ModelSpec spec, Graph graph) implements AutoCloseable {

    public static HfFixture open(String name) {
        Path dir = Fixtures.require("models/" + name);
        ObjectNode header = JsonNodeFactory.instance.objectNode();
        header.set("arch", HfArch.fromConfig(HfConfig.read(dir.resolve("config.json"))));
        SafetensorsReader r = SafetensorsReader.open(dir.resolve("model.safetensors"));
        Weights w = TestFiles.weights(r);
        ModelSpec spec = SpecBuilder.build(header, w);
        return new HfFixture(name, dir, r, spec, new Graph(spec, w, new CpuBackend(new CpuMatMul(), CpuBackend.pool(), null)));
    }

    @Override public void close() { reader.close(); }
}
