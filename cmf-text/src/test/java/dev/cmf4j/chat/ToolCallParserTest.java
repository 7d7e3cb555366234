package dev.cmf4j.chat;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

class ToolCallParserTest {

    @Test
    void oneQwenStyleCallWithContentBefore() {
        ToolCallParser.Result r = ToolCallParser.parse(
                "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>");
        assertThat(r.content()).isEqualTo("Let me check.");
        assertThat(r.calls()).containsExactly(new ToolCall("get_weather", "{\"city\": \"Paris\", \"days\": 2}"));
        assertThat(r.errors()).isEmpty();
        assertThat(r.hasCalls()).isTrue();
    }

    @Test
    void severalCallsKeepOrderAndArgumentsRoundTripLikePythonJson() {
        ToolCallParser.Result r = ToolCallParser.parse(
                "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"é\\n\", \"n\": [1, 2.5, null, true], \"o\": {}}}\n</tool_call>\n"
                        + "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"raw\\\": 1}\"}\n</tool_call>");
        assertThat(r.content()).isEmpty();
        assertThat(r.calls()).containsExactly(
                new ToolCall("a", "{\"q\": \"é\\n\", \"n\": [1, 2.5, null, true], \"o\": {}}"),
                new ToolCall("b", "{\"raw\": 1}"));
    }

    @Test
    void missingArgumentsIsAnEmptyObjectAndParametersIsAccepted() {
        ToolCallParser.Result r = ToolCallParser.parse("<tool_call>{\"name\": \"now\"}</tool_call><tool_call>{\"name\": \"x\", \"parameters\": {\"k\": 1}}</tool_call>");
        assertThat(r.calls()).containsExactly(new ToolCall("now", "{}"), new ToolCall("x", "{\"k\": 1}"));
    }

    @Test
    void malformedJsonIsReportedAndTextOutsideKept() {
        String text = "Before <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call> after <tool_call>{\"name\": \"g\"}</tool_call>";
        ToolCallParser.Result r = ToolCallParser.parse(text);
        assertThat(r.content()).isEqualTo("Before  after");
        assertThat(r.calls()).containsExactly(new ToolCall("g", "{}"));
        assertThat(r.errors()).hasSize(1);
        ToolCallParser.Error e = r.errors().getFirst();
        assertThat(e.offset()).isEqualTo(text.indexOf("<tool_call>"));
        assertThat(e.text()).startsWith("<tool_call>").endsWith("</tool_call>");
        assertThat(e.message()).startsWith("malformed JSON:").contains("line 2");
    }

    @Test
    void notAnObjectOrNoNameIsReported() {
        ToolCallParser.Result r = ToolCallParser.parse("<tool_call>[1, 2]</tool_call><tool_call>{\"arguments\": {}}</tool_call><tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call><tool_call>  </tool_call>");
        assertThat(r.calls()).isEmpty();
        assertThat(r.errors()).extracting(ToolCallParser.Error::message).containsExactly(
                "expected a JSON object, found an array at column 1",
                "tool call has no string \"name\"",
                "tool call \"f\": arguments must be a JSON object or a string, not a number",
                "empty tool call");
    }

    @Test
    void unterminatedBlock() {
        ToolCallParser.Result done = ToolCallParser.parse("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n");
        assertThat(done.calls()).containsExactly(new ToolCall("f", "{}"));
        assertThat(done.errors()).isEmpty();
        ToolCallParser.Result cut = ToolCallParser.parse("ok <tool_call>\n{\"name\": \"f\", \"argu");
        assertThat(cut.content()).isEqualTo("ok");
        assertThat(cut.calls()).isEmpty();
        assertThat(cut.errors()).singleElement().satisfies(e -> assertThat(e.message()).startsWith("unterminated <tool_call> block: malformed JSON"));
    }

    @Test
    void noCalls() {
        ToolCallParser.Result r = ToolCallParser.parse("  Just text.\n");
        assertThat(r.content()).isEqualTo("Just text.");
        assertThat(r.calls()).isEmpty();
        assertThat(r.hasCalls()).isFalse();
        assertThat(r.errors()).isEqualTo(List.of());
    }
}
