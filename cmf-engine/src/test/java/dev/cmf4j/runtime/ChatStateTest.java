package dev.cmf4j.runtime;

import dev.cmf4j.model.Model;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.util.Arrays;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A chat saved after a turn and resumed in a fresh session (bundled model, greedy) replies what the chat that never
 * stopped replies, prefilling only the new turn: the state carries the transcript the template renders from.
 */
class ChatStateTest {
    static Model model;
    static TextCodec codec;

    @BeforeAll static void open() {
        model = Model.open(SchedulerTest.bundled());
        codec = TextCodec.of(model.file());
    }

    @AfterAll static void close() { if (model != null) model.close(); }

    static Chat chat() {
        return new Chat(new Session(model.graph(), 512), codec, new Sampler(SamplingParams.GREEDY), 8, Map.of());
    }

    @Test void aResumedChatContinuesAsTheOneThatNeverStopped() throws IOException {
        Chat whole = chat();
        whole.system("You answer in one line.");
        String first = whole.reply("What does ls do?", null).text();
        String second = whole.reply("And grep?", null).text();
        int cachedWhole = whole.lastCachedTokens();

        Chat a = chat();
        a.system("You answer in one line.");
        assertThat(a.reply("What does ls do?", null).text()).isEqualTo(first);
        ByteArrayOutputStream saved = new ByteArrayOutputStream();
        a.exportState(saved);

        Chat b = chat();
        b.importState(new ByteArrayInputStream(saved.toByteArray()));
        assertThat(b.messages()).isEqualTo(a.messages()).hasSize(3);
        assertThat(b.reply("And grep?", null).text()).isNotBlank().isEqualTo(second);
        // the restored session held the conversation: only the new turn was prefilled, as in the chat that never stopped
        assertThat(b.lastCachedTokens()).isPositive().isEqualTo(cachedWhole);
        assertThat(b.messages()).isEqualTo(whole.messages());
    }

    @Test void aStateWithoutTranscriptOrCutShortIsRefused() throws IOException {
        Session s = new Session(model.graph(), 512);
        s.prefill(codec.encode("The ls command"));
        ByteArrayOutputStream plain = new ByteArrayOutputStream();
        s.exportState(plain);   // what cmf run --state-out writes
        Chat c = chat();
        assertThatThrownBy(() -> c.importState(new ByteArrayInputStream(plain.toByteArray())))
                .isInstanceOf(IOException.class).hasMessageContaining("no chat transcript");
        assertThat(c.messages()).isEmpty();

        Chat a = chat();
        a.reply("Hello", null);
        ByteArrayOutputStream saved = new ByteArrayOutputStream();
        a.exportState(saved);
        byte[] cut = Arrays.copyOf(saved.toByteArray(), saved.size() - 3);
        Chat b = chat();
        assertThatThrownBy(() -> b.importState(new ByteArrayInputStream(cut))).isInstanceOf(IOException.class).hasMessageContaining("truncated");
        assertThat(b.messages()).isEmpty();
        // a cmf run of a chat state continues its tokens: the transcript after the snapshot is not read
        Session r = new Session(model.graph(), 512);
        r.importState(new ByteArrayInputStream(saved.toByteArray()));
        assertThat(r.position()).isPositive();
    }
}
