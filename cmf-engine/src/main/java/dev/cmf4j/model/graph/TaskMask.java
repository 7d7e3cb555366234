package dev.cmf4j.model.graph;

import dev.cmf4j.format.Masks;

/**
 * One task mask resolved for the CPU graph (CMF_FORMAT.md §1.6): per layer, whether it runs, which FFN neurons and
 * attention heads are off (their activations zeroed before the down and o projections: the model with those weight
 * columns zeroed), and which MoE experts may not be routed to (their router logits −∞ before the softmax, so the
 * softmax renormalises over the routable ones: the model with those experts removed). No weight is touched.
 */
final class TaskMask {
    final String name;
    final boolean[] layerOff;
    /** Per layer the neuron / head indices that are off, or null when all are on. */
    final int[][] ffnOff, headsOff;
    /** Per layer, expert e off, or null when all are routable. */
    final boolean[][] expertOff;

    private TaskMask(String name, boolean[] layerOff, int[][] ffnOff, int[][] headsOff, boolean[][] expertOff) {
        this.name = name;
        this.layerOff = layerOff;
        this.ffnOff = ffnOff;
        this.headsOff = headsOff;
        this.expertOff = expertOff;
    }

    /** The mask's bits for {@code layers} layers, or null when every bit is on (an all-ones mask costs nothing). */
    static TaskMask of(Masks.TaskMask m, int layers) {
        Masks.Geometry g = m.geometry();
        if (g.rows() != layers)
            throw new IllegalArgumentException("it has " + g.rows() + " layer rows for a model of " + layers + " layers"
                    + " (a looped model's per-visit masks are not supported)");
        boolean any = false;
        boolean[] layerOff = new boolean[layers];
        int[][] ffn = new int[layers][], heads = new int[layers][];
        boolean[][] experts = new boolean[layers][];
        for (int l = 0; l < layers; l++) {
            int row = l;
            layerOff[l] = !m.layerActive(l);
            any |= layerOff[l];
            ffn[l] = offs(g.ffnWidth(), i -> m.ffnActive(row, i));
            heads[l] = offs(g.heads(), h -> m.headActive(row, h));
            any |= ffn[l] != null || heads[l] != null;
            if (m.hasExperts()) {
                boolean[] off = new boolean[g.experts()];
                boolean some = false;
                for (int e = 0; e < off.length; e++) some |= off[e] = !m.expertActive(l, e);
                if (some) { experts[l] = off; any = true; }
            }
        }
        return any ? new TaskMask(m.name(), layerOff, ffn, heads, experts) : null;
    }

    private static int[] offs(int n, java.util.function.IntPredicate active) {
        int c = 0;
        for (int i = 0; i < n; i++) if (!active.test(i)) c++;
        if (c == 0) return null;
        int[] out = new int[c];
        for (int i = 0, k = 0; i < n; i++) if (!active.test(i)) out[k++] = i;
        return out;
    }
}
