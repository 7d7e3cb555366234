package dev.cmf4j.model.graph;

import java.util.Arrays;

/**
 * The overlay of every row of one step (resolved from each span's sequence) and the distinct skills and adapters
 * present, plus the gather buffers a replaced product runs its rows through. One per {@link Batch} (so per driving
 * thread); rebuilt each step.
 */
final class RowOverlay {
    int rows;
    int[] skill = new int[64], adapter = new int[64], task = new int[64];
    /** The graph's resolved task masks by slot (null: the model has none); set by the graph each step. */
    TaskMask[] masks;
    /** True when some row runs under a task mask. */
    boolean anyTask;
    float[] scale = new float[64];
    /** Distinct non-zero skill and adapter slots on this step's rows. */
    int[] skills = new int[8], adapters = new int[8];
    int nSkills, nAdapters;
    // gather scratch: row indices, inputs and outputs of one group, the low-rank intermediate
    int[] group = new int[64];
    float[] xg = new float[0], yg = new float[0], t = new float[0];
    // the rows a task lets skip the current layer, and their residual saved across it
    int[] skipRows = new int[64];
    float[] skipped = new float[0];

    void reset(int n) {
        rows = 0;
        anyTask = false;
        nSkills = 0;
        nAdapters = 0;
        if (skill.length < n) {
            int c = Math.max(n, 2 * skill.length);
            skill = new int[c];
            adapter = new int[c];
            task = new int[c];
            scale = new float[c];
            group = new int[c];
            skipRows = new int[c];
        }
    }

    void add(Overlay o, int count) {
        for (int i = 0; i < count; i++, rows++) {
            skill[rows] = o.skill();
            adapter[rows] = o.adapter();
            scale[rows] = o.adapterScale();
            task[rows] = o.task();
        }
        anyTask |= o.task() != 0 && count > 0;
        if (o.skill() != 0 && indexOf(skills, nSkills, o.skill()) < 0) {
            if (nSkills == skills.length) skills = Arrays.copyOf(skills, 2 * nSkills);
            skills[nSkills++] = o.skill();
        }
        if (o.adapter() != 0 && indexOf(adapters, nAdapters, o.adapter()) < 0) {
            if (nAdapters == adapters.length) adapters = Arrays.copyOf(adapters, 2 * nAdapters);
            adapters[nAdapters++] = o.adapter();
        }
    }

    /** True when every row reads the backbone alone (the products run as before, over all rows at once). */
    boolean plain() { return nSkills == 0 && nAdapters == 0; }

    /** The task mask row {@code r} runs under, or null. */
    TaskMask mask(int r) { return masks == null || task[r] == 0 ? null : masks[task[r]]; }

    float[] xg(int n) { if (xg.length < n) xg = new float[n]; return xg; }

    float[] yg(int n) { if (yg.length < n) yg = new float[n]; return yg; }

    float[] t(int n) { if (t.length < n) t = new float[n]; return t; }

    private static int indexOf(int[] a, int n, int v) {
        for (int i = 0; i < n; i++) if (a[i] == v) return i;
        return -1;
    }

    @Override public String toString() {
        return "RowOverlay[rows=" + rows + ", skills=" + Arrays.toString(Arrays.copyOf(skills, nSkills))
                + ", adapters=" + Arrays.toString(Arrays.copyOf(adapters, nAdapters)) + "]";
    }
}
