package dev.cmf4j.model;

import java.util.List;
import java.util.Set;

/**
 * Where the engine finds its weights by (HF-style) tensor name. The file-backed implementation reads
 * them in place from a CMF memory map; tests may supply others.
 */
public interface Weights {
    /** The tensor called {@code name}, or null when there is none. */
    Tensor find(String name);

    /** Every tensor name. */
    Set<String> names();

    /**
     * The ids of the skills the file registers (each one's replacement tensors are named {@code skill.ID.NAME});
     * none by default.
     */
    default List<String> skillIds() { return List.of(); }

    /** The file's task masks, or null when it has none. */
    default dev.cmf4j.format.Masks masks() { return null; }

    default boolean has(String name) { return find(name) != null; }

    /**
     * Asked after a memory fault while reading the weights: throws an error naming the source when it changed under
     * them (a mapped file truncated); returns when it knows of nothing wrong.
     */
    default void checkIntact() { }

    /**
     * What makes these weights other than the file's as stored (a blend's skill weights), or empty: state snapshots
     * mix it into their hash, so a sequence computed through one blend is refused under another.
     */
    default String variant() { return ""; }

    /** The tensor called {@code name}; a {@link ModelException} naming it when it is missing. */
    default Tensor get(String name) {
        Tensor t = find(name);
        if (t == null) throw new ModelException("missing tensor '" + name + "'");
        return t;
    }
}
