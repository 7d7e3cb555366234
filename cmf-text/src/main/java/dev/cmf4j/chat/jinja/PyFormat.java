package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.MathContext;
import java.math.RoundingMode;
import java.util.List;
import java.util.Map;

/**
 * Python string formatting: {@code "fmt" % args} (printf style, also the {@code format} filter) and
 * {@code "fmt".format(...)}. Floats are rounded from their exact binary value, half to even, as
 * CPython does ({@code '%.2f' % 2.675 == '2.67'}).
 */
final class PyFormat {

    private PyFormat() { }

    // ---- printf style

    /** {@code fmt % args}; escape = the format string is Markup, so %s/%r output of non-Markup values is HTML-escaped. */
    static String percent(String fmt, Object args, boolean escape) {
        List<Object> positional = args instanceof PyTuple t ? t.items() : List.of(args == null ? NONE : args);
        Map<?, ?> mapping = args instanceof Map<?, ?> m ? m : null;
        StringBuilder out = new StringBuilder();
        int argi = 0;
        int n = fmt.length();
        for (int i = 0; i < n; i++) {
            char c = fmt.charAt(i);
            if (c != '%') {
                out.append(c);
                continue;
            }
            if (++i >= n) throw new TemplateException(Kind.ValueError, "incomplete format");
            Object value = null;
            boolean haveValue = false;
            if (fmt.charAt(i) == '(') {
                int close = fmt.indexOf(')', i);
                if (close < 0) throw new TemplateException(Kind.ValueError, "incomplete format key");
                if (mapping == null) throw new TemplateException(Kind.TypeError, "format requires a mapping");
                String key = fmt.substring(i + 1, close);
                @SuppressWarnings("unchecked")
                Object v = PyTypes.dictGet((Map<Object, Object>) mapping, key);
                if (v == PyTypes.MISSING) throw new TemplateException(Kind.KeyError, PyRepr.repr(key));
                value = v;
                haveValue = true;
                i = close + 1;
            }
            String flags = "";
            while (i < n && "-+ #0".indexOf(fmt.charAt(i)) >= 0) flags += fmt.charAt(i++);
            int width = -1;
            if (i < n && fmt.charAt(i) == '*') {
                width = (int) PyTypes.toLong(next(positional, argi++), "width");
                i++;
            } else {
                int s = i;
                while (i < n && Character.isDigit(fmt.charAt(i))) i++;
                if (i > s) width = Integer.parseInt(fmt.substring(s, i));
            }
            int precision = -1;
            if (i < n && fmt.charAt(i) == '.') {
                i++;
                if (i < n && fmt.charAt(i) == '*') {
                    precision = (int) PyTypes.toLong(next(positional, argi++), "precision");
                    i++;
                } else {
                    int s = i;
                    while (i < n && Character.isDigit(fmt.charAt(i))) i++;
                    precision = i > s ? Integer.parseInt(fmt.substring(s, i)) : 0;
                }
            }
            while (i < n && "hlL".indexOf(fmt.charAt(i)) >= 0) i++;
            if (i >= n) throw new TemplateException(Kind.ValueError, "incomplete format");
            char type = fmt.charAt(i);
            if (type == '%') {
                out.append('%');
                continue;
            }
            if (!haveValue) {
                value = mapping != null && !(args instanceof PyTuple) ? args : next(positional, argi++);
                if (value == NONE) value = null;
            }
            String body = convert(type, value, flags, precision, escape);
            boolean left = flags.indexOf('-') >= 0;
            boolean zero = flags.indexOf('0') >= 0 && !left && "diouxXeEfFgG".indexOf(type) >= 0;
            out.append(justify(body, width, left, zero));
        }
        if (mapping == null && argi < positional.size()) {
            throw new TemplateException(Kind.TypeError, "not all arguments converted during string formatting");
        }
        return out.toString();
    }

    private static final Object NONE = new Object();

    private static Object next(List<Object> positional, int i) {
        if (i >= positional.size()) throw new TemplateException(Kind.TypeError, "not enough arguments for format string");
        return positional.get(i);
    }

