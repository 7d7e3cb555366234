package dev.cmf4j.backend.vulkan;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.OpResult;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.format.DType;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.List;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The Vulkan device's products against the CPU's (the per-op harness, {@link VulkanOpCheck}) on the machine's Vulkan
 * device: lavapipe in CI. Bounds: 2e-6·√cols of the float64 reference's largest magnitude, f32 sums in another order.
 */
class VulkanOpsTest {
    static VulkanContext ctx;

    @BeforeAll static void device() { ctx = VulkanTesting.context(); }

    @Test void discoveryDescribesTheDevice() {
        List<VulkanDeviceInfo> all = VulkanContext.list();
        System.out.println("vulkan devices: " + all.stream().map(VulkanDeviceInfo::describe).toList());
        assertThat(all).isNotEmpty();
        VulkanDeviceInfo d = ctx.info();
        assertThat(all.get(d.index()).name()).isEqualTo(d.name());
        assertThat(d.computeQueueFamily()).isGreaterThanOrEqualTo(0);
        assertThat(d.subgroupSize()).isPositive();
        assertThat(d.subgroupArithmetic()).as("the shaders add across subgroups").isTrue();
        assertThat(d.maxStorageBufferRange()).isGreaterThanOrEqualTo(1 << 27);   // the spec's minimum
        assertThat(d.maxGroupCount()[0]).isGreaterThanOrEqualTo(65535);
        assertThat(d.heaps()).isNotEmpty();
        assertThat(d.apiVersion()).matches("1\\.[1-9].*");
        assertThat(d.describe()).startsWith(d.name()).contains("subgroup " + d.subgroupSize());
    }

    /**
     * {@code copies}: as on a discrete GPU, activations through device-local twins copied in and out by the submission
     * and weights uploaded through a staging buffer (lavapipe's memory is all host-visible, so this is forced).
     */
    @ParameterizedTest @ValueSource(booleans = {false, true})
    void everyDtypeAndShapeMatchesTheCpu(boolean copies) {
        List<OpResult> results;
        try (VulkanMatMul m = new VulkanMatMul(ctx, CpuBackend.newMatMul(), VulkanMatMul.PART_CAP, copies)) {
            results = VulkanOpCheck.run(m, true);
        }
        results.forEach(r -> System.out.printf("%-28s %-22s error %.2e (bound %.1e)%n", r.op(), r.shape(), r.error(), r.bound()));
        assertThat(results).hasSizeGreaterThan((VulkanOpCheck.DTYPES.length - 1) * VulkanOpCheck.QUICK.length * 2);
        assertThat(results.stream().map(OpResult::op).toList()).contains("matvec_q4_block vs cpu", "matvec_q4tp vs float64");
        assertThat(results.stream().map(OpResult::op).toList()).contains("rmsnorm offset", "rope", "attention window 4", "glu gelu", "copy", "bias",
                "attention sinks", "split attention sinks", "folded attention sinks",
                "per-layer inputs offset", "per-layer gate gelu_tanh", "layer scalar", "expert scales", "norm add offset", "folded attention over an earlier layer's caches: caches untouched",
                "moe route top-k then softmax: ids (ties to the lower index)", "moe route softmax top-k renormalised: weights", "moe gate/up q8_2f", "moe down q4_block", "moe gate/up q4tp", "moe down q8_2f by expert = by pick, bitwise",
                "moe down bf16", "f16 cache copy: halves, bitwise", "f16 cache folded attention: cache row halves");
        assertThat(results.stream().filter(r -> !r.ok()).toList()).isEmpty();
    }

    /** The f16 KV cache's pipelines alone (also among everyDtypeAndShapeMatchesTheCpu's): appends bitwise, attention against float64. */
    @Test void f16KvCacheOperatorsMatchFloat64() {
        List<OpResult> results;
        try (VulkanMatMul m = new VulkanMatMul(ctx, CpuBackend.newMatMul())) {
            results = VulkanOpCheck.kvHalf(m, new SplittableRandom(16));
        }
        results.forEach(r -> System.out.printf("%-50s %-40s error %.2e (bound %.1e)%n", r.op(), r.shape(), r.error(), r.bound()));
        assertThat(results.stream().map(OpResult::op).toList()).contains("f16 cache copy: halves, bitwise", "f16 rope into cache: halves of E's keys, bitwise",
                "f16 cache attention window 4", "f16 cache split attention", "f16 cache folded attention: cache row halves");
        assertThat(results.stream().filter(r -> !r.ok()).toList()).isEmpty();
    }

