package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Python methods of str, dict, list and tuple that templates call ({@code s.strip('\n')}, {@code d.items()}). */
final class Methods {

    private Methods() { }

    static Object call(BoundMethod m, Args a) {
        return switch (m.self()) {
            case String s -> str(s, m.name(), a);
            case Markup mk -> markup(mk, m.name(), a);
            case Map<?, ?> d -> dict(castMap(d), m.name(), a);
            case PyTuple t -> seq(t.items(), m.name(), a, "tuple");
            case List<?> l -> seq(l, m.name(), a, "list");
            default -> throw new TemplateException(Kind.TypeError, "'" + PyTypes.typeName(m.self()) + "' object has no method " + m.name());
        };
    }

    /** markupsafe 3's str methods that return Markup. */
    private static final java.util.Set<String> MARKUP_WRAPPED = java.util.Set.of(
            "capitalize", "title", "lower", "upper", "replace", "ljust", "rjust", "lstrip", "rstrip", "center",
            "strip", "translate", "expandtabs", "swapcase", "zfill", "casefold", "removeprefix", "removesuffix",
            "format", "format_map");

    /** Which argument markupsafe 3 escapes: replace's new, the fill character, every format argument. */
    private static boolean markupEscapes(String method, int argIndex) {
        return switch (method) {
            case "replace", "ljust", "rjust", "center" -> argIndex == 1;
            case "format", "format_map" -> true;
            default -> false;
        };
    }

    private static Object markup(Markup m, String name, Args a) {
        if (name.equals("join")) {
            List<Object> items = new ArrayList<>();
            for (Object o : PyTypes.iterate(a.require(0, "iterable", "join"))) items.add(Markup.escape(o).text());
            return new Markup(String.join(m.text(), items.stream().map(String.class::cast).toList()));
        }
        boolean wrapped = MARKUP_WRAPPED.contains(name);
        List<Object> pos = new ArrayList<>();
        for (int i = 0; i < a.positional.size(); i++) {
            Object o = a.positional.get(i);
            pos.add(Markup.plain(markupEscapes(name, i) ? Markup.escapeArg(o) : o));
        }
        Map<String, Object> kw = new LinkedHashMap<>();
        for (Map.Entry<String, Object> e : a.keywords.entrySet()) {
            boolean esc = name.startsWith("format") || e.getKey().equals("fillchar") || e.getKey().equals("new");
            kw.put(e.getKey(), Markup.plain(esc ? Markup.escapeArg(e.getValue()) : e.getValue()));
        }
        Args args = new Args(pos, kw);
        Object r = str(m.text(), name, args);
        if (wrapped && r instanceof String s) return new Markup(s);
        if (name.equals("split") || name.equals("rsplit") || name.equals("splitlines")) {
            List<Object> out = new ArrayList<>();
            for (Object o : (List<?>) r) out.add(new Markup((String) o));
            return out;
        }
        if (name.equals("partition") || name.equals("rpartition")) {
            List<Object> out = new ArrayList<>();
            for (Object o : ((PyTuple) r).items()) out.add(new Markup((String) o));
            return new PyTuple(out);
        }
        return r;
    }

    @SuppressWarnings("unchecked")
    private static Map<Object, Object> castMap(Map<?, ?> m) {
        return (Map<Object, Object>) m;
    }

    private static String strArg(Object v, String fn) {
        if (v instanceof String s) return s;
        if (v instanceof Markup m) return m.text();
        if (v instanceof Undefined u) throw u.error();
        throw new TemplateException(Kind.TypeError, fn + " arg must be None or str, not " + PyTypes.typeName(v));
    }

    private static String optChars(Args a, String fn) {
        Object c = a.get(0, null, null);
        return c == null ? null : strArg(c, fn);
    }

    private static String requireStr(Args a, int i, String name, String fn) {
        Object v = a.require(i, name, fn);
        if (v instanceof String s) return s;
        if (v instanceof Markup m) return m.text();
        if (v instanceof Undefined u) throw u.error();
        throw new TemplateException(Kind.TypeError, "must be str, not " + PyTypes.typeName(v));
    }

