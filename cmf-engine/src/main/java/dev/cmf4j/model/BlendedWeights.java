package dev.cmf4j.model;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.Dequantizers;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A file's weights plus one more skill, {@link #ID}, whose tensors blend other skills' (the reference's soft blend,
 * CMF_FORMAT.md §1.7): for every tensor NAME some blended skill replaces, {@code skill._blend.NAME} = Σ wᵢ·Tᵢ, with
 * Tᵢ skill i's replacement of NAME or, where it keeps the backbone's, NAME itself; the weights are normalised to sum
 * to 1 ("none" weighs the backbone). The blended tensors are float32, computed on first use and kept (only those of
 * the names the skills replace); everything else is read through as before.
 */
public final class BlendedWeights implements Weights {
    /** The blend's skill id (refused when the file has a skill of that id). */
    public static final String ID = "_blend";
    private static final String PREFIX = "skill." + ID + ".";
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(java.nio.ByteOrder.LITTLE_ENDIAN);

    private final Weights base;
    private final Map<String, Double> weights;
    private final Set<String> blended;
    private final Map<String, Tensor> cache = new ConcurrentHashMap<>();

    /**
     * @param weights skill id (or "none": the backbone) → weight, each finite and ≥ 0, at least one > 0
     */
    public BlendedWeights(Weights base, Map<String, Double> weights) {
        this.base = base;
        if (base.skillIds().contains(ID)) throw new ModelException("the file already has a skill '" + ID + "'");
        double sum = 0;
        for (var e : weights.entrySet()) {
            if (!e.getKey().equals("none") && !base.skillIds().contains(e.getKey()))
                throw new IllegalArgumentException("unknown skill '" + e.getKey() + "' in the blend; " + (base.skillIds().isEmpty()
                        ? "the file has no skills" : "the file has: " + String.join(", ", base.skillIds())));
            if (!(e.getValue() >= 0) || Double.isInfinite(e.getValue()))
                throw new IllegalArgumentException("blend weight of '" + e.getKey() + "' must be finite and >= 0, got " + e.getValue());
            sum += e.getValue();
        }
        if (!(sum > 0)) throw new IllegalArgumentException("a blend needs a weight > 0");
        Map<String, Double> norm = new LinkedHashMap<>();
        for (var e : weights.entrySet()) norm.put(e.getKey(), e.getValue() / sum);
        this.weights = java.util.Collections.unmodifiableMap(norm);
        Set<String> names = new LinkedHashSet<>();
        for (String n : base.names())
            for (String s : weights.keySet())
                if (!s.equals("none") && n.startsWith("skill." + s + ".")) names.add(n.substring(("skill." + s + ".").length()));
        this.blended = java.util.Collections.unmodifiableSet(names);
    }

    /** The normalised weights, by skill id ("none": the backbone). */
    public Map<String, Double> weights() { return weights; }

    @Override public Tensor find(String name) {
        if (!name.startsWith(PREFIX)) return base.find(name);
        String n = name.substring(PREFIX.length());
        return blended.contains(n) ? cache.computeIfAbsent(n, this::blend) : null;
    }

    private Tensor blend(String n) {
        Tensor backbone = base.get(n);
        float[] acc = new float[Math.toIntExact(backbone.size())];
        for (var e : weights.entrySet()) {
            if (e.getValue() == 0) continue;
            Tensor t = e.getKey().equals("none") ? backbone : base.find("skill." + e.getKey() + "." + n);
            if (t == null) t = backbone;
            if (!java.util.Arrays.equals(t.shape(), backbone.shape()))
                throw new ModelException("tensor '" + t.name() + "' has shape " + java.util.Arrays.toString(t.shape())
                        + ", the backbone's '" + n + "' " + java.util.Arrays.toString(backbone.shape()));
            float[] v;
            try {
                v = Dequantizers.of(t.dtype()).decoder(t.data(), t.shape()).all();
            } catch (RuntimeException ex) {
                throw new ModelException("tensor '" + t.name() + "': " + ex.getMessage(), ex);
            }
            float w = (float) (double) e.getValue();
            for (int i = 0; i < acc.length; i++) acc[i] += w * v[i];
        }
        MemorySegment m = Arena.ofAuto().allocate(4L * acc.length, 64);
        MemorySegment.copy(acc, 0, m, F32, 0, acc.length);
        return new Tensor(PREFIX + n, DType.F32, backbone.shape(), m);
    }

    @Override public Set<String> names() {
        Set<String> out = new LinkedHashSet<>(base.names());
        for (String n : blended) out.add(PREFIX + n);
        return out;
    }

    @Override public List<String> skillIds() {
        List<String> ids = new ArrayList<>(base.skillIds());
        ids.add(ID);
        return ids;
    }

    @Override public dev.cmf4j.format.Masks masks() { return base.masks(); }

    @Override public void checkIntact() { base.checkIntact(); }

    /** The normalised weights in skill order, so the same blend written in another order is the same variant. */
    @Override public String variant() { return "blend " + new java.util.TreeMap<>(weights); }
}
