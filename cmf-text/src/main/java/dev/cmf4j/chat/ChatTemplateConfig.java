package dev.cmf4j.chat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPInputStream;

/**
 * The chat-template part of a Hugging Face {@code tokenizer_config.json}: the template(s) and the
 * special tokens transformers passes to them.
 *
 * <p>{@code chat_template} is either one string or a list of {@code {"name", "template"}} objects;
 * special tokens are {@code bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
 * mask_token} (each a string or an AddedToken object with {@code content}) plus the entries of an
 * {@code extra_special_tokens} object (e.g. Gemma 3's {@code boi_token}).
 */
public record ChatTemplateConfig(Map<String, String> templates, Map<String, String> specialTokens) {

    /** The name a single-string {@code chat_template} is stored under. */
    public static final String DEFAULT = "default";

    private static final List<String> NAMED_TOKENS = List.of(
            "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token");

    public ChatTemplateConfig {
        templates = Map.copyOf(templates);
        specialTokens = Map.copyOf(specialTokens);
    }

    /** Reads tokenizer_config.json (or .json.gz). */
    public static ChatTemplateConfig read(Path file) throws IOException {
        try (InputStream raw = Files.newInputStream(file);
             InputStream in = file.getFileName().toString().endsWith(".gz") ? new GZIPInputStream(raw) : raw) {
            JsonNode node = new ObjectMapper().readTree(in);
            if (node == null || !node.isObject()) throw new IOException(file + ": not a JSON object");
            try {
                return fromJson(node);
            } catch (IllegalArgumentException e) {
                throw new IOException(file + ": " + e.getMessage(), e);
            }
        }
    }

    /** From the parsed tokenizer_config object. */
    public static ChatTemplateConfig fromJson(JsonNode config) {
        Map<String, String> templates = new LinkedHashMap<>();
        JsonNode ct = config.get("chat_template");
        if (ct != null && !ct.isNull()) {
            if (ct.isTextual()) {
                templates.put(DEFAULT, ct.asText());
            } else if (ct.isArray()) {
                for (JsonNode t : ct) {
                    JsonNode name = t.get("name");
                    JsonNode template = t.get("template");
                    if (name == null || !name.isTextual() || template == null || !template.isTextual()) {
                        throw new IllegalArgumentException("chat_template list entries need string 'name' and 'template'");
                    }
                    templates.put(name.asText(), template.asText());
                }
            } else if (ct.isObject()) {
                ct.properties().forEach(e -> {
                    if (!e.getValue().isTextual()) throw new IllegalArgumentException("chat_template '" + e.getKey() + "' is not a string");
                    templates.put(e.getKey(), e.getValue().asText());
                });
            } else {
                throw new IllegalArgumentException("chat_template must be a string or a list of {name, template}, not " + ct.getNodeType());
            }
        }
        Map<String, String> special = new LinkedHashMap<>();
        for (String key : NAMED_TOKENS) {
            String v = tokenText(config.get(key));
            if (v != null) special.put(key, v);
        }
        JsonNode extra = config.get("extra_special_tokens");
        if (extra != null && extra.isObject()) {
            extra.properties().forEach(e -> {
                String v = tokenText(e.getValue());
                if (v != null) special.put(e.getKey(), v);
            });
        }
        return new ChatTemplateConfig(templates, special);
    }

    /** A special token as a string: plain, or the {@code content} of an AddedToken object. */
    static String tokenText(JsonNode v) {
        if (v == null || v.isNull()) return null;
        if (v.isTextual()) return v.asText();
        if (v.isObject() && v.get("content") != null && v.get("content").isTextual()) return v.get("content").asText();
        return null;
    }

    /** The same config with the template taken from a separate {@code chat_template.jinja} file. */
    public ChatTemplateConfig withTemplate(String name, String source) {
        Map<String, String> t = new LinkedHashMap<>(templates);
        t.put(name, source);
        return new ChatTemplateConfig(t, specialTokens);
    }

    /**
     * Picks a template the way transformers does: the named one if name is given; else
     * {@code tool_use} when tools are passed and it exists, else {@code default}.
     *
     * @throws IllegalArgumentException when no template fits (the model ships none, or only
     *     named ones without a default)
     */
    public ChatTemplate select(String name, boolean withTools) {
        String source;
        if (name != null) {
            source = templates.get(name);
            if (source == null) throw new IllegalArgumentException("no chat template named '" + name + "'; available: " + templates.keySet());
        } else if (withTools && templates.containsKey("tool_use")) {
            source = templates.get("tool_use");
        } else if (templates.containsKey(DEFAULT)) {
            source = templates.get(DEFAULT);
        } else if (templates.isEmpty()) {
            throw new IllegalArgumentException("this tokenizer config has no chat_template (use ChatTemplate.chatMl for a ChatML fallback)");
        } else {
            throw new IllegalArgumentException("this model has several chat templates and no 'default': pick one of " + templates.keySet());
        }
        return ChatTemplate.of(source, specialTokens);
    }
}
