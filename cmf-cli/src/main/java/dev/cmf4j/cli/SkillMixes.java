package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.node.ArrayNode;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.model.Model;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.Overlay;
import dev.cmf4j.runtime.Session;

import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * {@code bench --skills}: the mixes of skills a batch's sequences read (sequence i the i-th skill of its mix, round
 * robin; {@code none} the backbone), and the cost of switching to a skill: the first step of a skill (its tensors
 * uploaded, on a GPU) against the same step with them resident.
 */
final class SkillMixes {
    private final List<List<String>> mixes = new ArrayList<>();

    /** Each element a comma-separated mix ("a,b,c", "a", "none"). */
    SkillMixes(List<String> specs) {
        for (String s : specs) {
            List<String> ids = Arrays.stream(s.split(",")).map(String::strip).toList();
            if (ids.isEmpty() || ids.stream().anyMatch(String::isEmpty))
                throw new IllegalArgumentException("--skills takes skill ids separated by commas ('none': the backbone), got '" + s + "'");
            mixes.add(ids);
        }
    }

    List<List<String>> mixes() { return mixes; }

    /** The overlays of {@code n} sequences under {@code mix}: round robin; an unknown skill fails naming the file's. */
    static Overlay[] overlays(Graph g, List<String> mix, int n) {
        Overlay[] o = new Overlay[n];
        for (int i = 0; i < n; i++) o[i] = g.overlay(mix.get(i % mix.size()), null, 1f);
        return o;
    }

    /** One skill's switch: its replaced bytes in the file, its first step (ms) and the same step with it resident (median ms). */
    record Switch(String skill, long bytes, double firstMs, double cachedMs) {}

    /**
     * For every skill of the mixes, in order: a 2-token prefill of a fresh session the first time the skill runs, then
     * {@code reps} more; the backbone's step first ({@code warmup} + 1 times) so the first skill pays no JIT or
     * set-up of its own. Two tokens, not one: a one-token step may be captured as a graph the first time, which
     * is not the switch.
     */
    List<Switch> measureSwitches(Model model, int reps, int warmup) {
        Graph g = model.graph();
        Set<String> ids = new LinkedHashSet<>();
        for (List<String> m : mixes) for (String s : m) if (!s.equals("none")) ids.add(s);
        for (int i = 0; i <= warmup; i++) step(g, Overlay.NONE);
        List<Switch> out = new ArrayList<>();
        for (String id : ids) {
            Overlay o = g.overlay(id, null, 1f);
            double first = step(g, o);
            double[] again = new double[Math.max(1, reps)];
            for (int r = 0; r < again.length; r++) again[r] = step(g, o);
            Arrays.sort(again);
            out.add(new Switch(id, replacedBytes(model, id), first, again[again.length / 2]));
        }
        return out;
    }

    private static double step(Graph g, Overlay o) {
        try (Session s = new Session(g, 4, 2)) {
            s.useOverlay(o);
            long t0 = System.nanoTime();
            s.prefill(new int[] {1, 2});
            return (System.nanoTime() - t0) * 1e-6;
        }
    }

    /** Bytes of the file's {@code skill.ID.*} tensors. */
    static long replacedBytes(Model model, String id) {
        long b = 0;
        for (TensorEntry t : model.file().tensors()) if (t.name().startsWith("skill." + id + ".")) b += t.nbytes();
        return b;
    }

    static void table(PrintWriter out, List<Switch> switches) {
        String fmt = "| %-12s | %12s | %15s | %13s |%n";
        out.printf(Locale.ROOT, "%n" + fmt, "skill", "replaced MB", "first step ms", "cached ms");
        out.printf(Locale.ROOT, "|%s|%s|%s|%s|%n", "-".repeat(14), "-".repeat(14), "-".repeat(17), "-".repeat(15));
        for (Switch s : switches)
            out.printf(Locale.ROOT, fmt, s.skill(), String.format(Locale.ROOT, "%.1f", s.bytes() / 1e6),
                    String.format(Locale.ROOT, "%.2f", s.firstMs()), String.format(Locale.ROOT, "%.2f", s.cachedMs()));
    }

    static void json(ArrayNode a, List<Switch> switches) {
        for (Switch s : switches) {
            var o = a.addObject();
            o.put("skill", s.skill());
            o.put("replaced_bytes", s.bytes());
            o.put("first_step_ms", Math.round(s.firstMs() * 1000) / 1000.0);
            o.put("cached_step_ms", Math.round(s.cachedMs() * 1000) / 1000.0);
        }
    }
}
