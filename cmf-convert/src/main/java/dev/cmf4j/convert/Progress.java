package dev.cmf4j.convert;

import java.io.PrintStream;
import java.util.Locale;

/**
 * Conversion progress. {@link #bar} draws one self-updating line with a bar, MB/s and ETA (for a
 * terminal); {@link #lines} prints a plain line every ~10% or 10 s (for logs and pipes);
 * {@link #NONE} is silent. Throughput counts source bytes read.
 */
public interface Progress {
    void start(String what, int tensors, long totalBytes);

    /** Called after each tensor is written, from the writing thread. */
    void tensorDone(String name, long sourceBytes);

    void finish();

    Progress NONE = new Progress() {
        @Override public void start(String what, int tensors, long totalBytes) {}
        @Override public void tensorDone(String name, long sourceBytes) {}
        @Override public void finish() {}
    };

    static Progress bar(PrintStream out) { return new Reporter(out, true); }

    static Progress lines(PrintStream out) { return new Reporter(out, false); }

    /** Both styles; the terminal one redraws at most 10 times a second. */
    final class Reporter implements Progress {
        private final PrintStream out;
        private final boolean terminal;
        private long t0, lastDraw, total, done;
        private int tensors, count, lastDecile = -1;

        Reporter(PrintStream out, boolean terminal) {
            this.out = out;
            this.terminal = terminal;
        }

        @Override public void start(String what, int tensors, long totalBytes) {
            this.tensors = tensors;
            this.total = Math.max(1, totalBytes);
            t0 = System.nanoTime();
            lastDraw = t0;
            if (!terminal) out.printf(Locale.ROOT, "converting %s: %d tensors, %s%n", what, tensors, mb(totalBytes));
        }

        @Override public void tensorDone(String name, long sourceBytes) {
            count++;
            done += sourceBytes;
            long now = System.nanoTime();
            if (terminal) {
                if (now - lastDraw > 100_000_000L || count == tensors) {
                    lastDraw = now;
                    out.print("\r" + line(now, name) + "\u001b[K");
                    out.flush();
                }
            } else {
                int decile = (int) (done * 10 / total);
                if (decile > lastDecile || now - lastDraw > 10_000_000_000L) {
                    lastDecile = decile;
                    lastDraw = now;
                    out.println(line(now, name));
                }
            }
        }

        private String line(long now, String name) {
            double secs = Math.max(1e-9, (now - t0) / 1e9);
            double rate = done / secs;
            double frac = Math.min(1.0, (double) done / total);
            String eta = eta(done, total, rate);
            StringBuilder b = new StringBuilder();
            if (terminal) b.append(bar(frac));
            b.append(String.format(Locale.ROOT, "%3.0f%% %d/%d tensors %s/%s %.1f MB/s ETA %s", frac * 100, count, tensors,
                    mb(done), mb(total), rate / 1e6, eta));
            if (!terminal) b.append(" (").append(name).append(')');
            return b.toString();
        }

        @Override public void finish() {
            double secs = (System.nanoTime() - t0) / 1e9;
            if (terminal) out.println();
            out.printf(Locale.ROOT, "converted %d tensors, %s in %.1f s (%.1f MB/s)%n", count, mb(done), secs, done / Math.max(secs, 1e-9) / 1e6);
        }

        /** {@code [#####     ] } for a fraction done. */
        public static String bar(double frac) {
            int width = 28, fill = (int) Math.round(Math.min(1, frac) * width);
            return "[" + "#".repeat(fill) + " ".repeat(width - fill) + "] ";
        }

        /** Time left at {@code rate} bytes a second. */
        public static String eta(long done, long total, double rate) {
            return rate > 0 && done < total ? fmtTime((total - done) / rate) : "0s";
        }

        public static String mb(long b) { return String.format(Locale.ROOT, "%.1f MB", b / 1e6); }

        public static String fmtTime(double s) {
            if (s < 60) return String.format(Locale.ROOT, "%.0fs", s);
            if (s < 3600) return String.format(Locale.ROOT, "%dm%02ds", (int) s / 60, (int) s % 60);
            return String.format(Locale.ROOT, "%dh%02dm", (int) s / 3600, ((int) s % 3600) / 60);
        }
    }
}
