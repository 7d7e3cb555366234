package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Evaluated call arguments with Python-style binding of positional and keyword parameters. */
final class Args {

    static final Args EMPTY = new Args(List.of(), Map.of());

    final List<Object> positional;
    final Map<String, Object> keywords;

    Args(List<Object> positional, Map<String, Object> keywords) {
        this.positional = positional;
        this.keywords = keywords;
    }

    static Args of(Object... positional) {
        return new Args(java.util.Arrays.asList(positional), Map.of());
    }

    /** The same arguments with one value put in front (a filter's subject, a method's self). */
    Args prepend(Object first) {
        List<Object> p = new java.util.ArrayList<>(positional.size() + 1);
        p.add(first);
        p.addAll(positional);
        return new Args(p, keywords);
    }

    int size() {
        return positional.size();
    }

    boolean has(int index, String name) {
        return index < positional.size() || keywords.containsKey(name);
    }

    /** Parameter number index (0-based) called name, or def when not given. */
    Object get(int index, String name, Object def) {
        if (index < positional.size()) {
            if (name != null && keywords.containsKey(name)) {
                throw new TemplateException(Kind.TypeError, "got multiple values for argument '" + name + "'");
            }
            return positional.get(index);
        }
        if (name != null && keywords.containsKey(name)) return keywords.get(name);
        return def;
    }

    Object require(int index, String name, String fn) {
        if (!has(index, name)) {
            throw new TemplateException(Kind.TypeError, fn + "() missing required argument '" + name + "' (pos " + (index + 1) + ")");
        }
        return get(index, name, null);
    }

    /** Rejects more positional arguments than names, and keywords not among names. */
    Args check(String fn, String... names) {
        if (positional.size() > names.length) {
            throw new TemplateException(Kind.TypeError, fn + "() takes at most " + names.length + " argument(s) (" + positional.size() + " given)");
        }
        outer:
        for (String k : keywords.keySet()) {
            for (String n : names) if (n.equals(k)) continue outer;
            throw new TemplateException(Kind.TypeError, fn + "() got an unexpected keyword argument '" + k + "'");
        }
        return this;
    }

    static Map<String, Object> kw() {
        return new LinkedHashMap<>();
    }
}
