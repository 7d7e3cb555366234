package dev.cmf4j.backend;

/**
 * One rank's end of a tensor-parallel group's collectives: the calls every rank of the group makes in the same order,
 * each returning once all ranks have made it. On the CPU {@link dev.cmf4j.backend.cpu.InProcessClique} (the ranks are
 * threads of one process); between GPUs NCCL ({@code backend.cuda.Nccl}).
 */
public interface Collective {

    /** This end's rank, 0..{@link #ranks()}−1. */
    int rank();

    /** The ranks of the group. */
    int ranks();

    /**
     * {@code data[off, off + n)} becomes its sum over the ranks, the same bits on every rank (the residual stream each
     * rank keeps whole must not drift apart); every rank passes the same {@code n}.
     */
    void allReduceSum(float[] data, int off, int n);
}
