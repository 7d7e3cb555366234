package dev.cmf4j.hub;

import dev.cmf4j.convert.Progress;

import java.io.PrintStream;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;

import static dev.cmf4j.convert.Progress.Reporter.eta;
import static dev.cmf4j.convert.Progress.Reporter.mb;

/**
 * Download progress, counted in bytes from every connection at once. {@link #bar} redraws one line (bar,
 * MB/s, ETA) at most ten times a second for a terminal; {@link #lines} prints a line every ~10% or 10 s for
 * logs; {@link #NONE} is silent. The rate counts only bytes fetched in this run, not those already cached.
 */
public interface TransferProgress {
    /** {@code total} bytes are wanted in {@code files} files, {@code have} of them are already on disk. */
    void start(String what, int files, long total, long have);

    /** {@code n} more bytes arrived (any thread). */
    void add(long n);

    void finish();

    TransferProgress NONE = new TransferProgress() {
        @Override public void start(String what, int files, long total, long have) {}
        @Override public void add(long n) {}
        @Override public void finish() {}
    };

    static TransferProgress bar(PrintStream out) { return new Reporter(out, true); }

    static TransferProgress lines(PrintStream out) { return new Reporter(out, false); }

    /** Both styles; drawing is serialized, counting is not. */
    final class Reporter implements TransferProgress {
        private final PrintStream out;
        private final boolean terminal;
        private final AtomicLong done = new AtomicLong();
        private volatile long lastDraw;
        private long t0, total, have;
        private int lastDecile;

        Reporter(PrintStream out, boolean terminal) {
            this.out = out;
            this.terminal = terminal;
        }

        @Override public synchronized void start(String what, int files, long total, long have) {
            this.total = Math.max(1, total);
            this.have = have;
            done.set(0);
            lastDecile = (int) (have * 10 / this.total);          // the start line stands for what is already here
            t0 = lastDraw = System.nanoTime();
            out.printf(Locale.ROOT, "downloading %s: %d file%s, %s%s%n", what, files, files == 1 ? "" : "s", mb(total - have),
                    have > 0 ? " (" + mb(have) + " already here)" : "");
        }

        @Override public void add(long n) {
            long d = done.addAndGet(n), now = System.nanoTime();
            if (now - lastDraw < 100_000_000L) return;
            synchronized (this) {
                if (now - lastDraw < 100_000_000L) return;
                if (terminal) {
                    lastDraw = now;
                    out.print("\r" + line(now, d) + "\u001b[K");
                    out.flush();
                } else {
                    int decile = (int) ((have + d) * 10 / total);
                    if (decile > lastDecile || now - lastDraw > 10_000_000_000L) {
                        lastDecile = decile;
                        lastDraw = now;
                        out.println(line(now, d));
                    }
                }
            }
        }

        private String line(long now, long d) {
            double secs = Math.max(1e-9, (now - t0) / 1e9), rate = d / secs;
            long got = have + d;
            double frac = Math.min(1.0, (double) got / total);
            return (terminal ? Progress.Reporter.bar(frac) : "") + String.format(Locale.ROOT, "%3.0f%% %s/%s %.1f MB/s ETA %s", frac * 100, mb(got), mb(total),
                    rate / 1e6, eta(got, total, rate));
        }

        @Override public synchronized void finish() {
            double secs = (System.nanoTime() - t0) / 1e9;
            if (terminal) out.println();
            out.printf(Locale.ROOT, "downloaded %s in %.1f s (%.1f MB/s)%n", mb(done.get()), secs, done.get() / Math.max(secs, 1e-9) / 1e6);
        }
    }
}
