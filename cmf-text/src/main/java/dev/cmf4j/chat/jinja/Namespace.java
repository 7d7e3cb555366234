package dev.cmf4j.chat.jinja;

import java.util.LinkedHashMap;
import java.util.Map;

/** jinja2's {@code namespace(...)}: the one mutable object a template may assign attributes on. */
final class Namespace {
    final Map<Object, Object> attrs = new LinkedHashMap<>();
}