    private static String justify(String body, int width, boolean left, boolean zero) {
        int len = body.codePointCount(0, body.length());
        if (width <= len) return body;
        int pad = width - len;
        if (left) return body + " ".repeat(pad);
        if (zero) {
            int signLen = !body.isEmpty() && (body.charAt(0) == '-' || body.charAt(0) == '+' || body.charAt(0) == ' ') ? 1 : 0;
            if (body.startsWith("0x", signLen) || body.startsWith("0X", signLen) || body.startsWith("0o", signLen)) signLen += 2;
            return body.substring(0, signLen) + "0".repeat(pad) + body.substring(signLen);
        }
        return " ".repeat(pad) + body;
    }

    private static String convert(char type, Object v, String flags, int precision, boolean escape) {
        if (v instanceof Undefined u && type != 's') throw u.error();
        String sign = flags.indexOf('+') >= 0 ? "+" : flags.indexOf(' ') >= 0 ? " " : "";
        boolean alt = flags.indexOf('#') >= 0;
        switch (type) {
            case 's': {
                String s = escape && !(v instanceof Markup) ? Filters.escapeHtml(PyRepr.str(v)) : PyRepr.str(v);
                return precision >= 0 ? truncate(s, precision) : s;
            }
            case 'r':
            case 'a': {
                String s = escape ? Filters.escapeHtml(PyRepr.repr(v)) : PyRepr.repr(v);
                return precision >= 0 ? truncate(s, precision) : s;
            }
            case 'd':
            case 'i':
            case 'u':
                return signed(intOf(v, type), sign, "");
            case 'x':
            case 'X':
            case 'o': {
                BigInteger x = intStrict(v, type);
                int radix = type == 'o' ? 8 : 16;
                String digits = x.abs().toString(radix);
                if (type == 'X') digits = digits.toUpperCase(java.util.Locale.ROOT);
                String prefix = alt ? (type == 'o' ? "0o" : type == 'x' ? "0x" : "0X") : "";
                return (x.signum() < 0 ? "-" : sign) + prefix + digits;
            }
            case 'c': {
                if (v instanceof String s && s.codePointCount(0, s.length()) == 1) return s;
                return Character.toString((int) PyTypes.toLong(v, "%c"));
            }
            case 'f':
            case 'F':
            case 'e':
            case 'E':
            case 'g':
            case 'G': {
                double d = floatOf(v, type);
                return floatFormat(d, type, precision < 0 ? 6 : precision, sign, alt);
            }
            default:
                throw new TemplateException(Kind.ValueError, "unsupported format character '" + type + "'");
        }
    }

    private static String truncate(String s, int codePoints) {
        if (s.codePointCount(0, s.length()) <= codePoints) return s;
        return s.substring(0, s.offsetByCodePoints(0, codePoints));
    }

    private static BigInteger intOf(Object v, char type) {
        if (v instanceof Double d) {
            if (d.isNaN() || d.isInfinite()) throw new TemplateException(Kind.ValueError, "cannot convert float " + PyRepr.floatRepr(d) + " to integer");
            return new BigDecimal(d).toBigInteger();
        }
        return intStrict(v, type);
    }

    private static BigInteger intStrict(Object v, char type) {
        if (v instanceof Long || v instanceof Boolean || v instanceof BigInteger) return PyTypes.bigOf(v);
        throw new TemplateException(Kind.TypeError, "%" + type + " format: an integer is required, not " + PyTypes.typeName(v));
    }

    private static double floatOf(Object v, char type) {
        if (PyTypes.isNumber(v)) return PyTypes.toDouble(v);
        throw new TemplateException(Kind.TypeError, "must be real number, not " + PyTypes.typeName(v));
    }

    private static String signed(BigInteger x, String sign, String prefix) {
        return (x.signum() < 0 ? "-" : sign) + prefix + x.abs();
    }

