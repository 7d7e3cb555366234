package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/** jinja2's built-in filters (3.1 semantics), with transformers' {@code tojson} in place of jinja2's. */
final class Filters {

    private Filters() { }

    private static final Set<String> NAMES = Set.of(
            "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
            "first", "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list",
            "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
            "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim", "truncate",
            "unique", "upper", "urlencode", "wordcount", "xmlattr",
            // known to jinja2 but not implemented here: a clear error at render time
            "filesizeformat", "groupby", "pprint", "random", "urlize", "wordwrap");

    static boolean exists(String name) {
        return NAMES.contains(name);
    }

    /** soft_str: str() of the value, '' for undefined. */
    private static String s(Object v) {
        return PyRepr.str(v);
    }

    static Object apply(String name, Object v, Args a) {
        return switch (name) {
            case "abs" -> {
                if (v instanceof Undefined u) throw u.error();
                if (v instanceof Double d) yield Math.abs(d);
                if (PyTypes.isNumber(v)) yield PyOps.unary(PyTypes.bigOf(v).signum() < 0 ? "-" : "+", v);
                throw new TemplateException(Kind.TypeError, "bad operand type for abs(): '" + PyTypes.typeName(v) + "'");
            }
            case "attr" -> {
                // jinja2's attr filter looks up the Python attribute only, never the item
                String attr = s(a.check("attr", "name").require(0, "name", "attr"));
                Object r = v instanceof Undefined u ? fail(u) : Access.pythonAttribute(v, attr);
                yield r == PyTypes.MISSING ? Undefined.member(v, attr) : r;
            }
            case "batch" -> generator(() -> batch(v, a.check("batch", "linecount", "fill_with")));
            case "capitalize" -> keep(v, PyStr.capitalize(s(v)));
            case "center" -> keep(v, Methods.pad(s(v), PyTypes.toLong(a.check("center", "width").get(0, "width", 80L), "width"), " ", "center"));
            case "count", "length" -> PyTypes.length(v);
            case "d", "default" -> {
                a.check(name, "default_value", "boolean");
                Object def = a.get(0, "default_value", "");
                boolean bool = PyTypes.truthy(a.get(1, "boolean", false));
                yield v instanceof Undefined || (bool && !PyTypes.truthy(v)) ? def : v;
            }
            case "dictsort" -> dictsort(v, a.check("dictsort", "case_sensitive", "by", "reverse"));
            case "e", "escape", "forceescape" -> Markup.escape(v);
            case "first" -> {
                Object first;
                if (v instanceof PyIterator it) {
                    first = it.next();
                } else {
                    List<Object> items = PyTypes.iterate(v);
                    first = items.isEmpty() ? PyTypes.MISSING : items.getFirst();
                }
                yield first == PyTypes.MISSING ? Undefined.hint("No first item, sequence was empty.", "first") : first;
            }
            case "last" -> {
                if (v instanceof Map<?, ?> || v instanceof DictView || v instanceof PyRange || v instanceof String
                        || v instanceof List<?> || v instanceof PyTuple || v instanceof Undefined || v instanceof Markup) {
                    List<Object> items = PyTypes.iterate(v);
                    yield items.isEmpty() ? Undefined.hint("No last item, sequence was empty.", "last") : items.getLast();
                }
                throw new TemplateException(Kind.TypeError, "'" + PyTypes.typeName(v) + "' object is not reversible");
            }
            case "float" -> v instanceof Undefined u ? fail(u) : toFloat(v, a.check("float", "default").get(0, "default", 0.0));
            case "format" -> keep(v, PyFormat.percent(s(v), a.keywords.isEmpty() ? new PyTuple(a.positional) : new LinkedHashMap<Object, Object>(a.keywords), v instanceof Markup));
            case "indent" -> v instanceof Undefined u ? fail(u) : keep(v, indent(s(v), a.check("indent", "width", "first", "blank")));
            case "int" -> v instanceof Undefined u ? fail(u) : toInt(v, a.check("int", "default", "base"));
            case "items" -> generator(() -> {
                if (v instanceof Undefined) return new ArrayList<>();
                if (!(v instanceof Map<?, ?>)) throw new TemplateException(Kind.TypeError, "Can only get item pairs from a mapping.");
                return PyTypes.iterate(new DictView(DictView.Kind.ITEMS, castMap(v)));
            });
            case "join" -> {
                a.check("join", "d", "attribute");
                String sep = s(a.get(0, "d", ""));
                Object attr = a.get(1, "attribute", null);
                StringBuilder b = new StringBuilder();
                boolean first = true;
                for (Object o : PyTypes.iterate(v)) {
                    if (!first) b.append(sep);
                    first = false;
                    b.append(s(attr == null ? o : attribute(o, attr, null)));
                }
                yield b.toString();
            }
            case "list" -> new ArrayList<>(PyTypes.iterate(v));
            case "lower" -> keep(v, PyStr.lower(s(v)));
            case "upper" -> keep(v, PyStr.upper(s(v)));
            case "map" -> generator(() -> PyTypes.truthy(v) ? map(v, a) : new ArrayList<>());
            case "max", "min" -> minMax(v, a.check(name, "case_sensitive", "attribute"), name.equals("max"));
            case "select", "reject" -> generator(() -> PyTypes.truthy(v) ? selectOrReject(v, a, name.equals("select"), false) : new ArrayList<>());
            case "selectattr", "rejectattr" -> generator(() -> PyTypes.truthy(v) ? selectOrReject(v, a, name.equals("selectattr"), true) : new ArrayList<>());
            case "replace" -> {
                a.check("replace", "old", "new", "count");
                Object count = a.get(2, "count", null);
                yield PyStr.replace(s(v), s(a.require(0, "old", "replace")), s(a.require(1, "new", "replace")),
                        count == null ? -1 : PyTypes.toLong(count, "count"));
            }
            case "reverse" -> {
                if (v instanceof String str) yield Slices.apply(str, new PySlice(null, null, -1L));
                if (v instanceof Markup m) yield new Markup((String) Slices.apply(m.text(), new PySlice(null, null, -1L)));
                List<Object> items = new ArrayList<>(PyTypes.iterate(v));
                java.util.Collections.reverse(items);
                // reversed(x) where Python has it (an iterator), else list(x) reversed
                String iterType = switch (v) {
                    case PyTuple t -> "reversed";
                    case List<?> l -> "list_reverseiterator";
                    case Map<?, ?> m -> "dict_reversekeyiterator";
                    case PyRange r -> "range_iterator";
                    case Undefined u -> "reversed";
                    default -> null;
                };
                yield iterType == null ? items : new PyIterator(iterType, () -> items);
            }
            case "round" -> round(v, a.check("round", "precision", "method"));
            case "safe" -> v instanceof Markup ? v : new Markup(s(v));
            case "string" -> v instanceof Markup ? v : s(v);
            case "slice" -> generator(() -> slice(v, a.check("slice", "slices", "fill_with")));
            case "sort" -> sort(v, a.check("sort", "reverse", "case_sensitive", "attribute"));
            case "striptags" -> PyStr.strip(s(v).replaceAll("(?s)<!--.*?-->|<[^>]*>", "").replaceAll("[\\s\\u00a0]+", " "), null);
            case "sum" -> sum(v, a.check("sum", "attribute", "start"));
            case "title" -> title(s(v));
            case "tojson" -> PyJson.dumps(v, a);
            case "trim" -> {
                Object chars = a.check("trim", "chars").get(0, "chars", null);
                yield keep(v, PyStr.strip(s(v), chars == null ? null : s(chars)));
            }
            case "truncate" -> truncate(s(v), a.check("truncate", "length", "killwords", "end", "leeway"));
            case "unique" -> generator(() -> unique(v, a.check("unique", "case_sensitive", "attribute")));
            case "urlencode" -> urlencode(v);
            case "wordcount" -> {
                long n = 0;
                boolean in = false;
                for (int cp : s(v).codePoints().toArray()) {
                    boolean word = Character.isLetterOrDigit(cp) || cp == '_';
                    if (word && !in) n++;
                    in = word;
                }
                yield n;
            }
            case "xmlattr" -> xmlattr(v, PyTypes.truthy(a.check("xmlattr", "autospace").get(0, "autospace", true)));
            default -> throw NAMES.contains(name)
                    ? new TemplateException(Kind.Unsupported, "the '" + name + "' filter is not supported by cmf4j")
                    : new TemplateException(Kind.TemplateRuntimeError, "No filter named '" + name + "' found.");
        };
    }

