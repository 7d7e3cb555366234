package dev.cmf4j.chat.jinja;

import com.code_intelligence.jazzer.junit.DictionaryEntries;
import com.code_intelligence.jazzer.junit.FuzzTest;

import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.List;
import java.util.Map;

/**
 * Coverage-guided fuzzing of Jinja chat templates, parse and render: any source either renders or fails with a
 * {@link TemplateException}, within the interpreter's step and output budgets (no hang, no memory exhaustion).
 * Rendered with a conversation shaped like a chat request's. Replays {@code TemplateFuzzTestInputs/} in every test
 * run; {@code JAZZER_FUZZ=1} fuzzes (docs/FUZZING.md).
 */
class TemplateFuzzTest {
    private static final Clock CLOCK = Clock.fixed(Instant.parse("2026-01-02T03:04:05Z"), ZoneOffset.UTC);
    private static final Map<String, Object> VARS = Map.of(
            "bos_token", "<s>", "eos_token", "</s>", "add_generation_prompt", true,
            "messages", List.of(
                    Map.of("role", "system", "content", "Be brief."),
                    Map.of("role", "user", "content", "Hi {{ x }} <think>"),
                    Map.of("role", "assistant", "content", "ok", "tool_calls",
                            List.of(Map.of("type", "function", "function", Map.of("name", "f", "arguments", Map.of("a", 1))))),
                    Map.of("role", "tool", "content", "42")),
            "tools", List.of(Map.of("type", "function", "function",
                    Map.of("name", "f", "description", "d", "parameters", Map.of("type", "object")))));

    @FuzzTest(maxDuration = "90m")
    @DictionaryEntries({"{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", " for ", " in ", " endfor ", " if ", " elif ",
            " else ", " endif ", " set ", " endset ", " macro ", " endmacro ", " call ", " endcall ", " raw ", " endraw ",
            " namespace(", " range(", " loop.", "messages", "tools", "message['content']", " | tojson", " | length",
            " | join(", " is defined", " is string", " not ", " and ", " or ", " ~ ", " * ", " ** ", "caller()",
            ".items()", ".split(", "raise_exception(", "strftime_now(", " recursive", " loop(", "break", "continue"})
    void compileAndRender(byte[] data) {
        // a render stops after 100 ms here, not the default 2 s: hostile seeds (loops, macros) and their mutations then
        // cost 100 ms each, not 2 s; the slow units the runs found are replayed by SlowTemplatesTest, not used as seeds
        compileAndRender(new String(data, StandardCharsets.UTF_8), 100);
    }

    /** Renders or fails with a {@link TemplateException} that says what happened; anything else is a finding. */
    static void compileAndRender(String source, long maxRenderMillis) {
        try {
            Template.compile(source).render(VARS, CLOCK, maxRenderMillis);
        } catch (TemplateException expected) {
            if (expected.getMessage() == null || expected.getMessage().isBlank()) throw new AssertionError("error without a message", expected);
        }
    }
}
