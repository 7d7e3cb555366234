package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The Python object model the interpreter works on. Values are plain Java objects:
 * None = {@code null}, bool = {@link Boolean}, int = {@link Long} (or {@link BigInteger} when it came
 * in too large), float = {@link Double}, str = {@link String}, list = {@link List}, tuple =
 * {@link PyTuple}, dict = {@link Map} (insertion-ordered), plus {@link Undefined}, {@link Namespace},
 * {@link PyRange}, {@link DictView}, {@link BoundMethod}, macros, loops and callables.
 */
final class PyTypes {

    /** Marks "no such key" in dict lookups (None is a legal value). */
    static final Object MISSING = new Object() {
        @Override public String toString() {
            return "<missing>";
        }
    };

    private PyTypes() { }

    static String typeName(Object v) {
        return switch (v) {
            case null -> "NoneType";
            case Boolean b -> "bool";
            case Long l -> "int";
            case BigInteger b -> "int";
            case Double d -> "float";
            case String s -> "str";
            case Markup m -> "Markup";
            case PyTuple t -> "tuple";
            case List<?> l -> "list";
            case Map<?, ?> m -> "dict";
            case Undefined u -> "Undefined";
            case Namespace n -> "Namespace";
            case PyRange r -> "range";
            case DictView d -> switch (d.kind()) {
                case ITEMS -> "dict_items";
                case KEYS -> "dict_keys";
                case VALUES -> "dict_values";
            };
            case PySlice s -> "slice";
            case PyIterator i -> i.typeName();
            case Interpreter.MacroValue m -> "Macro";
            case Interpreter.LoopState l -> "LoopContext";
            case BoundMethod b -> "builtin_function_or_method";
            case PyCallable c -> "function";
            default -> v.getClass().getSimpleName();
        };
    }

    /** jinja2's {@code object_type_repr}: "None", or "<type> object". */
    static String objectTypeRepr(Object v) {
        return v == null ? "None" : typeName(v) + " object";
    }

    static boolean isInt(Object v) {
        return v instanceof Long || v instanceof BigInteger;
    }

    /** int, bool (a Python int subclass) or float. */
    static boolean isNumber(Object v) {
        return v instanceof Long || v instanceof Double || v instanceof Boolean || v instanceof BigInteger;
    }

    static boolean isString(Object v) {
        return v instanceof String;
    }

    static boolean isCallable(Object v) {
        return v instanceof PyCallable || v instanceof BoundMethod || v instanceof Interpreter.MacroValue
                || (v instanceof Interpreter.LoopState l && l.recursive());
    }

    /** An int-like value (bool included) as long; TypeError otherwise. */
    static long toLong(Object v, String what) {
        if (v instanceof Long l) return l;
        if (v instanceof Boolean b) return b ? 1 : 0;
        if (v instanceof BigInteger b) {
            if (b.bitLength() < 64) return b.longValue();
            throw new TemplateException(Kind.OverflowError, "Python int too large to convert to C long");
        }
        if (v instanceof Undefined u) throw u.error();
        throw new TemplateException(Kind.TypeError, what + " must be an integer, not " + typeName(v));
    }

    static double toDouble(Object v) {
        return switch (v) {
            case Double d -> d;
            case Long l -> l;
            case Boolean b -> b ? 1 : 0;
            case BigInteger b -> b.doubleValue();
            case null, default -> throw new TemplateException(Kind.TypeError, "must be real number, not " + typeName(v));
        };
    }

    static boolean truthy(Object v) {
        return switch (v) {
            case null -> false;
            case Boolean b -> b;
            case Long l -> l != 0;
            case Double d -> d != 0.0;
            case BigInteger b -> b.signum() != 0;
            case String s -> !s.isEmpty();
            case Markup m -> !m.text().isEmpty();
            case PyTuple t -> !t.items().isEmpty();
            case List<?> l -> !l.isEmpty();
            case Map<?, ?> m -> !m.isEmpty();
            case Undefined u -> false;
            case PyRange r -> r.length() > 0;
            case DictView d -> !d.dict().isEmpty();
            default -> true;
        };
    }

