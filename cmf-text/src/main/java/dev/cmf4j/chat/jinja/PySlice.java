package dev.cmf4j.chat.jinja;

/** A slice key {@code [start:stop:step]}; each part is a Python value (usually Long or None). */
record PySlice(Object start, Object stop, Object step) { }
