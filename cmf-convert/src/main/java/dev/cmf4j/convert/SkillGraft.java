package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.convert.quant.Quantizer;
import dev.cmf4j.format.CmfAppend;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.format.quant.Dequantizers;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Makes a skill's replacement tensors ({@code skill.ID.NAME}, full shape, CMF_FORMAT.md §1.7) from a PEFT LoRA adapter
 * merged into the backbone's weights, or from a fine-tuned donor of the same base (the tensors it changed), and writes
 * the base file with the skill added.
 */
public final class SkillGraft {
    private SkillGraft() {}

    /** One replacement: the backbone tensor's name, the payload to store and how far it moved (‖Δ‖/‖W‖). */
    public record Replacement(String name, DType dtype, long[] shape, MemorySegment payload, double relDelta) {}

    private static final Pattern ID = Pattern.compile("[A-Za-z0-9_-]+");
    private static final Pattern LAYER = Pattern.compile("\\.layers\\.(\\d+)\\.");

    /** Skill ids are plain words, so {@code skill.ID.NAME} splits one way. */
    public static void checkId(String id) {
        if (id == null || !ID.matcher(id).matches())
            throw new ConvertException("skill id '" + id + "' must be letters, digits, '_' or '-'");
    }

    /**
     * W + scale·B·A for every weight the adapter targets, stored in {@code quant} (null: each backbone tensor's own
     * dtype). A target the base does not have, or of another shape, is an error naming it.
     */
    public static List<Replacement> fromLora(CmfFile base, PeftAdapter a, DType quant) {
        List<Replacement> out = new ArrayList<>();
        for (Map.Entry<String, PeftAdapter.Target> e : a.targets().entrySet()) {
            TensorEntry t = base.find(e.getKey()).orElseThrow(() -> new ConvertException("adapter '" + a.name()
                    + "' targets '" + e.getKey() + "', which " + base.label() + " does not have"));
            PeftAdapter.Target d = e.getValue();
            if (t.ndim() != 2 || t.dim(0) != d.out() || t.dim(1) != d.in())
                throw new ConvertException("adapter '" + a.name() + "' has a [" + d.out() + ", " + d.in() + "] delta for '"
                        + t.name() + "', which is " + Arrays.toString(t.shape()));
            float[] w = decode(t);
            float[] delta = d.delta();
            double dd = 0, ww = 0;
            for (int i = 0; i < w.length; i++) {
                dd += (double) delta[i] * delta[i];
                ww += (double) w[i] * w[i];
                w[i] += delta[i];
            }
            out.add(encode(t, w, quant, Math.sqrt(dd / Math.max(ww, Double.MIN_NORMAL))));
        }
        return out;
    }

    /**
     * The tensors {@code donor} (a fine-tune of the same base) changed by more than {@code minDelta} (‖D − W‖/‖W‖;
     * 0: any change), in {@code quant} (null: the backbone's dtype; the donor's payload is kept byte for byte when it
     * already has that dtype). The donor must hold every backbone tensor with the same shape.
     */
    public static List<Replacement> fromDonor(CmfFile base, CmfFile donor, double minDelta, DType quant) {
        if (!(minDelta >= 0)) throw new ConvertException("--min-delta must be >= 0, got " + minDelta);
        List<Replacement> out = new ArrayList<>();
        for (TensorEntry t : base.tensors()) {
            if (t.name().startsWith("skill.")) continue;
            TensorEntry d = donor.find(t.name()).orElseThrow(() -> new ConvertException(donor.label() + " has no tensor '"
                    + t.name() + "': not a fine-tune of " + base.label()));
            if (!Arrays.equals(d.shape(), t.shape()))
                throw new ConvertException(donor.label() + ": '" + t.name() + "' is " + Arrays.toString(d.shape()) + ", the base's "
                        + Arrays.toString(t.shape()) + ": not a fine-tune of the same base");
            if (d.dtype() == t.dtype() && d.nbytes() == t.nbytes() && d.data().mismatch(t.data()) == -1) continue;
            float[] w = decode(t), v = decode(d);
            double dd = 0, ww = 0;
            for (int i = 0; i < w.length; i++) {
                double x = (double) v[i] - w[i];
                dd += x * x;
                ww += (double) w[i] * w[i];
            }
            double rel = Math.sqrt(dd / Math.max(ww, Double.MIN_NORMAL));
            if (dd == 0 || rel <= minDelta) continue;
            DType want = quant != null ? quant : t.dtype();
            if (d.dtype() == want) out.add(new Replacement(t.name(), want, t.shape(), d.data(), rel));
            else out.add(encode(t, v, want, rel));
        }
        return out;
    }

