package dev.cmf4j.cli;

import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.MtpDraft;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.Speculation;
import dev.cmf4j.runtime.TextCodec;
import dev.cmf4j.text.Tokenizer;
import picocli.CommandLine.Option;

import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;

/**
 * {@code --draft FILE|mtp [--draft-max K]}: speculative decoding with a draft model of the same vocabulary, or with the
 * model file's own MTP head ({@code --draft mtp}).
 */
final class DraftOptions {
    @Option(names = "--draft", paramLabel = "FILE|mtp",
            description = "speculative decoding: a smaller .cmf model of the same vocabulary, or 'mtp' for the file's own MTP"
                    + " head (model.mtp.*), drafts tokens the model verifies in one step (greedy output unchanged;"
                    + " sampled output keeps its distribution)")
    Path draft;

    /** {@code --draft mtp}: the model file's own MTP head (a file named mtp is {@code ./mtp}). */
    static final String MTP = "mtp";

    @Option(names = "--draft-max", paramLabel = "K", defaultValue = "6",
            description = "tokens drafted per step with --draft (1..32, default ${DEFAULT-VALUE})")
    int draftMax;

    /** Whether a draft was asked for. */
    boolean on() { return draft != null; }

    /** Whether the draft is the model's own MTP head. */
    boolean mtp() { return draft != null && draft.toString().equals(MTP); }

    /** What drafts, for messages: the draft file's name or "the MTP head". */
    String label() { return mtp() ? "the MTP head" : String.valueOf(draft.getFileName()); }

    /**
     * Opens the draft on {@code backend} after checking its vocabulary is the target's, token for token; null without
     * {@code --draft} and with {@code --draft mtp} (whose head is checked here: the file must have one).
     */
    Model open(Model target, dev.cmf4j.backend.Backend backend) throws NoSuchFileException {
        if (draft == null) return null;
        if (draftMax < 1 || draftMax > 32) throw new IllegalArgumentException("--draft-max must be 1..32, got " + draftMax);
        if (mtp()) {
            target.mtpGraph();   // a one-line ModelException when the file has no head or its device keeps the hidden rows
            return null;
        }
        if (!Files.isRegularFile(draft)) throw new NoSuchFileException(draft.toString(), null, "the --draft model file does not exist");
        Model d = Model.open(draft, null, backend);
        try {
            boolean ta = target.file().vocab().isPresent(), tb = d.file().vocab().isPresent();
            String why = ta && tb ? vocabularyDifference(TextCodec.of(target.file()).tokenizer(), TextCodec.of(d.file()).tokenizer())
                    : ta != tb ? (tb ? "it has a tokenizer and the model has none" : "it has no tokenizer and the model has one") : null;
            if (why == null && d.graph().vocab() != target.graph().vocab())
                why = "its embedding has " + d.graph().vocab() + " rows, the model's " + target.graph().vocab();
            if (why != null) throw new IllegalArgumentException("--draft " + draft + " cannot draft for this model: " + why);
        } catch (RuntimeException e) {
            d.close();
            throw e;
        }
        return d;
    }

    /**
     * A speculation drafting through a fresh session of {@code d} (what {@link #open} gave) of {@code ctx} positions, or
     * through {@code target}'s MTP head.
     */
    Speculation speculation(Model target, Model d, int ctx, SamplingParams params) {
        if (mtp()) return new Speculation(new MtpDraft(target.mtpGraph(), ctx), draftMax, params);
        return new Speculation(new Session(d.graph(), ctx), draftMax, params);
    }

    /** The {@code -v} line of a speculative generation. */
    static String describe(Speculation.Stats st) {
        return String.format(java.util.Locale.ROOT, "[draft: %d drafted, %d accepted (%.1f%%), %.2f tokens per step over %d rounds and %d plain steps]",
                st.drafted(), st.accepted(), 100 * st.acceptance(), st.tokensPerStep(), st.rounds(), st.plainSteps());
    }

    /** Why two tokenizers do not map ids to the same tokens, or null when they do. */
    static String vocabularyDifference(Tokenizer a, Tokenizer b) {
        if (a.vocabSize() != b.vocabSize())
            return "its vocabulary has " + b.vocabSize() + " tokens, the model's " + a.vocabSize();
        for (int id = 0; id < a.vocabSize(); id++)
            if (!java.util.Objects.equals(a.idToToken(id), b.idToToken(id)))
                return "token " + id + " is '" + b.idToToken(id) + "' there and '" + a.idToToken(id) + "' here";
        return null;
    }
}
