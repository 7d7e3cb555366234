package dev.cmf4j.chat;

import dev.cmf4j.chat.jinja.Template;
import dev.cmf4j.chat.jinja.TemplateException;

import java.time.Clock;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A model's chat template, rendered exactly as transformers' {@code apply_chat_template(...,
 * tokenize=False)} renders it: the template sees {@code messages}, {@code tools} (None when not
 * given), {@code documents} (None), {@code add_generation_prompt}, the tokenizer's special tokens
 * ({@code bos_token}, {@code eos_token}, ...) and any extra keyword arguments
 * ({@code enable_thinking}, ...). Messages and tools are JSON-like values (Map, List, String,
 * Number, Boolean, null), e.g. as Jackson reads them into {@code Object}.
 *
 * <p>Errors are {@link TemplateException}s; a template's own {@code raise_exception(msg)} surfaces
 * as kind {@code TemplateError} with exactly msg as its message.
 */
public final class ChatTemplate {

    /**
     * The ChatML template transformers used as its class default (before default templates were
     * removed), extended to accept typed-list content (text parts joined). Used when a model ships
     * no template.
     */
    public static final String CHATML = """
            {%- for message in messages -%}
            {{- '<|im_start|>' + message['role'] + '\\n' -}}
            {%- if message['content'] is string -%}
            {{- message['content'] -}}
            {%- elif message['content'] is iterable -%}
            {%- for part in message['content'] if part['type'] == 'text' -%}{{- part['text'] -}}{%- endfor -%}
            {%- endif -%}
            {{- '<|im_end|>' + '\\n' -}}
            {%- endfor -%}
            {%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}""";

    private static final Set<String> RESERVED = Set.of("messages", "tools", "documents", "add_generation_prompt");

    private final String source;
    private final Template template;
    private final Map<String, String> specialTokens;

    private ChatTemplate(String source, Map<String, String> specialTokens) {
        this.source = source;
        this.template = Template.compile(source);
        this.specialTokens = Map.copyOf(specialTokens);
    }

    /** Compiles source (a syntax error throws {@link TemplateException}); specialTokens become template variables. */
    public static ChatTemplate of(String source, Map<String, String> specialTokens) {
        return new ChatTemplate(source, specialTokens);
    }

    /** The {@link #CHATML} fallback. */
    public static ChatTemplate chatMl(Map<String, String> specialTokens) {
        return new ChatTemplate(CHATML, specialTokens);
    }

    public String source() {
        return source;
    }

    public Map<String, String> specialTokens() {
        return specialTokens;
    }

    /** Renders a conversation; tools and kwargs may be null. */
    public String render(List<?> messages, List<?> tools, boolean addGenerationPrompt, Map<String, ?> kwargs) {
        return render(messages, tools, addGenerationPrompt, kwargs, Clock.systemDefaultZone());
    }

    /** As {@link #render(List, List, boolean, Map)}, with the clock {@code strftime_now} reads. */
    public String render(List<?> messages, List<?> tools, boolean addGenerationPrompt, Map<String, ?> kwargs, Clock clock) {
        if (messages == null) throw new IllegalArgumentException("messages must not be null");
        Map<String, Object> vars = new LinkedHashMap<>(specialTokens);
        if (kwargs != null) {
            for (Map.Entry<String, ?> e : kwargs.entrySet()) {
                if (RESERVED.contains(e.getKey())) {
                    throw new IllegalArgumentException("template kwarg '" + e.getKey() + "' clashes with an argument apply_chat_template sets itself");
                }
                vars.put(e.getKey(), e.getValue());
            }
        }
        vars.put("messages", messages);
        vars.put("tools", tools);
        vars.put("documents", null);
        vars.put("add_generation_prompt", addGenerationPrompt);
        return template.render(vars, clock);
    }
}
