package dev.cmf4j.chat.jinja;

/** {@code obj.name} where name is a Python method of obj's type (str, dict, list, loop); called later. */
record BoundMethod(Object self, String name) { }
