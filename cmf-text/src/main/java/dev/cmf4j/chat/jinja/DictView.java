package dev.cmf4j.chat.jinja;

import java.util.Map;

/** {@code dict.items()/keys()/values()}: iterable, sized, not indexable, prints like Python's views. */
record DictView(Kind kind, Map<Object, Object> dict) {
    enum Kind { ITEMS, KEYS, VALUES }
}
