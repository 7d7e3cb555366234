import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Session;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * Decode speed at several context depths measured side by side, for a machine whose load drifts (cmf bench --depth
 * runs the depths one after another, so a busier minute lands on one depth): one session per depth, each prefilled
 * with random ids, then bursts of 8 random tokens in turn through every session, so each depth sees the same load.
 *
 * <pre>
 *   java --add-modules jdk.incubator.vector -cp cmf-cli/target/cmf.jar tools/embryo/InterleavedDepths.java FILE [ROUNDS [D,D,...]]
 * </pre>
 * Threads: {@code -Dcmf.threads=N} (default 2). Defaults: 40 rounds, depths 64,4096,32768.
 */
public final class InterleavedDepths {
    public static void main(String[] args) {
        if (args.length < 1) throw new IllegalArgumentException("usage: InterleavedDepths FILE [ROUNDS [D,D,...]]");
        if (System.getProperty("cmf.threads") == null) System.setProperty("cmf.threads", "2");
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 40, burst = 8;
        int[] depths = args.length > 2 ? Arrays.stream(args[2].split(",")).mapToInt(Integer::parseInt).toArray() : new int[] {64, 4096, 32768};
        try (Model m = Model.open(Path.of(args[0]))) {
            var g = m.graph();
            SplittableRandom r = new SplittableRandom(1);
            Session[] s = new Session[depths.length];
            for (int i = 0; i < depths.length; i++) {
                s[i] = new Session(g, depths[i] + (rounds + 2) * burst + 1, Math.min(512, depths[i]));
                s[i].prefill(r.ints(depths[i], 0, g.vocab()).toArray());
            }
            long[] ns = new long[depths.length];
            for (int round = -2; round < rounds; round++)   // two unmeasured rounds for the JIT
                for (int i = 0; i < depths.length; i++) {
                    long t0 = System.nanoTime();
                    for (int k = 0; k < burst; k++) s[i].decode(r.nextInt(g.vocab()));
                    if (round >= 0) ns[i] += System.nanoTime() - t0;
                }
            for (int i = 0; i < depths.length; i++)
                System.out.printf("depth %6d: %7.1f tok/s over %d tokens, state %,d B per sequence%n", depths[i],
                        rounds * burst / (ns[i] * 1e-9), rounds * burst, s[i].state().stateBytes());
        }
    }
}
