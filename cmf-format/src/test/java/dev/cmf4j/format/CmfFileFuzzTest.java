package dev.cmf4j.format;

import com.code_intelligence.jazzer.junit.FuzzTest;

/**
 * Coverage-guided fuzzing of the CMF container (envelope, header JSON, directory, masks, vocab, skills registry):
 * any bytes either open and can be used, or fail with a {@link CmfException}. Each input is opened as it is and,
 * with its header and directory hashes recomputed, again, so mutations get past the integrity checks to the
 * parsers behind them. A plain test run replays the inputs in {@code CmfFileFuzzTestInputs/}; {@code JAZZER_FUZZ=1}
 * fuzzes (docs/FUZZING.md).
 */
class CmfFileFuzzTest {

    @FuzzTest(maxDuration = "40m")
    void openAnyBytes(byte[] data) {
        tryOpen(new Mutable(data));
        if (data.length >= 128) tryOpen(new Mutable(data).reseal());
    }

    private static void tryOpen(Mutable m) {
        try {
            MutationFuzzTest.exercise(m);
        } catch (CmfException expected) {
            if (!expected.getMessage().contains("fuzz.cmf")) throw new AssertionError("error does not name the file: " + expected, expected);
        }
    }
}
