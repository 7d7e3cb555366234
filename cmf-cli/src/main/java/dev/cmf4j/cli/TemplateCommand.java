package dev.cmf4j.cli;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.chat.ChatTemplate;
import dev.cmf4j.chat.ChatTemplateConfig;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.TokenizerConfig;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code cmf template SRC --messages m.json [--tools t.json] [--add-generation-prompt] [--kwargs k.json]}:
 * renders a chat template exactly as transformers' {@code apply_chat_template(..., tokenize=False)}.
 */
@Command(name = "template", mixinStandardHelpOptions = true,
        description = {"Render a chat template exactly as transformers' apply_chat_template(tokenize=False).",
                "Prints the prompt as is (no newline added). SRC is a .cmf file (its header's chat template and "
                        + "special tokens; ChatML when it has none), a tokenizer_config.json, a Hugging Face model "
                        + "directory (tokenizer_config.json, chat_template.jinja when present), or a .jinja file."})
public final class TemplateCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "SRC", description = "a .cmf, a tokenizer_config.json, a model directory, or a .jinja template")
    Path src;

    @Option(names = {"-m", "--messages"}, required = true, paramLabel = "FILE",
            description = "JSON array of messages ({\"role\", \"content\"}, content a string or a list of typed parts), "
                    + "or an object with \"messages\" (and optionally \"tools\"); - reads standard input")
    String messages;

    @Option(names = "--tools", paramLabel = "FILE", description = "JSON array of tool schemas ({\"type\": \"function\", \"function\": {...}})")
    Path tools;

    @Option(names = {"-g", "--add-generation-prompt"}, description = "end with the assistant turn's opening, as add_generation_prompt=True")
    boolean addGenerationPrompt;

    @Option(names = "--continue-final-message", description = "cut the prompt right after the last message's text so generation continues it (transformers' continue_final_message)")
    boolean continueFinalMessage;

    @Option(names = "--kwargs", paramLabel = "FILE", description = "JSON object of extra template variables, e.g. {\"enable_thinking\": false}")
    Path kwargs;

    @Option(names = "--template-name", paramLabel = "NAME", description = "pick a named template when the config has several (default: 'tool_use' with --tools if present, else 'default')")
    String templateName;

    @Option(names = "--special-tokens", paramLabel = "FILE",
            description = "JSON object of special-token variables (bos_token, eos_token, ...; strings or {\"content\": ...}), added to or replacing those of SRC")
    Path specialTokens;

    private static final ObjectMapper JSON = new ObjectMapper();

    @Override public Integer call() throws Exception {
        JsonNode msgDoc = readJson(messages);
        JsonNode msgNode = msgDoc.isObject() && msgDoc.has("messages") ? msgDoc.get("messages") : msgDoc;
        if (!msgNode.isArray()) throw new IllegalArgumentException(messages + ": expected a JSON array of messages (or an object with \"messages\")");
        List<?> msgs = JSON.convertValue(msgNode, List.class);

        List<?> toolList = null;
        if (tools != null) {
            JsonNode t = readJson(tools.toString());
            if (!t.isArray()) throw new IllegalArgumentException(tools + ": expected a JSON array of tools");
            toolList = JSON.convertValue(t, List.class);
        } else if (msgDoc.isObject() && msgDoc.hasNonNull("tools")) {
            toolList = JSON.convertValue(msgDoc.get("tools"), List.class);
        }

        Map<String, Object> kw = new LinkedHashMap<>();
        if (kwargs != null) {
            JsonNode k = readJson(kwargs.toString());
            if (!k.isObject()) throw new IllegalArgumentException(kwargs + ": expected a JSON object of template variables");
            kw.putAll(JSON.convertValue(k, Map.class));
        }

        ChatTemplate template = load(toolList != null);
        if (continueFinalMessage && addGenerationPrompt) {
            throw new IllegalArgumentException("--continue-final-message and --add-generation-prompt are not compatible (as in transformers)");
        }
        String prompt = continueFinalMessage ? template.renderContinuing(msgs, toolList, kw) : template.render(msgs, toolList, addGenerationPrompt, kw);
        PrintWriter out = spec.commandLine().getOut();
        out.print(prompt);
        out.flush();
        return 0;
    }

    private ChatTemplate load(boolean withTools) throws IOException {
        ChatTemplateConfig config = configOf(src);
        if (specialTokens != null) {
            JsonNode st = readJson(specialTokens.toString());
            if (!st.isObject()) throw new IllegalArgumentException(specialTokens + ": expected a JSON object");
            Map<String, String> merged = new LinkedHashMap<>(config.specialTokens());
            ChatTemplateConfig extra = ChatTemplateConfig.fromJson(JSON.createObjectNode().set("extra_special_tokens", st));
            merged.putAll(extra.specialTokens());
            config = new ChatTemplateConfig(config.templates(), merged);
        }
        if (config.templates().isEmpty() && templateName == null) return ChatTemplate.chatMl(config.specialTokens());
        return config.select(templateName, withTools);
    }

    /** Template(s) and special tokens from whatever SRC is. */
    static ChatTemplateConfig configOf(Path src) throws IOException {
        if (Files.isDirectory(src)) {
            Path cfg = src.resolve("tokenizer_config.json");
            ChatTemplateConfig c = Files.isRegularFile(cfg) ? ChatTemplateConfig.read(cfg) : new ChatTemplateConfig(Map.of(), Map.of());
            Path jinja = src.resolve("chat_template.jinja");
            if (Files.isRegularFile(jinja)) c = c.withTemplate(ChatTemplateConfig.DEFAULT, Files.readString(jinja, StandardCharsets.UTF_8));
            if (c.templates().isEmpty() && !Files.isRegularFile(cfg)) {
                throw new NoSuchFileException(src.toString(), null, "the directory holds no tokenizer_config.json or chat_template.jinja");
            }
            return c;
        }
        if (!Files.exists(src)) throw new NoSuchFileException(src.toString(), null, "no such file");
        String name = src.getFileName().toString().toLowerCase(Locale.ROOT);
        if (name.endsWith(".cmf")) {
            try (CmfFile cmf = CmfFile.open(src)) {
                TokenizerConfig tc = cmf.header().tokenizerConfig();
                if (tc == null) return new ChatTemplateConfig(Map.of(), Map.of());
                return ChatTemplateConfig.fromJson(tc.toJson());
            }
        }
        if (name.endsWith(".json") || name.endsWith(".json.gz")) return ChatTemplateConfig.read(src);
        return new ChatTemplateConfig(Map.of(ChatTemplateConfig.DEFAULT, Files.readString(src, StandardCharsets.UTF_8)), Map.of());
    }

    private static JsonNode readJson(String file) throws IOException {
        byte[] bytes = file.equals("-") ? System.in.readAllBytes() : Files.readAllBytes(Path.of(file));
        try {
            JsonNode n = JSON.readTree(bytes);
            if (n == null || n.isMissingNode()) throw new IllegalArgumentException(file + ": empty, expected JSON");
            return n;
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException(file + ": not valid JSON: " + e.getOriginalMessage()
                    + " (line " + e.getLocation().getLineNr() + ", column " + e.getLocation().getColumnNr() + ")");
        }
    }
}
