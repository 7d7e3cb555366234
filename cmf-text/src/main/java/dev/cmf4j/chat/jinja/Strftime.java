package dev.cmf4j.chat.jinja;

import java.time.LocalDateTime;
import java.time.format.TextStyle;
import java.time.temporal.ChronoField;
import java.time.temporal.IsoFields;
import java.util.Locale;

/**
 * Python's {@code datetime.now().strftime(fmt)} for a naive local time, C locale, glibc directives
 * (including the {@code %-d} no-padding form). {@code %z} and {@code %Z} are empty for naive
 * datetimes, as in Python.
 */
final class Strftime {

    private Strftime() { }

    static String format(LocalDateTime t, String fmt) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < fmt.length(); i++) {
            char c = fmt.charAt(i);
            if (c != '%' || i + 1 >= fmt.length()) {
                b.append(c);
                continue;
            }
            char d = fmt.charAt(++i);
            boolean noPad = false;
            if (d == '-' && i + 1 < fmt.length()) {
                noPad = true;
                d = fmt.charAt(++i);
            }
            String v = switch (d) {
                case 'a' -> t.getDayOfWeek().getDisplayName(TextStyle.SHORT, Locale.US);
                case 'A' -> t.getDayOfWeek().getDisplayName(TextStyle.FULL, Locale.US);
                case 'w' -> String.valueOf(t.getDayOfWeek().getValue() % 7);
                case 'u' -> String.valueOf(t.getDayOfWeek().getValue());
                case 'd' -> pad(t.getDayOfMonth(), 2, noPad);
                case 'e' -> noPad ? String.valueOf(t.getDayOfMonth()) : String.format("%2d", t.getDayOfMonth());
                case 'b', 'h' -> t.getMonth().getDisplayName(TextStyle.SHORT, Locale.US);
                case 'B' -> t.getMonth().getDisplayName(TextStyle.FULL, Locale.US);
                case 'm' -> pad(t.getMonthValue(), 2, noPad);
                case 'y' -> pad(t.getYear() % 100, 2, noPad);
                case 'Y' -> String.valueOf(t.getYear());
                case 'C' -> pad(t.getYear() / 100, 2, noPad);
                case 'H' -> pad(t.getHour(), 2, noPad);
                case 'k' -> String.format("%2d", t.getHour());
                case 'I' -> pad(hour12(t), 2, noPad);
                case 'l' -> String.format("%2d", hour12(t));
                case 'p' -> t.getHour() < 12 ? "AM" : "PM";
                case 'P' -> t.getHour() < 12 ? "am" : "pm";
                case 'M' -> pad(t.getMinute(), 2, noPad);
                case 'S' -> pad(t.getSecond(), 2, noPad);
                case 'f' -> String.format("%06d", t.getNano() / 1000);
                case 'j' -> pad(t.getDayOfYear(), 3, noPad);
                case 'U' -> pad((t.getDayOfYear() + 6 - t.getDayOfWeek().getValue() % 7) / 7, 2, noPad);
                case 'W' -> pad((t.getDayOfYear() + 6 - (t.getDayOfWeek().getValue() + 6) % 7) / 7, 2, noPad);
                case 'V' -> pad(t.get(IsoFields.WEEK_OF_WEEK_BASED_YEAR), 2, noPad);
                case 'G' -> String.valueOf(t.get(IsoFields.WEEK_BASED_YEAR));
                case 'c' -> format(t, "%a %b %e %H:%M:%S %Y");
                case 'x', 'D' -> format(t, "%m/%d/%y");
                case 'X', 'T' -> format(t, "%H:%M:%S");
                case 'F' -> format(t, "%Y-%m-%d");
                case 'R' -> format(t, "%H:%M");
                case 'r' -> format(t, "%I:%M:%S %p");
                case 's' -> String.valueOf(t.atZone(java.time.ZoneId.systemDefault()).toEpochSecond());
                case 'n' -> "\n";
                case 't' -> "\t";
                case 'z', 'Z' -> "";
                case '%' -> "%";
                default -> "%" + (noPad ? "-" : "") + d;
            };
            b.append(v);
        }
        return b.toString();
    }

    private static int hour12(LocalDateTime t) {
        int h = t.get(ChronoField.CLOCK_HOUR_OF_AMPM);
        return h;
    }

    private static String pad(int v, int width, boolean noPad) {
        if (noPad) return String.valueOf(v);
        String s = String.valueOf(v);
        return s.length() >= width ? s : "0".repeat(width - s.length()) + s;
    }
}