    /** Python float formatting for types f F e E g G (and '%' handled by the caller). */
    static String floatFormat(double d, char type, int precision, String sign, boolean alt) {
        boolean neg = d < 0 || (d == 0 && 1 / d < 0);
        String s = neg ? "-" : sign;
        if (Double.isNaN(d)) return (d < 0 ? "-" : sign) + (Character.isUpperCase(type) ? "NAN" : "nan");
        if (Double.isInfinite(d)) return s + (Character.isUpperCase(type) ? "INF" : "inf");
        BigDecimal x = new BigDecimal(Math.abs(d));
        String body = switch (type) {
            case 'f', 'F' -> fixed(x, precision, alt);
            case 'e', 'E' -> exp(x, precision, alt, type == 'E');
            default -> general(x, precision == 0 ? 1 : precision, alt, type == 'G');
        };
        return s + body;
    }

    private static String fixed(BigDecimal x, int precision, boolean alt) {
        String r = x.setScale(precision, RoundingMode.HALF_EVEN).toPlainString();
        return precision == 0 && alt ? r + "." : r;
    }

    private static String exp(BigDecimal x, int precision, boolean alt, boolean upper) {
        String digits;
        int exponent;
        if (x.signum() == 0) {
            digits = "0".repeat(precision + 1);
            exponent = 0;
        } else {
            BigDecimal r = x.round(new MathContext(precision + 1, RoundingMode.HALF_EVEN));
            digits = r.unscaledValue().toString();
            exponent = digits.length() - 1 - r.scale();
            if (digits.length() < precision + 1) digits = digits + "0".repeat(precision + 1 - digits.length());
            digits = digits.substring(0, precision + 1);
        }
        StringBuilder b = new StringBuilder();
        b.append(digits.charAt(0));
        if (precision > 0 || alt) b.append('.');
        b.append(digits, 1, digits.length());
        b.append(upper ? 'E' : 'e').append(exponent < 0 ? '-' : '+');
        int a = Math.abs(exponent);
        if (a < 10) b.append('0');
        b.append(a);
        return b.toString();
    }

    private static String general(BigDecimal x, int p, boolean alt, boolean upper) {
        int exponent;
        if (x.signum() == 0) {
            exponent = 0;
        } else {
            BigDecimal r = x.round(new MathContext(p, RoundingMode.HALF_EVEN));
            exponent = r.precision() - 1 - r.scale();
        }
        String out;
        if (exponent >= -4 && exponent < p) {
            out = fixed(x, p - 1 - exponent, alt);
        } else {
            out = exp(x, p - 1, alt, upper);
        }
        if (!alt) {
            int e = out.indexOf(upper ? 'E' : 'e');
            String mant = e >= 0 ? out.substring(0, e) : out;
            String tail = e >= 0 ? out.substring(e) : "";
            if (mant.indexOf('.') >= 0) {
                mant = mant.replaceAll("0+$", "");
                if (mant.endsWith(".")) mant = mant.substring(0, mant.length() - 1);
            }
            out = mant + tail;
        }
        return out;
    }

    // ---- str.format

