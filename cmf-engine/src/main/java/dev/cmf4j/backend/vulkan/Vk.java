package dev.cmf4j.backend.vulkan;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The Vulkan calls this backend makes, through {@code java.lang.foreign} to the loader {@code libvulkan.so.1} (which
 * exports every core 1.0 and 1.1 command and dispatches device commands to the driver). Dispatchable handles
 * (instance, physical device, device, queue, command buffer) are addresses; non-dispatchable ones (buffers, memory,
 * pipelines, …) are 64-bit integers, a Java long. Struct offsets are those of {@code vulkan_core.h} on a 64-bit
 * platform (checked against the header with offsetof when written). Every wrapper that returns a {@code VkResult}
 * checks it and throws a {@link VulkanException} naming the call.
 */
final class Vk {
    static final Linker LINKER = Linker.nativeLinker();
    static final ValueLayout.OfInt U32 = ValueLayout.JAVA_INT;
    static final ValueLayout.OfLong U64 = ValueLayout.JAVA_LONG;
    static final java.lang.foreign.AddressLayout PTR = ValueLayout.ADDRESS;

    /** Where the loader is looked for: its soname first, then the usual install places. */
    static final List<String> LIBRARY = List.of("libvulkan.so.1", "/usr/lib/x86_64-linux-gnu/libvulkan.so.1",
            "/usr/lib/aarch64-linux-gnu/libvulkan.so.1", "/usr/lib64/libvulkan.so.1", "/usr/local/lib/libvulkan.so.1",
            "libvulkan.1.dylib", "vulkan-1");

    // VkStructureType values
    static final int ST_APPLICATION_INFO = 0, ST_INSTANCE_CREATE_INFO = 1, ST_DEVICE_QUEUE_CREATE_INFO = 2,
            ST_DEVICE_CREATE_INFO = 3, ST_SUBMIT_INFO = 4, ST_MEMORY_ALLOCATE_INFO = 5, ST_FENCE_CREATE_INFO = 8,
            ST_BUFFER_CREATE_INFO = 12, ST_SHADER_MODULE_CREATE_INFO = 16, ST_PIPELINE_SHADER_STAGE_CREATE_INFO = 18,
            ST_COMPUTE_PIPELINE_CREATE_INFO = 29, ST_PIPELINE_LAYOUT_CREATE_INFO = 30,
            ST_DESCRIPTOR_SET_LAYOUT_CREATE_INFO = 32, ST_DESCRIPTOR_POOL_CREATE_INFO = 33,
            ST_DESCRIPTOR_SET_ALLOCATE_INFO = 34, ST_WRITE_DESCRIPTOR_SET = 35, ST_COMMAND_POOL_CREATE_INFO = 39,
            ST_QUERY_POOL_CREATE_INFO = 11, ST_COMMAND_BUFFER_ALLOCATE_INFO = 40,
            ST_PIPELINE_EXECUTABLE_FEATURES = 1000269000, ST_PIPELINE_INFO = 1000269001, ST_PIPELINE_EXECUTABLE_INFO = 1000269003,
            ST_PIPELINE_EXECUTABLE_STATISTIC = 1000269004, ST_COMMAND_BUFFER_BEGIN_INFO = 42, ST_MEMORY_BARRIER = 46,
            ST_PHYSICAL_DEVICE_FEATURES_2 = 1000059000, ST_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001,
            ST_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES = 1000082000, ST_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES = 1000094000,
            ST_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES = 1000168000, ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES = 1000196000,
            ST_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES = 1000211000, ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES = 1000506000,
            ST_COOPERATIVE_MATRIX_PROPERTIES = 1000506001;
    /** VkComponentTypeKHR and VkScopeKHR values of the cooperative-matrix shapes. */
    static final int COMPONENT_FLOAT16 = 0, COMPONENT_FLOAT32 = 1, SCOPE_SUBGROUP = 3;

