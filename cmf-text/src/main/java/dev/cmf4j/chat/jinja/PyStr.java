package dev.cmf4j.chat.jinja;

import java.util.ArrayList;
import java.util.List;

/** Python {@code str} semantics that Java's String does differently: whitespace set, code-point indexing, case, split. */
final class PyStr {

    private PyStr() { }

    /** Python's {@code str.isspace()} for one character (also what {@code \s} matches in Python's re). */
    static boolean isSpace(int c) {
        return switch (c) {
            case '\t', '\n', 0x0b, 0x0c, '\r', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680,
                 0x2028, 0x2029, 0x202f, 0x205f, 0x3000 -> true;
            default -> c >= 0x2000 && c <= 0x200a;
        };
    }

    static boolean allSpace(String s, int from) {
        for (int i = from; i < s.length(); i++) if (!isSpace(s.charAt(i))) return false;
        return true;
    }

    /** Python's {@code str.isprintable()} for one code point. */
    static boolean isPrintable(int cp) {
        if (cp == ' ') return true;
        return switch (Character.getType(cp)) {
            case Character.CONTROL, Character.FORMAT, Character.SURROGATE, Character.PRIVATE_USE, Character.UNASSIGNED,
                 Character.LINE_SEPARATOR, Character.PARAGRAPH_SEPARATOR, Character.SPACE_SEPARATOR -> false;
            default -> true;
        };
    }

    static boolean isCased(int cp) {
        return Character.isUpperCase(cp) || Character.isLowerCase(cp) || Character.isTitleCase(cp);
    }

    /** Compares by code point (Python order), not by UTF-16 unit. */
    static int compareCodePoints(String a, String b) {
        int i = 0, j = 0;
        while (i < a.length() && j < b.length()) {
            int x = a.codePointAt(i), y = b.codePointAt(j);
            if (x != y) return Integer.compare(x, y);
            i += Character.charCount(x);
            j += Character.charCount(y);
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }

    static List<Object> chars(String s) {
        List<Object> out = new ArrayList<>(s.length());
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            int n = Character.charCount(cp);
            out.add(s.substring(i, i + n));
            i += n;
        }
        return out;
    }

    static int[] codePoints(String s) {
        return s.codePoints().toArray();
    }

    static String fromCodePoints(int[] cps, int from, int to) {
        return new String(cps, from, to - from);
    }

    private static boolean inSet(int cp, String chars) {
        if (chars == null) return isSpace(cp);
        return chars.indexOf(cp) >= 0 || (Character.isSupplementaryCodePoint(cp) && chars.contains(Character.toString(cp)));
    }

    static String strip(String s, String chars) {
        return lstrip(rstrip(s, chars), chars);
    }

    static String lstrip(String s, String chars) {
        int i = 0;
        while (i < s.length()) {
            int cp = s.codePointAt(i);
            if (!inSet(cp, chars)) break;
            i += Character.charCount(cp);
        }
        return s.substring(i);
    }

    static String rstrip(String s, String chars) {
        int j = s.length();
        while (j > 0) {
            int cp = s.codePointBefore(j);
            if (!inSet(cp, chars)) break;
            j -= Character.charCount(cp);
        }
        return s.substring(0, j);
    }

    /** {@code str.split(sep, maxsplit)}; sep null splits on runs of whitespace and drops empty ends. */
    static List<Object> split(String s, String sep, long maxsplit) {
        List<Object> out = new ArrayList<>();
        if (sep == null) {
            int i = 0, n = s.length();
            while (true) {
                while (i < n && isSpace(s.charAt(i))) i++;
                if (i >= n) break;
                if (maxsplit >= 0 && out.size() >= maxsplit) {
                    out.add(s.substring(i)); // Python keeps the remainder's trailing whitespace
                    break;
                }
                int j = i;
                while (j < n && !isSpace(s.charAt(j))) j++;
                out.add(s.substring(i, j));
                i = j;
            }
            return out;
        }
        if (sep.isEmpty()) throw new TemplateException(TemplateException.Kind.ValueError, "empty separator");
        int i = 0;
        while (maxsplit < 0 || out.size() < maxsplit) {
            int j = s.indexOf(sep, i);
            if (j < 0) break;
            out.add(s.substring(i, j));
            i = j + sep.length();
        }
        out.add(s.substring(i));
        return out;
    }

    /** {@code str.rsplit(sep, maxsplit)}. */
    static List<Object> rsplit(String s, String sep, long maxsplit) {
        if (maxsplit < 0) return split(s, sep, -1);
        List<Object> out = new ArrayList<>();
        if (sep == null) {
            int j = s.length();
            while (true) {
                while (j > 0 && isSpace(s.charAt(j - 1))) j--;
                if (j <= 0) break;
                if (out.size() >= maxsplit) {
                    out.add(s.substring(0, j)); // Python keeps the remainder's leading whitespace
                    break;
                }
                int i = j;
                while (i > 0 && !isSpace(s.charAt(i - 1))) i--;
                out.add(s.substring(i, j));
                j = i;
            }
        } else {
            if (sep.isEmpty()) throw new TemplateException(TemplateException.Kind.ValueError, "empty separator");
            int j = s.length();
            while (out.size() < maxsplit) {
                int i = s.lastIndexOf(sep, j - sep.length());
                if (i < 0 || j - sep.length() < 0) break;
                out.add(s.substring(i + sep.length(), j));
                j = i;
            }
            out.add(s.substring(0, j));
        }
        java.util.Collections.reverse(out);
        return out;
    }

