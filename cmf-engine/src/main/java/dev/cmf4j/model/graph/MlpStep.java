package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Glu;
import dev.cmf4j.backend.MatMul;
import dev.cmf4j.model.Ffn;

/** Gated MLP: down(glu(gate·x, up·x)). */
final class MlpStep implements FfnStep {
    private final MatMul mm;
    private final Linear gate, up, down;
    private final Linear.Shared gateUp;
    private final Glu glu;
    final int intermediate;

    /** The layer whose task-mask FFN bits apply to this MLP, or -1 (a shared expert: none). */
    private final int layer;

    /** The threads a prompt chunk's gate activation is spread over (the backend's host pool), or null: one thread. */
    private final dev.cmf4j.backend.cpu.kernel.WorkerPool pool;

    /**
     * Fewest gate values (tokens × intermediate) from which a chunk's activation is split over the pool: below it
     * (decode rows) the hand-off costs more than the exp calls it shares out. Tests lower it to split small models.
     */
    static volatile int gluSplitFrom = 16384;

    MlpStep(Ffn.GatedMlp m, int hidden, Loader l, MatMul mm, int layer) {
        this(m, hidden, l, mm, layer, null);
    }

    MlpStep(Ffn.GatedMlp m, int hidden, Loader l, MatMul mm, int layer, dev.cmf4j.backend.cpu.kernel.WorkerPool pool) {
        this.mm = mm;
        this.pool = pool;
        this.layer = layer;
        var g = l.matrixRows(m.gate(), hidden);
        this.intermediate = g.outDim();
        this.gate = l.overlaid(m.gate(), g, m.gateBias(), l.optionalVector(m.gateBias(), intermediate));
        this.up = l.linear(m.up(), m.upBias(), intermediate, hidden);
        this.down = l.linear(m.down(), m.downBias(), hidden, intermediate);
        this.gateUp = new Linear.Shared(gate, up);
        this.glu = m.glu();
    }

    static final class Scratch {
        final float[] g, u;
        final float[][] gu;   // {g, u}: the shared product's outputs

        Scratch(int maxChunk, int inter) {
            g = new float[maxChunk * inter];
            u = new float[maxChunk * inter];
            gu = new float[][] {g, u};
        }
    }

    @Override public Object newScratch(int maxChunk) { return new Scratch(maxChunk, intermediate); }

    @Override public void forward(float[] normed, float[] residual, float[] out, int tokens, Object scratch, RowOverlay ro) {
        Scratch s = (Scratch) scratch;
        gateUp.apply(mm, normed, tokens, s.gu, ro);
        int n = tokens * intermediate;
        float[] g = s.g, u = s.u;
        if (pool != null && pool.threads() > 1 && n >= gluSplitFrom)   // each value on its own: the same bits on any split
            pool.parallelFor(n, 256, (from, to) -> { for (int i = from; i < to; i++) g[i] = glu.apply(g[i], u[i]); });
        else for (int i = 0; i < n; i++) g[i] = glu.apply(g[i], u[i]);
        if (ro != null && ro.anyTask && layer >= 0)   // neurons a row's task turns off: as if down_proj's columns were 0
            for (int t = 0; t < tokens; t++) {
                TaskMask tm = ro.mask(t);
                int[] off = tm == null ? null : tm.ffnOff[layer];
                if (off != null) for (int i : off) s.g[t * intermediate + i] = 0f;
            }
        down.apply(mm, s.g, tokens, out, ro);
    }
}
