package dev.cmf4j.server;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/** Reasoning split from the answer however the text is cut into pieces. */
class ReasoningSplitterTest {
    static String[] split(boolean inside, String text, int cut) {
        ReasoningSplitter s = new ReasoningSplitter(inside);
        StringBuilder reasoning = new StringBuilder(), content = new StringBuilder();
        for (int i = 0; i < text.length(); i += cut) {
            ReasoningSplitter.Out o = s.push(text.substring(i, Math.min(text.length(), i + cut)));
            reasoning.append(o.reasoning());
            content.append(o.content());
        }
        ReasoningSplitter.Out end = s.finish();
        return new String[] {reasoning.append(end.reasoning()).toString(), content.append(end.content()).toString()};
    }

    @Test void aThinkBlockBecomesReasoningAtEveryCut() {
        for (int cut = 1; cut <= 9; cut++) {
            assertThat(split(false, "<think>\nls lists files </thin k>.\n</think>\n\nIt lists files.", cut))
                    .as("cut " + cut).containsExactly("ls lists files </thin k>.\n", "It lists files.");
            assertThat(split(true, "\nreasoning</think>\n\nanswer <think> kept", cut))
                    .as("cut " + cut).containsExactly("reasoning", "answer <think> kept");
            assertThat(split(false, "No thinking here: <think> is text.", cut)).containsExactly("", "No thinking here: <think> is text.");
            assertThat(split(false, "<think>cut off", cut)).as("an unclosed block stays reasoning").containsExactly("cut off", "");
        }
        assertThat(ReasoningSplitter.endsInside("<|im_start|>assistant\n<think>\n")).isTrue();
        assertThat(ReasoningSplitter.endsInside("<|im_start|>assistant\n")).isFalse();
    }
}
