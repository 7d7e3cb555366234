package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.model.LayerSplit;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.Weights;

import java.util.List;
import java.util.function.IntFunction;

/**
 * A model split into a pipeline by layers ({@link LayerSplit}) run one sequence at a time: stage s's {@link Graph} on
 * its own backend; a step runs the stages in turn, each but the last handing its last layer's rows [tokens, hidden] to
 * the next through the host (device to host to device: a first version; a peer copy between the GPUs would skip the
 * host). Each stage keeps the KV cache and recurrent state of its own layers. The devices take turns: one step keeps one
 * busy at a time (no micro-batches in flight), so the split holds a model too large for one device rather than making
 * it faster.
 */
public final class LayerSplitGraph implements SplitGraph {
    private final List<LayerSplit.Stage> stages;
    private final Graph[] graphs;
    private final int vocab, hidden;

    private LayerSplitGraph(List<LayerSplit.Stage> stages, IntFunction<Backend> backends) {
        this.stages = stages;
        this.graphs = new Graph[stages.size()];
        for (int s = 0; s < graphs.length; s++) graphs[s] = Graph.ofStage(stages.get(s), backends.apply(s));
        this.vocab = stages.getFirst().spec().vocab();
        this.hidden = stages.getFirst().spec().hidden();
    }

    /**
     * {@code spec} over {@code weights} in {@code stages} stages, stage s's graph on {@code backends.apply(s)}; a
     * {@link dev.cmf4j.model.ModelException} saying why when the model cannot be split that way.
     */
    public static LayerSplitGraph of(ModelSpec spec, Weights weights, int stages, IntFunction<Backend> backends) {
        return new LayerSplitGraph(LayerSplit.split(spec, weights, stages), backends);
    }

    @Override public String kind() { return "layers"; }

    @Override public int parts() { return graphs.length; }

    @Override public int vocab() { return vocab; }

    @Override public Graph part(int s) { return graphs[s]; }

    public LayerSplit.Stage stage(int s) { return stages.get(s); }

    /** A sequence: one state a stage, each holding its layers' caches. */
    public final class Sequence implements SplitGraph.Sequence {
        final State[] states;
        boolean broken;

        private Sequence(int maxChunk, int maxContext) {
            states = new State[graphs.length];
            for (int s = 0; s < graphs.length; s++) states[s] = graphs[s].newState(maxChunk, maxContext);
        }

        @Override public int position() { return states[0].position; }

        private LayerSplitGraph graph() { return LayerSplitGraph.this; }
    }

    @Override public Sequence newSequence(int maxChunk, int maxContext) { return new Sequence(maxChunk, maxContext); }

    @Override public void forward(SplitGraph.Sequence sequence, int[] ids, int off, int tokens, float[] logits, boolean allLogits) {
        if (!(sequence instanceof Sequence seq) || seq.graph() != this) throw new IllegalArgumentException("a sequence of another split");
        if (seq.broken) throw new IllegalStateException("this sequence's stages went apart when an earlier step failed");
        float[] rows = new float[tokens * hidden];
        try {
            for (int s = 0; s < graphs.length; s++) {
                boolean last = s == graphs.length - 1;
                // every stage but the last hands its last layer's rows to the next
                Graph.HiddenObserver handOn = last ? null : graphs[s].lastLayer((x, t, h) -> System.arraycopy(x, 0, rows, 0, t * h));
                if (s == 0) graphs[s].forward(seq.states[s], ids, off, tokens, last ? logits : null, allLogits, handOn);
                else graphs[s].forwardRows(seq.states[s], rows, 0, tokens, last ? logits : null, allLogits, handOn);
            }
        } catch (RuntimeException | Error e) {
            seq.broken = true;   // the stages before the failing one have moved on
            throw e;
        }
    }

    @Override public void close() {}
}
