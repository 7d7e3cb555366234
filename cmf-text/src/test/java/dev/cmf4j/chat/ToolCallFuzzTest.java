package dev.cmf4j.chat;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;

import java.nio.charset.StandardCharsets;

/**
 * Coverage-guided fuzzing of tool-call parsing of generated text (a model steered by a hostile prompt writes anything):
 * any text parses into content, calls and per-call errors, and never throws. Replays {@code ToolCallFuzzTestInputs/}
 * in every test run; {@code JAZZER_FUZZ=1} fuzzes (docs/FUZZING.md).
 */
class ToolCallFuzzTest {

    @FuzzTest(maxDuration = "40m")
    @DictionaryEntries({"<tool_call>", "</tool_call>", "\"name\"", "\"arguments\"", "{", "}", "[", "]", "\":\"", "\\u"})
    void parseGenerated(byte[] data) {
        ToolCallParser.Result r = ToolCallParser.parse(new String(data, StandardCharsets.UTF_8));
        if (r.content() == null || r.calls() == null || r.errors() == null) throw new AssertionError("incomplete result " + r);
    }
}