    /** {@code str.splitlines(keepends)} with Python's line boundaries. */
    static List<Object> splitlines(String s, boolean keepends) {
        List<Object> out = new ArrayList<>();
        int i = 0, start = 0, n = s.length();
        while (i < n) {
            char c = s.charAt(i);
            int eol;
            if (c == '\r' && i + 1 < n && s.charAt(i + 1) == '\n') eol = 2;
            else if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e
                    || c == 0x85 || c == 0x2028 || c == 0x2029) eol = 1;
            else eol = 0;
            if (eol > 0) {
                out.add(s.substring(start, keepends ? i + eol : i));
                i += eol;
                start = i;
            } else {
                i++;
            }
        }
        if (start < n) out.add(s.substring(start));
        return out;
    }

    static String upper(String s) {
        return s.toUpperCase(java.util.Locale.ROOT);
    }

    static String lower(String s) {
        return s.toLowerCase(java.util.Locale.ROOT);
    }

    /** {@code str.title()}: title-case a letter after an uncased character, lower-case the others. */
    static String title(String s) {
        StringBuilder b = new StringBuilder(s.length());
        boolean prevCased = false;
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            if (prevCased) b.append(lower(Character.toString(cp)));
            else b.append(titleChar(cp));
            prevCased = isCased(cp);
        }
        return b.toString();
    }

    private static String titleChar(int cp) {
        String up = upper(Character.toString(cp));
        if (up.codePointCount(0, up.length()) == 1) return Character.toString(Character.toTitleCase(cp));
        // special casing (e.g. 'ß' -> 'Ss'): first char title, rest lower, as Python's titlecase mapping
        return up.substring(0, Character.charCount(up.codePointAt(0))) + lower(up.substring(Character.charCount(up.codePointAt(0))));
    }

    /** {@code str.capitalize()}: first character title case, the rest lower case (Python 3.8+). */
    static String capitalize(String s) {
        if (s.isEmpty()) return s;
        int cp = s.codePointAt(0);
        return titleChar(cp) + lower(s.substring(Character.charCount(cp)));
    }

    static String swapcase(String s) {
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            String c = Character.toString(cp);
            if (Character.isUpperCase(cp)) b.append(lower(c));
            else if (Character.isLowerCase(cp)) b.append(upper(c));
            else b.append(c);
        }
        return b.toString();
    }

    /** Python's {@code str.replace(old, new, count)}, including the empty-pattern case. */
    static String replace(String s, String old, String rep, long count) {
        if (count == 0) return s;
        if (old.isEmpty()) {
            StringBuilder b = new StringBuilder();
            List<Object> cs = chars(s);
            long done = 0;
            for (Object c : cs) {
                if (count < 0 || done < count) {
                    b.append(rep);
                    done++;
                }
                b.append((String) c);
            }
            if (count < 0 || done < count) b.append(rep);
            return b.toString();
        }
        StringBuilder b = new StringBuilder(s.length());
        int i = 0;
        long done = 0;
        while (count < 0 || done < count) {
            int j = s.indexOf(old, i);
            if (j < 0) break;
            b.append(s, i, j).append(rep);
            i = j + old.length();
            done++;
        }
        b.append(s, i, s.length());
        return b.toString();
    }

    /** {@code str * n}, bounded so a template cannot make a gigantic string. */
    static String repeat(String s, long n) {
        if (n <= 0 || s.isEmpty()) return "";
        if ((double) s.length() * n > Interpreter.MAX_OUTPUT_CHARS) {
            throw new TemplateException(TemplateException.Kind.LimitExceeded, "string repetition of " + n + " x " + s.length() + " chars exceeds the output limit");
        }
        return s.repeat((int) n);
    }

    /** Code-point index of sub in s (within [start, end) code points), or -1: str.find. */
    static long find(String s, String sub, Object start, Object end, boolean reverse) {
        int[] cps = codePoints(s);
        int n = cps.length;
        int[] range = Slices.clampRange(n, start, end);
        String hay = fromCodePoints(cps, range[0], Math.max(range[0], range[1]));
        if (range[1] < range[0]) return sub.isEmpty() && range[0] <= n ? -1 : -1;
        int idx = reverse ? hay.lastIndexOf(sub) : hay.indexOf(sub);
        if (idx < 0) return -1;
        return range[0] + hay.codePointCount(0, idx);
    }

    static long count(String s, String sub, Object start, Object end) {
        int[] cps = codePoints(s);
        int[] range = Slices.clampRange(cps.length, start, end);
        if (range[1] < range[0]) return 0;
        String hay = fromCodePoints(cps, range[0], range[1]);
        if (sub.isEmpty()) return hay.codePointCount(0, hay.length()) + 1;
        long c = 0;
        int i = 0;
        while ((i = hay.indexOf(sub, i)) >= 0) {
            c++;
            i += sub.length();
        }
        return c;
    }
}