    static final int MEMORY_DEVICE_LOCAL = 1, MEMORY_HOST_VISIBLE = 2, MEMORY_HOST_COHERENT = 4, MEMORY_HOST_CACHED = 8;
    static final int QUEUE_COMPUTE = 2;
    /** VkResult VK_NOT_READY (vkGetFenceStatus of an unsignalled fence). */
    static final int NOT_READY = 1;
    static final int BUFFER_TRANSFER_SRC = 1, BUFFER_TRANSFER_DST = 2, BUFFER_STORAGE = 0x20;
    static final int DESCRIPTOR_STORAGE_BUFFER = 7, STAGE_COMPUTE = 0x20, BIND_POINT_COMPUTE = 1;
    static final int PIPELINE_STAGE_COMPUTE = 0x800, PIPELINE_STAGE_TRANSFER = 0x1000, PIPELINE_STAGE_BOTTOM = 0x2000, PIPELINE_STAGE_HOST = 0x4000;
    static final int QUERY_TYPE_TIMESTAMP = 2, QUERY_RESULT_64 = 1, QUERY_RESULT_WAIT = 2;
    static final int ACCESS_SHADER_READ = 0x20, ACCESS_SHADER_WRITE = 0x40, ACCESS_TRANSFER_READ = 0x800, ACCESS_TRANSFER_WRITE = 0x1000,
            ACCESS_HOST_READ = 0x2000;
    static final long WHOLE_SIZE = -1L;
    static final int DEVICE_TYPE_OTHER = 0, DEVICE_TYPE_INTEGRATED = 1, DEVICE_TYPE_DISCRETE = 2, DEVICE_TYPE_VIRTUAL = 3, DEVICE_TYPE_CPU = 4;

    static int apiVersion(int major, int minor) { return (major << 22) | (minor << 12); }

    static String versionString(int v) { return (v >>> 22) + "." + ((v >>> 12) & 0x3ff) + "." + (v & 0xfff); }

    private final Map<String, MethodHandle> h;

    /** The binding table: symbol and C signature (VkResult and uint32_t are ints, VkDeviceSize and handles longs). */
    private static final Map<String, FunctionDescriptor> TABLE = table();