    /** {@code fmt.format(*args, **kwargs)}: fields {}, {0}, {name}, with .attr / [key], !r/!s and a format spec. */
    static String format(String fmt, Args a) {
        StringBuilder out = new StringBuilder();
        int auto = 0;
        int n = fmt.length();
        for (int i = 0; i < n; i++) {
            char c = fmt.charAt(i);
            if (c == '}') {
                if (i + 1 < n && fmt.charAt(i + 1) == '}') {
                    out.append('}');
                    i++;
                    continue;
                }
                throw new TemplateException(Kind.ValueError, "Single '}' encountered in format string");
            }
            if (c != '{') {
                out.append(c);
                continue;
            }
            if (i + 1 < n && fmt.charAt(i + 1) == '{') {
                out.append('{');
                i++;
                continue;
            }
            int depth = 1, j = i + 1;
            while (j < n && depth > 0) {
                if (fmt.charAt(j) == '{') depth++;
                else if (fmt.charAt(j) == '}') depth--;
                if (depth > 0) j++;
            }
            if (j >= n) throw new TemplateException(Kind.ValueError, "expected '}' before end of string");
            String field = fmt.substring(i + 1, j);
            i = j;
            String spec = "";
            char conversion = 0;
            int colon = field.indexOf(':');
            if (colon >= 0) {
                spec = field.substring(colon + 1);
                field = field.substring(0, colon);
            }
            int bang = field.indexOf('!');
            if (bang >= 0) {
                if (bang + 2 != field.length()) throw new TemplateException(Kind.ValueError, "expected ':' after conversion specifier");
                conversion = field.charAt(bang + 1);
                field = field.substring(0, bang);
            }
            if (spec.indexOf('{') >= 0) spec = format(spec, a);
            int end = 0;
            while (end < field.length() && field.charAt(end) != '.' && field.charAt(end) != '[') end++;
            String head = field.substring(0, end);
            Object value;
            if (head.isEmpty()) {
                value = positionalArg(a, auto++);
            } else if (head.chars().allMatch(Character::isDigit)) {
                value = positionalArg(a, Integer.parseInt(head));
            } else {
                if (!a.keywords.containsKey(head)) throw new TemplateException(Kind.KeyError, PyRepr.repr(head));
                value = a.keywords.get(head);
            }
            int k = end;
            while (k < field.length()) {
                if (field.charAt(k) == '.') {
                    int e = k + 1;
                    while (e < field.length() && field.charAt(e) != '.' && field.charAt(e) != '[') e++;
                    value = Access.getattr(value, field.substring(k + 1, e));
                    k = e;
                } else {
                    int e = field.indexOf(']', k);
                    if (e < 0) throw new TemplateException(Kind.ValueError, "Missing ']' in format string");
                    String key = field.substring(k + 1, e);
                    value = Access.getitem(value, key.chars().allMatch(Character::isDigit) && !key.isEmpty() ? (Object) Long.parseLong(key) : key);
                    k = e + 1;
                }
            }
            if (conversion == 'r' || conversion == 'a') value = PyRepr.repr(value);
            else if (conversion == 's') value = PyRepr.str(value);
            else if (conversion != 0) throw new TemplateException(Kind.ValueError, "Unknown conversion specifier " + conversion);
            out.append(formatSpec(value, spec));
        }
        return out.toString();
    }

    private static Object positionalArg(Args a, int i) {
        if (i >= a.positional.size()) throw new TemplateException(Kind.IndexError, "Replacement index " + i + " out of range for positional args tuple");
        return a.positional.get(i);
    }

