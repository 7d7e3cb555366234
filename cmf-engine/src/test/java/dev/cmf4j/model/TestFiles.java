package dev.cmf4j.model;

import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.format.DType;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

/** Engine test helpers over HF safetensors checkpoints. */
public final class TestFiles {
    private TestFiles() {}

    /** The float tensors of an open checkpoint as engine weights (read in place; valid while it is open). */
    public static Weights weights(SafetensorsReader r) {
        Map<String, Tensor> map = new HashMap<>();
        for (SafetensorsReader.Tensor t : r.tensors()) {
            DType dt = switch (t.dtype()) {
                case F32 -> DType.F32;
                case F16 -> DType.F16;
                case BF16 -> DType.BF16;
                default -> null;
            };
            if (dt != null) map.put(t.name(), new Tensor(t.name(), dt, t.shape(), r.bytes(t.name())));
        }
        return new Weights() {
            @Override public Tensor find(String name) { return map.get(name); }

            @Override public Set<String> names() { return map.keySet(); }
        };
    }

    public static int[] ints(long[] v) {
        int[] out = new int[v.length];
        for (int i = 0; i < v.length; i++) out[i] = Math.toIntExact(v[i]);
        return out;
    }
}
