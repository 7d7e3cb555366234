package dev.cmf4j.format;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;

/**
 * The JSON header of a CMF v2 file (CMF_FORMAT.md §1.5), typed. Blocks whose schema is free or
 * version-dependent ({@code provenance}, {@code calibration}, {@code routing}, {@code genome},
 * {@code lineage}, {@code segments}, {@code router}) are kept as JSON trees; fields this class does
 * not know are kept in {@link #extra}. {@link #toJson} writes all of them back, so a read-write round
 * trip loses nothing but explicit nulls and whitespace.
 *
 * @param quantType informational ({@code Q8_ROW|Q4_BLOCK|Q8_2F|VBIT|BF16|F16|F32}, ...); the directory's
 *                  per-tensor dtypes are the authority
 */
public record CmfHeader(String format, int version, ModelArch arch, String quantType,
                        TokenizerConfig tokenizerConfig, List<SkillRecord> skills, ShardInfo shard,
                        JsonNode provenance, SectionHashes sectionHashes, JsonNode calibration,
                        JsonNode routing, JsonNode genome, JsonNode lineage, JsonNode segments,
                        JsonNode router, Map<String, JsonNode> extra) {

    public CmfHeader {
        skills = skills == null ? List.of() : List.copyOf(skills);
        extra = extra == null ? Map.of() : Map.copyOf(extra);
    }

    /** A minimal header for writers: format "cmf", version 2, the given arch and quant type. */
    public static CmfHeader of(ModelArch arch, String quantType) {
        return new CmfHeader("cmf", 2, arch, quantType, null, List.of(), null, null, null, null, null, null, null,
                null, null, Map.of());
    }

    /** {@code shard{no, count}}: this file is shard {@code no} (1-based) of {@code count}. */
    public record ShardInfo(int no, int count) {}

    /**
     * {@code section_hashes}: hash64 of the masks, vocab and index sections (null = not recorded).
     * Stored as 16-char hex strings because a u64 would lose precision in JSON.
     */
    public record SectionHashes(Long masks, Long vocab, Long index) {
        public static final SectionHashes NONE = new SectionHashes(null, null, null);

        public boolean isEmpty() { return masks == null && vocab == null && index == null; }

        ObjectNode toJson() {
            Json.Out o = new Json.Out();
            if (masks != null) o.put("masks", Hash64.hex(masks));
            if (vocab != null) o.put("vocab", Hash64.hex(vocab));
            if (index != null) o.put("index", Hash64.hex(index));
            return o.done();
        }
    }

    public CmfHeader withShard(ShardInfo s) {
        return new CmfHeader(format, version, arch, quantType, tokenizerConfig, skills, s, provenance, sectionHashes,
                calibration, routing, genome, lineage, segments, router, extra);
    }

    public CmfHeader withSectionHashes(SectionHashes h) {
        return new CmfHeader(format, version, arch, quantType, tokenizerConfig, skills, shard, provenance, h,
                calibration, routing, genome, lineage, segments, router, extra);
    }

    public CmfHeader withSkills(List<SkillRecord> s) {
        return new CmfHeader(format, version, arch, quantType, tokenizerConfig, s, shard, provenance, sectionHashes,
                calibration, routing, genome, lineage, segments, router, extra);
    }

    /** This header with the {@code routing} calibration block ({@code temperature}, {@code novelty_theta}, ...) replaced. */
    public CmfHeader withRouting(JsonNode r) {
        return new CmfHeader(format, version, arch, quantType, tokenizerConfig, skills, shard, provenance, sectionHashes,
                calibration, r, genome, lineage, segments, router, extra);
    }

    public CmfHeader withTokenizerConfig(TokenizerConfig t) {
        return new CmfHeader(format, version, arch, quantType, t, skills, shard, provenance, sectionHashes,
                calibration, routing, genome, lineage, segments, router, extra);
    }

    public CmfHeader withProvenance(JsonNode p) {
        return new CmfHeader(format, version, arch, quantType, tokenizerConfig, skills, shard, p, sectionHashes,
                calibration, routing, genome, lineage, segments, router, extra);
    }

    /** The skill record with this id, or null. */
    public SkillRecord skill(String id) {
        for (SkillRecord s : skills) if (s.id().equals(id)) return s;
        return null;
    }

    /** Parses header JSON bytes; {@code offset} is where they sit in the file (for error messages). */
    public static CmfHeader parse(byte[] json, String label, long offset) {
        ObjectNode root = Json.parseObject(json, label, offset, "header");
        Json.Fields f = new Json.Fields(root, label, offset, "header");
        String format = f.requiredString("format");
        if (!format.equals("cmf")) throw new CmfException.Parse(label, offset, "header.format: expected \"cmf\", found \"" + format + "\"");
        int version = f.requiredInt("version");
        if (version != 2) throw new CmfException.UnsupportedVersion(label, offset, "header.version: expected 2, found " + version);
        Json.Fields af = f.sub("arch");
        ModelArch arch = af == null ? null : ModelArch.read(af);
        String quant = f.string("quant_type");
        TokenizerConfig tok = TokenizerConfig.read(f.sub("tokenizer_config"));
        List<SkillRecord> skills = new ArrayList<>();
        ArrayNode sa = f.array("skills");
        if (sa != null) {
            for (int i = 0; i < sa.size(); i++) {
                if (!(sa.get(i) instanceof ObjectNode so)) {
                    throw new CmfException.Parse(label, offset, "header.skills[" + i + "]: expected an object");
                }
                SkillRecord s = SkillRecord.read(new Json.Fields(so, label, offset, "header.skills[" + i + "]"));
                for (SkillRecord prev : skills) {
                    if (prev.id().equals(s.id())) {
                        throw new CmfException.Parse(label, offset, "header.skills: id \"" + s.id() + "\" appears twice");
                    }
                }
                skills.add(s);
            }
        }
        ShardInfo shard = null;
        Json.Fields sf = f.sub("shard");
        if (sf != null) {
            int no = sf.requiredInt("no"), count = sf.requiredInt("count");
            if (count < 1 || no < 1 || no > count || count > 99999) {
                throw new CmfException.Parse(label, offset, "header.shard: no " + no + " of count " + count
                        + " is not a valid shard number (1 <= no <= count <= 99999)");
            }
            shard = new ShardInfo(no, count);
        }
        JsonNode prov = f.raw("provenance");
        SectionHashes hashes = null;
        Json.Fields hf = f.sub("section_hashes");
        if (hf != null) hashes = new SectionHashes(hex(hf, "masks"), hex(hf, "vocab"), hex(hf, "index"));
        return new CmfHeader(format, version, arch, quant, tok, skills, shard, prov, hashes, f.raw("calibration"),
                f.raw("routing"), f.raw("genome"), f.raw("lineage"), f.raw("segments"), f.raw("router"), f.rest());
    }

    private static Long hex(Json.Fields f, String key) {
        String s = f.string(key);
        if (s == null) return null;
        if (s.length() != 16 || !s.chars().allMatch(c -> (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
            throw new CmfException.Parse(f.label, f.offset, f.path + "." + key + ": expected 16 hex digits, found \"" + s + "\"");
        }
        return HexFormat.fromHexDigitsToLong(s);
    }

    /** The header object in the reference field order; null blocks are written as JSON null where the reference does. */
    public ObjectNode toJson() {
        Json.Out o = new Json.Out().put("format", format).put("version", version);
        if (arch != null) o.put("arch", arch.toJson());
        o.put("quant_type", quantType);
        if (tokenizerConfig != null) o.put("tokenizer_config", tokenizerConfig.toJson()); else o.putNull("tokenizer_config");
        ArrayNode sk = o.node.putArray("skills");
        for (SkillRecord s : skills) sk.add(s.toJson());
        if (shard != null) o.put("shard", new Json.Out().put("no", shard.no).put("count", shard.count).done());
        else o.putNull("shard");
        o.put("provenance", provenance);
        if (sectionHashes != null && !sectionHashes.isEmpty()) o.put("section_hashes", sectionHashes.toJson());
        o.put("calibration", calibration).put("routing", routing).put("genome", genome).put("lineage", lineage)
                .put("segments", segments).put("router", router);
        return o.extra(extra).done();
    }

    /** Compact UTF-8 header bytes, as written into a file. */
    public byte[] toBytes() { return Json.compact(toJson()); }
}
