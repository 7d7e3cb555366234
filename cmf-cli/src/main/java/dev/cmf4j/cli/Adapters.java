package dev.cmf4j.cli;

import dev.cmf4j.convert.PeftAdapter;
import dev.cmf4j.model.LowRankAdapter;

import java.util.HashMap;
import java.util.Map;

/** PEFT adapters as the engine applies them un-merged. */
final class Adapters {
    private Adapters() {}

    /** {@code a}'s factors as engine deltas, named {@code name} (null: the adapter folder's name). */
    static LowRankAdapter toEngine(PeftAdapter a, String name) {
        Map<String, LowRankAdapter.Delta> d = new HashMap<>();
        a.targets().forEach((n, t) -> d.put(n, new LowRankAdapter.Delta(t.rank(), t.in(), t.out(), t.a(), t.b(), t.scale())));
        return new LowRankAdapter(name != null ? name : a.name(), d);
    }
}
