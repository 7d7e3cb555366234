package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cpu.kernel.KernelMatMul;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** What of the CUDA backend can be checked without any native library: table, layouts, fallback, errors, cache. */
class CudaBindingTest {
    /** A Vulkan opener that finds no loader, for the device-choice checks. */
    static final java.util.function.Supplier<dev.cmf4j.backend.vulkan.VulkanContext> NO_VULKAN =
            () -> { throw new dev.cmf4j.backend.vulkan.VulkanUnavailableException("no Vulkan loader: test"); };


    static Map<String, FunctionDescriptor> table() {
        return CudaDriver.TABLE.stream().collect(Collectors.toMap(NativeLib.Binding::symbol, NativeLib.Binding::descriptor));
    }

    @Test void bindsTheVersionedDriverSymbolsNeverTheOldAbiNames() {
        Set<String> names = table().keySet();
        // cuda.h #defines these public names to the versioned symbols; the plain symbols keep old ABIs
        for (String v : List.of("cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemsetD8_v2",
                "cuMemAllocHost_v2", "cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRelease_v2", "cuEventDestroy_v2",
                "cuEventElapsedTime_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2")) {
            assertThat(names).contains(v);
            assertThat(names).doesNotContain(v.substring(0, v.length() - 3));
        }
        assertThat(names).doesNotContain("cuCtxCreate", "cuGraphInstantiate", "cuStreamDestroy", "cuCtxDestroy");
    }

    @Test void layoutsFollowTheCDeclarations() {
        Map<String, FunctionDescriptor> t = table();
        t.forEach((name, d) -> assertThat(d.returnLayout()).as(name + " returns CUresult").contains(ValueLayout.JAVA_INT));
        // CUdeviceptr is unsigned long long: a Java long, never an address
        assertThat(t.get("cuMemFree_v2").argumentLayouts()).containsExactly(ValueLayout.JAVA_LONG);
        assertThat(t.get("cuMemcpyHtoD_v2").argumentLayouts().get(0)).isEqualTo(ValueLayout.JAVA_LONG);
        assertThat(t.get("cuMemcpyDtoH_v2").argumentLayouts().get(1)).isEqualTo(ValueLayout.JAVA_LONG);
        // cuLaunchKernel: f, grid xyz, block xyz, shared bytes, stream, kernelParams, extra
        List<MemoryLayout> l = t.get("cuLaunchKernel").argumentLayouts();
        assertThat(l).hasSize(11);
        assertThat(l.subList(1, 8)).allMatch(x -> x.equals(ValueLayout.JAVA_INT));
        assertThat(l.get(0)).isInstanceOf(java.lang.foreign.AddressLayout.class);
        assertThat(NativeLib.SIZE_T.byteSize()).isEqualTo(8);
        assertThat(Nvrtc.TABLE.stream().map(NativeLib.Binding::symbol)).contains("nvrtcCompileProgram", "nvrtcGetCUBIN");
    }

    @Test void kernelArgumentSlotsMatchTheKernelSource() {
        String src = CudaContext.kernelSource();
        for (String k : List.of("matvec_f32", "matvec_bf16", "matvec_f16", "matvec_q8"))
            assertThat(src).contains("MATVEC(" + k + ",");
        Pattern signature = Pattern.compile("__launch_bounds__\\((\\d+)\\) NAME\\(([^)]*)\\)");
        Matcher m = signature.matcher(src.replace("\\\n", " "));
        assertThat(m.find()).as("MATVEC macro signature").isTrue();
        // the q4 kernels launch through the same argument block
        String q4 = KernelSource.resource(CudaMatMul.Q4_KERNELS).source();
        for (String k : List.of("matvec_q4_block", "matvec_q4tp")) assertThat(q4).contains("MATVEC_Q4(" + k + ",");
        Matcher m4 = signature.matcher(q4.replace("\\\n", " "));
        assertThat(m4.find()).as("MATVEC_Q4 macro signature").isTrue();
        assertThat(m4.group(1)).isEqualTo(m.group(1));
        assertThat(m4.group(2).replaceAll("\\s+", " ")).isEqualTo(m.group(2).replaceAll("\\s+", " "));
        assertThat(Integer.parseInt(m.group(1))).isEqualTo(ArgPack.BLOCK);
        String[] params = m.group(2).trim().split("\\s*,\\s*");
        assertThat(params).hasSize(ArgPack.SIZES.length);
        long off = 0;
        for (int i = 0; i < params.length; i++) {
            int size = params[i].contains("*") || params[i].startsWith("long long") ? 8 : params[i].startsWith("int ") ? 4 : -1;
            assertThat(size).as(params[i]).isEqualTo(ArgPack.SIZES[i]);
            off = (off + size - 1) / size * size; // natural alignment
            assertThat(ArgPack.OFFSETS[i]).as("slot " + i).isEqualTo(off);
            off += size;
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment s = a.allocate(56, 8);
            ArgPack.write(s, 1, 2, 3, 4, 5, 6, 7, 8);
            for (int i = 0; i < 6; i++) assertThat(s.get(ValueLayout.JAVA_LONG, ArgPack.OFFSETS[i])).isEqualTo(i + 1);
            assertThat(s.get(ValueLayout.JAVA_INT, ArgPack.OFFSETS[6])).isEqualTo(7);
            assertThat(s.get(ValueLayout.JAVA_INT, ArgPack.OFFSETS[7])).isEqualTo(8);
        }
        assertThat(ArgPack.gridX(1)).isEqualTo(1);
        assertThat(ArgPack.gridX(8)).isEqualTo(1);
        assertThat(ArgPack.gridX(9)).isEqualTo(2);
    }

