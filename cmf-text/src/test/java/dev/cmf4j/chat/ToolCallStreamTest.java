package dev.cmf4j.chat;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** Tool calls split out of streamed text however the text is cut into pieces. */
class ToolCallStreamTest {
    static final String TEXT = "Let me look.<tool_call>\n{\"name\": \"get_manual\", \"arguments\": {\"command\": \"tar\"}}\n</tool_call>"
            + " and <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call><tool_call>not json</tool_call> <tool_ at the end";

    @Test void everyCutGivesTheSameContentAndCalls() {
        for (int cut = 1; cut <= 7; cut++) {
            ToolCallStream s = new ToolCallStream();
            StringBuilder content = new StringBuilder();
            List<ToolCall> calls = new ArrayList<>();
            for (int i = 0; i < TEXT.length(); i += cut) {
                ToolCallStream.Out o = s.push(TEXT.substring(i, Math.min(TEXT.length(), i + cut)));
                assertThat(o.content()).doesNotContain("<tool_call>\n{");
                content.append(o.content());
                calls.addAll(o.calls());
            }
            ToolCallStream.Out end = s.finish();
            content.append(end.content());
            calls.addAll(end.calls());
            assertThat(calls).extracting(ToolCall::name).as("cut " + cut).containsExactly("get_manual", "x");
            assertThat(calls.getFirst().argumentsJson()).isEqualTo("{\"command\": \"tar\"}");
            assertThat(content.toString()).as("cut " + cut)
                    .isEqualTo("Let me look. and <tool_call>not json</tool_call> <tool_ at the end");
            assertThat(s.calls()).isEqualTo(2);
        }
    }

    @Test void anUnterminatedCallAtTheEndIsParsedWhenItsJsonIsComplete() {
        ToolCallStream s = new ToolCallStream();
        assertThat(s.push("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}").content()).isEmpty();
        ToolCallStream.Out end = s.finish();
        assertThat(end.calls()).extracting(ToolCall::name).containsExactly("f");
        assertThat(end.content()).isEmpty();
    }
}
