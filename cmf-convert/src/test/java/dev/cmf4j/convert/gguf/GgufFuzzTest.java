package dev.cmf4j.convert.gguf;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.cmf4j.convert.ConvertException;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;

/**
 * Coverage-guided fuzzing of GGUF reading: any bytes either parse (and then every small tensor dequantizes and the
 * metadata maps to an architecture and a tokenizer.json, as {@code cmf convert} does) or fail with a
 * {@link ConvertException} naming the file. Replays {@code GgufFuzzTestInputs/} in every test run;
 * {@code JAZZER_FUZZ=1} fuzzes (docs/FUZZING.md).
 */
class GgufFuzzTest {
    private static final Path LABEL = Path.of("fuzz.gguf");

    @FuzzTest(maxDuration = "40m")
    void readAndImport(byte[] data) {
        GgufReader r;
        try {
            r = GgufReader.parse(LABEL, Arena.ofConfined(), MemorySegment.ofArray(data));
        } catch (ConvertException expected) {
            requireNamed(expected);
            return;
        }
        try (r) {
            for (GgufReader.Tensor t : r.tensors()) {
                if (t.type() != null && t.type().decodable() && t.numel() <= 1 << 16) r.readFloats(t);
            }
            new GgufSource(r);
        } catch (ConvertException expected) {
            requireNamed(expected);
        }
    }

    private static void requireNamed(ConvertException e) {
        if (e.getMessage() == null || !e.getMessage().contains("fuzz.gguf")) throw new AssertionError("error does not name the file: " + e, e);
    }
}