    private static Map<String, FunctionDescriptor> table() {
        Map<String, FunctionDescriptor> t = new HashMap<>();
        t.put("vkEnumerateInstanceVersion", FunctionDescriptor.of(U32, PTR));
        t.put("vkEnumerateInstanceExtensionProperties", FunctionDescriptor.of(U32, PTR, PTR, PTR));
        t.put("vkCreateInstance", FunctionDescriptor.of(U32, PTR, PTR, PTR));
        t.put("vkDestroyInstance", FunctionDescriptor.ofVoid(PTR, PTR));
        t.put("vkEnumeratePhysicalDevices", FunctionDescriptor.of(U32, PTR, PTR, PTR));
        t.put("vkGetPhysicalDeviceProperties2", FunctionDescriptor.ofVoid(PTR, PTR));
        t.put("vkGetPhysicalDeviceFeatures2", FunctionDescriptor.ofVoid(PTR, PTR));
        t.put("vkGetPhysicalDeviceQueueFamilyProperties", FunctionDescriptor.ofVoid(PTR, PTR, PTR));
        t.put("vkGetPhysicalDeviceMemoryProperties", FunctionDescriptor.ofVoid(PTR, PTR));
        t.put("vkEnumerateDeviceExtensionProperties", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkCreateDevice", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyDevice", FunctionDescriptor.ofVoid(PTR, PTR));
        t.put("vkGetDeviceQueue", FunctionDescriptor.ofVoid(PTR, U32, U32, PTR));
        t.put("vkDeviceWaitIdle", FunctionDescriptor.of(U32, PTR));
        t.put("vkCreateBuffer", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyBuffer", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkGetBufferMemoryRequirements", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkAllocateMemory", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkFreeMemory", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkBindBufferMemory", FunctionDescriptor.of(U32, PTR, U64, U64, U64));
        t.put("vkMapMemory", FunctionDescriptor.of(U32, PTR, U64, U64, U64, U32, PTR));
        t.put("vkUnmapMemory", FunctionDescriptor.ofVoid(PTR, U64));
        t.put("vkCreateShaderModule", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyShaderModule", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkCreateDescriptorSetLayout", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyDescriptorSetLayout", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkCreatePipelineLayout", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyPipelineLayout", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkCreateComputePipelines", FunctionDescriptor.of(U32, PTR, U64, U32, PTR, PTR, PTR));
        t.put("vkDestroyPipeline", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkCreateDescriptorPool", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyDescriptorPool", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkAllocateDescriptorSets", FunctionDescriptor.of(U32, PTR, PTR, PTR));
        t.put("vkUpdateDescriptorSets", FunctionDescriptor.ofVoid(PTR, U32, PTR, U32, PTR));
        t.put("vkCreateCommandPool", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyCommandPool", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkAllocateCommandBuffers", FunctionDescriptor.of(U32, PTR, PTR, PTR));
        t.put("vkFreeCommandBuffers", FunctionDescriptor.ofVoid(PTR, U64, U32, PTR));
        t.put("vkBeginCommandBuffer", FunctionDescriptor.of(U32, PTR, PTR));
        t.put("vkEndCommandBuffer", FunctionDescriptor.of(U32, PTR));
        t.put("vkResetCommandBuffer", FunctionDescriptor.of(U32, PTR, U32));
        t.put("vkCmdBindPipeline", FunctionDescriptor.ofVoid(PTR, U32, U64));
        t.put("vkCmdBindDescriptorSets", FunctionDescriptor.ofVoid(PTR, U32, U64, U32, U32, PTR, U32, PTR));
        t.put("vkCmdPushConstants", FunctionDescriptor.ofVoid(PTR, U64, U32, U32, U32, PTR));
        t.put("vkCmdDispatch", FunctionDescriptor.ofVoid(PTR, U32, U32, U32));
        t.put("vkCmdPipelineBarrier", FunctionDescriptor.ofVoid(PTR, U32, U32, U32, U32, PTR, U32, PTR, U32, PTR));
        t.put("vkCmdCopyBuffer", FunctionDescriptor.ofVoid(PTR, U64, U64, U32, PTR));
        t.put("vkCmdFillBuffer", FunctionDescriptor.ofVoid(PTR, U64, U64, U64, U32));
        t.put("vkQueueSubmit", FunctionDescriptor.of(U32, PTR, U32, PTR, U64));
        t.put("vkCreateFence", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyFence", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkWaitForFences", FunctionDescriptor.of(U32, PTR, U32, PTR, U32, U64));
        t.put("vkResetFences", FunctionDescriptor.of(U32, PTR, U32, PTR));
        t.put("vkGetFenceStatus", FunctionDescriptor.of(U32, PTR, U64));
        t.put("vkGetDeviceProcAddr", FunctionDescriptor.of(PTR, PTR, PTR));
        t.put("vkGetInstanceProcAddr", FunctionDescriptor.of(PTR, PTR, PTR));
        // timestamps (-Dcmf.vulkan.profile=true)
        t.put("vkCreateQueryPool", FunctionDescriptor.of(U32, PTR, PTR, PTR, PTR));
        t.put("vkDestroyQueryPool", FunctionDescriptor.ofVoid(PTR, U64, PTR));
        t.put("vkCmdResetQueryPool", FunctionDescriptor.ofVoid(PTR, U64, U32, U32));
        t.put("vkCmdWriteTimestamp", FunctionDescriptor.ofVoid(PTR, U32, U64, U32));
        t.put("vkGetQueryPoolResults", FunctionDescriptor.of(U32, PTR, U64, U32, U32, U64, PTR, U64, U32));
        return Map.copyOf(t);
    }

    /** The commands every product records and submits, bound once for exact (unboxed) invocation. */
    private final MethodHandle resetCommandBuffer, beginCommandBuffer, endCommandBuffer, cmdBindPipeline, cmdBindDescriptorSets,
            cmdPushConstants, cmdDispatch, cmdPipelineBarrier, cmdCopyBuffer, queueSubmit, waitForFences, resetFences, getFenceStatus;

    private Vk(Map<String, MethodHandle> h) {
        this.h = h;
        resetCommandBuffer = h.get("vkResetCommandBuffer"); beginCommandBuffer = h.get("vkBeginCommandBuffer");
        endCommandBuffer = h.get("vkEndCommandBuffer"); cmdBindPipeline = h.get("vkCmdBindPipeline");
        cmdBindDescriptorSets = h.get("vkCmdBindDescriptorSets"); cmdPushConstants = h.get("vkCmdPushConstants");
        cmdDispatch = h.get("vkCmdDispatch"); cmdPipelineBarrier = h.get("vkCmdPipelineBarrier"); cmdCopyBuffer = h.get("vkCmdCopyBuffer");
        queueSubmit = h.get("vkQueueSubmit"); waitForFences = h.get("vkWaitForFences"); resetFences = h.get("vkResetFences");
        getFenceStatus = h.get("vkGetFenceStatus");
    }

    private static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException r) return r;
        if (t instanceof Error e) throw e;
        return new VulkanException(t.toString(), t);
    }

