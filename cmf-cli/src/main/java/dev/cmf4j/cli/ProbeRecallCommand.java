package dev.cmf4j.cli;

import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.PasskeyProbe;
import dev.cmf4j.runtime.TextCodec;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code cmf probe-recall FILE --distances 256,1024,4096}: passkey accuracy by distance ({@link PasskeyProbe}). */
@Command(name = "probe-recall", mixinStandardHelpOptions = true,
        description = {"Passkey recall: a key hidden at each distance (tokens) in filler text, then asked for; prints the "
                + "accuracy per distance. With --o1 the layers seal before the question, which streams through them."})
public final class ProbeRecallCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf model")
    Path model;

    @Option(names = "--distances", paramLabel = "D[,D...]", split = ",", defaultValue = "256,1024,4096",
            description = "tokens between the key and the question (default ${DEFAULT-VALUE})")
    int[] distances;

    @Option(names = "--trials", paramLabel = "N", defaultValue = "5", description = "keys per distance (default ${DEFAULT-VALUE})")
    int trials;

    @Option(names = "--seed", paramLabel = "S", defaultValue = "1", description = "seed of the keys (default ${DEFAULT-VALUE})")
    long seed;

    @Mixin ModelFile.Overrides overrides;

    @Override public Integer call() throws Exception {
        if (trials < 1) throw new IllegalArgumentException("--trials must be >= 1, got " + trials);
        try (Model m = overrides.open(model)) {
            List<PasskeyProbe.Result> results = PasskeyProbe.run(m.graph(), TextCodec.of(m.file()), distances, trials, seed);
            var out = spec.commandLine().getOut();
            var mem = m.graph().memory();
            out.println("o1 " + (mem.sealed() == null ? "off" : mem.sealed().layers() + " (m " + mem.sealed().landmarks() + ", window "
                    + mem.sealed().window() + ", sink " + mem.sealed().sinks() + ")") + "; kv " + mem.kv().label());
            out.printf(Locale.ROOT, "| %9s | %7s | %8s |%n", "distance", "correct", "accuracy");
            for (var r : results)
                out.printf(Locale.ROOT, "| %9d | %3d/%-3d | %8.2f |%n", r.distance(), r.correct(), r.trials(), r.accuracy());
            out.flush();
        }
        return 0;
    }
}
