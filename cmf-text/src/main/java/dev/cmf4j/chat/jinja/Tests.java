package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.util.List;
import java.util.Map;
import java.util.Set;

/** jinja2's built-in tests ({@code x is defined}, {@code x is string}, ...), 3.1 semantics. */
final class Tests {

    private Tests() { }

    private static final Set<String> NAMES = Set.of(
            "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "escaped", "even", "false",
            "filter", "float", "ge", ">=", "gt", ">", "greaterthan", "in", "integer", "iterable", "le", "<=",
            "lower", "lt", "<", "lessthan", "mapping", "ne", "!=", "none", "number", "odd", "sameas", "sequence",
            "string", "test", "true", "undefined", "upper");

    static boolean exists(String name) {
        return NAMES.contains(name);
    }

    static boolean apply(String name, Object v, Args a) {
        return switch (name) {
            case "defined" -> !(v instanceof Undefined);
            case "undefined" -> v instanceof Undefined;
            case "none" -> v == null;
            case "boolean" -> v instanceof Boolean;
            case "true" -> Boolean.TRUE.equals(v);
            case "false" -> Boolean.FALSE.equals(v);
            case "integer" -> PyTypes.isInt(v);
            case "float" -> v instanceof Double;
            case "number" -> PyTypes.isNumber(v);
            case "string" -> v instanceof String || v instanceof Markup;
            case "mapping" -> v instanceof Map<?, ?>;
            // jinja2: len(value) and value.__getitem__ both work (an Undefined qualifies)
            case "sequence" -> v instanceof String || v instanceof Markup || v instanceof List<?> || v instanceof PyTuple || v instanceof Map<?, ?>
                    || v instanceof PyRange || v instanceof Undefined;
            case "iterable" -> PyTypes.isIterable(v);
            case "callable" -> PyTypes.isCallable(v);
            case "escaped" -> v instanceof Markup;
            case "lower" -> {
                String s = PyRepr.str(v);
                yield s.codePoints().anyMatch(PyStr::isCased) && s.codePoints().noneMatch(c -> Character.isUpperCase(c) || Character.isTitleCase(c));
            }
            case "upper" -> {
                String s = PyRepr.str(v);
                yield s.codePoints().anyMatch(PyStr::isCased) && s.codePoints().noneMatch(c -> Character.isLowerCase(c) || Character.isTitleCase(c));
            }
            case "odd" -> PyTypes.eq(PyOps.binary("%", number(v), 2L), 1L);
            case "even" -> PyTypes.eq(PyOps.binary("%", number(v), 2L), 0L);
            case "divisibleby" -> PyTypes.eq(PyOps.binary("%", number(v), number(arg(a, "num", name))), 0L);
            case "eq", "equalto", "==" -> PyTypes.eq(v, arg(a, "other", name));
            case "ne", "!=" -> !PyTypes.eq(v, arg(a, "other", name));
            case "gt", ">", "greaterthan" -> PyOps.compare(">", v, arg(a, "other", name));
            case "ge", ">=" -> PyOps.compare(">=", v, arg(a, "other", name));
            case "lt", "<", "lessthan" -> PyOps.compare("<", v, arg(a, "other", name));
            case "le", "<=" -> PyOps.compare("<=", v, arg(a, "other", name));
            case "in" -> PyOps.contains(arg(a, "seq", name), v);
            case "sameas" -> sameAs(v, arg(a, "other", name));
            case "filter" -> v instanceof String s && Filters.exists(s);
            case "test" -> v instanceof String s && exists(s);
            default -> throw new TemplateException(Kind.TemplateRuntimeError, "No test named '" + name + "' found.");
        };
    }

    private static Object number(Object v) {
        if (v instanceof Undefined u) throw u.error();
        return v;
    }

    private static Object arg(Args a, String name, String test) {
        return a.require(0, name, test);
    }

    /** Python's {@code is}: identity. None/True/False and small ints are singletons in CPython. */
    private static boolean sameAs(Object a, Object b) {
        if (a == b) return true;
        if (a == null || b == null) return false;
        if (a instanceof Boolean x && b instanceof Boolean y) return x.equals(y);
        if (a instanceof Long x && b instanceof Long y) return x.equals(y) && x >= -5 && x <= 256;
        if (a instanceof String x && b instanceof String y) return x.equals(y) && x.length() <= 1;
        return false;
    }
}