    private static void ok(int r, String call) {
        if (r != 0) throw new VulkanException(call + " failed: " + resultName(r));
    }

    void resetCommandBuffer(MemorySegment cb) {
        try { ok((int) resetCommandBuffer.invokeExact(cb, 0), "vkResetCommandBuffer"); } catch (Throwable t) { throw rethrow(t); }
    }

    void beginCommandBuffer(MemorySegment cb, MemorySegment info) {
        try { ok((int) beginCommandBuffer.invokeExact(cb, info), "vkBeginCommandBuffer"); } catch (Throwable t) { throw rethrow(t); }
    }

    void endCommandBuffer(MemorySegment cb) {
        try { ok((int) endCommandBuffer.invokeExact(cb), "vkEndCommandBuffer"); } catch (Throwable t) { throw rethrow(t); }
    }

    void cmdBindPipeline(MemorySegment cb, long pipeline) {
        try { cmdBindPipeline.invokeExact(cb, BIND_POINT_COMPUTE, pipeline); } catch (Throwable t) { throw rethrow(t); }
    }

    void cmdBindDescriptorSet(MemorySegment cb, long layout, MemorySegment oneSet) {
        try {
            cmdBindDescriptorSets.invokeExact(cb, BIND_POINT_COMPUTE, layout, 0, 1, oneSet, 0, MemorySegment.NULL);
        } catch (Throwable t) { throw rethrow(t); }
    }

    void cmdPushConstants(MemorySegment cb, long layout, int bytes, MemorySegment values) {
        try { cmdPushConstants.invokeExact(cb, layout, STAGE_COMPUTE, 0, bytes, values); } catch (Throwable t) { throw rethrow(t); }
    }

    void cmdDispatch(MemorySegment cb, int x, int y, int z) {
        try { cmdDispatch.invokeExact(cb, x, y, z); } catch (Throwable t) { throw rethrow(t); }
    }

    /** A global memory barrier ({@code barrier}: a VkMemoryBarrier) from {@code src} stages to {@code dst} stages. */
    void cmdBarrier(MemorySegment cb, int src, int dst, MemorySegment barrier) {
        try {
            cmdPipelineBarrier.invokeExact(cb, src, dst, 0, 1, barrier, 0, MemorySegment.NULL, 0, MemorySegment.NULL);
        } catch (Throwable t) { throw rethrow(t); }
    }

