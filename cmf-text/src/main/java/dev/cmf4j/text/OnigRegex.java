package dev.cmf4j.text;

import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * A regex written for Oniguruma (what the reference tokenizers compile split and replace patterns
 * with), translated to {@link java.util.regex} and searched with Oniguruma's iteration rules.
 *
 * <p>The translation keeps Oniguruma's meaning where Java differs: {@code \s} is Unicode White_Space,
 * {@code \w} is letters, marks, Nd and Pc, {@code \d} is Nd, {@code \h} is a hex digit, {@code .}
 * stops only at "\n", {@code ^}/{@code $} are line anchors, {@code (?m)} is dot-all, case-insensitive
 * groups fold Unicode case, script names work without "Is", and a brace that is not a quantifier is a
 * literal. Possessive quantifiers, atomic groups and lookaround are shared syntax.
 */
final class OnigRegex {
    private static final String WS = "\\t-\\r\\x20\\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000";
    private static final String WORD = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
    private static final String HEX = "0-9a-fA-F";
    private static final int FLAGS = Pattern.MULTILINE | Pattern.UNIX_LINES | Pattern.UNICODE_CASE;

    private static final Map<String, String> CATEGORY_LONG = Map.ofEntries(
            Map.entry("letter", "L"), Map.entry("uppercaseletter", "Lu"), Map.entry("lowercaseletter", "Ll"),
            Map.entry("titlecaseletter", "Lt"), Map.entry("modifierletter", "Lm"), Map.entry("otherletter", "Lo"),
            Map.entry("casedletter", "LC"), Map.entry("mark", "M"), Map.entry("combiningmark", "M"),
            Map.entry("nonspacingmark", "Mn"), Map.entry("spacingmark", "Mc"), Map.entry("enclosingmark", "Me"),
            Map.entry("number", "N"), Map.entry("decimalnumber", "Nd"), Map.entry("letternumber", "Nl"),
            Map.entry("othernumber", "No"), Map.entry("punctuation", "P"), Map.entry("connectorpunctuation", "Pc"),
            Map.entry("dashpunctuation", "Pd"), Map.entry("openpunctuation", "Ps"), Map.entry("closepunctuation", "Pe"),
            Map.entry("initialpunctuation", "Pi"), Map.entry("finalpunctuation", "Pf"), Map.entry("otherpunctuation", "Po"),
            Map.entry("symbol", "S"), Map.entry("mathsymbol", "Sm"), Map.entry("currencysymbol", "Sc"),
            Map.entry("modifiersymbol", "Sk"), Map.entry("othersymbol", "So"), Map.entry("separator", "Z"),
            Map.entry("spaceseparator", "Zs"), Map.entry("lineseparator", "Zl"), Map.entry("paragraphseparator", "Zp"),
            Map.entry("other", "C"), Map.entry("control", "Cc"), Map.entry("format", "Cf"), Map.entry("surrogate", "Cs"),
            Map.entry("privateuse", "Co"), Map.entry("unassigned", "Cn"));
    private static final java.util.Set<String> CATEGORY_SHORT = java.util.Set.of(
            "L", "Lu", "Ll", "Lt", "Lm", "Lo", "LC", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No", "P", "Pc", "Pd", "Ps",
            "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Cs", "Co", "Cn");

    private final String source;
    private final Pattern pattern;

    private OnigRegex(String source, Pattern pattern) {
        this.source = source;
        this.pattern = pattern;
    }

    /** Compiles an Oniguruma pattern; throws {@link IllegalArgumentException} naming the construct it cannot take. */
    static OnigRegex compile(String onig) {
        String java = translate(onig);
        try {
            return new OnigRegex(onig, Pattern.compile(java, FLAGS));
        } catch (PatternSyntaxException e) {
            throw new IllegalArgumentException("regex " + quote(onig) + " is not supported: " + e.getDescription());
        }
    }

    String source() {
        return source;
    }

    Pattern javaPattern() {
        return pattern;
    }

