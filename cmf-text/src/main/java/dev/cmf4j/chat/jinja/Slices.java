package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.util.ArrayList;
import java.util.List;

/** Python slicing ({@code PySlice_AdjustIndices}) for lists, tuples, strings and ranges. */
final class Slices {

    private Slices() { }

    private static long index(Object v, String what) {
        if (v instanceof Undefined u) throw u.error();
        if (!(v instanceof Long) && !(v instanceof Boolean) && !(v instanceof java.math.BigInteger)) {
            throw new TemplateException(Kind.TypeError, "slice indices must be integers or None or have an __index__ method");
        }
        return PyTypes.toLong(v, what);
    }

    /** [start, stop, step] resolved against a sequence of length n. */
    static long[] resolve(PySlice s, long n) {
        long step = s.step() == null ? 1 : index(s.step(), "step");
        if (step == 0) throw new TemplateException(Kind.ValueError, "slice step cannot be zero");
        long lower = step < 0 ? -1 : 0;
        long upper = step < 0 ? n - 1 : n;
        long start;
        if (s.start() == null) {
            start = step < 0 ? upper : lower;
        } else {
            start = index(s.start(), "start");
            if (start < 0) start = Math.max(start + n, lower);
            else start = Math.min(start, upper);
        }
        long stop;
        if (s.stop() == null) {
            stop = step < 0 ? lower : upper;
        } else {
            stop = index(s.stop(), "stop");
            if (stop < 0) stop = Math.max(stop + n, lower);
            else stop = Math.min(stop, upper);
        }
        return new long[] {start, stop, step};
    }

    static List<Integer> positions(PySlice s, long n) {
        long[] r = resolve(s, n);
        List<Integer> out = new ArrayList<>();
        if (r[2] > 0) for (long i = r[0]; i < r[1]; i += r[2]) out.add((int) i);
        else for (long i = r[0]; i > r[1]; i += r[2]) out.add((int) i);
        return out;
    }

    static Object apply(Object seq, PySlice s) {
        return switch (seq) {
            case String str -> {
                int[] cps = PyStr.codePoints(str);
                StringBuilder b = new StringBuilder();
                for (int i : positions(s, cps.length)) b.appendCodePoint(cps[i]);
                yield b.toString();
            }
            case PyTuple t -> {
                List<Object> out = new ArrayList<>();
                for (int i : positions(s, t.items().size())) out.add(t.items().get(i));
                yield new PyTuple(out);
            }
            case List<?> l -> {
                List<Object> out = new ArrayList<>();
                for (int i : positions(s, l.size())) out.add(l.get(i));
                yield out;
            }
            case PyRange r -> {
                List<Object> out = new ArrayList<>();
                for (int i : positions(s, r.length())) out.add(r.get(i));
                yield out;
            }
            case null, default -> PyTypes.MISSING;
        };
    }

    /** The [start, end) window str.find/count/startswith use (clamped like a step-1 slice). */
    static int[] clampRange(int n, Object start, Object end) {
        long[] r = resolve(new PySlice(start, end, null), n);
        return new int[] {(int) r[0], (int) r[1]};
    }
}
