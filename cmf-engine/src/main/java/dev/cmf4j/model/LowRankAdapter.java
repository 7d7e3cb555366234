package dev.cmf4j.model;

import java.util.Map;

/**
 * A LoRA adapter kept un-merged: per target weight (by its HF tensor name) a low-rank delta
 * {@code ΔW = scale · B·A} that the graph adds to the product of the rows that ask for the adapter, so a new
 * adapter runs without converting anything. Built from a PEFT folder by {@code convert.PeftAdapter}.
 *
 * @param name   how requests name it
 * @param deltas target weight name → its delta
 */
public record LowRankAdapter(String name, Map<String, Delta> deltas) {
    public LowRankAdapter {
        if (name == null || name.isBlank()) throw new IllegalArgumentException("an adapter needs a name");
        deltas = Map.copyOf(deltas);
        if (deltas.isEmpty()) throw new IllegalArgumentException("adapter '" + name + "' targets no weight");
    }

    /**
     * y += scale · B·(A·x) for a weight [out, in].
     *
     * @param a [rank, in] row-major
     * @param b [out, rank] row-major
     */
    public record Delta(int rank, int in, int out, float[] a, float[] b, float scale) {
        public Delta {
            if (rank < 1 || in < 1 || out < 1) throw new IllegalArgumentException("rank, in and out must be >= 1");
            if (a.length != (long) rank * in || b.length != (long) out * rank)
                throw new IllegalArgumentException("A holds " + a.length + " values for [" + rank + ", " + in + "], B "
                        + b.length + " for [" + out + ", " + rank + "]");
            if (!Float.isFinite(scale)) throw new IllegalArgumentException("scale must be finite");
        }
    }
}
