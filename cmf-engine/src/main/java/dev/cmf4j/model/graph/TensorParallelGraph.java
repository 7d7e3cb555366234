package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cpu.InProcessClique;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.TensorParallel;
import dev.cmf4j.model.Weights;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.IntFunction;

/**
 * A model split over ranks ({@link TensorParallel}) run together: one {@link Graph} a rank, each on its own backend and
 * its own owner thread, their all-reduces through an {@link InProcessClique}; a step runs every rank's forward at once
 * and gathers the vocabulary slices of their logits into whole rows. On the CPU it is the reference a device split is
 * checked against (the rank's products in the host's threads: no speed is meant).
 */
public final class TensorParallelGraph implements SplitGraph {
    private final List<TensorParallel.Shard> shards;
    private final Graph[] graphs;
    private final ExecutorService[] owners;
    private final InProcessClique clique;
    private final int vocab;

    private TensorParallelGraph(List<TensorParallel.Shard> shards, IntFunction<Backend> backends) {
        this.shards = shards;
        int n = shards.size();
        this.clique = InProcessClique.of(n);
        this.graphs = new Graph[n];
        for (int r = 0; r < n; r++) graphs[r] = Graph.ofRank(shards.get(r), backends.apply(r), clique.rank(r));
        // the all-reduces of every rank go through one kind of collective: the device's (NCCL) or the host's clique
        for (int r = 1; r < n; r++)
            if ((graphs[r].device() != null) != (graphs[0].device() != null))
                throw new dev.cmf4j.model.ModelException("tensor parallel: rank " + r + " runs " + (graphs[r].device() != null
                        ? "on its device" : "on the host") + ", rank 0 " + (graphs[0].device() != null ? "on its device" : "on the host"));
        this.owners = new ExecutorService[n];
        for (int r = 0; r < n; r++) {
            int rank = r;
            owners[r] = Executors.newSingleThreadExecutor(task -> {
                Thread t = new Thread(task, "cmf-tp-rank-" + rank);
                t.setDaemon(true);
                return t;
            });
        }
        this.vocab = shards.getFirst().vocab();
    }

    /**
     * {@code spec} over {@code weights} split over {@code ranks}, rank r's graph on {@code backends.apply(r)}; a
     * {@link dev.cmf4j.model.ModelException} saying why when the model cannot be split that way.
     */
    public static TensorParallelGraph of(ModelSpec spec, Weights weights, int ranks, IntFunction<Backend> backends) {
        return new TensorParallelGraph(TensorParallel.split(spec, weights, ranks), backends);
    }

    public int ranks() { return graphs.length; }

    @Override public String kind() { return "tensor"; }

    @Override public int parts() { return graphs.length; }

    @Override public Graph part(int r) { return graphs[r]; }

    /** The whole vocabulary (a step's logit rows are this wide). */
    public int vocab() { return vocab; }

    /** Rank {@code r}'s graph (its logits are its vocabulary slice). */
    public Graph rank(int r) { return graphs[r]; }

    public TensorParallel.Shard shard(int r) { return shards.get(r); }

    /** A sequence: one state a rank, each holding the rank's KV heads. */
    public final class Sequence implements SplitGraph.Sequence {
        final State[] states;
        boolean broken;

        private Sequence(int maxChunk, int maxContext) {
            states = new State[graphs.length];
            for (int r = 0; r < graphs.length; r++) states[r] = graphs[r].newState(maxChunk, maxContext);
        }

        private TensorParallelGraph graph() { return TensorParallelGraph.this; }

        /** Tokens the sequence has taken. */
        @Override public int position() { return states[0].position; }
    }

    public Sequence newSequence(int maxChunk, int maxContext) { return new Sequence(maxChunk, maxContext); }

    /**
     * As {@link Graph#forward(State, int[], int, int, float[], boolean, Graph.HiddenObserver)} over every rank at once:
     * {@code logits} receives [tokens, vocab] rows when {@code allLogits}, else the last token's (null: no head). A step
     * that fails on any rank fails on all (the clique is aborted) and leaves the sequence unusable.
     */
    @Override public void forward(SplitGraph.Sequence sequence, int[] ids, int off, int tokens, float[] logits, boolean allLogits) {
        if (!(sequence instanceof Sequence seq) || seq.graph() != this) throw new IllegalArgumentException("a sequence of another split");
        if (seq.broken) throw new IllegalStateException("this sequence's ranks went apart when an earlier step failed");
        int rows = logits == null ? 0 : allLogits ? tokens : 1;
        if (logits != null && logits.length < (long) rows * vocab)
            throw new IllegalArgumentException("logits buffer holds " + logits.length / vocab + " rows, the step gives " + rows);
        int n = graphs.length;
        float[][] slices = new float[n][];
        List<Future<?>> done = new ArrayList<>(n);
        for (int r = 0; r < n; r++) {
            int rank = r;
            slices[r] = logits == null ? null : new float[rows * shards.get(r).spec().vocab()];
            done.add(owners[r].submit(() -> {
                try {
                    graphs[rank].forward(seq.states[rank], ids, off, tokens, slices[rank], allLogits, null);
                } catch (RuntimeException | Error e) {
                    clique.abort();   // the other ranks leave their collectives instead of waiting for this one
                    throw e;
                }
            }));
        }
        Throwable failure = null;
        for (Future<?> f : done) {
            try {
                f.get();
            } catch (ExecutionException e) {
                // the failing rank's own error, not the aborts it caused on the others
                if (failure == null || failure instanceof InProcessClique.Aborted) failure = e.getCause();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                clique.abort();
                failure = e;
            }
        }
        if (failure != null) {
            seq.broken = true;
            clique.reset();
            if (failure instanceof RuntimeException re) throw re;
            if (failure instanceof Error er) throw er;
            throw new IllegalStateException(failure);
        }
        if (logits == null) return;
        for (int r = 0; r < n; r++) {
            TensorParallel.Shard s = shards.get(r);
            int w = s.spec().vocab();
            for (int t = 0; t < rows; t++) System.arraycopy(slices[r], t * w, logits, t * vocab + s.vocabFrom(), w);
        }
    }

    @Override public void close() {
        for (ExecutorService e : owners) e.shutdownNow();
    }
}
