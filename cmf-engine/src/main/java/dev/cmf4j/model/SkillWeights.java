package dev.cmf4j.model;

import java.util.List;
import java.util.Set;

/**
 * A file's weights with one skill applied to them: {@code NAME} reads {@code skill.ID.NAME} where the file has it (the
 * reference's tensor-source indirection done once, for the whole model), and no skills remain to choose from. For a
 * process that runs one skill on a device whose whole-model forward takes no per-row overlays: the device then holds
 * the skill's tensors in place of the backbone's, and nothing else changes. Any tensor a skill replaces is applied,
 * norms included.
 */
public final class SkillWeights implements Weights {
    private final Weights base;
    private final String prefix;

    public SkillWeights(Weights base, String skill) {
        if (!base.skillIds().contains(skill))
            throw new IllegalArgumentException("unknown skill '" + skill + "'; " + (base.skillIds().isEmpty()
                    ? "the file has no skills" : "the file has: " + String.join(", ", base.skillIds())));
        this.base = base;
        this.prefix = "skill." + skill + ".";
    }

    @Override public Tensor find(String name) {
        if (!name.startsWith("skill.")) {
            Tensor t = base.find(prefix + name);
            if (t != null) return t;
        }
        return base.find(name);
    }

    @Override public Set<String> names() { return base.names(); }

    @Override public List<String> skillIds() { return List.of(); }

    @Override public dev.cmf4j.format.Masks masks() { return base.masks(); }

    @Override public void checkIntact() { base.checkIntact(); }
}
