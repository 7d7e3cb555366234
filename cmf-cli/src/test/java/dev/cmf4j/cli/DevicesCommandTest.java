package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.backend.cpu.CpuInfo;
import dev.cmf4j.backend.vulkan.VulkanContext;
import dev.cmf4j.backend.vulkan.VulkanDeviceInfo;
import dev.cmf4j.backend.vulkan.VulkanUnavailableException;
import org.junit.jupiter.api.Test;

import java.util.List;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code cmf devices}: lists what the loaders find (in CI: lavapipe, no NVIDIA driver) and says why a kind has none; its
 * Vulkan list is the one the engine's discovery returns.
 */
class DevicesCommandTest {
    @Test void listsTheVulkanDevicesAndSaysWhyCudaHasNone() throws Exception {
        List<VulkanDeviceInfo> want;
        try {
            want = VulkanContext.list();
        } catch (VulkanUnavailableException e) {
            want = List.of();
        }
        Run r = run("devices", "--json");
        assertThat(r.code()).as(r.err()).isZero();
        JsonNode j = new ObjectMapper().readTree(r.out());
        CpuInfo cpu = CpuInfo.host();
        assertThat(j.get("cpu").get("processors").asInt()).isEqualTo(cpu.processors());
        assertThat(j.get("cpu").get("name").asText()).isEqualTo(cpu.name());
        assertThat(j.get("cpu").get("vector_bits").asInt()).isEqualTo(cpu.vectorBits());
        assertThat(j.get("cpu").get("features")).hasSize(cpu.features().size());
        assertThat(j.get("cuda").size() > 0 || j.has("cuda_unavailable")).as(r.out()).isTrue();
        assertThat(j.get("vulkan")).hasSize(want.size());
        if (want.isEmpty()) assertThat(j.get("vulkan_unavailable").asText()).isNotBlank();
        for (int i = 0; i < want.size(); i++) {
            assertThat(j.get("vulkan").get(i).get("name").asText()).isEqualTo(want.get(i).name());
            assertThat(j.get("vulkan").get(i).get("subgroup_size").asInt()).isEqualTo(want.get(i).subgroupSize());
        }
        Run text = run("devices");
        assertThat(text.code()).as(text.err()).isZero();
        assertThat(text.out()).startsWith("cpu       " + cpu.describe() + "\n");
        for (VulkanDeviceInfo d : want) assertThat(text.out()).contains("vulkan " + d.index()).contains(d.name());
        if (j.has("cuda_unavailable")) assertThat(text.out()).contains("cuda      none: ");
    }
}
