package dev.cmf4j.backend;

import java.util.List;
import java.util.Map;

/**
 * What a file's skills replace in a {@link DecoderPlan}, for a device that switches them per row: by skill slot − 1
 * (slot 0 is the backbone), each replaced matrix of the plan → the skill's matrix of the same shape, and each replaced
 * bias vector of the plan → the skill's. Both maps are keyed by identity (the plan's own objects), so a backend finds a
 * replacement from what it uploaded without knowing tensor names.
 *
 * @param ids      the skills' ids, slot i + 1 is ids.get(i)
 * @param matrices per skill, plan matrix → replacement ({@link java.util.IdentityHashMap})
 * @param biases   per skill, plan bias → replacement ({@link java.util.IdentityHashMap})
 */
public record DeviceSkills(List<String> ids, List<Map<Matrix, Matrix>> matrices, List<Map<float[], float[]>> biases) {
    public DeviceSkills {
        if (matrices.size() != ids.size() || biases.size() != ids.size())
            throw new IllegalArgumentException("one replacement map per skill");
        ids = List.copyOf(ids);
        matrices = List.copyOf(matrices);
        biases = List.copyOf(biases);
    }

    /** No skills. */
    public static final DeviceSkills NONE = new DeviceSkills(List.of(), List.of(), List.of());

    /** The replacement of {@code m} by skill {@code slot} (1-based), or null where it keeps the plan's. */
    public Matrix matrix(int slot, Matrix m) { return slot == 0 ? null : matrices.get(slot - 1).get(m); }

    /** The replacement of bias {@code b} by skill {@code slot} (1-based), or null where it keeps the plan's. */
    public float[] bias(int slot, float[] b) { return slot == 0 || b == null ? null : biases.get(slot - 1).get(b); }
}
