package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.time.Clock;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A compiled Jinja template rendered with the environment transformers uses for chat templates:
 * jinja2's {@code ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
 * extensions=[AssistantTracker, loopcontrols])} with {@code tojson} replaced by
 * {@code json.dumps(x, ensure_ascii=False, ...)} and the globals {@code raise_exception} and
 * {@code strftime_now}. Compiling parses once; {@link #render} is thread-safe.
 */
public final class Template {

    private final List<Node> body;

    private Template(List<Node> body) {
        this.body = body;
    }

    /** Parses source; a syntax error is a {@link TemplateException} naming the line. */
    public static Template compile(String source) {
        return new Template(Parser.parse(source));
    }

    /** Renders with the system clock for {@code strftime_now}. */
    public String render(Map<String, ?> variables) {
        return render(variables, Clock.systemDefaultZone());
    }

    /**
     * Renders with the given variables (JSON-like Java values: Map, List, String, Number, Boolean,
     * null; converted to the Python model first). clock drives {@code strftime_now}.
     */
    public String render(Map<String, ?> variables, Clock clock) {
        return render(variables, clock, Interpreter.MAX_RENDER_MILLIS);
    }

    /** Tests: a render with another wall-time limit. */
    String render(Map<String, ?> variables, Clock clock, long maxRenderMillis) {
        Map<String, Object> vars = new LinkedHashMap<>();
        for (Map.Entry<String, ?> e : variables.entrySet()) vars.put(e.getKey(), toPython(e.getValue(), 0));
        return new Interpreter(globals(clock), maxRenderMillis).render(body, vars);
    }

    private static Map<String, Object> globals(Clock clock) {
        Map<String, Object> g = new LinkedHashMap<>();
        g.put("range", (PyCallable) Template::range);
        g.put("dict", (PyCallable) a -> {
            Map<Object, Object> m = new LinkedHashMap<>();
            if (a.positional.size() > 1) throw new TemplateException(Kind.TypeError, "dict expected at most 1 argument, got " + a.positional.size());
            if (!a.positional.isEmpty()) fill(m, a.positional.getFirst());
            m.putAll(a.keywords);
            return m;
        });
        g.put("namespace", (PyCallable) a -> {
            Namespace ns = new Namespace();
            for (Object p : a.positional) fill(ns.attrs, p);
            ns.attrs.putAll(a.keywords);
            return ns;
        });
        g.put("joiner", (PyCallable) a -> {
            String sep = PyRepr.str(a.check("joiner", "sep").get(0, "sep", ", "));
            boolean[] used = {false};
            return (PyCallable) x -> {
                if (!used[0]) {
                    used[0] = true;
                    return "";
                }
                return sep;
            };
        });
        g.put("raise_exception", (PyCallable) a -> {
            throw new TemplateException(Kind.TemplateError, PyRepr.str(a.require(0, "message", "raise_exception")));
        });
        g.put("strftime_now", (PyCallable) a -> {
            Object fmt = a.require(0, "format", "strftime_now");
            if (!(fmt instanceof String f)) throw new TemplateException(Kind.TypeError, "strftime() argument 1 must be str, not " + PyTypes.typeName(fmt));
            return Strftime.format(LocalDateTime.now(clock), f);
        });
        return g;
    }

    private static void fill(Map<Object, Object> m, Object source) {
        if (source instanceof Map<?, ?> src) {
            for (Map.Entry<?, ?> e : src.entrySet()) PyTypes.dictPut(m, e.getKey(), e.getValue());
            return;
        }
        for (Object pair : PyTypes.iterate(source)) {
            List<Object> kv = PyTypes.iterate(pair);
            if (kv.size() != 2) throw new TemplateException(Kind.ValueError, "dictionary update sequence element has length " + kv.size() + "; 2 is required");
            PyTypes.dictPut(m, kv.get(0), kv.get(1));
        }
    }

    private static Object range(Args a) {
        if (a.positional.isEmpty() || a.positional.size() > 3 || !a.keywords.isEmpty()) {
            throw new TemplateException(Kind.TypeError, "range expected 1 to 3 integer arguments");
        }
        long start = 0, stop, step = 1;
        if (a.positional.size() == 1) {
            stop = PyTypes.toLong(a.positional.getFirst(), "range()");
        } else {
            start = PyTypes.toLong(a.positional.get(0), "range()");
            stop = PyTypes.toLong(a.positional.get(1), "range()");
            if (a.positional.size() == 3) step = PyTypes.toLong(a.positional.get(2), "range()");
        }
        if (step == 0) throw new TemplateException(Kind.ValueError, "range() arg 3 must not be zero");
        PyRange r = new PyRange(start, stop, step);
        if (r.length() > Interpreter.MAX_RANGE) {
            throw new TemplateException(Kind.OverflowError, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + Interpreter.MAX_RANGE + ").");
        }
        return r;
    }

    /**
     * Converts a JSON-like Java value to the interpreter's Python model: integers to Long (BigInteger
     * beyond 64 bits), other numbers to Double, maps to insertion-ordered dicts, lists to lists.
     */
    static Object toPython(Object v, int depth) {
        if (depth > 1000) throw new TemplateException(Kind.LimitExceeded, "input value nested deeper than 1000 levels");
        return switch (v) {
            case null -> null;
            case String s -> s;
            case Boolean b -> b;
            case Long l -> l;
            case Integer i -> (long) i;
            case Short s -> (long) s;
            case Byte b -> (long) b;
            case BigInteger b -> b.bitLength() < 64 ? (Object) b.longValue() : b;
            case Double d -> d;
            case Float f -> (double) f;
            case BigDecimal d -> d.doubleValue();
            case Number n -> n.doubleValue();
            case CharSequence cs -> cs.toString();
            case Map<?, ?> m -> {
                Map<Object, Object> out = new LinkedHashMap<>();
                for (Map.Entry<?, ?> e : m.entrySet()) out.put(toPython(e.getKey(), depth + 1), toPython(e.getValue(), depth + 1));
                yield out;
            }
            case List<?> l -> {
                List<Object> out = new ArrayList<>(l.size());
                for (Object o : l) out.add(toPython(o, depth + 1));
                yield out;
            }
            case Object[] arr -> toPython(java.util.Arrays.asList(arr), depth);
            default -> throw new IllegalArgumentException("cannot pass a " + v.getClass().getName() + " to a template; use Map, List, String, Number, Boolean or null");
        };
    }
}
