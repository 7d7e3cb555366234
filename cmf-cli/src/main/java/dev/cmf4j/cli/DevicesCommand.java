package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.cpu.CpuInfo;
import dev.cmf4j.backend.cuda.CudaDriver;
import dev.cmf4j.backend.cuda.CudaException;
import dev.cmf4j.backend.cuda.CudaUnavailableException;
import dev.cmf4j.backend.vulkan.VulkanContext;
import dev.cmf4j.backend.vulkan.VulkanDeviceInfo;
import dev.cmf4j.backend.vulkan.VulkanException;
import dev.cmf4j.backend.vulkan.VulkanUnavailableException;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code cmf devices [--json]}: the devices {@code --device} can name on this machine: the CPU, each NVIDIA GPU the CUDA
 * driver lists (and, where there are GPUs, the NCCL library their collectives would use), each Vulkan device the Vulkan
 * loader lists (its index is {@code -Dcmf.vulkan.device=N}), and why a kind has none. Opens no model and allocates
 * nothing on a device.
 */
@Command(name = "devices", mixinStandardHelpOptions = true,
        description = {"List the devices --device can use: the CPU, NVIDIA GPUs (cuda) and Vulkan devices (vulkan), or why there are none.",
                "--device auto takes a CUDA GPU, else a Vulkan GPU (never a software one such as lavapipe), else the CPU."})
public final class DevicesCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Option(names = "--json", description = "print one JSON object instead of text")
    boolean json;

    /** One CUDA device. */
    record Cuda(int ordinal, String name, int ccMajor, int ccMinor, long memory) {}

    @Override public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        List<Cuda> cuda = new ArrayList<>();
        String cudaWhy = null;
        try {
            CudaDriver cu = CudaDriver.get();
            for (int i = 0; i < cu.deviceCount(); i++) {
                int d = cu.device(i);
                cuda.add(new Cuda(i, cu.deviceName(d), cu.attribute(CudaDriver.ATTR_CC_MAJOR, d), cu.attribute(CudaDriver.ATTR_CC_MINOR, d),
                        cu.totalMemory(d)));
            }
            if (cuda.isEmpty()) cudaWhy = "the NVIDIA driver lists no GPU";
        } catch (CudaUnavailableException | CudaException e) {
            cudaWhy = e.getMessage();
        }
        String ncclVersion = null, ncclLibrary = null, ncclWhy = null;   // the collectives between GPUs, asked where there are GPUs
        if (!cuda.isEmpty())
            try {
                dev.cmf4j.backend.cuda.Nccl nccl = dev.cmf4j.backend.cuda.Nccl.load();
                ncclVersion = nccl.version();
                ncclLibrary = nccl.library();
            } catch (CudaUnavailableException | CudaException e) {
                ncclWhy = e.getMessage();
            }
        List<VulkanDeviceInfo> vulkan = List.of();
        String vulkanWhy = null;
        try {
            vulkan = VulkanContext.list();
            if (vulkan.isEmpty()) vulkanWhy = "the Vulkan loader lists no device (install your GPU's Vulkan driver, or mesa-vulkan-drivers)";
        } catch (VulkanUnavailableException | VulkanException e) {
            vulkanWhy = e.getMessage();
        }
        CpuInfo cpu = CpuInfo.host();
        if (json) {
            ObjectMapper om = new ObjectMapper();
            ObjectNode o = om.createObjectNode();
            ObjectNode h = o.putObject("cpu").put("name", cpu.name()).put("identity", cpu.identity())
                    .put("processors", cpu.processors()).put("vector_bits", cpu.vectorBits());
            cpu.features().forEach(h.putArray("features")::add);
            ArrayNode c = o.putArray("cuda");
            for (Cuda d : cuda)
                c.addObject().put("index", d.ordinal()).put("name", d.name()).put("compute_capability", d.ccMajor() + "." + d.ccMinor())
                        .put("memory_bytes", d.memory());
            if (cudaWhy != null) o.put("cuda_unavailable", cudaWhy);
            if (ncclVersion != null) o.putObject("nccl").put("version", ncclVersion).put("library", ncclLibrary);
            if (ncclWhy != null) o.put("nccl_unavailable", ncclWhy);
            ArrayNode v = o.putArray("vulkan");
            for (VulkanDeviceInfo d : vulkan) {
                ObjectNode n = v.addObject().put("index", d.index()).put("name", d.name()).put("type", d.type())
                        .put("vendor_id", d.vendorId()).put("driver", d.driverName()).put("driver_info", d.driverInfo())
                        .put("api_version", d.apiVersion()).put("device_local_bytes", d.deviceLocalBytes())
                        .put("subgroup_size", d.subgroupSize()).put("subgroup_arithmetic", d.subgroupArithmetic()).put("shader_float16", d.shaderFloat16()).put("shader_int8", d.shaderInt8()).put("shader_float64", d.shaderFloat64())
                        .put("cooperative_matrix", d.cooperativeMatrix()).put("cooperative_matrix_prompt", d.coopMatmul()).put("compute_queue", d.computeQueueFamily() >= 0)
                        .put("software", d.software());
                n.put("max_storage_buffer_bytes", d.maxStorageBufferRange());
            }
            if (vulkanWhy != null) o.put("vulkan_unavailable", vulkanWhy);
            out.println(om.writerWithDefaultPrettyPrinter().writeValueAsString(o));
        } else {
            out.println("cpu       " + cpu.describe());
            for (Cuda d : cuda)
                out.printf(Locale.ROOT, "cuda %-4d %s (sm_%d%d, %.1f GiB)%n", d.ordinal(), d.name(), d.ccMajor(), d.ccMinor(), d.memory() / (double) (1L << 30));
            if (cudaWhy != null) out.println("cuda      none: " + cudaWhy);
            if (ncclVersion != null) out.printf(Locale.ROOT, "nccl      %s (%s): collectives between the GPUs%n", ncclVersion, ncclLibrary);
            if (ncclWhy != null) out.println("nccl      none: " + ncclWhy);
            for (VulkanDeviceInfo d : vulkan)
                out.printf(Locale.ROOT, "vulkan %-2d %s%s%n", d.index(), d.describe(),
                        d.software() ? " [software: --device vulkan takes it, auto does not]"
                                : d.computeQueueFamily() < 0 ? " [no compute queue: unusable]" : "");
            if (vulkanWhy != null) out.println("vulkan    none: " + vulkanWhy);
        }
        out.flush();
        return 0;
    }
}