    /** One region ({@code region}: a VkBufferCopy) from {@code src} to {@code dst}. */
    void cmdCopyBuffer(MemorySegment cb, long src, long dst, MemorySegment region) {
        try { cmdCopyBuffer.invokeExact(cb, src, dst, 1, region); } catch (Throwable t) { throw rethrow(t); }
    }

    void queueSubmit(MemorySegment queue, MemorySegment submitInfo, long fence) {
        try { ok((int) queueSubmit.invokeExact(queue, 1, submitInfo, fence), "vkQueueSubmit"); } catch (Throwable t) { throw rethrow(t); }
    }

    /**
     * How long a fence is polled before a blocking wait (-Dcmf.vulkan.spinMicros, 0: block at once): a decode step takes
     * milliseconds, and a blocking wait may be woken late (docs/VULKAN.md, session 21).
     */
    static final long FENCE_SPIN_NANOS = 1000L * Math.max(0, Long.getLong("cmf.vulkan.spinMicros", 20_000));

    /** Waits without a timeout for the one fence in {@code fences} (polling it for up to FENCE_SPIN_NANOS first), then resets it. */
    void waitAndReset(MemorySegment device, MemorySegment fences) {
        try {
            if (FENCE_SPIN_NANOS > 0) {
                long fence = fences.get(ValueLayout.JAVA_LONG, 0), until = System.nanoTime() + FENCE_SPIN_NANOS;
                int status;
                while ((status = (int) getFenceStatus.invokeExact(device, fence)) == NOT_READY && System.nanoTime() < until) Thread.onSpinWait();
                if (status != NOT_READY) ok(status, "vkGetFenceStatus");
            }
            ok((int) waitForFences.invokeExact(device, 1, fences, 1, -1L), "vkWaitForFences");
            ok((int) resetFences.invokeExact(device, 1, fences), "vkResetFences");
        } catch (Throwable t) { throw rethrow(t); }
    }

    private static Vk loaded;
    private static String loadFailure;

    /** The loader's bindings, opened once per process; a clear {@link VulkanUnavailableException} when there is none. */
    static synchronized Vk load() {
        if (loaded != null) return loaded;
        if (loadFailure != null) throw new VulkanUnavailableException(loadFailure);
        List<String> tried = new ArrayList<>();
        SymbolLookup lib = open(LIBRARY, tried);
        if (lib == null) {
            loadFailure = "no Vulkan loader (libvulkan.so.1) found: tried " + tried
                    + "; install it (Debian/Ubuntu: apt-get install libvulkan1, plus your GPU's Vulkan driver, or mesa-vulkan-drivers)";
            throw new VulkanUnavailableException(loadFailure);
        }
        Map<String, MethodHandle> out = new HashMap<>();
        List<String> missing = new ArrayList<>();
        TABLE.forEach((name, fd) -> lib.find(name).ifPresentOrElse(s -> out.put(name, LINKER.downcallHandle(s, fd)), () -> missing.add(name)));
        if (!missing.isEmpty()) {
            loadFailure = "the Vulkan loader lacks " + missing + " (a loader older than Vulkan 1.1?)";
            throw new VulkanUnavailableException(loadFailure);
        }
        return loaded = new Vk(Map.copyOf(out));
    }

    private static SymbolLookup open(List<String> names, List<String> tried) {
        for (String n : names) {
            try {
                if (n.contains("/")) {
                    Path p = Path.of(n);
                    if (!Files.exists(p)) continue;
                    return SymbolLookup.libraryLookup(p, Arena.global());
                }
                return SymbolLookup.libraryLookup(n, Arena.global());
            } catch (IllegalArgumentException | IllegalCallerException e) {
                tried.add(n);
            }
        }
        return null;
    }