    /**
     * Writes {@code base} with skill {@code id} added (its tensors and its registry record) to {@code out}: a new
     * file, built beside its destination and renamed into place only when complete and verified. When {@code out} is
     * the base file itself the skill is appended in place instead ({@link CmfAppend}: payload at the tail, new header
     * and directory, envelope last, in fsync order; a crash leaves the file with its earlier skills).
     */
    public static void add(CmfFile base, Path out, String id, String name, List<Replacement> rs, JsonNode provenance) {
        add(base, out, id, name, rs, provenance, null);
    }

    /** As above, with a routing subspace ({@code selection}; may be null). */
    public static void add(CmfFile base, Path out, String id, String name, List<Replacement> rs, JsonNode provenance,
                           SkillRecord.Selection selection) {
        checkId(id);
        if (base.header().skill(id) != null)
            throw new ConvertException(base.label() + " already has a skill '" + id + "' (remove it first)");
        if (rs.isEmpty()) throw new ConvertException("skill '" + id + "' would replace no tensor");
        TreeSet<Integer> layers = new TreeSet<>();
        for (Replacement r : rs) {
            Matcher m = LAYER.matcher(r.name());
            if (m.find()) layers.add(Integer.parseInt(m.group(1)));
        }
        Map<String, JsonNode> extra = provenance == null ? Map.of() : Map.of("provenance", provenance);
        SkillRecord rec = new SkillRecord(id, name == null ? id : name, List.copyOf(layers), selection, null, null, null, null,
                null, extra);
        List<CmfAppend.NewTensor> ts = new ArrayList<>();
        for (Replacement r : rs) ts.add(new CmfAppend.NewTensor(rec.tensorName(r.name()), r.dtype(), r.shape(), r.payload()));
        write(base, out, rec, ts);
    }

    /** {@code base} plus skill {@code rec} with tensors {@code ts}: appended in place when {@code out} is the base's file. */
    private static void write(CmfFile base, Path out, SkillRecord rec, List<CmfAppend.NewTensor> ts) {
        List<SkillRecord> skills = new ArrayList<>(base.header().skills());
        skills.add(rec);
        if (inPlace(base, out)) {
            CmfAppend.append(out, base.header().withSkills(skills), ts);
            return;
        }
        try (CmfWriter w = CmfWriter.create(out, base.header().withSkills(skills),
                CmfWriter.Options.DEFAULT.withExpectedTensors(base.tensors().size() + ts.size()))) {
            CmfWriter.copyAll(base, w);
            for (CmfAppend.NewTensor t : ts) w.addTensor(t.name(), t.dtype(), t.shape(), t.payload());
            w.finish();
        }
    }

    private static boolean inPlace(CmfFile base, Path out) {
        try {
            return base.shards().size() == 1 && java.nio.file.Files.exists(out)
                    && java.nio.file.Files.isSameFile(Path.of(base.label()), out);
        } catch (java.io.IOException e) {
            return false;
        }
    }

