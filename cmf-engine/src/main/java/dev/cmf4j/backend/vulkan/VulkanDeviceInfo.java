package dev.cmf4j.backend.vulkan;

import java.util.List;
import java.util.Locale;

/**
 * What one Vulkan physical device says about itself, read at discovery ({@code cmf devices}) and when a backend opens it.
 *
 * @param index               its place in {@code vkEnumeratePhysicalDevices}' list ({@code -Dcmf.vulkan.device=N})
 * @param type                discrete, integrated, virtual, cpu (a software rasterizer such as lavapipe) or other
 * @param heaps               each memory heap: bytes and whether it is device-local
 * @param subgroupSize        the default subgroup (warp, wave) width
 * @param subgroupArithmetic  whether compute shaders may add and shuffle across a subgroup (the shaders need both)
 * @param computeQueueFamily  the first queue family with compute, -1 when none has
 * @param maxStorageBufferRange the largest storage-buffer binding in bytes (a weight larger than this is split by rows)
 * @param maxAllocationSize   the largest single allocation (maintenance3)
 * @param maxGroupCount       the most workgroups a dispatch may have in x, y, z
 * @param cooperativeMatrix   whether it has VK_KHR_cooperative_matrix
 * @param coopMatmul          whether it can run matmul_coop.comp: the extension's feature, f16 × f16 → f32 matrices of
 *                            16 × 16 × 16 at subgroup scope, f16 arithmetic, the Vulkan memory model, 32-invocation subgroups
 * @param portabilitySubset   whether it is a portability implementation (MoltenVK), which must enable VK_KHR_portability_subset
 * @param timestampPeriod     nanoseconds per timestamp tick, 0 when the compute queue family writes no timestamps
 * @param shaderFloat64       whether shaders may compute in 64-bit floats (embryo.comp's sums need them; enabled when there)
 */
public record VulkanDeviceInfo(int index, String name, String type, int vendorId, int deviceId, String apiVersion,
                               String driverName, String driverInfo, List<Heap> heaps, int subgroupSize, boolean subgroupArithmetic,
                               boolean shaderFloat16, boolean shaderInt8, boolean cooperativeMatrix, boolean coopMatmul, int computeQueueFamily,
                               long maxStorageBufferRange, long maxAllocationSize, int[] maxGroupCount,
                               boolean portabilitySubset, float timestampPeriod, boolean shaderFloat64) {

    /** One memory heap. */
    public record Heap(long bytes, boolean deviceLocal) {}

    /** A software device (lavapipe, SwiftShader): correct but slower than the CPU backend, so {@code auto} passes it by. */
    public boolean software() { return type.equals("cpu"); }

    /** Bytes of the largest device-local heap. */
    public long deviceLocalBytes() {
        return heaps.stream().filter(Heap::deviceLocal).mapToLong(Heap::bytes).max().orElse(0);
    }

    static String typeName(int t) {
        return switch (t) {
            case Vk.DEVICE_TYPE_INTEGRATED -> "integrated";
            case Vk.DEVICE_TYPE_DISCRETE -> "discrete";
            case Vk.DEVICE_TYPE_VIRTUAL -> "virtual";
            case Vk.DEVICE_TYPE_CPU -> "cpu";
            default -> "other";
        };
    }

    /** One line for people. */
    public String describe() {
        return String.format(Locale.ROOT, "%s (%s, vendor 0x%04x, %s%s, Vulkan %s, %.1f GiB device-local, subgroup %d%s, f16 %s, int8 %s, f64 %s, cooperative matrix %s%s)",
                name, type, vendorId, driverName.isEmpty() ? "driver ?" : driverName, driverInfo.isEmpty() ? "" : " " + driverInfo,
                apiVersion, deviceLocalBytes() / (double) (1L << 30), subgroupSize, subgroupArithmetic ? "" : " without compute subgroup adds and shuffles: unusable",
                yes(shaderFloat16), yes(shaderInt8), yes(shaderFloat64),
                yes(cooperativeMatrix), !cooperativeMatrix ? "" : coopMatmul ? " (f16 16x16x16: f16 and int8 prompt products take it; -Dcmf.vulkan.coopmat=false does not)" : " (no f16 16x16x16 subgroup shape the prompt products use)");
    }

    private static String yes(boolean b) { return b ? "yes" : "no"; }
}
