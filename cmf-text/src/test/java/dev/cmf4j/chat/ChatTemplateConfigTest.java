package dev.cmf4j.chat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class ChatTemplateConfigTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    private static JsonNode json(String s) throws Exception {
        return JSON.readTree(s);
    }

    @Test
    void namedTemplatesAndAddedTokenObjects() throws Exception {
        ChatTemplateConfig c = ChatTemplateConfig.fromJson(json("""
                {"chat_template": [{"name": "default", "template": "D{{ bos_token }}"}, {"name": "tool_use", "template": "T{{ tools | length }}"}],
                 "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
                 "eos_token": "</s>", "pad_token": null, "unk_token": {"content": "<unk>"},
                 "additional_special_tokens": ["<x>"],
                 "extra_special_tokens": {"image_token": "<img>"}}"""));
        assertThat(c.templates()).containsOnlyKeys("default", "tool_use");
        assertThat(c.specialTokens()).isEqualTo(Map.of("bos_token", "<s>", "eos_token", "</s>", "unk_token", "<unk>", "image_token", "<img>"));
        List<Map<String, Object>> msgs = List.of(Map.of("role", "user", "content", "hi"));
        assertThat(c.select(null, false).render(msgs, null, false, null)).isEqualTo("D<s>");
        assertThat(c.select(null, true).render(msgs, List.of(Map.of("a", 1)), false, null)).isEqualTo("T1");
        assertThat(c.select("default", true).render(msgs, null, false, null)).isEqualTo("D<s>");
        assertThatThrownBy(() -> c.select("nope", false)).hasMessageContaining("no chat template named 'nope'");
    }

    @Test
    void noTemplateOrNoDefault() throws Exception {
        assertThatThrownBy(() -> ChatTemplateConfig.fromJson(json("{\"eos_token\": \"x\"}")).select(null, false))
                .hasMessageContaining("has no chat_template");
        assertThatThrownBy(() -> ChatTemplateConfig.fromJson(json("{\"chat_template\": [{\"name\": \"rag\", \"template\": \"r\"}]}")).select(null, false))
                .hasMessageContaining("no 'default'");
        assertThatThrownBy(() -> ChatTemplateConfig.fromJson(json("{\"chat_template\": 5}")))
                .hasMessageContaining("chat_template must be a string");
    }

    @Test
    void chatMlFallback() {
        ChatTemplate t = ChatTemplate.chatMl(Map.of());
        List<Map<String, Object>> msgs = List.of(
                Map.of("role", "system", "content", "S"),
                Map.of("role", "user", "content", List.of(Map.of("type", "text", "text", "a"), Map.of("type", "image"), Map.of("type", "text", "text", "b"))));
        assertThat(t.render(msgs, null, true, null))
                .isEqualTo("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n");
        assertThat(t.render(msgs.subList(0, 1), null, false, null)).isEqualTo("<|im_start|>system\nS<|im_end|>\n");
    }

    @Test
    void variablesTransformersPasses() {
        ChatTemplate t = ChatTemplate.of("{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ eos_token }}|{{ enable_thinking }}|{{ messages[0].content }}",
                Map.of("eos_token", "E"));
        assertThat(t.render(List.of(Map.of("role", "user", "content", "c")), null, true, Map.of("enable_thinking", false)))
                .isEqualTo("True|True|True|E|False|c");
        assertThatThrownBy(() -> t.render(List.of(), null, false, Map.of("messages", List.of())))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("'messages'");
    }

    /** Expected strings: transformers' continue_final_message logic run on jinja2 output (fixture templates). */
    @Test
    void continueFinalMessage() throws Exception {
        java.nio.file.Path chat = dev.cmf4j.testkit.Fixtures.require("chat");
        ChatTemplate qwen = ChatTemplate.of(java.nio.file.Files.readString(chat.resolve("qwen3/chat_template.jinja")), Map.of());
        ChatTemplate gemma = ChatTemplate.of(java.nio.file.Files.readString(chat.resolve("gemma3/chat_template.jinja")), Map.of("bos_token", "<bos>"));
        assertThat(qwen.renderContinuing(List.of(Map.of("role", "user", "content", "Hi"), Map.of("role", "assistant", "content", "The answer is")), null, null))
                .isEqualTo("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is");
        assertThat(gemma.renderContinuing(List.of(Map.of("role", "user", "content", "Hi"), Map.of("role", "assistant", "content", "  Sure thing  ")), null, null))
                .isEqualTo("<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nSure thing");
        assertThat(gemma.renderContinuing(List.of(Map.of("role", "user", "content", "Hi"),
                Map.of("role", "assistant", "content", List.of(Map.of("type", "text", "text", "Part"), Map.of("type", "image")))), null, null))
                .isEqualTo("<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nPart");
        assertThatThrownBy(() -> ChatTemplate.of("nothing", Map.of()).renderContinuing(List.of(Map.of("role", "user", "content", "x y")), null, null))
                .hasMessageContaining("does not appear in the chat");
    }
}