    /** A tensor split over several buffers by rows (as one beyond the device's storage-buffer range is), and views into it. */
    @ParameterizedTest @ValueSource(booleans = {false, true})
    void rowSplitBuffersAndRowViewsGiveTheSameProducts(boolean copies) {
        SplittableRandom r = new SplittableRandom(5);
        MatMul cpu = CpuBackend.newMatMul();
        MatMul reference = CpuBackend.reference().matmul();
        for (DType dt : VulkanOpCheck.DTYPES) {
            int rows = 37, cols = dt == DType.Q4_BLOCK || dt == DType.Q4TP ? 64 : 24, tokens = 3;
            Matrix w = Matrix.of("w", dt, VulkanOpCheck.randomPayload(r, dt, rows, cols), rows, cols);
            float[] x = gauss(r, tokens * cols);
            // parts of at most 5 rows (q8_2f: 5·24 + 5·4 + 24·4 + 4 bytes), so every product crosses several buffers
            long cap = dt == DType.Q4_BLOCK || dt == DType.Q4TP ? 5L * 64 + 8 + 40 + 15 : 5L * cols * 4 + 5 * 4 + 4L * cols + 4 + 15;
            try (VulkanMatMul m = new VulkanMatMul(ctx, cpu, cap, copies)) {
                for (Matrix v : List.of(w, w.slice(0, 4, false), w.slice(3, 20, false), w.slice(36, 1, false)))
                    for (int n : new int[] {tokens, 1}) {   // a chunk, and one token (the decode pipelines)
                        float[] got = new float[n * v.outDim()], want = new float[got.length];
                        m.apply(v, x, n, got);
                        reference.apply(v, x, n, want);
                        assertThat(maxDiff(got, want)).as(dt.label + " rows " + v.firstRow() + "+" + v.rows() + ", " + n + " tokens").isLessThan(1e-4);
                    }
                assertThat(m.deviceBytes()).as("uploaded once for every view").isLessThan(2L * (rows * cols * 4L + 8L * rows + 4L * cols));
            }
        }
    }

    /** Shared products: the device's and the fallback's (an input-major view) in one call, each as its own apply would give. */
    @Test void sharedProductsMixDeviceAndFallback() {
        SplittableRandom r = new SplittableRandom(6);
        MatMul cpu = CpuBackend.newMatMul();
        int cols = 40, tokens = 10;
        Matrix a = Matrix.of("a", DType.Q8_2F, VulkanOpCheck.randomPayload(r, DType.Q8_2F, 50, cols), 50, cols);
        Matrix b = Matrix.of("b", DType.F16, VulkanOpCheck.randomPayload(r, DType.F16, 7, cols), 7, cols);
        Matrix c = Matrix.of("c", DType.F32, VulkanOpCheck.randomPayload(r, DType.F32, cols, 9), cols, 9).slice(0, cols, true);
        assertThat(VulkanMatMul.supports(c)).isFalse();
        float[] x = gauss(r, tokens * cols);
        Matrix[] ws = {a, c, b};
        float[][] got = {new float[tokens * 50], new float[tokens * 9], new float[tokens * 7]};
        try (VulkanMatMul m = new VulkanMatMul(ctx, cpu)) {
            m.applyShared(ws, x, tokens, got);
            long bytes = m.deviceBytes();
            m.applyShared(ws, x, tokens, got);
            assertThat(m.deviceBytes()).as("weights stay resident").isEqualTo(bytes);
        }
        MatMul reference = CpuBackend.reference().matmul();
        for (int i = 0; i < ws.length; i++) {
            float[] want = new float[got[i].length];
            reference.apply(ws[i], x, tokens, want);
            assertThat(maxDiff(got[i], want)).as(ws[i].name()).isLessThan(1e-4);
        }
    }

    static float[] gauss(SplittableRandom r, int n) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = (float) r.nextGaussian();
        return v;
    }

    static double maxDiff(float[] a, float[] b) {
        double d = 0;
        for (int i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
        return Double.isNaN(d) ? Double.POSITIVE_INFINITY : d;
    }
}
