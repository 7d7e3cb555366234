package dev.cmf4j.runtime;

import dev.cmf4j.model.Model;

import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/** What the device MTP tests share: every position's last-layer row a session hands over, compared; greedy ids. */
public final class LastLayerRows implements Session.HiddenRows {
    /** The rows, by position. */
    public final Map<Integer, float[]> at = new HashMap<>();

    @Override public void accept(int position, float[] x, int off, int rows, int hidden) {
        for (int r = 0; r < rows; r++) at.put(position + r, Arrays.copyOfRange(x, off + r * hidden, off + (r + 1) * hidden));
    }

    /** The same positions, each row within 1e-4 of {@code want}'s over its largest magnitude (at least 1). */
    public static void assertClose(LastLayerRows got, LastLayerRows want, String what) {
        assertThat(got.at.keySet()).as(what + ": positions handed over").isEqualTo(want.at.keySet());
        for (var e : want.at.entrySet()) {
            float[] a = got.at.get(e.getKey()), b = e.getValue();
            float scale = 0;
            for (float v : b) scale = Math.max(scale, Math.abs(v));
            for (int i = 0; i < b.length; i++)
                assertThat(Math.abs(a[i] - b[i])).as(what + ": position " + e.getKey() + " [" + i + "]").isLessThan(1e-4f * Math.max(1f, scale));
        }
    }

    /** {@code n} greedy ids after {@code prompt}, in a session of 128 positions. */
    public static int[] greedy(Model m, int[] prompt, int n) {
        return new Generator(new Session(m.graph(), 128), new Sampler(SamplingParams.GREEDY), Set.of(), List.of())
                .generate(prompt, n, null, null).tokens();
    }
}