    /**
     * Fills {@code out} with the matches in {@code s} and the gaps between them. Iterates like the
     * Oniguruma binding the reference uses: each search starts where the last match ended, and an
     * empty match right at the end of the previous match is skipped by advancing one character.
     */
    void find(String s, Matches out) {
        out.clear();
        int n = s.length();
        if (n == 0) { out.add(0, 0, false); return; }
        Matcher m = pattern.matcher(s);
        int from = 0, prev = 0, lastMatchEnd = -1;
        while (from <= n && m.find(from)) {
            int st = m.start(), en = m.end();
            if (st == en && en == lastMatchEnd) {
                from += from < n ? Character.charCount(s.codePointAt(from)) : 1;
                continue;
            }
            if (prev != st) out.add(prev, st, false);
            out.add(st, en, true);
            prev = en;
            from = en;
            lastMatchEnd = en;
        }
        if (prev != n) out.add(prev, n, false);
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    // ---------------------------------------------------------------- translation

    static String translate(String p) {
        StringBuilder out = new StringBuilder(p.length() + 32);
        int depth = 0; // character-class nesting
        int i = 0, n = p.length();
        while (i < n) {
            char c = p.charAt(i);
            if (c == '\\') {
                if (i + 1 >= n) throw bad(p, "a trailing backslash");
                i = escape(p, i, depth > 0, out);
                continue;
            }
            if (depth > 0) {
                if (c == '[') {
                    if (p.startsWith("[:", i)) {
                        int close = p.indexOf(":]", i + 2);
                        if (close < 0) throw bad(p, "an unterminated POSIX bracket");
                        out.append(posix(p, p.substring(i + 2, close)));
                        i = close + 2;
                        continue;
                    }
                    out.append('[');
                    depth++;
                    i++;
                    i = classStart(p, i, out);
                    continue;
                }
                if (c == ']') { depth--; out.append(']'); i++; continue; }
                out.append(c);
                i++;
                continue;
            }
            switch (c) {
                case '[' -> {
                    out.append('[');
                    depth++;
                    i = classStart(p, i + 1, out);
                }
                case '(' -> i = group(p, i, out);
                case '{' -> {
                    int close = p.indexOf('}', i);
                    String body = close < 0 ? null : p.substring(i + 1, close);
                    if (body != null && body.matches("\\d+(,\\d*)?")) {
                        out.append('{').append(body).append('}');
                        i = close + 1;
                    } else if (body != null && body.matches(",\\d+")) {
                        out.append("{0").append(body).append('}');
                        i = close + 1;
                    } else {
                        out.append("\\{");
                        i++;
                    }
                }
                case '}' -> { out.append("\\}"); i++; }
                default -> { out.append(c); i++; }
            }
        }
        if (depth != 0) throw bad(p, "an unterminated character class");
        return out.toString();
    }

    /** After an opening '[': copies a leading '^' and treats a ']' right after it as a literal. */
    private static int classStart(String p, int i, StringBuilder out) {
        if (i < p.length() && p.charAt(i) == '^') { out.append('^'); i++; }
        if (i < p.length() && p.charAt(i) == ']') { out.append("\\]"); i++; }
        return i;
    }

    private static int group(String p, int i, StringBuilder out) {
        if (!p.startsWith("(?", i)) { out.append('('); return i + 1; }
        int j = i + 2;
        if (j >= p.length()) throw bad(p, "an unterminated group");
        char k = p.charAt(j);
        if (k == '#') { // comment
            int close = p.indexOf(')', j);
            if (close < 0) throw bad(p, "an unterminated comment");
            return close + 1;
        }
        if (k == ':' || k == '=' || k == '!' || k == '>') { out.append("(?").append(k); return j + 1; }
        if (k == '<' && j + 1 < p.length() && (p.charAt(j + 1) == '=' || p.charAt(j + 1) == '!')) {
            out.append("(?<").append(p.charAt(j + 1));
            return j + 2;
        }
        if (k == '<' || k == '\'' || (k == 'P' && j + 1 < p.length() && p.charAt(j + 1) == '<')) {
            char close = k == '\'' ? '\'' : '>';
            int end = p.indexOf(close, k == 'P' ? j + 2 : j + 1);
            if (end < 0) throw bad(p, "an unterminated group name");
            out.append('('); // named group: numbering is all we need, and Java names allow fewer characters
            return end + 1;
        }
        // option flags: (?imx-imx) or (?imx-imx:...)
        int e = j;
        StringBuilder flags = new StringBuilder();
        while (e < p.length() && "imx-".indexOf(p.charAt(e)) >= 0) {
            char f = p.charAt(e);
            flags.append(f == 'm' ? 's' : f); // Oniguruma's m is Java's s (dot matches newline)
            e++;
        }
        if (e < p.length() && (p.charAt(e) == ')' || p.charAt(e) == ':') && e > j) {
            out.append("(?").append(flags).append(p.charAt(e));
            return e + 1;
        }
        throw bad(p, "the group syntax \"" + p.substring(i, Math.min(p.length(), e + 1)) + "\"");
    }

    private static int escape(String p, int i, boolean inClass, StringBuilder out) {
        char d = p.charAt(i + 1);
        switch (d) {
            case 's' -> out.append(inClass ? WS : "[" + WS + "]");
            case 'S' -> out.append("[^" + WS + "]");
            case 'w' -> out.append(inClass ? WORD : "[" + WORD + "]");
            case 'W' -> out.append("[^" + WORD + "]");
            case 'd' -> out.append("\\p{Nd}");
            case 'D' -> out.append("\\P{Nd}");
            case 'h' -> out.append(inClass ? HEX : "[" + HEX + "]");
            case 'H' -> out.append("[^" + HEX + "]");
            case 'v' -> out.append("\\x0B");
            case 'b' -> out.append(inClass ? "\\x08" : "(?:(?<=[" + WORD + "])(?![" + WORD + "])|(?<![" + WORD + "])(?=[" + WORD + "]))");
            case 'B' -> {
                if (inClass) throw bad(p, "\\B in a character class");
                out.append("(?:(?<=[" + WORD + "])(?=[" + WORD + "])|(?<![" + WORD + "])(?![" + WORD + "]))");
            }
            case 'p', 'P' -> { return property(p, i, d == 'P', out); }
            case 'x' -> {
                int j = i + 2;
                if (j < p.length() && p.charAt(j) == '{') {
                    int close = p.indexOf('}', j);
                    if (close < 0) throw bad(p, "an unterminated \\x{...}");
                    out.append(p, i, close + 1);
                    return close + 1;
                }
                int k = j;
                while (k < p.length() && k < j + 2 && isHex(p.charAt(k))) k++;
                if (k == j) throw bad(p, "\\x without hex digits");
                out.append("\\x{").append(p, j, k).append('}');
                return k;
            }
            case '0' -> {
                int j = i + 2, k = j;
                while (k < p.length() && k < j + 2 && p.charAt(k) >= '0' && p.charAt(k) <= '7') k++;
                int v = k == j ? 0 : Integer.parseInt(p.substring(j, k), 8);
                out.append("\\x{").append(Integer.toHexString(v)).append('}');
                return k;
            }
            case 'K' -> throw bad(p, "\\K");
            default -> {
                if (Character.isLetterOrDigit(d) && "AzZGntrfeaRXuk123456789".indexOf(d) < 0) {
                    throw bad(p, "the escape \\" + d);
                }
                out.append('\\').append(d);
            }
        }
        return i + 2;
    }

    private static boolean isHex(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    }

    private static int property(String p, int i, boolean negated, StringBuilder out) {
        int j = i + 2;
        String name;
        int next;
        if (j < p.length() && p.charAt(j) == '{') {
            int close = p.indexOf('}', j);
            if (close < 0) throw bad(p, "an unterminated \\p{...}");
            name = p.substring(j + 1, close);
            next = close + 1;
        } else if (j < p.length()) {
            name = String.valueOf(p.charAt(j));
            next = j + 1;
        } else {
            throw bad(p, "\\p without a name");
        }
        if (name.startsWith("^")) { negated = !negated; name = name.substring(1); }
        String body = propertyBody(p, name);
        if (body.startsWith("[")) { // a class expression: negate by nesting
            out.append(negated ? "[^" + body.substring(1) : body);
        } else {
            out.append(negated ? "\\P{" : "\\p{").append(body).append('}');
        }
        return next;
    }

    /** The Java spelling of an Oniguruma property: a name for \p{...}, or a whole "[...]" class. */
    private static String propertyBody(String p, String name) {
        if (CATEGORY_SHORT.contains(name)) return name;
        String key = name.toLowerCase(Locale.ROOT).replace("_", "").replace(" ", "").replace("-", "");
        String cat = CATEGORY_LONG.get(key);
        if (cat != null) return cat;
        if (key.equals("l&")) return "LC";
        switch (key) {
            case "any": return "[\\x{0}-\\x{10FFFF}]";
            case "alpha", "alphabetic": return "IsAlphabetic";
            case "upper", "uppercase": return "IsUppercase";
            case "lower", "lowercase": return "IsLowercase";
            case "space", "whitespace": return "[" + WS + "]";
            case "digit": return "Nd";
            case "alnum": return "[\\p{IsAlphabetic}\\p{Nd}]";
            case "word": return "[" + WORD + "]";
            case "punct": return "P";
            case "xdigit": return "[" + HEX + "]";
            case "cntrl": return "Cc";
            case "ascii": return "[\\x00-\\x7F]";
            case "blank": return "[\\t\\p{Zs}]";
            default: break;
        }
        try { // a script (Han, Hiragana, Latin, ...) or a binary property Java knows with "Is"
            Pattern.compile("\\p{Is" + name + "}");
            return "Is" + name;
        } catch (PatternSyntaxException e) {
            throw bad(p, "the property \\p{" + name + "}");
        }
    }

    private static String posix(String p, String name) {
        boolean neg = name.startsWith("^");
        String body = propertyBody(p, neg ? name.substring(1) : name);
        if (body.startsWith("[")) return neg ? "[^" + body.substring(1) : body;
        return (neg ? "\\P{" : "\\p{") + body + "}";
    }

    private static IllegalArgumentException bad(String p, String what) {
        return new IllegalArgumentException("regex " + quote(p) + " uses " + what + ", which is not supported");
    }

    @Override public String toString() {
        return "OnigRegex[" + source + "]";
    }
}
