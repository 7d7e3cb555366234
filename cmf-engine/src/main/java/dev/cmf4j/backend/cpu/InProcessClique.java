package dev.cmf4j.backend.cpu;

import dev.cmf4j.backend.Collective;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CyclicBarrier;

/**
 * The collectives of a tensor-parallel group whose ranks are threads of one process (the CPU reference of what NCCL
 * does between GPUs). An all-reduce sums the ranks' rows in rank order on every rank, so each gets the same bits. A
 * rank that fails {@link #abort}s the clique: the others' pending and later calls throw instead of waiting forever.
 */
public final class InProcessClique {
    private final int ranks;
    private final CyclicBarrier barrier;
    private final float[][] deposited;
    private final int[] offsets, counts;
    private volatile boolean aborted;

    private InProcessClique(int ranks) {
        if (ranks < 1) throw new IllegalArgumentException("a clique of " + ranks + " ranks");
        this.ranks = ranks;
        this.barrier = new CyclicBarrier(ranks);
        this.deposited = new float[ranks][];
        this.offsets = new int[ranks];
        this.counts = new int[ranks];
    }

    /** A clique of {@code ranks}; end i is rank i's, to be used from one thread at a time. */
    public static InProcessClique of(int ranks) { return new InProcessClique(ranks); }

    /** The end of rank {@code rank}. */
    public Collective rank(int rank) {
        if (rank < 0 || rank >= ranks) throw new IndexOutOfBoundsException("rank " + rank + " of " + ranks);
        return new End(rank);
    }

    /** The ends of every rank, in rank order. */
    public List<Collective> ends() {
        List<Collective> out = new ArrayList<>(ranks);
        for (int r = 0; r < ranks; r++) out.add(rank(r));
        return out;
    }

    /** Breaks the clique after a rank failed: calls waiting and to come throw {@link Aborted}. */
    public void abort() {
        aborted = true;
        barrier.reset();
    }

    public boolean aborted() { return aborted; }

    /** Makes an aborted clique usable again, once no rank is inside a collective. */
    public void reset() {
        barrier.reset();
        aborted = false;
    }

    /** What a rank's collective throws when another rank aborted the clique. */
    public static final class Aborted extends IllegalStateException {
        Aborted(String message, Throwable cause) { super(message, cause); }
    }

    private void await() {
        if (aborted) throw new Aborted("the tensor-parallel group was aborted (another rank failed)", null);
        try {
            barrier.await();
        } catch (BrokenBarrierException e) {
            throw new Aborted("the tensor-parallel group was aborted (another rank failed)", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            abort();
            throw new IllegalStateException("interrupted in a collective", e);
        }
    }

    private final class End implements Collective {
        private final int rank;
        private float[] sum = new float[0];

        End(int rank) { this.rank = rank; }

        @Override public int rank() { return rank; }

        @Override public int ranks() { return ranks; }

        @Override public void allReduceSum(float[] data, int off, int n) {
            if (ranks == 1) return;
            deposited[rank] = data;
            offsets[rank] = off;
            counts[rank] = n;
            await();                                  // every rank's rows are in place
            for (int r = 0; r < ranks; r++)
                if (counts[r] != n) {
                    abort();
                    throw new IllegalStateException("all-reduce of " + n + " floats on rank " + rank + ", " + counts[r] + " on rank " + r);
                }
            if (sum.length < n) sum = new float[n];
            float[] s = sum;
            System.arraycopy(deposited[0], offsets[0], s, 0, n);
            for (int r = 1; r < ranks; r++) {
                float[] d = deposited[r];
                int o = offsets[r];
                for (int i = 0; i < n; i++) s[i] += d[o + i];
            }
            await();                                  // every rank has read the others' rows
            System.arraycopy(s, 0, data, off, n);
        }
    }
}
