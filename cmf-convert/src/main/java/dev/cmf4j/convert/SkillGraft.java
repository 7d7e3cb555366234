package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.convert.quant.Quantizer;
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
     * Writes {@code base} with skill {@code id} added (its tensors and its registry record) to {@code out}, which may
     * be the base file itself: the writer builds the new file beside it and renames it into place only when it is
     * complete and verified, so a crash leaves the old file as it was.
     */
    public static void add(CmfFile base, Path out, String id, String name, List<Replacement> rs, JsonNode provenance) {
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
        SkillRecord rec = new SkillRecord(id, name == null ? id : name, List.copyOf(layers), null, null, null, null, null,
                null, extra);
        List<SkillRecord> skills = new ArrayList<>(base.header().skills());
        skills.add(rec);
        try (CmfWriter w = CmfWriter.create(out, base.header().withSkills(skills),
                CmfWriter.Options.DEFAULT.withExpectedTensors(base.tensors().size() + rs.size()))) {
            CmfWriter.copyAll(base, w);
            for (Replacement r : rs) w.addTensor(rec.tensorName(r.name()), r.dtype(), r.shape(), r.payload());
            w.finish();
        }
    }

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
