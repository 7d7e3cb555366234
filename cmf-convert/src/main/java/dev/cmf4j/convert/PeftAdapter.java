package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * A PEFT LoRA adapter folder ({@code adapter_config.json} + {@code adapter_model.safetensors}) read as low-rank deltas
 * per target weight: for a target Linear W [out, in], y = W·x + scale·B·(A·x), A = {@code lora_A} [r, in],
 * B = {@code lora_B} [out, r], scale = alpha/r (alpha/√r with {@code use_rslora}), r and alpha per module as peft
 * resolves {@code rank_pattern}/{@code alpha_pattern}. Weights are named as in the base checkpoint
 * ({@code base_model.model.X.lora_A.weight} targets {@code X.weight}). DoRA, fan-in-fan-out layouts, trained biases
 * and {@code modules_to_save} are refused with a message, not approximated.
 *
 * @param name    the folder's name (how requests and skills refer to it unless told otherwise)
 * @param targets base weight name → its delta, in file order
 */
public record PeftAdapter(String name, Map<String, Target> targets) {

    /** One target's factors: A [rank, in] and B [out, rank] row-major, float32. */
    public record Target(int rank, int in, int out, float[] a, float[] b, float scale) {
        /** ΔW = scale·B·A, [out, in] row-major. */
        public float[] delta() {
            float[] d = new float[Math.multiplyExact(out, in)];
            for (int o = 0; o < out; o++)
                for (int k = 0; k < rank; k++) {
                    float bk = scale * b[o * rank + k];
                    if (bk == 0f) continue;
                    int ao = k * in, dofs = o * in;
                    for (int i = 0; i < in; i++) d[dofs + i] += bk * a[ao + i];
                }
            return d;
        }
    }

    private static final ObjectMapper JSON = new ObjectMapper();

    /** Reads the adapter in {@code dir}; a {@link ConvertException} saying what is wrong otherwise. */
    public static PeftAdapter read(Path dir) {
        Path cfgFile = dir.resolve("adapter_config.json"), weights = dir.resolve("adapter_model.safetensors");
        if (!Files.isRegularFile(cfgFile) || !Files.isRegularFile(weights))
            throw new ConvertException(dir + ": not a PEFT adapter folder (needs adapter_config.json and adapter_model.safetensors)");
        JsonNode cfg;
        try {
            cfg = JSON.readTree(cfgFile.toFile());
        } catch (IOException e) {
            throw new ConvertException(cfgFile + ": " + e.getMessage(), e);
        }
        String type = cfg.path("peft_type").asText("LORA");
        if (!type.equals("LORA")) throw new ConvertException(cfgFile + ": peft_type " + type + " is not LoRA");
        if (cfg.path("use_dora").asBoolean(false)) throw new ConvertException(cfgFile + ": DoRA adapters are not supported");
        if (cfg.path("fan_in_fan_out").asBoolean(false))
            throw new ConvertException(cfgFile + ": fan_in_fan_out (Conv1D-style [in, out] weights) is not supported");
        if (!cfg.path("bias").asText("none").equals("none"))
            throw new ConvertException(cfgFile + ": adapters that train biases (bias=" + cfg.path("bias").asText() + ") are not supported");
        JsonNode mts = cfg.path("modules_to_save");
        if (mts.isArray() && !mts.isEmpty())
            throw new ConvertException(cfgFile + ": modules_to_save (whole replaced modules) is not supported");
        int r = cfg.path("r").asInt(8);
        double alpha = cfg.path("lora_alpha").asDouble(8);
        boolean rslora = cfg.path("use_rslora").asBoolean(false);
        Map<String, Target> targets = new LinkedHashMap<>();
        String name = dir.toAbsolutePath().normalize().getFileName().toString();
        try (SafetensorsReader st = SafetensorsReader.open(weights)) {
            for (String n : st.names()) {
                if (n.contains(".lora_B.")) continue;
                if (!n.contains(".lora_A."))
                    throw new ConvertException(weights + ": tensor '" + n + "' is not a lora_A/lora_B factor"
                            + " (embedding adapters, magnitude vectors and saved modules are not supported)");
                String module = n.substring(0, n.indexOf(".lora_A."));
                String suffix = n.substring(n.indexOf(".lora_A.") + ".lora_A.".length());
                if (!suffix.equals("weight"))
                    throw new ConvertException(weights + ": tensor '" + n + "': expected lora_A.weight (a named adapter inside the file?)");
                String bName = module + ".lora_B.weight";
                if (!st.has(bName)) throw new ConvertException(weights + ": '" + n + "' has no matching '" + bName + "'");
                SafetensorsReader.Tensor ta = st.tensor(n), tb = st.tensor(bName);
                if (ta.rank() != 2 || tb.rank() != 2 || tb.dim(1) != ta.dim(0))
                    throw new ConvertException(weights + ": '" + n + "' " + java.util.Arrays.toString(ta.shape()) + " and '" + bName
                            + "' " + java.util.Arrays.toString(tb.shape()) + " are not [r, in] and [out, r]");
                String base = module.startsWith("base_model.model.") ? module.substring("base_model.model.".length()) : module;
                int rank = (int) ta.dim(0);
                int rModule = (int) pattern(cfg.path("rank_pattern"), base, r);
                if (rModule != rank)
                    throw new ConvertException(weights + ": '" + n + "' has rank " + rank + ", the config says " + rModule);
                double a = pattern(cfg.path("alpha_pattern"), base, alpha);
                float scale = (float) (rslora ? a / Math.sqrt(rank) : a / rank);
                targets.put(base + ".weight", new Target(rank, (int) ta.dim(1), (int) tb.dim(0), st.readFloats(n), st.readFloats(bName), scale));
            }
        }
        if (targets.isEmpty()) throw new ConvertException(weights + ": no LoRA factors in the file");
        return new PeftAdapter(name, targets);
    }

    /** The value peft uses for {@code module}: the first pattern key matching {@code (.*\.)?KEY$}, else {@code fallback}. */
    private static double pattern(JsonNode patterns, String module, double fallback) {
        if (patterns == null || !patterns.isObject()) return fallback;
        for (Iterator<Map.Entry<String, JsonNode>> it = patterns.fields(); it.hasNext(); ) {
            var e = it.next();
            if (Pattern.compile("(.*\\.)?" + e.getKey() + "$").matcher(module).matches()) return e.getValue().asDouble();
        }
        return fallback;
    }
}
