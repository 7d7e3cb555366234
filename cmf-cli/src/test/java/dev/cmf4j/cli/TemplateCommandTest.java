package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.TextNode;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.TokenizerConfig;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static dev.cmf4j.cli.Run.run;
import static org.assertj.core.api.Assertions.assertThat;

/** {@code cmf template} over a tokenizer_config.json, a .jinja file, a model directory and .cmf files. */
class TemplateCommandTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** The fixture conversation with this id, written out as the command's input files. */
    private static JsonNode fixtureCase(String template, String id) throws IOException {
        for (String l : Files.readAllLines(Fixtures.require("chat/" + template + "/renders.jsonl"))) {
            JsonNode c = JSON.readTree(l);
            if (c.get("id").asText().equals(id)) return c;
        }
        throw new AssertionError("no case " + id);
    }

    private static Path write(Path dir, String name, JsonNode value) throws IOException {
        Path p = dir.resolve(name);
        Files.writeString(p, JSON.writeValueAsString(value));
        return p;
    }

    @Test
    void rendersQwen3ToolsFromTokenizerConfig(@TempDir Path tmp) throws IOException {
        JsonNode c = fixtureCase("qwen3", "tool_call_roundtrip");
        Path msgs = write(tmp, "m.json", c.get("messages"));
        Path tools = write(tmp, "t.json", c.get("tools"));
        String cfg = Fixtures.require("tokenizers/qwen3/tokenizer_config.json").toString();
        Run r = run("template", cfg, "--messages", msgs.toString(), "--tools", tools.toString(), "--add-generation-prompt");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(c.get("rendered").asText());
    }

    @Test
    void kwargsReachTheTemplate(@TempDir Path tmp) throws IOException {
        JsonNode c = fixtureCase("qwen3", "enable_thinking_false");
        Path msgs = write(tmp, "m.json", c.get("messages"));
        Path kw = write(tmp, "k.json", c.get("template_kwargs"));
        Run r = run("template", Fixtures.require("tokenizers/qwen3").toString() + "/tokenizer_config.json",
                "-m", msgs.toString(), "--kwargs", kw.toString(), "-g");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(c.get("rendered").asText());
    }

    @Test
    void jinjaFileWithSpecialTokens(@TempDir Path tmp) throws IOException {
        JsonNode c = fixtureCase("llama3", "multi_turn_agp");
        Path msgs = write(tmp, "m.json", c.get("messages"));
        JsonNode meta = JSON.readTree(Fixtures.require("chat/llama3/renders_meta.json").toFile());
        Path special = write(tmp, "s.json", meta.get("special_tokens_passed_to_template"));
        Run r = run("template", Fixtures.require("chat/llama3/chat_template.jinja").toString(),
                "--messages", msgs.toString(), "--special-tokens", special.toString(), "--add-generation-prompt");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(c.get("rendered").asText());
    }

    @Test
    void templateErrorIsOneClearLine(@TempDir Path tmp) throws IOException {
        JsonNode c = fixtureCase("gemma3", "assistant_first");
        Path msgs = write(tmp, "m.json", c.get("messages"));
        Run r = run("template", Fixtures.require("tokenizers/gemma3/tokenizer_config.json").toString(), "--messages", msgs.toString(), "-g");
        assertThat(r.code()).isEqualTo(1);
        assertThat(r.out()).isEmpty();
        assertThat(r.err().strip()).isEqualTo("cmf: error: Conversation roles must alternate user/assistant/user/assistant/...");
    }

    /** A messages, tools, kwargs or special-tokens file that is not there: its name and why, not the bare name. */
    @Test
    void missingInputFilesSayTheyAreMissing(@TempDir Path tmp) throws IOException {
        Path msgs = tmp.resolve("m.json");
        Files.writeString(msgs, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}");
        String model = Fixtures.require("cmf/tiny/tiny-F32.cmf").toString(), gone = tmp.resolve("gone.json").toString();
        for (String[] args : new String[][] {{"--messages", gone}, {"-m", msgs.toString(), "--tools", gone},
                {"-m", msgs.toString(), "--kwargs", gone}, {"-m", msgs.toString(), "--special-tokens", gone}}) {
            String[] all = new String[args.length + 3];
            all[0] = "template";
            all[1] = model;
            System.arraycopy(args, 0, all, 2, args.length);
            all[all.length - 1] = "-g";
            Run r = run(all);
            assertThat(r.code()).as(String.join(" ", args)).isEqualTo(1);
            assertThat(r.err().strip()).as(String.join(" ", args)).isEqualTo("cmf: error: " + gone + ": no such file");
        }
    }

    @Test
    void cmfWithoutChatBundleFallsBackToChatMl(@TempDir Path tmp) throws IOException {
        Path msgs = tmp.resolve("m.json");
        Files.writeString(msgs, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}");
        Run r = run("template", Fixtures.require("cmf/tiny/tiny-F32.cmf").toString(), "--messages", msgs.toString(), "-g");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    }

    @Test
    void cmfChatBundleTemplateAndSpecialTokens(@TempDir Path tmp) throws IOException {
        String gemma = Files.readString(Fixtures.require("chat/gemma3/chat_template.jinja"));
        Path out = tmp.resolve("with-chat.cmf");
        try (CmfFile src = CmfFile.open(Fixtures.require("cmf/tiny/tiny-F32.cmf"))) {
            TokenizerConfig tc = new TokenizerConfig(gemma, List.of(1), 2, 0, Map.of("bos_token", TextNode.valueOf("<bos>")));
            try (CmfWriter w = CmfWriter.create(out, src.header().withTokenizerConfig(tc))) {
                CmfWriter.copyAll(src, w);
                w.finish();
            }
        }
        JsonNode c = fixtureCase("gemma3", "system_user");
        Path msgs = write(tmp, "m.json", c.get("messages"));
        Run r = run("template", out.toString(), "--messages", msgs.toString(), "--add-generation-prompt");
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(c.get("rendered").asText());
    }

    @Test
    void modelDirectoryPrefersChatTemplateJinja(@TempDir Path tmp) throws IOException {
        Files.copy(Fixtures.require("tokenizers/llama3/tokenizer_config.json"), tmp.resolve("tokenizer_config.json"));
        Files.writeString(tmp.resolve("chat_template.jinja"), "{{ bos_token }}[{{ messages | length }}]");
        Path msgs = tmp.resolve("m.json");
        Files.writeString(msgs, "[{\"role\": \"user\", \"content\": \"Hi\"}]");
        Run r = run("template", tmp.toString(), "--messages", msgs.toString());
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo("<|begin_of_text|>[1]");
    }

    @Test
    void badInputsAreClearErrors(@TempDir Path tmp) throws IOException {
        Path bad = tmp.resolve("bad.json");
        Files.writeString(bad, "[{\"role\": \"user\", ");
        String cfg = Fixtures.require("tokenizers/llama3/tokenizer_config.json").toString();
        Run r = run("template", cfg, "--messages", bad.toString());
        assertThat(r.code()).isEqualTo(1);
        assertThat(r.err()).startsWith("cmf: error: " + bad + ": not valid JSON");

        Path notList = tmp.resolve("obj.json");
        Files.writeString(notList, "{\"role\": \"user\"}");
        assertThat(run("template", cfg, "--messages", notList.toString()).err()).contains("expected a JSON array of messages");

        Path tpl = tmp.resolve("broken.jinja");
        Files.writeString(tpl, "line one\n{% if x %}never closed");
        Path msgs = tmp.resolve("m.json");
        Files.writeString(msgs, "[]");
        Run syntax = run("template", tpl.toString(), "--messages", msgs.toString());
        assertThat(syntax.code()).isEqualTo(1);
        assertThat(syntax.err()).contains("TemplateSyntaxError").contains("'endif'").contains("template line 2");

        assertThat(run("template", "/no/such/tokenizer_config.json", "--messages", msgs.toString()).err())
                .startsWith("cmf: error:").contains("/no/such/tokenizer_config.json");
    }
}