    /**
     * A standalone skill file of skill {@code id} (CMF_FORMAT.md §1.7, feature bit SKILL_FILE): its tensors and its
     * record, bound to the base by {@code base_dir_hash} (the hash64 of the base's directory) and {@code base_trunk}
     * (a hash of the base's own tensors: name, dtype, shape and payload hash of every non-skill tensor, so the skill
     * still applies to its base after other skills were added or removed).
     */
    public static void export(CmfFile base, String id, Path out) {
        SkillRecord rec = base.header().skill(id);
        if (rec == null) throw new ConvertException(base.label() + " has no skill '" + id + "' (its skills: " + ids(base) + ")");
        Map<String, JsonNode> extra = new java.util.LinkedHashMap<>(rec.extra());
        var nodes = com.fasterxml.jackson.databind.node.JsonNodeFactory.instance;
        extra.put("base_trunk", nodes.textNode(dev.cmf4j.format.Hash64.hex(trunk(base))));
        if (base.header().arch() != null && base.header().arch().archName() != null)
            extra.put("base_arch", nodes.textNode(base.header().arch().archName()));
        SkillRecord bound = new SkillRecord(rec.id(), rec.name(), rec.layers(), rec.selection(), rec.inputMaskTask(), rec.quality(),
                rec.kind(), rec.status(), dev.cmf4j.format.Hash64.hex(base.envelope().dirHash()), extra);
        var header = base.header().withSkills(List.of(bound)).withSectionHashes(dev.cmf4j.format.CmfHeader.SectionHashes.NONE);
        try (CmfWriter w = CmfWriter.create(out, header, CmfWriter.Options.DEFAULT.withFeatures(dev.cmf4j.format.Feature.SKILL_FILE.mask()))) {
            for (TensorEntry t : base.tensors())
                if (t.name().startsWith("skill." + id + ".")) w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
            w.finish();
        }
    }

    /**
     * Adds the skill of standalone skill file {@code skillFile} to {@code base} (written to {@code out}; appended in
     * place when it is the base's file); refused on another base.
     */
    public static void apply(CmfFile base, CmfFile skillFile, Path out) {
        if ((skillFile.envelope().features() & dev.cmf4j.format.Feature.SKILL_FILE.mask()) == 0)
            throw new ConvertException(skillFile.label() + " is not a standalone skill file (feature bit SKILL_FILE unset)");
        if (skillFile.header().skills().size() != 1)
            throw new ConvertException(skillFile.label() + ": a skill file holds one skill record, found " + skillFile.header().skills().size());
        SkillRecord rec = skillFile.header().skills().getFirst();
        String dirHash = dev.cmf4j.format.Hash64.hex(base.envelope().dirHash());
        JsonNode trunk = rec.extra().get("base_trunk");
        boolean same = dirHash.equals(rec.baseDirHash())
                || (trunk != null && trunk.asText().equals(dev.cmf4j.format.Hash64.hex(trunk(base))));
        if (!same)
            throw new ConvertException(skillFile.label() + " was exported from another base (base_dir_hash " + rec.baseDirHash()
                    + "; " + base.label() + " has " + dirHash + " and other tensors)");
        if (base.header().skill(rec.id()) != null)
            throw new ConvertException(base.label() + " already has a skill '" + rec.id() + "' (remove it first)");
        Map<String, JsonNode> extra = new java.util.LinkedHashMap<>(rec.extra());
        extra.remove("base_trunk");
        extra.remove("base_arch");
        SkillRecord inFile = new SkillRecord(rec.id(), rec.name(), rec.layers(), rec.selection(), rec.inputMaskTask(), rec.quality(),
                rec.kind(), rec.status(), null, extra);
        List<CmfAppend.NewTensor> ts = new ArrayList<>();
        for (TensorEntry t : skillFile.tensors()) {
            if (!t.name().startsWith("skill." + rec.id() + "."))
                throw new ConvertException(skillFile.label() + ": tensor '" + t.name() + "' is not skill " + rec.id() + "'s");
            String target = t.name().substring(("skill." + rec.id() + ".").length());
            TensorEntry b = base.find(target).orElseThrow(() -> new ConvertException(skillFile.label() + " replaces '" + target
                    + "', which " + base.label() + " does not have"));
            if (!Arrays.equals(b.shape(), t.shape()))
                throw new ConvertException(skillFile.label() + ": '" + t.name() + "' is " + Arrays.toString(t.shape()) + ", the base's "
                        + Arrays.toString(b.shape()));
            ts.add(new CmfAppend.NewTensor(t.name(), t.dtype(), t.shape(), t.data()));
        }
        write(base, out, inFile, ts);
    }

