package dev.cmf4j.cli;

import dev.cmf4j.runtime.SamplingParams;
import picocli.CommandLine.Option;

/** The sampling flags shared by generate, run and chat (REFERENCE_RUNTIME.md §4.3 chain). */
final class SamplingOptions {
    @Option(names = "--greedy", description = "always take the most likely token (temperature 0)")
    boolean greedy;

    @Option(names = {"--temperature", "--temp"}, paramLabel = "T", description = "sampling temperature; 0 = greedy (default ${DEFAULT-VALUE})")
    Float temperature;

    @Option(names = "--top-k", paramLabel = "K", description = "keep the K most likely tokens; 0 = off")
    Integer topK;

    @Option(names = "--top-p", paramLabel = "P", description = "keep the smallest set of tokens whose probability reaches P; 1 = off")
    Float topP;

    @Option(names = "--min-p", paramLabel = "P", description = "drop tokens less likely than P times the most likely one; 0 = off")
    Float minP;

    @Option(names = {"--rep-penalty", "--repetition-penalty"}, paramLabel = "R", description = "divide the logits of tokens already seen by R; 1 = off")
    Float repetitionPenalty;

    @Option(names = "--presence-penalty", paramLabel = "X", description = "subtract X from the logits of tokens already seen; 0 = off")
    Float presencePenalty;

    @Option(names = "--seed", paramLabel = "S", description = "random seed, for reproducible sampling")
    Long seed;

    /** The flags over {@code base} (the command's defaults). */
    SamplingParams params(SamplingParams base) {
        if (greedy) return SamplingParams.GREEDY.withSeed(seed);
        return new SamplingParams(
                temperature != null ? temperature : base.temperature(),
                topK != null ? topK : base.topK(),
                topP != null ? topP : base.topP(),
                minP != null ? minP : base.minP(),
                repetitionPenalty != null ? repetitionPenalty : base.repetitionPenalty(),
                presencePenalty != null ? presencePenalty : base.presencePenalty(),
                seed);
    }
}
