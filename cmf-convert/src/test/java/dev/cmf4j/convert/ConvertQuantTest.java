package dev.cmf4j.convert;

import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The end-to-end quantized convert path: every tensor lands in the dtype the policy names, and its
 * dequantized values stay within the documented error bound of the f32 source (docs/CONVERT.md):
 * relative RMSE = ||deq - src|| / ||src|| per tensor. For q8_2f the result is also compared with the
 * reference converter's files, tensor by tensor.
 */
class ConvertQuantTest {
    @TempDir Path tmp;

    /** Documented per-tensor bounds on relative RMSE (docs/CONVERT.md, "Error bounds"). */
    static final Map<DType, Double> BOUND = Map.of(
            DType.F32, 0.0, DType.F16, 4e-4, DType.BF16, 3e-3,
            DType.Q8_ROW, 0.010, DType.Q8_2F, 0.010, DType.Q4_BLOCK, 0.13, DType.Q4TP, 0.13);

    private static float[] values(TensorEntry e) {
        return Dequantizers.of(e.dtype()).all(e.data(), e.shape());
    }

    static double sse(float[] a, float[] b) {
        double s = 0;
        for (int i = 0; i < a.length; i++) {
            double d = (double) a[i] - b[i];
            s += d * d;
        }
        return s;
    }

    static double norm2(float[] a) {
        double s = 0;
        for (float v : a) s += (double) v * v;
        return s;
    }

    @ParameterizedTest
    @CsvSource({
            "llama,q8_row", "llama,q8_2f", "llama,q4_block", "llama,q4tp", "llama,f16", "llama,bf16",
            "gemma4,q8_2f", "gemma4,q4tp", "gemma4_moe,q4_block", "gpt_oss,q8_row", "gpt_oss,q4tp",
            "qwen3_next,q4_block", "qwen3_moe,q4tp", "gemma3,q8_2f", "qwen3_e2e,q8_row"})
    void quantizedTensorsWithinBounds(String model, String quant) {
        Path src = Fixtures.require("models/" + model);
        Path exact = ConvertHfTest.convert(src, tmp.resolve("f32.cmf"), TensorPolicy.Mode.F32, List.of());
        TensorPolicy.Mode mode = TensorPolicy.Mode.parse(quant);
        Path q = ConvertHfTest.convert(src, tmp.resolve("q.cmf"), mode, List.of());
        Map<String, Double> worst = new TreeMap<>();
        try (CmfFile ref = CmfFile.open(exact); CmfFile f = CmfFile.open(q)) {
            assertThat(f.verify()).isEmpty();
            ConvertHfTest.assertLayout(f);
            assertThat(f.header().quantType()).isEqualTo(quant.toUpperCase(Locale.ROOT));
            assertThat(f.tensors()).hasSameSizeAs(ref.tensors());
            TensorPolicy policy = new TensorPolicy(mode, List.of());
            for (TensorEntry e : f.tensors()) {
                TensorEntry r = ref.tensor(e.name());
                DType want = policy.choose(new SourceTensor(e.name(), e.shape(), "F32", "", (o, d, off, len) -> {}));
                assertThat(e.dtype()).as(e.name()).isEqualTo(want);
                float[] src32 = values(r), deq = values(e);
                double n = norm2(src32);
                double rel = n == 0 ? Math.sqrt(sse(deq, src32)) : Math.sqrt(sse(deq, src32) / n);
                assertThat(rel).as("%s %s %s relative RMSE", model, e.name(), e.dtype().label).isLessThanOrEqualTo(BOUND.get(e.dtype()));
                worst.merge(e.dtype().label, rel, Math::max);
            }
        }
        System.out.printf(Locale.ROOT, "quant %s %s worst relative RMSE per dtype: %s%n", model, quant, worst);
    }

    /**
     * q8_2f: each tensor of ours is at least as close to the f32 source as the reference converter's
     * (cmf/refconv/*-Q8_2F.cmf), measured as squared error over the tensor.
     */
    @ParameterizedTest
    @ValueSource(strings = {"qwen3", "llama", "qwen3_moe", "qwen3_next"})
    void q8TwoFieldAtLeastAsCloseAsReference(String model) {
        Path src = Fixtures.require("models/" + model);
        Path exact = ConvertHfTest.convert(src, tmp.resolve("f32.cmf"), TensorPolicy.Mode.F32, List.of());
        Path ours = ConvertHfTest.convert(src, tmp.resolve("q.cmf"), TensorPolicy.Mode.Q8_2F, List.of());
        double sumOurs = 0, sumRef = 0;
        try (CmfFile x = CmfFile.open(exact); CmfFile o = CmfFile.open(ours);
             CmfFile r = CmfFile.open(Fixtures.require("cmf/refconv/" + model + "-Q8_2F.cmf"))) {
            assertThat(o.tensors().stream().map(TensorEntry::name).toList())
                    .isEqualTo(r.tensors().stream().map(TensorEntry::name).toList());
            for (TensorEntry re : r.tensors()) {
                float[] truth = values(x.tensor(re.name()));
                double eo = sse(values(o.tensor(re.name())), truth), er = sse(values(re), truth);
                assertThat(eo).as("%s %s: ours (%s) vs reference (%s)", model, re.name(), o.tensor(re.name()).dtype().label,
                        re.dtype().label).isLessThanOrEqualTo(er * (1 + 1e-9) + 1e-30);
                sumOurs += eo;
                sumRef += er;
            }
        }
        System.out.printf(Locale.ROOT, "q8_2f %s: total squared error ours %.4g, reference %.4g (ratio %.3f)%n", model, sumOurs, sumRef,
                sumOurs / sumRef);
    }
}