    /** Python's format-spec mini-language: [[fill]align][sign][#][0][width][,|_][.precision][type]. */
    static String formatSpec(Object v, String spec) {
        if (v instanceof Undefined u) {
            if (spec.isEmpty()) return "";
            throw u.error();
        }
        if (spec.isEmpty()) return PyRepr.str(v);
        int i = 0, n = spec.length();
        String fill = " ";
        char align = 0;
        if (n >= 2 && "<>=^".indexOf(spec.charAt(1)) >= 0) {
            fill = spec.substring(0, 1);
            align = spec.charAt(1);
            i = 2;
        } else if (n >= 1 && "<>=^".indexOf(spec.charAt(0)) >= 0) {
            align = spec.charAt(0);
            i = 1;
        }
        String sign = "-";
        if (i < n && "+- ".indexOf(spec.charAt(i)) >= 0) sign = String.valueOf(spec.charAt(i++));
        boolean alt = false;
        if (i < n && spec.charAt(i) == '#') {
            alt = true;
            i++;
        }
        if (i < n && spec.charAt(i) == '0') {
            if (align == 0) {
                fill = "0";
                align = '=';
            }
            i++;
        }
        int s = i;
        while (i < n && Character.isDigit(spec.charAt(i))) i++;
        int width = i > s ? Integer.parseInt(spec.substring(s, i)) : -1;
        char grouping = 0;
        if (i < n && (spec.charAt(i) == ',' || spec.charAt(i) == '_')) grouping = spec.charAt(i++);
        int precision = -1;
        if (i < n && spec.charAt(i) == '.') {
            s = ++i;
            while (i < n && Character.isDigit(spec.charAt(i))) i++;
            if (i == s) throw new TemplateException(Kind.ValueError, "Format specifier missing precision");
            precision = Integer.parseInt(spec.substring(s, i));
        }
        char type = i < n ? spec.charAt(i++) : 0;
        if (i != n) throw new TemplateException(Kind.ValueError, "Invalid format specifier '" + spec + "'");
        String signStr = sign.equals("-") ? "" : sign;
        String body;
        boolean numeric = true;
        if (v instanceof String str) {
            if (type != 0 && type != 's') throw new TemplateException(Kind.ValueError, "Unknown format code '" + type + "' for object of type 'str'");
            body = precision >= 0 ? truncate(str, precision) : str;
            numeric = false;
            if (align == 0) align = '<';
        } else if ((PyTypes.isInt(v) || v instanceof Boolean) && (type == 0 || "dnbcoxX".indexOf(type) >= 0)) {
            if (v instanceof Boolean b && type == 0) {
                body = b ? "True" : "False";
                numeric = false;
                if (align == 0) align = '<';
            } else {
                BigInteger x = PyTypes.bigOf(v);
                String digits = switch (type) {
                    case 'b' -> x.abs().toString(2);
                    case 'o' -> x.abs().toString(8);
                    case 'x' -> x.abs().toString(16);
                    case 'X' -> x.abs().toString(16).toUpperCase(java.util.Locale.ROOT);
                    case 'c' -> Character.toString(x.intValue());
                    default -> group(x.abs().toString(), grouping);
                };
                String prefix = alt ? switch (type) { case 'b' -> "0b"; case 'o' -> "0o"; case 'x' -> "0x"; case 'X' -> "0X"; default -> ""; } : "";
                body = (x.signum() < 0 ? "-" : signStr) + prefix + digits;
            }
        } else if (PyTypes.isNumber(v)) {
            double d = PyTypes.toDouble(v);
            char t = type == 0 ? (precision >= 0 ? 'g' : 'r') : type;
            if (t == 'r') {
                body = (d < 0 || (d == 0 && 1 / d < 0) ? "-" : signStr) + PyRepr.floatRepr(Math.abs(d));
            } else if (t == '%') {
                body = floatFormat(d * 100, 'f', precision < 0 ? 6 : precision, signStr, alt) + "%";
            } else if ("eEfFgGn".indexOf(t) >= 0) {
                body = floatFormat(d, t == 'n' ? 'g' : t, precision < 0 ? 6 : precision, signStr, alt);
            } else {
                throw new TemplateException(Kind.ValueError, "Unknown format code '" + t + "' for object of type '" + PyTypes.typeName(v) + "'");
            }
            if (grouping != 0) {
                int start = body.charAt(0) == '-' || body.charAt(0) == '+' || body.charAt(0) == ' ' ? 1 : 0;
                int end = start;
                while (end < body.length() && Character.isDigit(body.charAt(end))) end++;
                body = body.substring(0, start) + group(body.substring(start, end), grouping) + body.substring(end);
            }
        } else {
            body = PyRepr.str(v);
            numeric = false;
            if (type != 0) throw new TemplateException(Kind.TypeError, "unsupported format string passed to " + PyTypes.typeName(v) + ".__format__");
            if (align == 0) align = '<';
        }
        if (align == 0) align = numeric ? '>' : '<';
        int len = body.codePointCount(0, body.length());
        if (width <= len) return body;
        int pad = width - len;
        return switch (align) {
            case '<' -> body + fill.repeat(pad);
            case '>' -> fill.repeat(pad) + body;
            case '^' -> fill.repeat(pad / 2) + body + fill.repeat(pad - pad / 2);
            default -> {
                int signLen = !body.isEmpty() && "+- ".indexOf(body.charAt(0)) >= 0 ? 1 : 0;
                yield body.substring(0, signLen) + fill.repeat(pad) + body.substring(signLen);
            }
        };
    }

    private static String group(String digits, char sep) {
        if (sep == 0 || digits.length() <= 3) return digits;
        StringBuilder b = new StringBuilder();
        int first = digits.length() % 3;
        if (first > 0) b.append(digits, 0, first);
        for (int i = first; i < digits.length(); i += 3) {
            if (b.length() > 0) b.append(sep);
            b.append(digits, i, i + 3);
        }
        return b.toString();
    }
}
