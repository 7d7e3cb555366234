package dev.cmf4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** {@code --o1} resolution: the flag, then the file's {@code provenance.o1_attn} hint, then off; layer selections. */
class AttentionMemoryTest {
    static JsonNode header(String o1) throws Exception {
        return new ObjectMapper().readTree("{\"provenance\": {\"o1_attn\": " + o1 + "}}");
    }

    @Test
    void flagThenHintThenOff() throws Exception {
        JsonNode hinted = header("{\"layers\": \"deep2\", \"m\": 16, \"w\": 64, \"sink\": 2}");
        assertThat(AttentionMemory.resolve(null, null, null, null, hinted)).isEqualTo(new AttentionMemory.Sealed("deep2", 16, 64, 2));
        // the flag wins, with the defaults (not the hint's parameters) unless given
        assertThat(AttentionMemory.resolve("all", null, 256, null, hinted)).isEqualTo(new AttentionMemory.Sealed("all", 32, 256, 4));
        assertThat(AttentionMemory.resolve("off", null, null, null, hinted)).isNull();
        assertThat(AttentionMemory.resolve(null, 8, null, null, hinted)).isEqualTo(new AttentionMemory.Sealed("deep2", 8, 64, 2));
        assertThat(AttentionMemory.resolve(null, null, null, null, header("{\"layers\": [1, 3]}")))
                .isEqualTo(new AttentionMemory.Sealed("1,3", 32, 128, 4));
        assertThat(AttentionMemory.resolve(null, null, null, null, new ObjectMapper().readTree("{}"))).isNull();
    }

    @Test
    void layerSelections() {
        assertThat(new AttentionMemory.Sealed("all", 32, 128, 4).flags(3)).containsExactly(true, true, true);
        assertThat(new AttentionMemory.Sealed("deep2", 32, 128, 4).flags(4)).containsExactly(false, false, true, true);
        assertThat(new AttentionMemory.Sealed("deep9", 32, 128, 4).flags(2)).containsExactly(true, true);
        assertThat(new AttentionMemory.Sealed("0, 2", 32, 128, 4).flags(3)).containsExactly(true, false, true);
        assertThatThrownBy(() -> new AttentionMemory.Sealed("deep0", 32, 128, 4)).hasMessageContaining("all, deepN or i,j,k");
        assertThatThrownBy(() -> new AttentionMemory.Sealed("1,-2", 32, 128, 4)).hasMessageContaining("all, deepN or i,j,k");
        assertThatThrownBy(() -> new AttentionMemory.Sealed("all", 32, 0, 4)).hasMessageContaining("--o1-window");
        assertThatThrownBy(() -> new AttentionMemory.Sealed("all", 32, 128, -1)).hasMessageContaining("--o1-sink");
    }
}
