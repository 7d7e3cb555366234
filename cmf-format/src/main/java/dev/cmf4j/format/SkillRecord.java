package dev.cmf4j.format;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.Base64;
import java.util.List;
import java.util.Map;

/**
 * One entry of the header's {@code skills[]} registry (CMF_FORMAT.md §1.7). A skill's tensors are
 * stored as {@code skill.{id}.{original_name}}; this record carries its routing subspace and quality
 * numbers. v2 fields ({@code kind}, {@code status}) are typed; the other v2 blocks (overrides, bound,
 * gate, origin, ...) and anything newer stay in {@link #extra} verbatim.
 */
public record SkillRecord(String id, String name, List<Integer> layers, Selection selection,
                          String inputMaskTask, JsonNode quality, String kind, String status,
                          String baseDirHash, Map<String, JsonNode> extra) {

    /** v2 record kinds. */
    public static final List<String> KINDS = List.of(
            "ffn_replace", "expert_append", "lookup", "anchor_sinks", "mask_only", "fcd_vector");

    public SkillRecord { extra = extra == null ? Map.of() : Map.copyOf(extra); }

    /** The tensor name this skill uses in place of the backbone's {@code name}. */
    public String tensorName(String name) { return "skill." + id + "." + name; }

    /**
     * The routing subspace: φ is the mean-pooled hidden state after layer {@code phiLayer}; {@code mean}
     * and {@code basis} ({@code rank} rows of hidden size) are base64 f16 arrays.
     */
    public record Selection(String metric, Integer phiLayer, String mean, String basis, Integer rank,
                            Double errMean, Double errStd, JsonNode holdout, Integer holdoutN,
                            Map<String, JsonNode> extra) {
        public Selection { extra = extra == null ? Map.of() : Map.copyOf(extra); }

        static Selection read(Json.Fields f) {
            if (f == null) return null;
            return new Selection(f.string("metric"), f.integer("phi_layer"), f.string("mean"), f.string("basis"),
                    f.integer("rank"), f.dbl("err_mean"), f.dbl("err_std"), f.raw("holdout"), f.integer("holdout_n"),
                    f.rest());
        }

        ObjectNode toJson() {
            return new Json.Out().put("metric", metric).put("phi_layer", phiLayer).put("mean", mean).put("basis", basis)
                    .put("rank", rank).put("err_mean", errMean).put("err_std", errStd).put("holdout", holdout)
                    .put("holdout_n", holdoutN).extra(extra).done();
        }

        /** {@link #mean} decoded from base64 little-endian f16 (empty when absent). */
        public float[] meanValues() { return f16(mean); }

        /** {@link #basis} decoded from base64 little-endian f16, row-major rank x hidden (empty when absent). */
        public float[] basisValues() { return f16(basis); }

        private static float[] f16(String b64) {
            if (b64 == null) return new float[0];
            byte[] b;
            try {
                b = Base64.getDecoder().decode(b64);
            } catch (IllegalArgumentException e) {
                throw new CmfException.Parse("skill selection", -1, "not base64 f16 data: " + e.getMessage());
            }
            float[] out = new float[b.length / 2];
            for (int i = 0; i < out.length; i++) {
                out[i] = Float.float16ToFloat((short) ((b[2 * i] & 0xFF) | (b[2 * i + 1] & 0xFF) << 8));
            }
            return out;
        }
    }

    static SkillRecord read(Json.Fields f) {
        SkillRecord s = new SkillRecord(f.requiredString("id"), f.string("name"), f.ints("layers"),
                Selection.read(f.sub("selection")), f.string("input_mask_task"), f.raw("quality"),
                f.oneOf("kind", KINDS), f.string("status"), f.string("base_dir_hash"), f.rest());
        if (s.id.isEmpty()) throw new CmfException.Parse(f.label, f.offset, f.path + ".id must not be empty");
        return s;
    }

    public ObjectNode toJson() {
        return new Json.Out().put("id", id).put("name", name).ints("layers", layers)
                .put("selection", selection == null ? null : selection.toJson()).put("input_mask_task", inputMaskTask)
                .put("quality", quality).put("kind", kind).put("status", status).put("base_dir_hash", baseDirHash)
                .extra(extra).done();
    }
}