    @Test void missingDriverIsAClearUnavailableError() {
        assertThatThrownBy(() -> CudaDriver.load(List.of("/nonexistent/libcuda.so.1")))
                .isInstanceOf(CudaUnavailableException.class)
                .hasMessageContaining("no NVIDIA driver").hasMessageContaining("/nonexistent/libcuda.so.1")
                .hasMessageContaining("--device cpu");
    }

    @Test void autoFallsBackToCpuAndCudaFailsClearly() {
        CudaUnavailableException none = new CudaUnavailableException("no NVIDIA driver: test");
        try (Backend b = DeviceChoice.AUTO.open(() -> { throw none; }, NO_VULKAN)) {
            assertThat(b.device()).isEqualTo("cpu");
            assertThat(b.matmul()).isInstanceOf(KernelMatMul.class);
            assertThat(b.description()).startsWith("cpu").contains("no NVIDIA driver");
            assertThat(b.takeNotes()).singleElement().asString().contains("no usable GPU (no NVIDIA driver: test; vulkan: no Vulkan loader: test)");
            assertThat(b.takeNotes()).isEmpty();
        }
        assertThatThrownBy(() -> DeviceChoice.CUDA.open(() -> { throw none; }, NO_VULKAN)).isSameAs(none);
        try (Backend cpu = DeviceChoice.CPU.open(() -> { throw new AssertionError("cpu must not open the GPU"); },
                () -> { throw new AssertionError("cpu must not open Vulkan"); })) {
            assertThat(cpu.matmul()).isInstanceOf(KernelMatMul.class);
            assertThat(cpu.takeNotes()).isEmpty();
            assertThat(cpu.runsWholeModels()).isFalse();
        }
        assertThat(DeviceChoice.parse("CUDA")).isEqualTo(DeviceChoice.CUDA);
        assertThat(DeviceChoice.parse("auto")).isEqualTo(DeviceChoice.AUTO);
        assertThatThrownBy(() -> DeviceChoice.parse("tpu")).hasMessageContaining("expected cuda, vulkan, cpu or auto");
        assertThat(DeviceChoice.parse("Vulkan")).isEqualTo(DeviceChoice.VULKAN);
    }