    private static Object str(String s, String name, Args a) {
        switch (name) {
            case "strip": a.check("strip", "chars"); return PyStr.strip(s, optChars(a, "strip"));
            case "lstrip": a.check("lstrip", "chars"); return PyStr.lstrip(s, optChars(a, "lstrip"));
            case "rstrip": a.check("rstrip", "chars"); return PyStr.rstrip(s, optChars(a, "rstrip"));
            case "split":
            case "rsplit": {
                a.check(name, "sep", "maxsplit");
                Object sep = a.get(0, "sep", null);
                long max = PyTypes.toLong(a.get(1, "maxsplit", -1L), "maxsplit");
                String sp = sep == null ? null : strArg(sep, name);
                return name.equals("split") ? PyStr.split(s, sp, max) : PyStr.rsplit(s, sp, max);
            }
            case "splitlines": a.check("splitlines", "keepends"); return PyStr.splitlines(s, PyTypes.truthy(a.get(0, "keepends", false)));
            case "startswith":
            case "endswith": {
                Object prefix = a.require(0, "prefix", name);
                int[] cps = PyStr.codePoints(s);
                int[] r = Slices.clampRange(cps.length, a.get(1, "start", null), a.get(2, "end", null));
                if (r[1] < r[0]) return false;
                String window = PyStr.fromCodePoints(cps, r[0], r[1]);
                List<Object> options = prefix instanceof PyTuple t ? t.items() : List.of(prefix);
                for (Object o : options) {
                    if (!(Markup.plain(o) instanceof String p)) {
                        throw new TemplateException(Kind.TypeError, name + " first arg must be str or a tuple of str, not " + PyTypes.typeName(o));
                    }
                    if (name.equals("startswith") ? window.startsWith(p) : window.endsWith(p)) return true;
                }
                return false;
            }
            case "replace": {
                a.check("replace", "old", "new", "count");
                return PyStr.replace(s, requireStr(a, 0, "old", name), requireStr(a, 1, "new", name),
                        PyTypes.toLong(a.get(2, "count", -1L), "count"));
            }
            case "upper": a.check(name); return PyStr.upper(s);
            case "lower": a.check(name); return PyStr.lower(s);
            case "casefold": a.check(name); return PyStr.lower(PyStr.upper(s));
            case "title": a.check(name); return PyStr.title(s);
            case "capitalize": a.check(name); return PyStr.capitalize(s);
            case "swapcase": a.check(name); return PyStr.swapcase(s);
            case "join": {
                a.check("join", "iterable");
                StringBuilder b = new StringBuilder();
                List<Object> items = PyTypes.iterate(a.require(0, "iterable", "join"));
                for (int i = 0; i < items.size(); i++) {
                    if (!(Markup.plain(items.get(i)) instanceof String p)) {
                        throw new TemplateException(Kind.TypeError, "sequence item " + i + ": expected str instance, " + PyTypes.typeName(items.get(i)) + " found");
                    }
                    if (i > 0) b.append(s);
                    b.append(p);
                }
                return b.toString();
            }
            case "find":
            case "rfind":
            case "index":
            case "rindex": {
                String sub = requireStr(a, 0, "sub", name);
                long r = PyStr.find(s, sub, a.get(1, "start", null), a.get(2, "end", null), name.startsWith("r"));
                if (r < 0 && name.endsWith("index")) throw new TemplateException(Kind.ValueError, "substring not found");
                return r;
            }
            case "count": return PyStr.count(s, requireStr(a, 0, "sub", name), a.get(1, "start", null), a.get(2, "end", null));
            case "format": return PyFormat.format(s, a);
            case "format_map": return PyFormat.format(s, new Args(List.of(), stringKeys(a.require(0, "mapping", name))));
            case "center":
            case "ljust":
            case "rjust": {
                long width = PyTypes.toLong(a.require(0, "width", name), "width");
                String fill = a.has(1, "fillchar") ? requireStr(a, 1, "fillchar", name) : " ";
                if (fill.codePointCount(0, fill.length()) != 1) throw new TemplateException(Kind.TypeError, "The fill character must be exactly one character long");
                return pad(s, width, fill, name);
            }
            case "zfill": {
                long width = PyTypes.toLong(a.require(0, "width", name), "width");
                long len = PyTypes.length(s);
                if (len >= width) return s;
                String sign = !s.isEmpty() && (s.charAt(0) == '+' || s.charAt(0) == '-') ? s.substring(0, 1) : "";
                return sign + "0".repeat((int) (width - len)) + s.substring(sign.length());
            }
            case "partition":
            case "rpartition": {
                String sep = requireStr(a, 0, "sep", name);
                if (sep.isEmpty()) throw new TemplateException(Kind.ValueError, "empty separator");
                int i = name.equals("partition") ? s.indexOf(sep) : s.lastIndexOf(sep);
                if (i < 0) return name.equals("partition") ? PyTuple.of(s, "", "") : PyTuple.of("", "", s);
                return PyTuple.of(s.substring(0, i), sep, s.substring(i + sep.length()));
            }
            case "removeprefix": {
                String p = requireStr(a, 0, "prefix", name);
                return s.startsWith(p) ? s.substring(p.length()) : s;
            }
            case "removesuffix": {
                String p = requireStr(a, 0, "suffix", name);
                return !p.isEmpty() && s.endsWith(p) ? s.substring(0, s.length() - p.length()) : s;
            }
            case "expandtabs": {
                long tab = PyTypes.toLong(a.get(0, "tabsize", 8L), "tabsize");
                StringBuilder b = new StringBuilder();
                int col = 0;
                for (Object c : PyStr.chars(s)) {
                    String ch = (String) c;
                    if (ch.equals("\t")) {
                        if (tab > 0) {
                            int n = (int) (tab - col % tab);
                            b.repeat(' ', n);
                            col += n;
                        }
                    } else {
                        b.append(ch);
                        col = ch.equals("\n") || ch.equals("\r") ? 0 : col + 1;
                    }
                }
                return b.toString();
            }
            case "isspace": return !s.isEmpty() && s.codePoints().allMatch(PyStr::isSpace);
            case "isdigit":
            case "isdecimal":
            case "isnumeric": return !s.isEmpty() && s.codePoints().allMatch(Character::isDigit);
            case "isalpha": return !s.isEmpty() && s.codePoints().allMatch(Character::isLetter);
            case "isalnum": return !s.isEmpty() && s.codePoints().allMatch(Character::isLetterOrDigit);
            case "isascii": return s.codePoints().allMatch(c -> c < 128);
            case "isidentifier": return !s.isEmpty() && (Character.isUnicodeIdentifierStart(s.codePointAt(0)) || s.charAt(0) == '_')
                    && s.codePoints().allMatch(c -> Character.isUnicodeIdentifierPart(c) || c == '_');
            case "isprintable": return s.codePoints().allMatch(PyStr::isPrintable);
            case "islower": return s.codePoints().anyMatch(PyStr::isCased) && s.codePoints().noneMatch(c -> Character.isUpperCase(c) || Character.isTitleCase(c));
            case "isupper": return s.codePoints().anyMatch(PyStr::isCased) && s.codePoints().noneMatch(c -> Character.isLowerCase(c) || Character.isTitleCase(c));
            case "istitle": return !s.isEmpty() && PyStr.title(s).equals(s) && s.codePoints().anyMatch(PyStr::isCased);
            default: throw new TemplateException(Kind.Unsupported, "str." + name + "() is not supported");
        }
    }

