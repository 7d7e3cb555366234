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

    /**
     * Renders with transformers' {@code continue_final_message=True}: the prompt is cut right after
     * the last message's text, so generation continues that (assistant) message instead of opening
     * a new turn. Incompatible with add_generation_prompt, as in transformers.
     */
    public String renderContinuing(List<?> messages, List<?> tools, Map<String, ?> kwargs) {
        if (messages == null) throw new IllegalArgumentException("messages must not be null");
        return continueFinalMessage(messages, render(messages, tools, false, kwargs));
    }

    /** transformers' continue_final_message post-processing of a rendered prompt. */
    static String continueFinalMessage(List<?> messages, String rendered) {
        if (messages.isEmpty()) throw new IllegalArgumentException("continue_final_message needs at least one message");
        Object last = messages.getLast() instanceof Map<?, ?> m ? m.get("content") : null;
        String finalMessage = null;
        if (last instanceof String s) {
            finalMessage = s;
        } else if (last instanceof List<?> parts) {
            for (int i = parts.size() - 1; i >= 0 && finalMessage == null; i--) {
                if (parts.get(i) instanceof Map<?, ?> p && p.containsKey("text") && p.get("text") instanceof String t) finalMessage = t;
            }
        }
        if (finalMessage == null) {
            throw new IllegalArgumentException("continue_final_message is set but we could not find any text to continue in the final message!");
        }
        String stripped = jinjaStrip(finalMessage);
        int loc = rendered.lastIndexOf(stripped);
        if (loc < 0) {
            throw new IllegalArgumentException("continue_final_message is set but the final message does not appear in the chat after applying the chat template!");
        }
        int keep = jinjaLstrip(finalMessage).length();
        // transformers: if rendered[loc : loc + len(msg.lstrip())] == msg, keep that much, else up to msg.strip()
        if (rendered.substring(loc, Math.min(rendered.length(), loc + keep)).equals(finalMessage)) return rendered.substring(0, loc + keep);
        return rendered.substring(0, loc + stripped.length());
    }

    /** Python's str.strip() (Unicode whitespace, as Python defines it). */
    private static String jinjaStrip(String s) {
        return jinjaRstrip(jinjaLstrip(s));
    }

    private static String jinjaLstrip(String s) {
        int i = 0;
        while (i < s.length() && isPySpace(s.charAt(i))) i++;
        return s.substring(i);
    }

    private static String jinjaRstrip(String s) {
        int j = s.length();
        while (j > 0 && isPySpace(s.charAt(j - 1))) j--;
        return s.substring(0, j);
    }

    private static boolean isPySpace(char c) {
        return switch (c) {
            case '\t', '\n', 0x0b, 0x0c, '\r', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000 -> true;
            default -> c >= 0x2000 && c <= 0x200a;
        };
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
