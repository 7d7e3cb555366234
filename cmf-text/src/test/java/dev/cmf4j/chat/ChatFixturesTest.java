package dev.cmf4j.chat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.chat.jinja.TemplateException;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Acceptance: every conversation in fixtures/chat/{llama3,qwen3,gemma3}/renders.jsonl renders byte
 * for byte like transformers 5.17's apply_chat_template, and the recorded error case raises with
 * transformers' message. Special tokens come from renders_meta.json, the template from
 * chat_template.jinja; a second pass loads the template from the shipped tokenizer_config.json.
 */
class ChatFixturesTest {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final List<String> TEMPLATES = List.of("llama3", "qwen3", "gemma3");

    record Case(String template, JsonNode line) {
        String id() {
            return template + "/" + line.get("id").asText();
        }
    }

    private static List<Case> cases() throws IOException {
        Path root = Fixtures.require("chat");
        List<Case> out = new ArrayList<>();
        for (String t : TEMPLATES) {
            for (String l : Files.readAllLines(root.resolve(t).resolve("renders.jsonl"))) {
                if (!l.isBlank()) out.add(new Case(t, JSON.readTree(l)));
            }
        }
        return out;
    }

    private static Map<String, String> meta(String template) throws IOException {
        JsonNode m = JSON.readTree(Fixtures.require("chat").resolve(template).resolve("renders_meta.json").toFile());
        Map<String, String> tokens = new LinkedHashMap<>();
        m.get("special_tokens_passed_to_template").properties().forEach(e -> tokens.put(e.getKey(), e.getValue().asText()));
        return tokens;
    }

    @SuppressWarnings("unchecked")
    static String render(ChatTemplate t, JsonNode c) {
        List<Object> messages = JSON.convertValue(c.get("messages"), List.class);
        List<Object> tools = c.hasNonNull("tools") ? JSON.convertValue(c.get("tools"), List.class) : null;
        Map<String, Object> kwargs = c.hasNonNull("template_kwargs") ? JSON.convertValue(c.get("template_kwargs"), Map.class) : Map.of();
        return t.render(messages, tools, c.get("add_generation_prompt").asBoolean(), kwargs);
    }

    static void check(ChatTemplate t, Case c) {
        JsonNode rendered = c.line().get("rendered");
        if (rendered == null || rendered.isNull()) {
            String error = c.line().get("error").asText();
            assertThatThrownBy(() -> render(t, c.line()))
                    .isInstanceOfSatisfying(TemplateException.class, e -> {
                        assertThat(e.kind()).isEqualTo(TemplateException.Kind.TemplateError);
                        assertThat(e.pythonMessage()).isEqualTo(error);
                    });
        } else {
            assertThat(render(t, c.line())).as(c.id()).isEqualTo(rendered.asText());
        }
    }

    @TestFactory
    List<DynamicTest> rendersMatchTransformers() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        Map<String, ChatTemplate> compiled = new LinkedHashMap<>();
        for (String t : TEMPLATES) {
            Path dir = Fixtures.require("chat").resolve(t);
            compiled.put(t, ChatTemplate.of(Files.readString(dir.resolve("chat_template.jinja")), meta(t)));
        }
        for (Case c : cases()) tests.add(DynamicTest.dynamicTest(c.id(), () -> check(compiled.get(c.template()), c)));
        return tests;
    }

    @Test
    void everyFixtureCasePasses() throws IOException {
        // one summary assertion so a CI log states the count plainly
        int pass = 0, total = 0;
        List<String> failed = new ArrayList<>();
        Map<String, ChatTemplate> compiled = new LinkedHashMap<>();
        for (String t : TEMPLATES) {
            Path dir = Fixtures.require("chat").resolve(t);
            compiled.put(t, ChatTemplate.of(Files.readString(dir.resolve("chat_template.jinja")), meta(t)));
        }
        for (Case c : cases()) {
            total++;
            try {
                check(compiled.get(c.template()), c);
                pass++;
            } catch (AssertionError | RuntimeException e) {
                failed.add(c.id() + ": " + e.getMessage());
            }
        }
        assertThat(failed).as(pass + "/" + total + " chat fixture renders pass").isEmpty();
        assertThat(total).isEqualTo(40);
    }

    /**
     * The same conversations rendered from the shipped tokenizer_config.json: template and special
     * tokens both come from the config (gemma3's mask_token is a class default in transformers,
     * not in the file, and its template does not use it).
     */
    @TestFactory
    List<DynamicTest> rendersFromTokenizerConfig() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        Map<String, ChatTemplateConfig> configs = new LinkedHashMap<>();
        for (String t : TEMPLATES) {
            configs.put(t, ChatTemplateConfig.read(Fixtures.require("tokenizers").resolve(t).resolve("tokenizer_config.json")));
        }
        for (Case c : cases()) {
            ChatTemplateConfig config = configs.get(c.template());
            tests.add(DynamicTest.dynamicTest(c.id(), () -> check(config.select(null, c.line().hasNonNull("tools")), c)));
        }
        return tests;
    }

    /** End to end: the rendered prompt, tokenized without special tokens, gives transformers' ids. */
    @TestFactory
    List<DynamicTest> renderedPromptsTokenizeToTheRecordedIds() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        Map<String, dev.cmf4j.text.Tokenizer> tokenizers = new LinkedHashMap<>();
        Map<String, ChatTemplate> compiled = new LinkedHashMap<>();
        for (String t : TEMPLATES) {
            tokenizers.put(t, dev.cmf4j.text.Tokenizer.fromFile(Fixtures.require("tokenizers").resolve(t).resolve("tokenizer.json.gz")));
            compiled.put(t, ChatTemplate.of(Files.readString(Fixtures.require("chat").resolve(t).resolve("chat_template.jinja")), meta(t)));
        }
        for (Case c : cases()) {
            if (!c.line().hasNonNull("rendered_ids")) continue;
            tests.add(DynamicTest.dynamicTest(c.id(), () -> {
                int[] ids = tokenizers.get(c.template()).encodeIds(render(compiled.get(c.template()), c.line()), false);
                int[] expected = JSON.convertValue(c.line().get("rendered_ids"), int[].class);
                assertThat(ids).isEqualTo(expected);
            }));
        }
        return tests;
    }

    @Test
    void configSpecialTokensMatchWhatTransformersPassed() throws IOException {
        for (String t : TEMPLATES) {
            ChatTemplateConfig config = ChatTemplateConfig.read(Fixtures.require("tokenizers").resolve(t).resolve("tokenizer_config.json"));
            Map<String, String> passed = new LinkedHashMap<>(meta(t));
            if (t.equals("gemma3")) passed.remove("mask_token"); // GemmaTokenizer class default, absent from the file
            assertThat(config.specialTokens()).as(t).isEqualTo(passed);
        }
    }
}
