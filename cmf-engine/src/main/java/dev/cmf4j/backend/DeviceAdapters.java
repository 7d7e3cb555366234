package dev.cmf4j.backend;

import java.util.List;
import java.util.Map;

/**
 * The un-merged LoRA adapters a model was opened with, for a device that applies them per row: by adapter slot − 1
 * (slot 0 is none), each targeted matrix of the {@link DecoderPlan} (by identity) → its low-rank delta.
 *
 * @param names  the adapters' names, slot i + 1 is names.get(i)
 * @param deltas per adapter, plan matrix → delta ({@link java.util.IdentityHashMap})
 */
public record DeviceAdapters(List<String> names, List<Map<Matrix, LowRank>> deltas) {
    public DeviceAdapters {
        if (deltas.size() != names.size()) throw new IllegalArgumentException("one delta map per adapter");
        names = List.copyOf(names);
        deltas = List.copyOf(deltas);
    }

    /**
     * y += scale · B·(A·x) for a matrix [out, in].
     *
     * @param a [rank, in] row-major
     * @param b [out, rank] row-major
     */
    public record LowRank(int rank, int in, int out, float[] a, float[] b, float scale) {
        public LowRank {
            if (a.length != (long) rank * in || b.length != (long) out * rank)
                throw new IllegalArgumentException("A or B does not hold [" + rank + ", " + in + "] / [" + out + ", " + rank + "] values");
        }
    }
}
