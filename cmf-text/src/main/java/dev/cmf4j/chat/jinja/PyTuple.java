package dev.cmf4j.chat.jinja;

import java.util.List;

/** A Python tuple: immutable, prints with parentheses, never equal to a list. */
record PyTuple(List<Object> items) {
    PyTuple {
        items = java.util.Collections.unmodifiableList(new java.util.ArrayList<>(items));
    }

    static PyTuple of(Object... items) {
        return new PyTuple(java.util.Arrays.asList(items));
    }
}
