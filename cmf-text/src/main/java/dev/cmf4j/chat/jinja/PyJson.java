package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * Python's {@code json.dumps}, which is what transformers' {@code tojson} filter calls:
 * {@code json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)}.
 * Defaults give {@code ", "} and {@code ": "} separators (or {@code ","} and {@code ": "} when
 * indenting), keys in insertion order, floats as Python's repr, NaN/Infinity as bare words.
 */
public final class PyJson {

    private final String indent;
    private final String itemSep;
    private final String keySep;
    private final boolean ensureAscii;
    private final boolean sortKeys;
    private final StringBuilder out = new StringBuilder();
    private final IdentityHashMap<Object, Boolean> active = new IdentityHashMap<>();

    private PyJson(String indent, String itemSep, String keySep, boolean ensureAscii, boolean sortKeys) {
        this.indent = indent;
        this.itemSep = itemSep;
        this.keySep = keySep;
        this.ensureAscii = ensureAscii;
        this.sortKeys = sortKeys;
    }

    /**
     * {@code json.dumps(value, ensure_ascii=False)} of a JSON-like Java value (Map, List, String,
     * Number, Boolean, null): separators ", " and ": ", keys in insertion order, Python float repr.
     */
    public static String dumps(Object value) {
        PyJson j = new PyJson(null, ", ", ": ", false, false);
        j.write(Template.toPython(value, 0), 0);
        return j.out.toString();
    }

    /** transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False). */
    static String dumps(Object value, Args a) {
        a.check("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
        boolean ensureAscii = PyTypes.truthy(a.get(0, "ensure_ascii", false));
        Object indentArg = a.get(1, "indent", null);
        Object separators = a.get(2, "separators", null);
        boolean sortKeys = PyTypes.truthy(a.get(3, "sort_keys", false));
        String indent = null;
        if (indentArg instanceof String s) indent = s;
        else if (indentArg != null) indent = " ".repeat((int) Math.max(0, PyTypes.toLong(indentArg, "indent")));
        String itemSep = indent == null ? ", " : ",";
        String keySep = ": ";
        if (separators != null) {
            List<Object> seps = PyTypes.iterate(separators);
            if (seps.size() != 2 || !(seps.get(0) instanceof String x) || !(seps.get(1) instanceof String y)) {
                throw new TemplateException(Kind.ValueError, "separators must be a (item_separator, key_separator) pair of strings");
            }
            itemSep = x;
            keySep = y;
        }
        PyJson j = new PyJson(indent, itemSep, keySep, ensureAscii, sortKeys);
        j.write(value, 0);
        return j.out.toString();
    }

    private void newline(int level) {
        if (indent == null) return;
        out.append('\n');
        for (int i = 0; i < level; i++) out.append(indent);
    }

    private void write(Object v, int level) {
        switch (v) {
            case null -> out.append("null");
            case Boolean b -> out.append(b ? "true" : "false");
            case Long l -> out.append(l);
            case BigInteger b -> out.append(b);
            case Double d -> out.append(floatJson(d));
            case String s -> string(s);
            case Markup m -> string(m.text());
            case PyTuple t -> array(t.items(), t, level);
            case List<?> l -> array(l, l, level);
            case Map<?, ?> m -> object(m, level);
            default -> throw new TemplateException(Kind.TypeError, "Object of type " + PyTypes.typeName(v) + " is not JSON serializable");
        }
    }

    private static String floatJson(double d) {
        if (Double.isNaN(d)) return "NaN";
        if (Double.isInfinite(d)) return d > 0 ? "Infinity" : "-Infinity";
        return PyRepr.floatRepr(d);
    }

    private void enter(Object container) {
        if (active.put(container, Boolean.TRUE) != null) throw new TemplateException(Kind.ValueError, "Circular reference detected");
        if (active.size() > 500) throw new TemplateException(Kind.LimitExceeded, "value nested too deeply for tojson");
    }

    private void array(List<?> items, Object identity, int level) {
        if (items.isEmpty()) {
            out.append("[]");
            return;
        }
        enter(identity);
        out.append('[');
        for (int i = 0; i < items.size(); i++) {
            if (i > 0) out.append(itemSep);
            newline(level + 1);
            write(items.get(i), level + 1);
        }
        newline(level);
        out.append(']');
        active.remove(identity);
    }

    private void object(Map<?, ?> m, int level) {
        if (m.isEmpty()) {
            out.append("{}");
            return;
        }
        enter(m);
        List<Map.Entry<String, Object>> entries = new ArrayList<>();
        for (Map.Entry<?, ?> e : m.entrySet()) entries.add(Map.entry(key(e.getKey()), e.getValue() == null ? NULL : e.getValue()));
        if (sortKeys) entries.sort((x, y) -> PyStr.compareCodePoints(x.getKey(), y.getKey()));
        out.append('{');
        boolean first = true;
        for (Map.Entry<String, Object> e : entries) {
            if (!first) out.append(itemSep);
            first = false;
            newline(level + 1);
            string(e.getKey());
            out.append(keySep);
            write(e.getValue() == NULL ? null : e.getValue(), level + 1);
        }
        newline(level);
        out.append('}');
        active.remove(m);
    }

    private static final Object NULL = new Object();

    /** json.dumps coerces str, int, float, bool and None keys to strings; anything else is a TypeError. */
    private static String key(Object k) {
        return switch (k) {
            case String s -> s;
            case Markup m -> m.text();
            case null -> "null";
            case Boolean b -> b ? "true" : "false";
            case Long l -> l.toString();
            case BigInteger b -> b.toString();
            case Double d -> floatJson(d);
            default -> throw new TemplateException(Kind.TypeError, "keys must be str, int, float, bool or None, not " + PyTypes.typeName(k));
        };
    }

    private void string(String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20 || (ensureAscii && c > 0x7e)) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
                }
            }
        }
        out.append('"');
    }
}
