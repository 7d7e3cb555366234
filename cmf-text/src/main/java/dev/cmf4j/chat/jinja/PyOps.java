package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Python operators on template values, with Python's results and error messages. */
final class PyOps {

    private PyOps() { }

    private static void undefinedCheck(Object a, Object b) {
        if (a instanceof Undefined u) throw u.error();
        if (b instanceof Undefined u) throw u.error();
    }

    private static TemplateException unsupported(String op, Object a, Object b) {
        return new TemplateException(Kind.TypeError, "unsupported operand type(s) for " + op + ": '"
                + PyTypes.typeName(a) + "' and '" + PyTypes.typeName(b) + "'");
    }

    private static boolean intLike(Object v) {
        return v instanceof Long || v instanceof Boolean || v instanceof BigInteger;
    }

    private static Object intResult(BigInteger v) {
        if (v.bitLength() < 64) return v.longValue();
        throw new TemplateException(Kind.OverflowError, "integer result " + v + " does not fit in 64 bits (cmf4j limit)");
    }

    static Object binary(String op, Object a, Object b) {
        undefinedCheck(a, b);
        return switch (op) {
            case "+" -> add(a, b);
            case "-" -> arith(op, a, b);
            case "*" -> mul(a, b);
            case "/" -> div(a, b);
            case "//" -> floorDiv(a, b);
            case "%" -> a instanceof String s ? PyFormat.percent(s, b, false)
                    : a instanceof Markup m ? new Markup(PyFormat.percent(m.text(), b, true)) : mod(a, b);
            case "**" -> pow(a, b);
            default -> throw new IllegalStateException(op);
        };
    }

    private static Object add(Object a, Object b) {
        if (a instanceof Markup m) {
            if (b instanceof String || b instanceof Markup) return new Markup(m.text() + Markup.escape(b).text());
            throw unsupported("+", a, b);
        }
        if (b instanceof Markup m && a instanceof String s) return new Markup(Markup.escape(s).text() + m.text());
        if (a instanceof String s) {
            if (b instanceof String t) {
                if ((long) s.length() + t.length() > Interpreter.MAX_OUTPUT_CHARS) {
                    throw new TemplateException(Kind.LimitExceeded, "string concatenation exceeds " + Interpreter.MAX_OUTPUT_CHARS + " characters");
                }
                return s + t;
            }
            throw new TemplateException(Kind.TypeError, "can only concatenate str (not \"" + PyTypes.typeName(b) + "\") to str");
        }
        if (a instanceof PyTuple t) {
            if (b instanceof PyTuple u) {
                List<Object> out = new ArrayList<>(t.items());
                out.addAll(u.items());
                return new PyTuple(out);
            }
            throw new TemplateException(Kind.TypeError, "can only concatenate tuple (not \"" + PyTypes.typeName(b) + "\") to tuple");
        }
        if (a instanceof List<?> l) {
            if (b instanceof List<?> m && !(b instanceof PyTuple)) {
                if ((long) l.size() + m.size() > Interpreter.MAX_OUTPUT_CHARS) throw new TemplateException(Kind.LimitExceeded, "list concatenation too large");
                List<Object> out = new ArrayList<>(l);
                out.addAll(m);
                return out;
            }
            throw new TemplateException(Kind.TypeError, "can only concatenate list (not \"" + PyTypes.typeName(b) + "\") to list");
        }
        return arith("+", a, b);
    }

    private static Object arith(String op, Object a, Object b) {
        if (!PyTypes.isNumber(a) || !PyTypes.isNumber(b)) throw unsupported(op, a, b);
        if (a instanceof Double || b instanceof Double) {
            double x = PyTypes.toDouble(a), y = PyTypes.toDouble(b);
            return switch (op) {
                case "+" -> x + y;
                case "-" -> x - y;
                case "*" -> x * y;
                default -> throw new IllegalStateException(op);
            };
        }
        BigInteger x = PyTypes.bigOf(a), y = PyTypes.bigOf(b);
        return intResult(switch (op) {
            case "+" -> x.add(y);
            case "-" -> x.subtract(y);
            case "*" -> x.multiply(y);
            default -> throw new IllegalStateException(op);
        });
    }