    /** soft_str keeps a Markup subject Markup, and the str method applied to it returns Markup. */
    private static Object keep(Object subject, String result) {
        return subject instanceof Markup ? new Markup(result) : result;
    }

    /** jinja2 filters written as Python generators: lazy, one-shot, truthy, no len(). */
    private static PyIterator generator(java.util.function.Supplier<List<Object>> items) {
        return new PyIterator("generator", items);
    }

    /** Undefined's __int__/__float__/__add__ raise; the filters that need them fail the same way. */
    private static Object fail(Undefined u) {
        throw u.error();
    }

    @SuppressWarnings("unchecked")
    private static Map<Object, Object> castMap(Object m) {
        return (Map<Object, Object>) m;
    }

    static String escapeHtml(String s) {
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '&' -> b.append("&amp;");
                case '<' -> b.append("&lt;");
                case '>' -> b.append("&gt;");
                case '"' -> b.append("&#34;");
                case '\'' -> b.append("&#39;");
                default -> b.append(c);
            }
        }
        return b.toString();
    }

    /** jinja2's title filter: upper-cases the first char of each word split on [-\s({[<]+, lowers the rest. */
    private static String title(String s) {
        StringBuilder b = new StringBuilder();
        int i = 0, n = s.length();
        while (i < n) {
            int j = i;
            boolean sep = isTitleSep(s.charAt(i));
            while (j < n && isTitleSep(s.charAt(j)) == sep) j++;
            String item = s.substring(i, j);
            if (sep || item.isEmpty()) {
                b.append(item);
            } else {
                int cp = item.codePointAt(0);
                int len = Character.charCount(cp);
                b.append(PyStr.upper(item.substring(0, len))).append(PyStr.lower(item.substring(len)));
            }
            i = j;
        }
        return b.toString();
    }

    private static boolean isTitleSep(char c) {
        return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || PyStr.isSpace(c);
    }

    private static List<Object> batch(Object v, Args a) {
        long n = PyTypes.toLong(a.require(0, "linecount", "batch"), "linecount");
        if (n <= 0) throw new TemplateException(Kind.ValueError, "batch linecount must be positive");
        boolean fill = a.has(1, "fill_with") && a.get(1, "fill_with", null) != null;
        Object filler = a.get(1, "fill_with", null);
        List<Object> out = new ArrayList<>();
        List<Object> tmp = new ArrayList<>();
        for (Object o : PyTypes.iterate(v)) {
            if (tmp.size() == n) {
                out.add(tmp);
                tmp = new ArrayList<>();
            }
            tmp.add(o);
        }
        if (!tmp.isEmpty()) {
            if (fill) while (tmp.size() < n) tmp.add(filler);
            out.add(tmp);
        }
        return out;
    }

    private static List<Object> slice(Object v, Args a) {
        long slices = PyTypes.toLong(a.require(0, "slices", "slice"), "slices");
        Object filler = a.get(1, "fill_with", null);
        List<Object> seq = PyTypes.iterate(v);
        int length = seq.size();
        int perSlice = (int) (length / slices);
        int withExtra = (int) (length % slices);
        int offset = 0;
        List<Object> out = new ArrayList<>();
        for (int i = 0; i < slices; i++) {
            int start = offset + i * perSlice;
            if (i < withExtra) offset++;
            int end = offset + (i + 1) * perSlice;
            List<Object> tmp = new ArrayList<>(seq.subList(start, end));
            if (filler != null && i >= withExtra) tmp.add(filler);
            out.add(tmp);
        }
        return out;
    }

    private static Object toFloat(Object v, Object def) {
        return switch (v) {
            case Double d -> d;
            case Long l -> (double) l;
            case Boolean b -> b ? 1.0 : 0.0;
            case BigInteger b -> b.doubleValue();
            case String str -> {
                Double d = parsePyFloat(str);
                yield d == null ? def : d;
            }
            case null, default -> def;
        };
    }

    /** Python's float(str): surrounding whitespace, underscores between digits, inf/nan words. */
    private static Double parsePyFloat(String str) {
        String t = PyStr.strip(str, null);
        String lower = PyStr.lower(t);
        String unsigned = lower.startsWith("+") || lower.startsWith("-") ? lower.substring(1) : lower;
        boolean neg = lower.startsWith("-");
        if (unsigned.equals("inf") || unsigned.equals("infinity")) return neg ? Double.NEGATIVE_INFINITY : Double.POSITIVE_INFINITY;
        if (unsigned.equals("nan")) return Double.NaN;
        if (!t.matches("[+-]?(\\d(_?\\d)*)?(\\.(\\d(_?\\d)*)?)?([eE][+-]?\\d(_?\\d)*)?") || !t.matches(".*\\d.*")) return null;
        String m = t.replace("_", "");
        String mantissa = m.replaceAll("[eE].*", "");
        if (mantissa.equals(".") || mantissa.equals("+.") || mantissa.equals("-.")) return null;
        return Double.parseDouble(m);
    }

    private static Object toInt(Object v, Args a) {
        Object def = a.get(0, "default", 0L);
        long base = PyTypes.toLong(a.get(1, "base", 10L), "base");
        if (v instanceof String str) {
            Object parsed = parsePyInt(str, (int) base);
            if (parsed != null) return parsed;
        } else if (PyTypes.isInt(v)) {
            return v;
        } else if (v instanceof Boolean b) {
            return b ? 1L : 0L;
        } else if (v instanceof Double d) {
            return floatToInt(d);
        }
        // jinja2: int(float(value)) so that "42.23"|int gives 42
        Object f = toFloat(v instanceof String ? v : PyTypes.MISSING, null);
        if (f instanceof Double d) return floatToInt(d);
        return def;
    }

    private static Object floatToInt(double d) {
        if (Double.isNaN(d)) throw new TemplateException(Kind.ValueError, "cannot convert float NaN to integer");
        if (Double.isInfinite(d)) throw new TemplateException(Kind.OverflowError, "cannot convert float infinity to integer");
        BigInteger b = new BigDecimal(d).toBigInteger();
        return b.bitLength() < 64 ? (Object) b.longValue() : b;
    }

    private static Object parsePyInt(String str, int base) {
        String t = PyStr.strip(str, null);
        boolean neg = false;
        if (t.startsWith("+") || t.startsWith("-")) {
            neg = t.startsWith("-");
            t = t.substring(1);
        }
        String lower = PyStr.lower(t);
        if (base == 16 && lower.startsWith("0x") || base == 8 && lower.startsWith("0o") || base == 2 && lower.startsWith("0b")) {
            t = t.substring(2);
            if (t.startsWith("_")) t = t.substring(1);
        } else if (base == 0) {
            if (lower.startsWith("0x")) base = 16;
            else if (lower.startsWith("0o")) base = 8;
            else if (lower.startsWith("0b")) base = 2;
            else base = 10;
            if (base != 10) t = t.substring(2);
        }
        if (t.isEmpty() || t.startsWith("_") || t.endsWith("_") || t.contains("__")) return null;
        try {
            BigInteger b = new BigInteger(t.replace("_", ""), base);
            if (neg) b = b.negate();
            return b.bitLength() < 64 ? (Object) b.longValue() : b;
        } catch (NumberFormatException e) {
            return null;
        }
    }

    private static String indent(String s, Args a) {
        Object width = a.get(0, "width", 4L);
        boolean first = PyTypes.truthy(a.get(1, "first", false));
        boolean blank = PyTypes.truthy(a.get(2, "blank", false));
        String ind = width instanceof String w ? w : " ".repeat((int) Math.max(0, PyTypes.toLong(width, "width")));
        s = s + "\n";
        List<Object> lines = PyStr.splitlines(s, false);
        StringBuilder rv = new StringBuilder();
        if (blank) {
            for (int i = 0; i < lines.size(); i++) {
                if (i > 0) rv.append('\n').append(ind);
                rv.append((String) lines.get(i));
            }
        } else {
            rv.append((String) lines.getFirst());
            if (lines.size() > 1) {
                rv.append('\n');
                for (int i = 1; i < lines.size(); i++) {
                    if (i > 1) rv.append('\n');
                    String line = (String) lines.get(i);
                    if (!line.isEmpty()) rv.append(ind);
                    rv.append(line);
                }
            }
        }
        return first ? ind + rv : rv.toString();
    }

    /** jinja2's make_attrgetter: "a.b.0" walks getitem per dotted part (digits become ints). */
    static Object attribute(Object item, Object attr, Object def) {
        List<Object> parts = new ArrayList<>();
        if (attr instanceof String str) {
            for (String p : str.split("\\.", -1)) parts.add(!p.isEmpty() && p.chars().allMatch(Character::isDigit) ? (Object) Long.parseLong(p) : p);
        } else {
            parts.add(attr);
        }
        for (Object p : parts) {
            item = Access.getitem(item, p);
            if (def != null && item instanceof Undefined) item = def;
        }
        return item;
    }

    private static List<Object> map(Object v, Args a) {
        List<Object> items = PyTypes.iterate(v);
        List<Object> out = new ArrayList<>(items.size());
        if (a.positional.isEmpty() && a.keywords.containsKey("attribute")) {
            Map<String, Object> kw = new LinkedHashMap<>(a.keywords);
            Object attr = kw.remove("attribute");
            Object def = kw.remove("default");
            if (!kw.isEmpty()) throw new TemplateException(Kind.TemplateRuntimeError, "Unexpected keyword argument '" + kw.keySet().iterator().next() + "'");
            for (Object o : items) out.add(attribute(o, attr, def));
            return out;
        }
        if (a.positional.isEmpty()) throw new TemplateException(Kind.TemplateRuntimeError, "map requires a filter argument");
        String filter = s(a.positional.getFirst());
        if (!exists(filter)) throw new TemplateException(Kind.TemplateRuntimeError, "No filter named '" + filter + "'.");
        Args rest = new Args(a.positional.subList(1, a.positional.size()), a.keywords);
        for (Object o : items) out.add(apply(filter, o, rest));
        return out;
    }

    private static List<Object> selectOrReject(Object v, Args a, boolean select, boolean byAttr) {
        List<Object> items = PyTypes.iterate(v);
        Object attr = null;
        int next = 0;
        if (byAttr) {
            if (a.positional.isEmpty()) throw new TemplateException(Kind.TemplateRuntimeError, "Missing parameter for attribute name");
            attr = a.positional.getFirst();
            next = 1;
        }
        String test = null;
        Args rest = Args.EMPTY;
        if (a.positional.size() > next) {
            test = s(a.positional.get(next));
            if (!Tests.exists(test)) throw new TemplateException(Kind.TemplateRuntimeError, "No test named '" + test + "'.");
            rest = new Args(a.positional.subList(next + 1, a.positional.size()), a.keywords);
        }
        List<Object> out = new ArrayList<>();
        for (Object o : items) {
            Object subject = byAttr ? attribute(o, attr, null) : o;
            boolean ok = test == null ? PyTypes.truthy(subject) : Tests.apply(test, subject, rest);
            if (ok == select) out.add(o);
        }
        return out;
    }

    private static Comparator<Object> ordering(boolean caseSensitive, String op) {
        return (x, y) -> PyTypes.compare(sortKey(x, caseSensitive), sortKey(y, caseSensitive), op);
    }

    private static Object sortKey(Object v, boolean caseSensitive) {
        return !caseSensitive && v instanceof String s ? PyStr.lower(s) : v;
    }

    private static Object sort(Object v, Args a) {
        boolean reverse = PyTypes.truthy(a.get(0, "reverse", false));
        boolean cs = PyTypes.truthy(a.get(1, "case_sensitive", false));
        Object attr = a.get(2, "attribute", null);
        List<Object> items = new ArrayList<>(PyTypes.iterate(v));
        Comparator<Object> cmp = ordering(cs, "<");
        Comparator<Object> byKey = attr == null ? cmp : (x, y) -> cmp.compare(attribute(x, attr, null), attribute(y, attr, null));
        // Python's sort(reverse=True) keeps equal items in their original order, like a stable sort on the reversed comparison
        items.sort(reverse ? byKey.reversed() : byKey);
        return items;
    }

    private static Object dictsort(Object v, Args a) {
        if (v instanceof Undefined u) throw u.error();
        if (!(v instanceof Map<?, ?> m)) throw new TemplateException(Kind.TypeError, "'" + PyTypes.typeName(v) + "' object has no attribute 'items'");
        boolean cs = PyTypes.truthy(a.get(0, "case_sensitive", false));
        String by = s(a.get(1, "by", "key"));
        boolean reverse = PyTypes.truthy(a.get(2, "reverse", false));
        int pos = switch (by) {
            case "key" -> 0;
            case "value" -> 1;
            default -> throw new TemplateException(Kind.TemplateRuntimeError, "You can only sort by either \"key\" or \"value\"");
        };
        List<Object> items = new ArrayList<>(PyTypes.iterate(new DictView(DictView.Kind.ITEMS, castMap(m))));
        Comparator<Object> cmp = ordering(cs, "<");
        Comparator<Object> byPos = (x, y) -> cmp.compare(((PyTuple) x).items().get(pos), ((PyTuple) y).items().get(pos));
        items.sort(reverse ? byPos.reversed() : byPos);
        return items;
    }

    private static List<Object> unique(Object v, Args a) {
        boolean cs = PyTypes.truthy(a.get(0, "case_sensitive", false));
        Object attr = a.get(1, "attribute", null);
        List<Object> seen = new ArrayList<>();
        List<Object> out = new ArrayList<>();
        for (Object o : PyTypes.iterate(v)) {
            Object key = sortKey(attr == null ? o : attribute(o, attr, null), cs);
            boolean dup = false;
            for (Object s : seen) if (PyTypes.eq(s, key)) { dup = true; break; }
            if (!dup) {
                seen.add(key);
                out.add(o);
            }
        }
        return out;
    }

    private static Object minMax(Object v, Args a, boolean max) {
        boolean cs = PyTypes.truthy(a.get(0, "case_sensitive", false));
        Object attr = a.get(1, "attribute", null);
        List<Object> items = PyTypes.iterate(v);
        if (items.isEmpty()) return Undefined.hint("No aggregated item, sequence was empty.", max ? "max" : "min");
        Object best = null;
        Object bestKey = null;
        boolean have = false;
        for (Object o : items) {
            Object key = sortKey(attr == null ? o : attribute(o, attr, null), cs);
            if (!have || (max ? PyTypes.compare(key, bestKey, ">") > 0 : PyTypes.compare(key, bestKey, "<") < 0)) {
                best = o;
                bestKey = key;
                have = true;
            }
        }
        return best;
    }

    private static Object sum(Object v, Args a) {
        Object attr = a.get(0, "attribute", null);
        Object total = a.get(1, "start", 0L);
        for (Object o : PyTypes.iterate(v)) total = PyOps.binary("+", total, attr == null ? o : attribute(o, attr, null));
        return total;
    }

    private static Object round(Object v, Args a) {
        long precision = PyTypes.toLong(a.get(0, "precision", 0L), "precision");
        String method = s(a.get(1, "method", "common"));
        if (!method.equals("common") && !method.equals("ceil") && !method.equals("floor")) {
            throw new TemplateException(Kind.TemplateRuntimeError, "method must be common, ceil or floor");
        }
        if (v instanceof Undefined u) throw u.error();
        if (!PyTypes.isNumber(v)) throw new TemplateException(Kind.TypeError, "type " + PyTypes.typeName(v) + " doesn't define __round__ method");
        if (method.equals("common")) {
            if (!(v instanceof Double d)) {
                if (precision >= 0) return v instanceof Boolean b ? (Object) (b ? 1L : 0L) : v;
                BigDecimal r = new BigDecimal(PyTypes.bigOf(v)).setScale((int) precision, RoundingMode.HALF_EVEN);
                return r.toBigInteger().longValue();
            }
            if (d.isNaN() || d.isInfinite()) return d;
            return new BigDecimal(d).setScale((int) precision, RoundingMode.HALF_EVEN).doubleValue();
        }
        double x = PyTypes.toDouble(v);
        double scale = Math.pow(10, precision);
        double r = method.equals("ceil") ? Math.ceil(x * scale) : Math.floor(x * scale);
        return r / scale;
    }

    private static String truncate(String s, Args a) {
        long length = PyTypes.toLong(a.get(0, "length", 255L), "length");
        boolean killwords = PyTypes.truthy(a.get(1, "killwords", false));
        String end = s(a.get(2, "end", "..."));
        long leeway = PyTypes.toLong(a.get(3, "leeway", 5L), "leeway");
        long endLen = PyTypes.length(end);
        if (length < endLen) throw new TemplateException(Kind.TemplateRuntimeError, "expected length >= " + endLen + ", got " + length);
        if (PyTypes.length(s) <= length + leeway) return s;
        String head = (String) Slices.apply(s, new PySlice(null, length - endLen, null));
        if (killwords) return head + end;
        int sp = head.lastIndexOf(' ');
        return (sp >= 0 ? head.substring(0, sp) : head) + end;
    }

    private static String urlencode(Object v) {
        if (v instanceof Map<?, ?> m) {
            StringBuilder b = new StringBuilder();
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!b.isEmpty()) b.append('&');
                b.append(quote(s(e.getKey()), true)).append('=').append(quote(s(e.getValue()), true));
            }
            return b.toString();
        }
        return quote(s(v), false);
    }

    private static String quote(String s, boolean forQuery) {
        StringBuilder b = new StringBuilder();
        for (byte x : s.getBytes(StandardCharsets.UTF_8)) {
            int c = x & 0xff;
            if (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || "_.-~".indexOf(c) >= 0 || (!forQuery && c == '/')) {
                b.append((char) c);
            } else if (forQuery && c == ' ') {
                b.append('+');
            } else {
                b.append('%').append(String.format("%02X", c));
            }
        }
        return b.toString();
    }

    private static String xmlattr(Object v, boolean autospace) {
        if (!(v instanceof Map<?, ?> m)) throw new TemplateException(Kind.TypeError, "xmlattr needs a mapping");
        StringBuilder b = new StringBuilder();
        for (Map.Entry<?, ?> e : m.entrySet()) {
            if (e.getValue() == null || e.getValue() instanceof Undefined) continue;
            String key = s(e.getKey());
            if (key.matches(".*[\\s/>=].*")) throw new TemplateException(Kind.ValueError, "Invalid character in attribute name: " + PyRepr.repr(key));
            if (!b.isEmpty()) b.append(' ');
            b.append(escapeHtml(key)).append("=\"").append(escapeHtml(s(e.getValue()))).append('"');
        }
        return autospace && !b.isEmpty() ? " " + b : b.toString();
    }
}
