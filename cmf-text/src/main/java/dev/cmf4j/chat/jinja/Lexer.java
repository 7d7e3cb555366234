package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;
import dev.cmf4j.chat.jinja.Token.Type;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;

/**
 * Splits template source into tokens the way jinja2's lexer does with the settings transformers
 * uses ({@code trim_blocks=True, lstrip_blocks=True}, default delimiters, no line statements):
 * newlines normalised to {@code \n} and one trailing newline dropped ({@code keep_trailing_newline=False});
 * {@code {%- / -%}} (and {@code {{-}}, {@code {#-}}) strip all whitespace on that side; {@code %}}
 * and {@code #}} eat one following newline (trim_blocks); a block or comment tag preceded on its
 * line only by whitespace takes that whitespace away (lstrip_blocks), unless written {@code {%+}.
 * "Whitespace" is Python's {@code str.isspace} set, as in jinja2's regexes.
 */
final class Lexer {

    private final String src;
    private final int[] lineStarts;
    private final List<Token> out = new ArrayList<>();
    private int pos;
    /** jinja2's {@code line_starting}: the previous match ended with a newline (or nothing matched yet). */
    private boolean lineStarting = true;

    private Lexer(String source) {
        this.src = normalizeNewlines(source);
        List<Integer> starts = new ArrayList<>();
        starts.add(0);
        for (int i = 0; i < src.length(); i++) if (src.charAt(i) == '\n') starts.add(i + 1);
        lineStarts = starts.stream().mapToInt(Integer::intValue).toArray();
    }

    static List<Token> tokenize(String source) {
        Lexer lx = new Lexer(source);
        lx.run();
        return lx.out;
    }

