package dev.cmf4j.chat.jinja;

import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Attribute and item access with the semantics of jinja2's {@code ImmutableSandboxedEnvironment}
 * (what transformers renders with): {@code obj.name} tries the Python attribute first, then the
 * item; {@code obj[key]} tries the item first, then the attribute; methods that mutate a list or
 * dict are "unsafe" and give an undefined that raises SecurityError when called.
 */
final class Access {

    private Access() { }

    static final Set<String> STR_METHODS = Set.of(
            "capitalize", "casefold", "center", "count", "endswith", "expandtabs", "find", "format", "index",
            "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
            "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
            "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip",
            "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill",
            "encode", "format_map", "maketrans", "translate");
    static final Set<String> DICT_SAFE = Set.of("get", "items", "keys", "values", "copy", "fromkeys");
    static final Set<String> DICT_UNSAFE = Set.of("clear", "pop", "popitem", "setdefault", "update");
    static final Set<String> LIST_SAFE = Set.of("index", "count", "copy");
    static final Set<String> LIST_UNSAFE = Set.of("append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort");
    static final Set<String> TUPLE_SAFE = Set.of("index", "count");

    /** The Python attribute obj.name, or MISSING when the type has none. */
    static Object pythonAttribute(Object obj, String name) {
        switch (obj) {
            case String s -> {
                if (STR_METHODS.contains(name)) return new BoundMethod(s, name);
            }
            case Markup m -> {
                if (STR_METHODS.contains(name)) return new BoundMethod(m, name);
            }
            case Map<?, ?> m -> {
                if (DICT_SAFE.contains(name)) return new BoundMethod(m, name);
                if (DICT_UNSAFE.contains(name)) return Undefined.unsafe(obj, name);
            }
            case PyTuple t -> {
                if (TUPLE_SAFE.contains(name)) return new BoundMethod(t, name);
            }
            case List<?> l -> {
                if (LIST_SAFE.contains(name)) return new BoundMethod(l, name);
                if (LIST_UNSAFE.contains(name)) return Undefined.unsafe(obj, name);
            }
            case Namespace n -> {
                Object v = PyTypes.dictGet(n.attrs, name);
                if (v != PyTypes.MISSING) return v;
            }
            case Interpreter.LoopState l -> {
                return l.attribute(name);
            }
            case Interpreter.MacroValue m -> {
                if (name.equals("name")) return m.name();
            }
            case Long l -> {
                if (name.equals("real") || name.equals("numerator")) return l;
                if (name.equals("imag")) return 0L;
                if (name.equals("denominator")) return 1L;
            }
            case Double d -> {
                if (name.equals("real")) return d;
                if (name.equals("imag")) return 0.0;
            }
            case PyRange r -> {
                if (name.equals("start")) return r.start();
                if (name.equals("stop")) return r.stop();
                if (name.equals("step")) return r.step();
            }
            case null, default -> { }
        }
        return PyTypes.MISSING;
    }

    /** {@code obj.name}. */
    static Object getattr(Object obj, String name) {
        if (obj instanceof Undefined u) throw u.error();
        Object attr = name.startsWith("__") ? PyTypes.MISSING : pythonAttribute(obj, name);
        if (attr != PyTypes.MISSING) return attr;
        Object item = rawItem(obj, name);
        return item != PyTypes.MISSING ? item : Undefined.member(obj, name);
    }

    /** {@code obj[key]}. */
    static Object getitem(Object obj, Object key) {
        if (obj instanceof Undefined u) throw u.error();
        if (obj instanceof Markup m && (key instanceof PySlice || key instanceof Long || key instanceof Boolean)) {
            Object r = getitem(m.text(), key); // markupsafe wraps __getitem__: the result is Markup again
            return r instanceof String s ? new Markup(s) : r;
        }
        if (key instanceof PySlice s) {
            Object r = Slices.apply(obj, s);
            return r != PyTypes.MISSING ? r : Undefined.member(obj, key);
        }
        Object item = rawItem(obj, key);
        if (item != PyTypes.MISSING) return item;
        if (key instanceof String name && !name.startsWith("__")) {
            Object attr = pythonAttribute(obj, name);
            if (attr != PyTypes.MISSING) return attr;
        }
        return Undefined.member(obj, key);
    }

    /** Python {@code obj[key]} without fallbacks; MISSING where Python raises Lookup/TypeError. */
    @SuppressWarnings("unchecked")
    private static Object rawItem(Object obj, Object key) {
        switch (obj) {
            case Map<?, ?> m -> {
                if (key instanceof Map || key instanceof List && !(key instanceof PyTuple)) return PyTypes.MISSING;
                return PyTypes.dictGet((Map<Object, Object>) m, key);
            }
            case PyTuple t -> {
                return index(t.items(), key);
            }
            case List<?> l -> {
                return index(l, key);
            }
            case String s -> {
                if (!(key instanceof Long) && !(key instanceof Boolean)) return PyTypes.MISSING;
                List<Object> cs = PyStr.chars(s);
                return index(cs, key);
            }
            case PyRange r -> {
                if (!(key instanceof Long) && !(key instanceof Boolean)) return PyTypes.MISSING;
                long i = PyTypes.toLong(key, "index");
                long n = r.length();
                if (i < 0) i += n;
                return i >= 0 && i < n ? r.get(i) : PyTypes.MISSING;
            }
            case null, default -> {
                return PyTypes.MISSING;
            }
        }
    }

    private static Object index(List<?> l, Object key) {
        if (!(key instanceof Long) && !(key instanceof Boolean)) return PyTypes.MISSING;
        long i = PyTypes.toLong(key, "index");
        if (i < 0) i += l.size();
        return i >= 0 && i < l.size() ? l.get((int) i) : PyTypes.MISSING;
    }
}