    private static Object mul(Object a, Object b) {
        if (a instanceof Markup m && intLike(b)) return new Markup(PyStr.repeat(m.text(), PyTypes.toLong(b, "count")));
        if (b instanceof Markup m && intLike(a)) return new Markup(PyStr.repeat(m.text(), PyTypes.toLong(a, "count")));
        if (a instanceof String s && intLike(b)) return PyStr.repeat(s, PyTypes.toLong(b, "count"));
        if (b instanceof String s && intLike(a)) return PyStr.repeat(s, PyTypes.toLong(a, "count"));
        boolean seqA = a instanceof List<?> || a instanceof PyTuple;
        boolean seqB = b instanceof List<?> || b instanceof PyTuple;
        if ((seqA && intLike(b)) || (seqB && intLike(a))) {
            Object seq = seqA ? a : b;
            List<?> l = seq instanceof PyTuple t ? t.items() : (List<?>) seq;
            long n = PyTypes.toLong(seqA ? b : a, "count");
            if (n > 0 && (double) l.size() * n > Interpreter.MAX_OUTPUT_CHARS) {
                throw new TemplateException(Kind.LimitExceeded, "list repetition too large");
            }
            List<Object> out = new ArrayList<>();
            for (long i = 0; i < n; i++) out.addAll(l);
            return seq instanceof PyTuple ? new PyTuple(out) : out;
        }
        if (!PyTypes.isNumber(a) || !PyTypes.isNumber(b)) {
            if (a instanceof String || seqA) {
                throw new TemplateException(Kind.TypeError, "can't multiply sequence by non-int of type '" + PyTypes.typeName(b) + "'");
            }
            throw unsupported("*", a, b);
        }
        return arith("*", a, b);
    }

    private static Object div(Object a, Object b) {
        if (!PyTypes.isNumber(a) || !PyTypes.isNumber(b)) throw unsupported("/", a, b);
        double y = PyTypes.toDouble(b);
        if (y == 0) throw new TemplateException(Kind.ZeroDivisionError, intLike(a) && intLike(b) ? "division by zero" : "float division by zero");
        return PyTypes.toDouble(a) / y;
    }

    private static Object floorDiv(Object a, Object b) {
        if (!PyTypes.isNumber(a) || !PyTypes.isNumber(b)) throw unsupported("//", a, b);
        if (a instanceof Double || b instanceof Double) {
            double x = PyTypes.toDouble(a), y = PyTypes.toDouble(b);
            if (y == 0) throw new TemplateException(Kind.ZeroDivisionError, "float floor division by zero");
            return Math.floor(x / y);
        }
        BigInteger y = PyTypes.bigOf(b);
        if (y.signum() == 0) throw new TemplateException(Kind.ZeroDivisionError, "integer division or modulo by zero");
        BigInteger[] qr = PyTypes.bigOf(a).divideAndRemainder(y);
        BigInteger q = qr[0];
        if (qr[1].signum() != 0 && qr[1].signum() != y.signum()) q = q.subtract(BigInteger.ONE);
        return intResult(q);
    }

    private static Object mod(Object a, Object b) {
        if (!PyTypes.isNumber(a) || !PyTypes.isNumber(b)) throw unsupported("%", a, b);
        if (a instanceof Double || b instanceof Double) {
            double x = PyTypes.toDouble(a), y = PyTypes.toDouble(b);
            if (y == 0) throw new TemplateException(Kind.ZeroDivisionError, "float modulo");
            double r = x % y;
            if (r != 0 && (r < 0) != (y < 0)) r += y;
            else if (r == 0) r = Math.copySign(0.0, y);
            return r;
        }
        BigInteger y = PyTypes.bigOf(b);
        if (y.signum() == 0) throw new TemplateException(Kind.ZeroDivisionError, "integer modulo by zero");
        BigInteger r = PyTypes.bigOf(a).mod(y.abs());
        if (y.signum() < 0 && r.signum() != 0) r = r.add(y);
        return intResult(r);
    }

