package dev.cmf4j.model.graph;

/**
 * What a sequence reads its weights through: one of the file's skills (its {@code skill.ID.NAME} tensors in place of
 * the backbone's) and/or one un-merged LoRA adapter (a low-rank delta added to the products it targets, times
 * {@code adapterScale}) and/or one task mask of the file (FFN neurons, heads, layers and experts turned off). Slot 0 is
 * "none" for each. Made by {@link Graph#overlay}, which checks the names.
 */
public record Overlay(int skill, String skillId, int adapter, String adapterName, float adapterScale, int task,
                      String taskName) {
    /** The backbone alone. */
    public static final Overlay NONE = new Overlay(0, null, 0, null, 0f, 0, null);

    public Overlay {
        if (skill < 0 || adapter < 0 || task < 0) throw new IllegalArgumentException("negative slot");
        if (!Float.isFinite(adapterScale)) throw new IllegalArgumentException("adapter scale must be finite");
    }

    public boolean isBackbone() { return skill == 0 && adapter == 0 && task == 0; }

    /** This overlay with task mask {@code t} (slot 0: none), as {@link Graph#withTask} makes it. */
    Overlay withTask(int t, String name) { return new Overlay(skill, skillId, adapter, adapterName, adapterScale, t, name); }

    @Override public String toString() {
        if (isBackbone()) return "backbone";
        String s = skill == 0 ? "" : "skill " + skillId;
        String a = adapter == 0 ? "" : "lora " + adapterName + (adapterScale == 1f ? "" : "×" + adapterScale);
        String t = taskName == null ? "" : "task " + taskName;
        return String.join(" + ", java.util.stream.Stream.of(s, a, t).filter(x -> !x.isEmpty()).toList());
    }
}
