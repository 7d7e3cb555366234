package dev.cmf4j.convert;

import com.code_intelligence.jazzer.junit.FuzzTest;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;

/**
 * Coverage-guided fuzzing of a safetensors file (the 8-byte length, the JSON header, the offsets): any bytes either
 * open and every small tensor reads, or fail with a {@link ConvertException} naming the file. Replays
 * {@code SafetensorsFuzzTestInputs/} in every test run; {@code JAZZER_FUZZ=1} fuzzes (docs/FUZZING.md).
 */
class SafetensorsFuzzTest {
    private static final Path LABEL = Path.of("fuzz.safetensors");

    @FuzzTest(maxDuration = "40m")
    void readAnyBytes(byte[] data) {
        try (SafetensorsReader r = SafetensorsReader.read(LABEL, MemorySegment.ofArray(data))) {
            for (SafetensorsReader.Tensor t : r.tensors()) {
                if (t.numel() > 1 << 16 || t.dtype() == null) continue;
                if (t.dtype().isFloat()) r.readFloats(t.name());
                else if (t.dtype().isInteger()) r.readLongs(t.name());
            }
        } catch (ConvertException expected) {
            if (expected.getMessage() == null || !expected.getMessage().contains("fuzz.safetensors"))
                throw new AssertionError("error does not name the file: " + expected, expected);
        }
    }
}
