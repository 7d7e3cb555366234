package dev.cmf4j.chat.jinja;

import java.util.List;
import java.util.function.Supplier;

/**
 * A one-shot Python iterator: what jinja2's {@code map}, {@code select}, {@code selectattr},
 * {@code items}, {@code batch}, {@code unique}, ... filters return (generators) and what
 * {@code reverse} gives for a list. Like in Python it is always truthy, has no length, is not
 * JSON-serialisable, and a second pass over it sees nothing. Its items are computed on first use,
 * so errors surface when it is consumed, as with a generator.
 */
final class PyIterator {

    private final String typeName;
    private Supplier<List<Object>> source;
    private List<Object> items;
    private int pos;

    PyIterator(String typeName, Supplier<List<Object>> source) {
        this.typeName = typeName;
        this.source = source;
    }

    String typeName() {
        return typeName;
    }

    private List<Object> items() {
        if (items == null) {
            Supplier<List<Object>> s = source;
            source = null;
            items = s.get();
        }
        return items;
    }

    /** Everything not consumed yet; the iterator is exhausted afterwards. */
    List<Object> drain() {
        List<Object> all = items();
        List<Object> rest = new java.util.ArrayList<>(all.subList(pos, all.size()));
        pos = all.size();
        return rest;
    }

    /** The next item, or {@link PyTypes#MISSING} when exhausted. */
    Object next() {
        List<Object> all = items();
        return pos < all.size() ? all.get(pos++) : PyTypes.MISSING;
    }
}
