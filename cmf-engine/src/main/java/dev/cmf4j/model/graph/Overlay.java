package dev.cmf4j.model.graph;

/**
 * What a sequence reads its weights through: one of the file's skills (its {@code skill.ID.NAME} tensors in place of
 * the backbone's) and/or one un-merged LoRA adapter (a low-rank delta added to the products it targets, times
 * {@code adapterScale}). Slot 0 is "none" for both. Made by {@link Graph#overlay}, which checks the names.
 */
public record Overlay(int skill, String skillId, int adapter, String adapterName, float adapterScale) {
    /** The backbone alone. */
    public static final Overlay NONE = new Overlay(0, null, 0, null, 0f);

    public Overlay {
        if (skill < 0 || adapter < 0) throw new IllegalArgumentException("negative slot");
        if (!Float.isFinite(adapterScale)) throw new IllegalArgumentException("adapter scale must be finite");
    }

    public boolean isBackbone() { return skill == 0 && adapter == 0; }

    @Override public String toString() {
        if (isBackbone()) return "backbone";
        String s = skill == 0 ? "" : "skill " + skillId;
        String a = adapter == 0 ? "" : "lora " + adapterName + (adapterScale == 1f ? "" : "×" + adapterScale);
        return s.isEmpty() ? a : a.isEmpty() ? s : s + " + " + a;
    }
}
