package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.convert.quant.Quantizer;
import dev.cmf4j.format.DType;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Pattern;

/**
 * Which CMF dtype each tensor gets (docs/CONVERT.md, "Per-tensor policy"):
 * <ol>
 *   <li>{@code --keep GLOB=DTYPE} overrides, the last matching one wins;</li>
 *   <li>tensors that are not 2-D (norms, biases, scalars, sinks, conv kernels) stay f32 — they are
 *       tiny and some (gemma's 1+w norms, A_log) are precision-sensitive;</li>
 *   <li>under a quantizing mode, routers and gates that pick experts or decay rates
 *       ({@code mlp.gate}, {@code mlp.router}, {@code router.proj}, {@code shared_expert_gate},
 *       GDN {@code in_proj_a}/{@code in_proj_b}) are stored f16, like the reference converter does;</li>
 *   <li>under q4_block/q4tp the embeddings and {@code lm_head} are q8_row (their error reaches the
 *       logits directly); under q8_row/q8_2f they take the mode like every other matrix;</li>
 *   <li>every other matrix takes the mode; {@code auto} keeps the source's float type (f32, f16 or
 *       bf16; other source types become f32);</li>
 *   <li>a matrix whose shape the chosen dtype cannot hold (q4tp needs columns % 32 == 0) falls back to
 *       f16 (q8_row for embeddings).</li>
 * </ol>
 */
public final class TensorPolicy {

    /** The {@code --quant} modes. */
    public enum Mode {
        AUTO("auto"), F32("f32"), F16("f16"), BF16("bf16"), Q8_ROW("q8_row"), Q8_2F("q8_2f"), Q4_BLOCK("q4_block"), Q4TP("q4tp");

        public final String label;

        Mode(String label) { this.label = label; }

        public static Mode parse(String s) {
            String l = s.toLowerCase(Locale.ROOT);
            if (l.equals("q8")) l = "q8_row";
            if (l.equals("q4")) l = "q4_block";
            for (Mode m : values()) if (m.label.equals(l)) return m;
            throw new IllegalArgumentException("unknown --quant \"" + s + "\" (auto, f32, f16, bf16, q8_row, q8_2f, q4_block, q4tp)");
        }

        boolean quantizing() { return this == Q8_ROW || this == Q8_2F || this == Q4_BLOCK || this == Q4TP; }

        /** The header's informational quant_type. */
        public String quantType(String autoType) {
            return this == AUTO ? autoType : label.toUpperCase(Locale.ROOT);
        }

        DType dtype() {
            return switch (this) {
                case F32 -> DType.F32;
                case F16 -> DType.F16;
                case BF16 -> DType.BF16;
                case Q8_ROW -> DType.Q8_ROW;
                case Q8_2F -> DType.Q8_2F;
                case Q4_BLOCK -> DType.Q4_BLOCK;
                case Q4TP -> DType.Q4TP;
                case AUTO -> throw new IllegalStateException("auto has no single dtype");
            };
        }
    }

    /** One {@code --keep GLOB=DTYPE}: {@code *} matches any run of characters (dots included), {@code ?} one. */
    public record Keep(String glob, DType dtype, Pattern pattern) {
        public static Keep parse(String spec) {
            int eq = spec.lastIndexOf('=');
            if (eq <= 0 || eq == spec.length() - 1)
                throw new IllegalArgumentException("--keep expects GLOB=DTYPE (e.g. 'lm_head.weight=f16'), got \"" + spec + "\"");
            String glob = spec.substring(0, eq), d = spec.substring(eq + 1);
            DType dt = DType.ofLabel(d);
            if (dt == null || !ENCODABLE.contains(dt))
                throw new IllegalArgumentException("--keep " + spec + ": dtype \"" + d + "\" is not one of f32, f16, bf16, q8_row, q8_2f, q4_block, q4tp");
            StringBuilder re = new StringBuilder();
            for (char ch : glob.toCharArray()) {
                if (ch == '*') re.append(".*");
                else if (ch == '?') re.append('.');
                else re.append(Pattern.quote(String.valueOf(ch)));
            }
            return new Keep(glob, dt, Pattern.compile(re.toString()));
        }

        boolean matches(String name) { return pattern.matcher(name).matches(); }
    }

    static final List<DType> ENCODABLE = List.of(DType.F32, DType.F16, DType.BF16, DType.Q8_ROW, DType.Q8_2F, DType.Q4_BLOCK, DType.Q4TP);

