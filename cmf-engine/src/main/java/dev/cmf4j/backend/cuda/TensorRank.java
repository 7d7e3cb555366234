package dev.cmf4j.backend.cuda;

import java.lang.foreign.MemorySegment;

/**
 * A GPU's place in a tensor-parallel group (issue 26): the NCCL communicator of rank {@code rank} of {@code ranks}. The
 * resident forward of a rank's plan sums the row-parallel products' outputs through it, on the rank's stream.
 */
record TensorRank(Nccl nccl, MemorySegment comm, int rank, int ranks) {
    TensorRank {
        if (rank < 0 || rank >= ranks) throw new IllegalArgumentException("rank " + rank + " of " + ranks);
    }
}