    /**
     * Gives skill {@code id} of {@code base} the routing subspace {@code selection}: the header alone changes (appended
     * in place when {@code out} is the base's file).
     */
    public static void describe(CmfFile base, Path out, String id, SkillRecord.Selection selection) {
        SkillRecord r = base.header().skill(id);
        if (r == null) throw new ConvertException(base.label() + " has no skill '" + id + "' (its skills: " + ids(base) + ")");
        List<SkillRecord> skills = new ArrayList<>();
        for (SkillRecord s : base.header().skills())
            skills.add(s != r ? s : new SkillRecord(r.id(), r.name(), r.layers(), selection, r.inputMaskTask(), r.quality(), r.kind(),
                    r.status(), r.baseDirHash(), r.extra()));
        if (inPlace(base, out)) CmfAppend.append(out, base.header().withSkills(skills), List.of());
        else rewrite(base, out, base.header().withSkills(skills), null);
    }

    /**
     * Gives {@code base} the header's {@code routing} calibration block {@code routing} (temperature, novelty θ): the
     * header alone changes (appended in place when {@code out} is the base's file).
     */
    public static void calibrate(CmfFile base, Path out, JsonNode routing) {
        if (inPlace(base, out)) CmfAppend.append(out, base.header().withRouting(routing), List.of());
        else rewrite(base, out, base.header().withRouting(routing), null);
    }

    /** {@code base} without skill {@code id} (its tensors and record), written to {@code out} (may be the base's file). */
    public static void remove(CmfFile base, String id, Path out) {
        if (base.header().skill(id) == null)
            throw new ConvertException(base.label() + " has no skill '" + id + "' (its skills: " + ids(base) + ")");
        List<SkillRecord> keep = new ArrayList<>(base.header().skills());
        keep.removeIf(s -> s.id().equals(id));
        rewrite(base, out, base.header().withSkills(keep), "skill." + id + ".");
    }

    /** {@code file} rewritten without the dead bytes appends leave (old headers, directories and sections). */
    public static void compact(CmfFile file, Path out) { rewrite(file, out, file.header(), null); }

    private static void rewrite(CmfFile src, Path out, dev.cmf4j.format.CmfHeader header, String dropPrefix) {
        int features = src.envelope().features() & dev.cmf4j.format.Feature.SKILL_FILE.mask();
        try (CmfWriter w = CmfWriter.create(out, header, CmfWriter.Options.DEFAULT.withExpectedTensors(src.tensors().size())
                .withFeatures(features))) {
            for (TensorEntry t : src.tensors())
                if (dropPrefix == null || !t.name().startsWith(dropPrefix)) w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
            src.masks().ifPresent(w::setMasks);
            src.vocab().ifPresent(w::setVocab);
            src.index().ifPresent(ix -> w.setIndex(ix.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE)));
            w.finish();
        }
    }

    /** A hash of the base's own tensors (every non-skill entry's name, dtype, shape and payload hash, by name). */
    static long trunk(CmfFile f) {
        StringBuilder sb = new StringBuilder("cmf4j-base-v1\n");
        f.tensors().stream().filter(t -> !t.name().startsWith("skill.")).sorted(java.util.Comparator.comparing(TensorEntry::name))
                .forEach(t -> sb.append(t.name()).append('\0').append(t.dtype().id).append('\0')
                        .append(Arrays.toString(t.shape())).append('\0').append(Long.toHexString(t.hash())).append('\n'));
        return dev.cmf4j.format.Hash64.of(sb.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8));
    }

    private static String ids(CmfFile f) { return f.header().skills().stream().map(SkillRecord::id).toList().toString(); }

    private static float[] decode(TensorEntry t) {
        if (!Dequantizers.decodable(t.dtype()))
            throw new ConvertException("tensor '" + t.name() + "' has dtype " + t.dtype().label + ", which cannot be decoded");
        return Dequantizers.of(t.dtype()).decoder(t.data(), t.shape()).all();
    }

    private static Replacement encode(TensorEntry t, float[] values, DType quant, double rel) {
        DType dt = quant != null ? quant : t.dtype();
        Quantizer q;
        try {
            q = Quantizer.of(dt);
        } catch (UnsupportedOperationException e) {
            throw new ConvertException("tensor '" + t.name() + "': " + e.getMessage() + "; pass --quant");
        }
        if (!q.supports(t.shape()))
            throw new ConvertException("tensor '" + t.name() + "' " + Arrays.toString(t.shape()) + " cannot be stored as " + dt.label);
        return new Replacement(t.name(), dt, t.shape(), MemorySegment.ofArray(q.encode(values, t.shape())), rel);
    }
}
