package dev.cmf4j.chat.jinja;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.List;
import java.util.Map;

/** Python's {@code str()} and {@code repr()} of template values, byte for byte. */
final class PyRepr {

    private PyRepr() { }

    /** {@code str(v)}: what {@code {{ v }}} prints (Undefined prints nothing). */
    static String str(Object v) {
        return switch (v) {
            case null -> "None";
            case String s -> s;
            case Markup m -> m.text();
            case Boolean b -> b ? "True" : "False";
            case Long l -> l.toString();
            case BigInteger b -> b.toString();
            case Double d -> floatRepr(d);
            case Undefined u -> "";
            default -> repr(v);
        };
    }

    static String repr(Object v) {
        StringBuilder b = new StringBuilder();
        repr(v, b, 0);
        return b.toString();
    }

    private static void repr(Object v, StringBuilder b, int depth) {
        if (depth > 200) throw new TemplateException(TemplateException.Kind.LimitExceeded, "value nested too deeply to print");
        switch (v) {
            case null -> b.append("None");
            case String s -> quote(s, b);
            case Markup m -> {
                b.append("Markup(");
                quote(m.text(), b);
                b.append(')');
            }
            case Boolean x -> b.append(x ? "True" : "False");
            case Long l -> b.append(l);
            case BigInteger x -> b.append(x);
            case Double d -> b.append(floatRepr(d));
            case Undefined u -> b.append("Undefined");
            case PyTuple t -> {
                b.append('(');
                items(t.items(), b, depth);
                if (t.items().size() == 1) b.append(',');
                b.append(')');
            }
            case List<?> l -> {
                b.append('[');
                items(l, b, depth);
                b.append(']');
            }
            case Map<?, ?> m -> dict(m, b, depth);
            case Namespace n -> {
                b.append("<Namespace ");
                dict(n.attrs, b, depth);
                b.append('>');
            }
            case PyRange r -> {
                b.append("range(").append(r.start()).append(", ").append(r.stop());
                if (r.step() != 1) b.append(", ").append(r.step());
                b.append(')');
            }
            case DictView d -> {
                b.append(PyTypes.typeName(d)).append("([");
                items(PyTypes.iterate(d), b, depth);
                b.append("])");
            }
            case PySlice s -> {
                b.append("slice(");
                repr(s.start(), b, depth + 1);
                b.append(", ");
                repr(s.stop(), b, depth + 1);
                b.append(", ");
                repr(s.step(), b, depth + 1);
                b.append(')');
            }
            case Interpreter.MacroValue m -> b.append("<Macro '").append(m.name()).append("'>");
            case Interpreter.LoopState l -> b.append("<LoopContext ").append(l.index()).append('/').append(l.length()).append('>');
            case BoundMethod m -> b.append("<built-in method ").append(m.name()).append(" of ")
                    .append(PyTypes.typeName(m.self())).append(" object>");
            case PyCallable c -> b.append("<function>");
            case PyIterator i -> b.append('<').append(i.typeName()).append(" object>");
            default -> b.append(v);
        }
    }

    private static void items(List<?> items, StringBuilder b, int depth) {
        for (int i = 0; i < items.size(); i++) {
            if (i > 0) b.append(", ");
            repr(items.get(i), b, depth + 1);
        }
    }

    private static void dict(Map<?, ?> m, StringBuilder b, int depth) {
        b.append('{');
        boolean first = true;
        for (Map.Entry<?, ?> e : m.entrySet()) {
            if (!first) b.append(", ");
            first = false;
            repr(e.getKey(), b, depth + 1);
            b.append(": ");
            repr(e.getValue(), b, depth + 1);
        }
        b.append('}');
    }

    /** Python's {@code repr(str)}: single quotes unless the text has ' and no ", escapes for non-printables. */
    static void quote(String s, StringBuilder b) {
        char q = s.indexOf('\'') >= 0 && s.indexOf('"') < 0 ? '"' : '\'';
        b.append(q);
        for (int i = 0; i < s.length(); ) {
            // escapes grow a string up to 10×: a repr of a repr of … would build gigabytes before any output cap saw it
            if (b.length() > Interpreter.MAX_OUTPUT_CHARS)
                throw new TemplateException(TemplateException.Kind.LimitExceeded, "a printed value exceeds " + Interpreter.MAX_OUTPUT_CHARS + " characters");
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            if (cp == q || cp == '\\') {
                b.append('\\').appendCodePoint(cp);
            } else if (cp == '\t') {
                b.append("\\t");
            } else if (cp == '\n') {
                b.append("\\n");
            } else if (cp == '\r') {
                b.append("\\r");
            } else if (cp < 0x20 || cp == 0x7f) {
                hex(b, "\\x", cp, 2);
            } else if (cp < 0x7f || PyStr.isPrintable(cp)) {
                b.appendCodePoint(cp);
            } else if (cp <= 0xff) {
                hex(b, "\\x", cp, 2);
            } else if (cp <= 0xffff) {
                hex(b, "\\u", cp, 4);
            } else {
                hex(b, "\\U", cp, 8);
            }
        }
        b.append(q);
    }

    /** {@code prefix} and {@code cp} in {@code digits} lowercase hex digits (String.format took a microsecond a character). */
    private static void hex(StringBuilder b, String prefix, int cp, int digits) {
        b.append(prefix);
        for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) b.append(Character.forDigit((cp >>> shift) & 0xf, 16));
    }

    /**
     * Python's {@code repr(float)}: the shortest digits that round-trip (Java's
     * {@link Double#toString} finds the same digits since JDK 19), laid out fixed when the decimal
     * exponent is in [-4, 16), else as {@code d.ddde+XX}.
     */
    static String floatRepr(double d) {
        if (Double.isNaN(d)) return "nan";
        if (Double.isInfinite(d)) return d > 0 ? "inf" : "-inf";
        if (d == 0) return (1 / d < 0) ? "-0.0" : "0.0";
        BigDecimal bd = new BigDecimal(Double.toString(Math.abs(d))).stripTrailingZeros();
        String digits = bd.unscaledValue().toString();
        int decpt = digits.length() - bd.scale(); // value = 0.DIGITS * 10^decpt
        StringBuilder b = new StringBuilder();
        if (d < 0) b.append('-');
        if (decpt > -4 && decpt <= 16) {
            if (decpt <= 0) {
                b.append("0.");
                b.repeat('0', -decpt);
                b.append(digits);
            } else if (decpt >= digits.length()) {
                b.append(digits);
                b.repeat('0', decpt - digits.length());
                b.append(".0");
            } else {
                b.append(digits, 0, decpt).append('.').append(digits, decpt, digits.length());
            }
        } else {
            b.append(digits.charAt(0));
            if (digits.length() > 1) b.append('.').append(digits, 1, digits.length());
            int exp = decpt - 1;
            b.append('e').append(exp < 0 ? '-' : '+');
            int a = Math.abs(exp);
            if (a < 10) b.append('0');
            b.append(a);
        }
        return b.toString();
    }
}