    /** A device command the loader does not export (an extension's), bound through vkGetDeviceProcAddr. */
    MethodHandle deviceCommand(MemorySegment device, String name, FunctionDescriptor fd) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment p = (MemorySegment) h.get("vkGetDeviceProcAddr").invokeWithArguments(device, a.allocateFrom(name));
            if (p.equals(MemorySegment.NULL)) throw new VulkanException(name + ": the device does not have it");
            return LINKER.downcallHandle(p, fd);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new VulkanException(name + ": " + t, t);
        }
    }

    /** An instance command the loader does not export (an extension's), bound through vkGetInstanceProcAddr; null when absent. */
    MethodHandle instanceCommand(MemorySegment instance, String name, FunctionDescriptor fd) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment p = (MemorySegment) h.get("vkGetInstanceProcAddr").invokeWithArguments(instance, a.allocateFrom(name));
            return p.equals(MemorySegment.NULL) ? null : LINKER.downcallHandle(p, fd);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new VulkanException(name + ": " + t, t);
        }
    }

    /** Calls {@code name} and returns its VkResult without checking it. */
    int result(String name, Object... args) {
        try {
            return (int) h.get(name).invokeWithArguments(args);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new VulkanException(name + ": " + t, t);
        }
    }

    /** Calls {@code name}, failing unless it returned VK_SUCCESS (or VK_INCOMPLETE, a partial listing). */
    void check(String name, Object... args) {
        int r = result(name, args);
        if (r != 0 && r != 5) throw new VulkanException(name + " failed: " + resultName(r));
    }

    /** Calls a command that returns nothing. */
    void call(String name, Object... args) {
        try {
            h.get(name).invokeWithArguments(args);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new VulkanException(name + ": " + t, t);
        }
    }

    static String resultName(int r) {
        return switch (r) {
            case 0 -> "VK_SUCCESS";
            case 2 -> "VK_TIMEOUT";
            case 5 -> "VK_INCOMPLETE";
            case -1 -> "VK_ERROR_OUT_OF_HOST_MEMORY";
            case -2 -> "VK_ERROR_OUT_OF_DEVICE_MEMORY";
            case -3 -> "VK_ERROR_INITIALIZATION_FAILED";
            case -4 -> "VK_ERROR_DEVICE_LOST";
            case -5 -> "VK_ERROR_MEMORY_MAP_FAILED";
            case -6 -> "VK_ERROR_LAYER_NOT_PRESENT";
            case -7 -> "VK_ERROR_EXTENSION_NOT_PRESENT";
            case -8 -> "VK_ERROR_FEATURE_NOT_PRESENT";
            case -9 -> "VK_ERROR_INCOMPATIBLE_DRIVER";
            case -10 -> "VK_ERROR_TOO_MANY_OBJECTS";
            case -13 -> "VK_ERROR_UNKNOWN";
            default -> "VkResult " + r;
        };
    }

    /** A zeroed struct of {@code size} bytes whose first field, sType, is {@code sType}. */
    static MemorySegment struct(Arena a, long size, int sType) {
        MemorySegment s = a.allocate(size, 8);
        s.set(U32, 0, sType);
        return s;
    }

    /** A zeroed struct of {@code size} bytes with no sType. */
    static MemorySegment plain(Arena a, long size) { return a.allocate(size, 8); }

    /** A NUL-terminated char array field read as text. */
    static String chars(MemorySegment s, long offset, int max) {
        byte[] b = s.asSlice(offset, max).toArray(ValueLayout.JAVA_BYTE);
        int n = 0;
        while (n < b.length && b[n] != 0) n++;
        return new String(b, 0, n, java.nio.charset.StandardCharsets.UTF_8);
    }

    /** A {@code const char* const*} array of {@code names} in {@code a}. */
    static MemorySegment names(Arena a, List<String> names) {
        MemorySegment arr = a.allocate(MemoryLayout.sequenceLayout(Math.max(1, names.size()), PTR));
        for (int i = 0; i < names.size(); i++) arr.setAtIndex(PTR, i, a.allocateFrom(names.get(i)));
        return arr;
    }

    /** A single-handle out parameter. */
    static MemorySegment out(Arena a) { return a.allocate(U64); }
}