    /** Python {@code ==}. */
    static boolean eq(Object a, Object b) {
        if (a == b) return true;
        a = Markup.plain(a);
        b = Markup.plain(b);
        if (a == null || b == null) return false;
        if (a instanceof Undefined || b instanceof Undefined) return a instanceof Undefined && b instanceof Undefined;
        if (isNumber(a) && isNumber(b)) {
            if (a instanceof Double || b instanceof Double) return toDouble(a) == toDouble(b);
            return bigOf(a).equals(bigOf(b));
        }
        if (a instanceof String s) return s.equals(b);
        if (a instanceof PyTuple t) return b instanceof PyTuple u && listEq(t.items(), u.items());
        if (a instanceof List<?> l) return b instanceof List<?> m && !(b instanceof PyTuple) && listEq(l, m);
        if (a instanceof Map<?, ?> m) {
            if (!(b instanceof Map<?, ?> n) || m.size() != n.size()) return false;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                @SuppressWarnings("unchecked")
                Object other = dictGet((Map<Object, Object>) n, e.getKey());
                if (other == MISSING || !eq(e.getValue(), other)) return false;
            }
            return true;
        }
        if (a instanceof PyRange r && b instanceof PyRange s) return listEq(iterate(r), iterate(s));
        return a.equals(b);
    }

    private static boolean listEq(List<?> a, List<?> b) {
        if (a.size() != b.size()) return false;
        for (int i = 0; i < a.size(); i++) if (!eq(a.get(i), b.get(i))) return false;
        return true;
    }

    static BigInteger bigOf(Object v) {
        return switch (v) {
            case Long l -> BigInteger.valueOf(l);
            case Boolean b -> b ? BigInteger.ONE : BigInteger.ZERO;
            case BigInteger b -> b;
            default -> throw new IllegalArgumentException(String.valueOf(v));
        };
    }

    /** Python ordering for {@code < <= > >=}; TypeError between unorderable types. */
    static int compare(Object a, Object b, String op) {
        a = Markup.plain(a);
        b = Markup.plain(b);
        if (a instanceof Undefined u) throw u.error();
        if (b instanceof Undefined u) throw u.error();
        if (isNumber(a) && isNumber(b)) {
            if (a instanceof Double || b instanceof Double) {
                double x = toDouble(a), y = toDouble(b);
                return Double.compare(x == 0.0 ? 0.0 : x, y == 0.0 ? 0.0 : y);
            }
            return bigOf(a).compareTo(bigOf(b));
        }
        if (a instanceof String s && b instanceof String t) return PyStr.compareCodePoints(s, t);
        if (a instanceof PyTuple t && b instanceof PyTuple u) return compareLists(t.items(), u.items(), op);
        if (a instanceof List<?> l && b instanceof List<?> m && !(a instanceof PyTuple) && !(b instanceof PyTuple)) return compareLists(l, m, op);
        throw new TemplateException(Kind.TypeError, "'" + op + "' not supported between instances of '" + typeName(a) + "' and '" + typeName(b) + "'");
    }

    private static int compareLists(List<?> a, List<?> b, String op) {
        int n = Math.min(a.size(), b.size());
        for (int i = 0; i < n; i++) {
            if (!eq(a.get(i), b.get(i))) return compare(a.get(i), b.get(i), op);
        }
        return Integer.compare(a.size(), b.size());
    }

    /** Python {@code len()}. */
    static long length(Object v) {
        return switch (v) {
            case String s -> s.codePointCount(0, s.length());
            case Markup m -> m.text().codePointCount(0, m.text().length());
            case PyTuple t -> t.items().size();
            case List<?> l -> l.size();
            case Map<?, ?> m -> m.size();
            case Undefined u -> 0;
            case PyRange r -> r.length();
            case DictView d -> d.dict().size();
            case Namespace n -> throw new TemplateException(Kind.TypeError, "object of type 'Namespace' has no len()");
            case null, default -> throw new TemplateException(Kind.TypeError, "object of type '" + typeName(v) + "' has no len()");
        };
    }

    /** Python {@code iter()} materialised: the items a for-loop or filter sees. */
    static List<Object> iterate(Object v) {
        return switch (v) {
            case PyTuple t -> t.items();
            case List<?> l -> castList(l);
            case Map<?, ?> m -> new ArrayList<>(m.keySet());
            case String s -> PyStr.chars(s);
            case Markup m -> PyStr.chars(m.text());
            case Undefined u -> List.of();
            case PyRange r -> {
                List<Object> out = new ArrayList<>((int) r.length());
                for (long i = 0; i < r.length(); i++) out.add(r.get(i));
                yield out;
            }
            case PyIterator i -> i.drain();
            case DictView d -> {
                List<Object> out = new ArrayList<>(d.dict().size());
                for (Map.Entry<Object, Object> e : d.dict().entrySet()) {
                    out.add(switch (d.kind()) {
                        case ITEMS -> PyTuple.of(e.getKey(), e.getValue());
                        case KEYS -> e.getKey();
                        case VALUES -> e.getValue();
                    });
                }
                yield out;
            }
            case null -> throw new TemplateException(Kind.TypeError, "'NoneType' object is not iterable");
            default -> throw new TemplateException(Kind.TypeError, "'" + typeName(v) + "' object is not iterable");
        };
    }

    static boolean isIterable(Object v) {
        return v instanceof List || v instanceof PyTuple || v instanceof Map || v instanceof String || v instanceof Markup
                || v instanceof Undefined || v instanceof PyRange || v instanceof DictView || v instanceof PyIterator;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> castList(List<?> l) {
        return (List<Object>) l;
    }

    /** Dict lookup with Python key equality (1 == 1.0 == True). Returns {@link #MISSING} when absent. */
    static Object dictGet(Map<Object, Object> m, Object key) {
        key = Markup.plain(key);
        if (key instanceof Map || key instanceof List && !(key instanceof PyTuple)) {
            throw new TemplateException(Kind.TypeError, "unhashable type: '" + typeName(key) + "'");
        }
        Object v = m.get(key);
        if (v != null || m.containsKey(key)) return v;
        if (key instanceof String) return MISSING;
        for (Map.Entry<Object, Object> e : m.entrySet()) if (eq(e.getKey(), key)) return e.getValue();
        return MISSING;
    }

    /** Dict store with Python key equality: an equal existing key keeps its place and spelling. */
    static void dictPut(Map<Object, Object> m, Object key, Object value) {
        key = Markup.plain(key);
        if (key instanceof Map || key instanceof List && !(key instanceof PyTuple) || key instanceof Undefined) {
            throw new TemplateException(Kind.TypeError, "unhashable type: '" + typeName(key) + "'");
        }
        if (!(key instanceof String) && !m.containsKey(key)) {
            for (Map.Entry<Object, Object> e : m.entrySet()) {
                if (eq(e.getKey(), key)) {
                    e.setValue(value);
                    return;
                }
            }
        }
        m.put(key, value);
    }
}
