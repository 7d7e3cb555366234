package dev.cmf4j.convert.quant;

import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.format.DType;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The per-dtype error bounds stated in docs/QUANTIZATION.md, checked on every matrix of the nine
 * fixture models: relative RMSE = RMS(w − dequant(quant(w))) / RMS(w), per tensor.
 */
class FixtureModelErrorTest {
    static final List<String> MODELS = List.of("llama", "qwen3", "gemma3", "gemma4", "gemma4_moe", "qwen3_next", "gpt_oss",
            "qwen3_moe", "qwen3_e2e");

    /** Documented bounds on the worst tensor. */
    static final Map<DType, Double> BOUND = Map.of(
            DType.F16, 3e-4, DType.BF16, 2.5e-3, DType.Q8_ROW, 0.012, DType.Q8_2F, 0.012,
            DType.Q4_BLOCK, 0.13, DType.Q4TP, 0.13);

    @Test void everyMatrixOfEveryFixtureModelIsWithinItsBound() {
        Map<DType, double[]> worst = new EnumMap<>(DType.class);   // {max, sum, count}
        for (String model : MODELS) {
            Path src = Fixtures.require("models/" + model + "/model.safetensors");
            try (SafetensorsReader st = SafetensorsReader.open(src)) {
                for (SafetensorsReader.Tensor t : st.tensors()) {
                    if (t.rank() < 2 || !t.dtype().isFloat()) continue;
                    float[] w = st.readFloats(t.name());
                    for (DType q : BOUND.keySet()) {
                        Quantizer qz = Quantizer.of(q);
                        if (!qz.supports(t.shape())) continue;
                        if (model.equals("qwen3_e2e") && t.dtype() == SafetensorsReader.Dtype.BF16 && q == DType.BF16) {
                            assertThat(java.util.Arrays.equals(Codec.roundTrip(q, w, t.shape()), w)).as("bf16 source is exact in bf16").isTrue();
                            continue;
                        }
                        double e = Codec.relRmse(w, Codec.roundTrip(q, w, t.shape()));
                        assertThat(e).as("%s %s %s", model, t.name(), q.label).isLessThanOrEqualTo(BOUND.get(q));
                        double[] a = worst.computeIfAbsent(q, k -> new double[3]);
                        a[0] = Math.max(a[0], e);
                        a[1] += e;
                        a[2]++;
                    }
                }
            }
        }
        worst.forEach((q, a) -> System.out.printf("%-8s %4d matrices: worst rel RMSE %.3e, mean %.3e (bound %.1e)%n",
                q.label, (int) a[2], a[0], a[1] / a[2], BOUND.get(q)));
    }
}