    private static final Pattern ROUTERS = Pattern.compile(
            ".*\\.(mlp\\.gate|mlp\\.router|router\\.proj|shared_expert_gate|linear_attn\\.in_proj_a|linear_attn\\.in_proj_b)\\.weight");
    private static final Pattern EMBEDDINGS = Pattern.compile(
            "(model\\.embed_tokens\\.weight|model\\.embed_tokens_per_layer\\.weight|lm_head\\.weight)");

    private final Mode mode;
    private final List<Keep> keeps;

    public TensorPolicy(Mode mode, List<Keep> keeps) {
        this.mode = mode;
        this.keeps = List.copyOf(keeps);
    }

    public Mode mode() { return mode; }

    public List<Keep> keeps() { return keeps; }

    /** The dtype for {@code t}; an override the shape cannot take is an error naming the tensor. */
    public DType choose(SourceTensor t) {
        long[] shape = t.shape();
        for (int i = keeps.size() - 1; i >= 0; i--) {
            Keep k = keeps.get(i);
            if (k.matches(t.name())) {
                if (!Quantizer.of(k.dtype()).supports(shape))
                    throw new ConvertException("--keep " + k.glob() + "=" + k.dtype().label + ": tensor " + t.name()
                            + " " + java.util.Arrays.toString(shape) + " cannot be stored as " + k.dtype().label);
                return k.dtype();
            }
        }
        if (shape.length != 2) return DType.F32;
        DType mode = this.mode == Mode.AUTO ? auto(t.sourceDtype()) : this.mode.dtype();
        if (mode == DType.F32 || mode == DType.F16 || mode == DType.BF16) return mode;
        if (ROUTERS.matcher(t.name()).matches()) return DType.F16;
        boolean embed = EMBEDDINGS.matcher(t.name()).matches();
        DType want = embed && (mode == DType.Q4_BLOCK || mode == DType.Q4TP) ? DType.Q8_ROW : mode;
        if (Quantizer.of(want).supports(shape)) return want;
        return embed ? DType.Q8_ROW : DType.F16;
    }

    /**
     * {@code --quant auto}: the CMF dtype closest to a source dtype. Float types are kept; 5- to 8-bit types
     * (GGUF Q8_0, Q6_K, Q5_*, safetensors FP8) become q8_2f (whose column field follows the outliers that per-block
     * scales absorbed; one scale a row would add ten times the error), 2- to 4-bit ones (Q4_*, IQ4_*, MXFP4, Q3_K, Q2_K)
     * q4_block, which holds a Q4_0 tensor exactly ({@link dev.cmf4j.convert.quant.Q4BlockQuantizer#ggmlQ4_0()}).
     */
    public static DType auto(String sourceDtype) {
        return switch (sourceDtype) {
            case "F16" -> DType.F16;
            case "BF16" -> DType.BF16;
            case "Q8_0", "Q8_1", "Q8_K", "Q6_K", "Q5_0", "Q5_1", "Q5_K", "F8_E4M3" -> DType.Q8_2F;
            case "Q4_0", "Q4_1", "Q4_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS", "MXFP4" -> DType.Q4_BLOCK;
            default -> DType.F32;
        };
    }

    /** The policy as provenance: mode, rules in words, overrides. */
    public ObjectNode describe() {
        ObjectNode o = JsonNodeFactory.instance.objectNode();
        o.put("mode", mode.label);
        o.put("rules", "non-2-D tensors f32; " + switch (mode) {
            case AUTO -> "matrices keep the source float type; quantized sources: 5-8 bit types q8_2f, 2-4 bit types q4_block "
                    + "(embeddings and lm_head q8_row), routers/gates f16";
            case F32, F16, BF16 -> "matrices " + mode.label;
            case Q8_ROW, Q8_2F -> "routers/gates f16; matrices incl. embeddings and lm_head " + mode.label + "; unsupported shapes f16";
            case Q4_BLOCK, Q4TP -> "routers/gates f16; embeddings and lm_head q8_row; other matrices " + mode.label + "; unsupported shapes f16";
        });
        var arr = o.putArray("keep");
        for (Keep k : keeps) arr.add(k.glob() + "=" + k.dtype().label);
        return o;
    }

    static List<Keep> parseKeeps(List<String> specs) {
        List<Keep> out = new ArrayList<>();
        if (specs != null) for (String s : specs) out.add(Keep.parse(s));
        return out;
    }
}