    /** jinja2: {@code "\n".join(newline_re.split(source)[::2])} minus one trailing empty line. */
    static String normalizeNewlines(String s) {
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\r') {
                b.append('\n');
                if (i + 1 < s.length() && s.charAt(i + 1) == '\n') i++;
            } else {
                b.append(c);
            }
        }
        if (b.length() > 0 && b.charAt(b.length() - 1) == '\n') b.setLength(b.length() - 1);
        return b.toString();
    }

    int lineOf(int offset) {
        int lo = 0, hi = lineStarts.length - 1;
        while (lo < hi) {
            int mid = (lo + hi + 1) >>> 1;
            if (lineStarts[mid] <= offset) lo = mid; else hi = mid - 1;
        }
        return lo + 1;
    }

    private TemplateException syntax(String msg, int at) {
        return new TemplateException(Kind.TemplateSyntaxError, msg, lineOf(at));
    }

    private void run() {
        int n = src.length();
        while (pos < n) {
            int p = nextTagStart(pos);
            if (p < 0) {
                emit(Type.DATA, src.substring(pos), pos);
                pos = n;
                break;
            }
            char kindChar = src.charAt(p + 1);
            char sign = p + 2 < n && (src.charAt(p + 2) == '-' || src.charAt(p + 2) == '+') ? src.charAt(p + 2) : 0;
            int afterBegin = p + 2 + (sign != 0 ? 1 : 0);
            int rawEnd = kindChar == '%' ? matchRawBegin(afterBegin) : -1;
            String text = stripBefore(src.substring(pos, p), sign, kindChar != '{');
            if (!text.isEmpty()) emit(Type.DATA, text, pos);
            if (rawEnd >= 0) {
                lexRaw(p, rawEnd);
            } else if (kindChar == '#') {
                lexComment(p, afterBegin);
            } else {
                lexTag(p, afterBegin, kindChar == '%');
            }
        }
        out.add(new Token(Type.EOF, "", null, lineOf(n)));
    }

    private int nextTagStart(int from) {
        int i = src.indexOf('{', from);
        while (i >= 0 && i + 1 < src.length()) {
            char c = src.charAt(i + 1);
            if (c == '{' || c == '%' || c == '#') return i;
            i = src.indexOf('{', i + 1);
        }
        return -1;
    }

    /** jinja2's OptionalLStrip handling of the text before a tag. */
    private String stripBefore(String text, char sign, boolean lstripApplies) {
        if (sign == '-') return PyStr.rstrip(text, null);
        if (sign != '+' && lstripApplies) {
            int lpos = text.lastIndexOf('\n') + 1;
            if ((lpos > 0 || lineStarting) && lpos < text.length() && PyStr.allSpace(text, lpos)) {
                return text.substring(0, lpos);
            }
        }
        return text;
    }

    private void emit(Type t, String text, int at) {
        out.add(new Token(t, text, text, lineOf(at)));
    }

    // ---- raw blocks: {% raw %}...{% endraw %}

    /** If {@code {%[-+]?\s*raw\s*(-%}\s*|%})} starts here, returns the end of that match, else -1. */
    private int matchRawBegin(int i) {
        i = skipSpace(i);
        if (!src.startsWith("raw", i)) return -1;
        i += 3;
        if (i < src.length() && isNameChar(src.charAt(i))) return -1;
        i = skipSpace(i);
        if (src.startsWith("-%}", i)) return skipSpace(i + 3);
        if (src.startsWith("%}", i)) return i + 2;
        return -1;
    }

    private void lexRaw(int tagStart, int contentStart) {
        lineStarting = contentStart > 0 && src.charAt(contentStart - 1) == '\n';
        int search = contentStart;
        while (true) {
            int p = src.indexOf("{%", search);
            if (p < 0) throw syntax("Missing end of raw directive", tagStart);
            int i = p + 2;
            char sign = i < src.length() && (src.charAt(i) == '-' || src.charAt(i) == '+') ? src.charAt(i) : 0;
            if (sign != 0) i++;
            i = skipSpace(i);
            if (src.startsWith("endraw", i) && !(i + 6 < src.length() && isNameChar(src.charAt(i + 6)))) {
                i = skipSpace(i + 6);
                int end = endOfBlockClose(i);
                if (end >= 0) {
                    String content = stripBefore(src.substring(contentStart, p), sign, true);
                    if (!content.isEmpty()) emit(Type.DATA, content, contentStart);
                    finishMatch(end);
                    return;
                }
            }
            search = p + 2;
        }
    }

    // ---- comments

    private void lexComment(int tagStart, int contentStart) {
        int e = src.indexOf("#}", contentStart);
        if (e < 0) throw syntax("Missing end of comment tag", tagStart);
        int end;
        if (e - 1 >= contentStart && src.charAt(e - 1) == '-') end = skipSpace(e + 2);
        else if (e - 1 >= contentStart && src.charAt(e - 1) == '+') end = e + 2;
        else end = e + 2 < src.length() && src.charAt(e + 2) == '\n' ? e + 3 : e + 2;
        finishMatch(end);
    }

    // ---- {{ ... }} and {% ... %}

    /** {@code \+%}|\-%}\s*|%}\n?} at i: the end offset, or -1. */
    private int endOfBlockClose(int i) {
        if (src.startsWith("+%}", i)) return i + 3;
        if (src.startsWith("-%}", i)) return skipSpace(i + 3);
        if (src.startsWith("%}", i)) return i + 2 < src.length() && src.charAt(i + 2) == '\n' ? i + 3 : i + 2;
        return -1;
    }

    /** {@code \-}}\s*|}}} at i: the end offset, or -1. */
    private int endOfVariableClose(int i) {
        if (src.startsWith("-}}", i)) return skipSpace(i + 3);
        if (src.startsWith("}}", i)) return i + 2;
        return -1;
    }

    private void finishMatch(int end) {
        lineStarting = end > 0 && src.charAt(end - 1) == '\n';
        pos = end;
    }

    private void lexTag(int tagStart, int i, boolean block) {
        out.add(new Token(block ? Type.BLOCK_BEGIN : Type.VARIABLE_BEGIN, block ? "{%" : "{{", null, lineOf(tagStart)));
        Deque<Character> balance = new ArrayDeque<>();
        int n = src.length();
        while (true) {
            if (balance.isEmpty()) {
                int end = block ? endOfBlockClose(i) : endOfVariableClose(i);
                if (end >= 0) {
                    out.add(new Token(block ? Type.BLOCK_END : Type.VARIABLE_END, block ? "%}" : "}}", null, lineOf(i)));
                    finishMatch(end);
                    return;
                }
            }
            if (i >= n) throw syntax("unexpected end of template, expected '" + (block ? "end of statement block" : "end of print statement") + "'", tagStart);
            char c = src.charAt(i);
            if (PyStr.isSpace(c)) {
                i++;
                continue;
            }
            int line = lineOf(i);
            if (c == '\'' || c == '"') {
                int close = i + 1;
                while (close < n && src.charAt(close) != c) close += src.charAt(close) == '\\' ? 2 : 1;
                if (close >= n) throw syntax("unexpected char " + PyRepr.repr(String.valueOf(c)) + " at " + i, i);
                String body = src.substring(i + 1, close);
                out.add(new Token(Type.STRING, src.substring(i, close + 1), unescape(body, i), line));
                i = close + 1;
                continue;
            }
            if (isDigit(c)) {
                i = lexNumber(i, line);
                continue;
            }
            if (Character.isUnicodeIdentifierStart(c) || c == '_') {
                int s = i;
                while (i < n && isNameChar(src.charAt(i))) i++;
                out.add(new Token(Type.NAME, src.substring(s, i), src.substring(s, i), line));
                continue;
            }
            String op = operatorAt(i);
            if (op == null) throw syntax("unexpected char " + PyRepr.repr(String.valueOf(c)) + " at " + i, i);
            switch (op) {
                case "(" -> balance.push(')');
                case "[" -> balance.push(']');
                case "{" -> balance.push('}');
                case ")", "]", "}" -> {
                    if (balance.isEmpty()) throw syntax("unexpected '" + op + "'", i);
                    char expected = balance.pop();
                    if (expected != op.charAt(0)) throw syntax("unexpected '" + op + "', expected '" + expected + "'", i);
                }
                default -> { }
            }
            out.add(new Token(Type.OPERATOR, op, op, line));
            i += op.length();
        }
    }

    private static final String[] OPERATORS = {
        "//", "**", "==", "!=", ">=", "<=",
        "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";",
    };

    private String operatorAt(int i) {
        for (String op : OPERATORS) if (src.startsWith(op, i)) return op;
        return null;
    }

    /**
     * jinja2's float and integer rules: {@code (\d+_)*\d+((\.(\d+_)*\d+)?e[+-]?(\d+_)*\d+|\.(\d+_)*\d+)}
     * (not right after a dot, so {@code foo.0.1} is two subscripts) and
     * {@code 0b../0o../0x../[1-9](_?\d)*|0(_?0)*}.
     */
    private int lexNumber(int start, int line) {
        int n = src.length();
        boolean afterDot = start > 0 && src.charAt(start - 1) == '.';
        int i = digitsWithUnderscores(start);
        if (!afterDot && i > start) {
            int f = i;
            boolean isFloat = false;
            if (f < n && src.charAt(f) == '.' && f + 1 < n && isDigit(src.charAt(f + 1))) {
                f = digitsWithUnderscores(f + 1);
                isFloat = true;
            }
            if (f < n && (src.charAt(f) == 'e' || src.charAt(f) == 'E')) {
                int e = f + 1;
                if (e < n && (src.charAt(e) == '+' || src.charAt(e) == '-')) e++;
                int ed = digitsWithUnderscores(e);
                if (ed > e) {
                    f = ed;
                    isFloat = true;
                }
            }
            if (isFloat) {
                String text = src.substring(start, f);
                out.add(new Token(Type.FLOAT, text, Double.parseDouble(text.replace("_", "")), line));
                return f;
            }
        }
        // integer
        if (src.charAt(start) == '0' && start + 1 < n && "bBoOxX".indexOf(src.charAt(start + 1)) >= 0) {
            int radix = switch (Character.toLowerCase(src.charAt(start + 1))) { case 'b' -> 2; case 'o' -> 8; default -> 16; };
            int j = start + 2;
            while (j < n && (src.charAt(j) == '_' || Character.digit(src.charAt(j), radix) >= 0)) j++;
            String digits = src.substring(start + 2, j).replace("_", "");
            if (!digits.isEmpty()) {
                out.add(new Token(Type.INTEGER, src.substring(start, j), parseInt(digits, radix, start), line));
                return j;
            }
        }
        int j;
        if (src.charAt(start) == '0') {
            j = start + 1;
            while (j < n) {
                if (src.charAt(j) == '0') j++;
                else if (src.charAt(j) == '_' && j + 1 < n && src.charAt(j + 1) == '0') j += 2;
                else break;
            }
        } else {
            j = start + 1;
            while (j < n && (isDigit(src.charAt(j)) || (src.charAt(j) == '_' && j + 1 < n && isDigit(src.charAt(j + 1))))) j++;
        }
        String text = src.substring(start, j);
        out.add(new Token(Type.INTEGER, text, parseInt(text.replace("_", ""), 10, start), line));
        return j;
    }

    private Object parseInt(String digits, int radix, int at) {
        java.math.BigInteger v = new java.math.BigInteger(digits, radix);
        if (v.bitLength() < 64) return v.longValue();
        throw new TemplateException(Kind.OverflowError, "integer literal " + digits + " does not fit in 64 bits", lineOf(at));
    }

    private int digitsWithUnderscores(int i) {
        int n = src.length();
        int s = i;
        while (i < n && isDigit(src.charAt(i))) {
            i++;
            if (i + 1 < n && src.charAt(i) == '_' && isDigit(src.charAt(i + 1))) i++;
        }
        return i > s ? i : s;
    }

    private static boolean isDigit(char c) {
        return c >= '0' && c <= '9';
    }

    private static boolean isNameChar(char c) {
        return Character.isUnicodeIdentifierPart(c) && !Character.isIdentifierIgnorable(c) || c == '_';
    }

    private int skipSpace(int i) {
        while (i < src.length() && PyStr.isSpace(src.charAt(i))) i++;
        return i;
    }

    /**
     * jinja2 decodes string literals with Python's {@code unicode-escape} codec (after escaping
     * non-ASCII with backslashreplace, so non-ASCII text passes through unchanged).
     */
    private String unescape(String body, int at) {
        if (body.indexOf('\\') < 0) return body;
        StringBuilder b = new StringBuilder(body.length());
        int n = body.length();
        for (int i = 0; i < n; i++) {
            char c = body.charAt(i);
            if (c != '\\' || i + 1 >= n) {
                b.append(c);
                continue;
            }
            char e = body.charAt(++i);
            switch (e) {
                case '\n' -> { }
                case '\\' -> b.append('\\');
                case '\'' -> b.append('\'');
                case '"' -> b.append('"');
                case 'a' -> b.append('\u0007');
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'n' -> b.append('\n');
                case 'r' -> b.append('\r');
                case 't' -> b.append('\t');
                case 'v' -> b.append('\u000b');
                case 'x', 'u', 'U' -> {
                    int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    String hex = body.substring(i + 1, Math.min(n, i + 1 + len));
                    int cp;
                    try {
                        if (hex.length() != len) throw new NumberFormatException();
                        cp = Integer.parseInt(hex, 16);
                    } catch (NumberFormatException ex) {
                        throw syntax("truncated \\" + e + " escape in string literal", at);
                    }
                    if (cp > 0x10FFFF) throw syntax("illegal Unicode character in string literal", at);
                    b.appendCodePoint(cp);
                    i += len;
                }
                case '0', '1', '2', '3', '4', '5', '6', '7' -> {
                    int v = e - '0';
                    int k = 1;
                    while (k < 3 && i + 1 < n && body.charAt(i + 1) >= '0' && body.charAt(i + 1) <= '7') {
                        v = v * 8 + (body.charAt(++i) - '0');
                        k++;
                    }
                    b.append((char) v);
                }
                case 'N' -> throw new TemplateException(Kind.Unsupported, "\\N{...} escapes in string literals are not supported", lineOf(at));
                default -> b.append('\\').append(e);
            }
        }
        return b.toString();
    }
}
