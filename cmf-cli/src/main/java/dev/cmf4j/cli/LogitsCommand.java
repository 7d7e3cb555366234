package dev.cmf4j.cli;

import dev.cmf4j.format.Npy;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Session;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Callable;

/** {@code cmf logits FILE --ids 1,2,3 --out logits.npy}: float32 [T, vocab] of one full forward. */
@Command(name = "logits", mixinStandardHelpOptions = true,
        description = {"Run one forward pass over token ids and write the logits of every position.",
                "Output: a float32 .npy array [T, vocab] (the conformance contract against transformers' "
                        + "model(input_ids).logits)."})
public final class LogitsCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf model")
    Path file;

    @Mixin ModelFile.Overrides overrides;

    @Option(names = "--ids", required = true, paramLabel = "IDS", description = "token ids, e.g. 1,2,3")
    String ids;

    @Option(names = {"-o", "--out"}, required = true, paramLabel = "OUT", description = "the .npy file to write")
    Path out;

    @picocli.CommandLine.Mixin DeviceOption device;

    @Option(names = "--o1-prompt", paramLabel = "N",
            description = "with sealed layers (--o1): the first N ids are the prompt they seal after (default: half the ids)")
    Integer o1Prompt;

    @Override public Integer call() throws Exception {
        int[] tokens = ModelFile.parseIds(ids);
        try (var dev = device.open(spec.commandLine().getErr());
             Model m = overrides.openOne(file, dev, spec.commandLine().getErr())) {
            var target = overrides.target(m, tokens, spec.commandLine().getErr());   // --skill auto and --blend pick here
            Session session = new Session(target.graph(), Math.max(1, tokens.length));
            session.useOverlay(target.overlay());
            float[] logits;
            if (m.graph().memory().sealed() == null || tokens.length < 2) {
                logits = session.logitsAll(tokens);
            } else {   // the prompt exact, then the layers seal and the rest streams through them
                int p = o1Prompt != null ? o1Prompt : tokens.length / 2;
                if (p < 1 || p >= tokens.length)
                    throw new IllegalArgumentException("--o1-prompt must be in [1, " + tokens.length + "), got " + p);
                float[] head = session.logitsAll(java.util.Arrays.copyOf(tokens, p));
                session.state().seal();
                float[] tail = session.logitsAll(java.util.Arrays.copyOfRange(tokens, p, tokens.length));
                logits = java.util.Arrays.copyOf(head, head.length + tail.length);
                System.arraycopy(tail, 0, logits, head.length, tail.length);
            }
            Path parent = out.toAbsolutePath().getParent();
            if (parent != null) Files.createDirectories(parent);
            try (OutputStream os = Files.newOutputStream(out)) {
                Npy.writeFloats(os, logits, tokens.length, m.graph().vocab());
            }
            spec.commandLine().getErr().println("wrote " + out + " [" + tokens.length + ", " + m.graph().vocab() + "]");
        }
        return 0;
    }
}