    private static Object pow(Object a, Object b) {
        if (!PyTypes.isNumber(a) || !PyTypes.isNumber(b)) throw unsupported("** or pow()", a, b);
        if (intLike(a) && intLike(b)) {
            BigInteger x = PyTypes.bigOf(a);
            long e = PyTypes.toLong(b, "exponent");
            if (e >= 0) {
                if (e > 4096 && x.abs().compareTo(BigInteger.ONE) > 0) throw new TemplateException(Kind.OverflowError, "integer power too large");
                return intResult(x.pow((int) e));
            }
            if (x.signum() == 0) throw new TemplateException(Kind.ZeroDivisionError, "0.0 cannot be raised to a negative power");
            return Math.pow(x.doubleValue(), e);
        }
        double x = PyTypes.toDouble(a), y = PyTypes.toDouble(b);
        if (x == 0 && y < 0) throw new TemplateException(Kind.ZeroDivisionError, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != Math.rint(y)) throw new TemplateException(Kind.Unsupported, "complex results of ** are not supported");
        return Math.pow(x, y);
    }

    static Object unary(String op, Object v) {
        if (v instanceof Undefined u) throw u.error();
        if (!PyTypes.isNumber(v)) throw new TemplateException(Kind.TypeError, "bad operand type for unary " + op + ": '" + PyTypes.typeName(v) + "'");
        if (op.equals("+")) return v instanceof Boolean b ? (Object) (b ? 1L : 0L) : v;
        if (v instanceof Double d) return -d;
        return intResult(PyTypes.bigOf(v).negate());
    }

    /** One comparison of a chain: {@code == != < <= > >= in notin}. */
    static boolean compare(String op, Object a, Object b) {
        return switch (op) {
            case "==" -> PyTypes.eq(a, b);
            case "!=" -> !PyTypes.eq(a, b);
            case "in" -> contains(b, a);
            case "notin" -> !contains(b, a);
            default -> {
                if (a instanceof Double d && d.isNaN() || b instanceof Double e && e.isNaN()) {
                    if (PyTypes.isNumber(a) && PyTypes.isNumber(b)) yield false;
                }
                int c = PyTypes.compare(a, b, op);
                yield switch (op) {
                    case "<" -> c < 0;
                    case "<=" -> c <= 0;
                    case ">" -> c > 0;
                    case ">=" -> c >= 0;
                    default -> throw new IllegalStateException(op);
                };
            }
        };
    }

    /** Python {@code item in container}. */
    @SuppressWarnings("unchecked")
    static boolean contains(Object container, Object item) {
        container = Markup.plain(container);
        item = Markup.plain(item);
        switch (container) {
            case String s -> {
                if (item instanceof Undefined u) throw u.error();
                if (!(item instanceof String t)) {
                    throw new TemplateException(Kind.TypeError, "'in <string>' requires string as left operand, not " + PyTypes.typeName(item));
                }
                return s.contains(t);
            }
            case Map<?, ?> m -> {
                if (item instanceof Undefined) return false;
                return PyTypes.dictGet((Map<Object, Object>) m, item) != PyTypes.MISSING;
            }
            case PyIterator it -> {
                for (Object o = it.next(); o != PyTypes.MISSING; o = it.next()) if (PyTypes.eq(o, item)) return true;
                return false;
            }
            case Namespace n -> throw new TemplateException(Kind.TypeError, "argument of type 'Namespace' is not iterable");
            case null -> throw new TemplateException(Kind.TypeError, "argument of type 'NoneType' is not iterable");
            default -> {
                if (!PyTypes.isIterable(container) && !(container instanceof PyTuple)) {
                    throw new TemplateException(Kind.TypeError, "argument of type '" + PyTypes.typeName(container) + "' is not iterable");
                }
                for (Object o : PyTypes.iterate(container)) if (PyTypes.eq(o, item)) return true;
                return false;
            }
        }
    }
}