    private static Map<String, Object> stringKeys(Object m) {
        if (!(m instanceof Map<?, ?> map)) throw new TemplateException(Kind.TypeError, "format_map() argument must be a mapping");
        Map<String, Object> out = new LinkedHashMap<>();
        for (Map.Entry<?, ?> e : map.entrySet()) out.put(PyRepr.str(e.getKey()), e.getValue());
        return out;
    }

    static String pad(String s, long width, String fill, String how) {
        long len = PyTypes.length(s);
        if (len >= width) return s;
        int total = (int) (width - len);
        int left = switch (how) {
            case "ljust" -> 0;
            case "rjust" -> total;
            // Python's centering: left = pad/2 + (pad & width & 1)
            default -> total / 2 + (int) (total & width & 1);
        };
        return fill.repeat(left) + s + fill.repeat(total - left);
    }

    private static Object dict(Map<Object, Object> d, String name, Args a) {
        switch (name) {
            case "items": a.check(name); return new DictView(DictView.Kind.ITEMS, d);
            case "keys": a.check(name); return new DictView(DictView.Kind.KEYS, d);
            case "values": a.check(name); return new DictView(DictView.Kind.VALUES, d);
            case "get": {
                if (a.keywords.size() > 0) throw new TemplateException(Kind.TypeError, "get() takes no keyword arguments");
                Object key = a.require(0, "key", "get");
                if (key instanceof Undefined) return a.get(1, null, null);
                Object v = PyTypes.dictGet(d, key);
                return v == PyTypes.MISSING ? a.get(1, null, null) : v;
            }
            case "copy": a.check(name); return new LinkedHashMap<>(d);
            default: throw new TemplateException(Kind.Unsupported, "dict." + name + "() is not supported");
        }
    }

    private static Object seq(List<?> l, String name, Args a, String type) {
        switch (name) {
            case "count": {
                Object x = a.require(0, "value", "count");
                long c = 0;
                for (Object o : l) if (PyTypes.eq(o, x)) c++;
                return c;
            }
            case "index": {
                Object x = a.require(0, "value", "index");
                for (int i = 0; i < l.size(); i++) if (PyTypes.eq(l.get(i), x)) return (long) i;
                throw new TemplateException(Kind.ValueError, type.equals("list") ? PyRepr.repr(x) + " is not in list" : "tuple.index(x): x not in tuple");
            }
            case "copy": return new ArrayList<>(l);
            default: throw new TemplateException(Kind.Unsupported, type + "." + name + "() is not supported");
        }
    }
}