    @Test void errorsNameTheCallAndStatus() {
        CudaException e = new CudaException("cuMemAlloc_v2", 2, null, null);
        assertThat(e).hasMessage("cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)");
        assertThat(e.status()).isEqualTo(2);
        assertThat(new CudaException("cuLaunchKernel", 700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access"))
                .hasMessage("cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access");
        assertThat(CudaException.knownName(12345)).isEqualTo("CUDA_ERROR_12345");
    }

    /** A fatbin container as nvcc writes it, with one small fake payload per image ("sm_90", "compute_80", ...). */
    static byte[] fakeFatbin(String... labels) {
        java.nio.ByteBuffer b = java.nio.ByteBuffer.allocate(16 + labels.length * 80).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        b.putInt(Fatbin.MAGIC).putShort((short) 1).putShort((short) 16).putLong(labels.length * 80L);
        for (String l : labels) {
            int at = b.position();
            b.putShort((short) (l.startsWith("compute_") ? 1 : 2)).putShort((short) 0x101).putInt(64).putLong(16);
            b.putInt(at + 28, Integer.parseInt(l.substring(l.indexOf('_') + 1)));
            b.position(at + 64);
            b.put(l.getBytes(java.nio.charset.StandardCharsets.US_ASCII)).position(at + 80);
        }
        return b.array();
    }

    @Test void fatbinIndexPicksWhatTheDriverWouldRun() {
        Fatbin f = Fatbin.parse(fakeFatbin("compute_80", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"));
        assertThat(f.labels()).containsExactly("compute_80", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120");
        assertThat(f.choose(9, 0).label()).isEqualTo("sm_90");
        assertThat(f.choose(8, 7).label()).isEqualTo("sm_86");     // same major, nearest lower minor
        assertThat(f.choose(12, 1).label()).isEqualTo("sm_120");
        assertThat(f.choose(10, 3).label()).isEqualTo("sm_100");
        assertThat(f.choose(11, 0).label()).isEqualTo("compute_80"); // no SASS of major 11: the PTX, JIT-compiled
        assertThat(f.choose(7, 5)).isNull();                         // older than every image
        assertThatThrownBy(() -> Fatbin.parse(new byte[] {1, 2, 3})).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("not a fatbin");
        byte[] cut = java.util.Arrays.copyOf(fakeFatbin("sm_90", "sm_80"), 100);
        assertThatThrownBy(() -> Fatbin.parse(cut)).isInstanceOf(IllegalArgumentException.class).hasMessageContaining("100 bytes");
        byte[] overrun = fakeFatbin("sm_90");
        overrun[16 + 8] = 127;   // the entry's payload size runs past the container
        assertThatThrownBy(() -> Fatbin.parse(overrun)).isInstanceOf(IllegalArgumentException.class).hasMessageContaining("overruns");
    }

    @Test void aShippedFatbinIsUsedOnlyForTheSourceItWasBuiltFrom() {
        byte[] fb = fakeFatbin("sm_90");
        String src = "extern \"C\" __global__ void k() {}\n";
        Map<String, String> stamp = dev.cmf4j.backend.BuildStamp.parse("# comment\nsource k.cu\nsource-sha256 " + dev.cmf4j.backend.BuildStamp.sourceSha256(src)
                + "\nfatbin-sha256 " + dev.cmf4j.backend.BuildStamp.sha256(fb) + "\nnvcc 13.0.88\n");
        assertThat(new KernelSource("k.cu", src, fb, stamp).fatbinProblem()).isNull();
        assertThat(new KernelSource("k.cu", src.replace("\n", "\r\n"), fb, stamp).fatbinProblem()).as("CRLF checkout").isNull();
        assertThat(new KernelSource("k.cu", src + "// edit\n", fb, stamp).fatbinProblem())
                .startsWith("k.fatbin is stale (built from k.cu sha256 " + dev.cmf4j.backend.BuildStamp.sourceSha256(src).substring(0, 12) + "…");
        assertThat(new KernelSource("k.cu", src, null, Map.of()).fatbinProblem()).isEqualTo("no k.fatbin is shipped");
        assertThat(new KernelSource("k.cu", src, fb, Map.of()).fatbinProblem()).isEqualTo("k.fatbin has no k.fatbin.stamp");
        assertThat(new KernelSource("k.cu", src, fakeFatbin("sm_80"), stamp).fatbinProblem()).contains("damaged");
        assertThat(CudaContext.forceNvrtc(null)).isFalse();
        assertThat(CudaContext.forceNvrtc("auto")).isFalse();
        assertThat(CudaContext.forceNvrtc("FORCE")).isTrue();
        assertThatThrownBy(() -> CudaContext.forceNvrtc("always")).hasMessage("-Dcmf.cuda.nvrtc=always: expected auto or force");
    }

    @Test void kernelCacheKeysOnEverythingThatChangesTheImage(@TempDir Path dir) {
        String k = KernelCache.key("src", List.of("--gpu-architecture=sm_90"), "nvrtc 13.0", "sm_90");
        assertThat(KernelCache.key("src2", List.of("--gpu-architecture=sm_90"), "nvrtc 13.0", "sm_90")).isNotEqualTo(k);
        assertThat(KernelCache.key("src", List.of("--gpu-architecture=sm_89"), "nvrtc 13.0", "sm_90")).isNotEqualTo(k);
        assertThat(KernelCache.key("src", List.of("--gpu-architecture=sm_90"), "nvrtc 13.1", "sm_90")).isNotEqualTo(k);
        assertThat(KernelCache.key("src", List.of("--gpu-architecture=sm_90"), "nvrtc 13.0", "sm_100")).isNotEqualTo(k);
        KernelCache c = new KernelCache(dir.resolve("c"));
        assertThat(c.get(k)).isNull();
        c.put(k, new byte[] {1, 2, 3});
        assertThat(c.get(k)).containsExactly(1, 2, 3);
    }
}
