package dev.cmf4j.chat.jinja;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Interpreter features against real jinja2. Every expected string (or error type and message) in
 * jinja2_cases.jsonl was produced by jinja2 3.1.6 in the environment transformers renders chat
 * templates with (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
 * AssistantTracker, transformers' tojson / raise_exception / strftime_now at a fixed time), by
 * src/test/jinja2/generate_cases.py, run once by hand; no Python runs here.
 */
class Jinja2ParityTest {

    private static final ObjectMapper JSON = new ObjectMapper();
    /** generate_cases.py's fixed "now": 2024-03-05 14:07:09.123456. */
    static final Clock FIXED = Clock.fixed(LocalDateTime.of(2024, 3, 5, 14, 7, 9, 123_456_000).toInstant(ZoneOffset.UTC), ZoneOffset.UTC);

    @TestFactory
    List<DynamicTest> matchesJinja2() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(
                Objects.requireNonNull(getClass().getResourceAsStream("jinja2_cases.jsonl")), StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                if (line.isBlank()) continue;
                JsonNode c = JSON.readTree(line);
                tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> check(c)));
            }
        }
        assertThat(tests).hasSizeGreaterThan(150);
        return tests;
    }

    @SuppressWarnings("unchecked")
    private static void check(JsonNode c) {
        String template = c.get("template").asText();
        Map<String, Object> vars = JSON.convertValue(c.get("vars"), Map.class);
        if (c.has("expected")) {
            String out = Template.compile(template).render(vars, FIXED);
            assertThat(out).as(template).isEqualTo(c.get("expected").asText());
        } else {
            String type = c.get("error_type").asText();
            String message = c.get("error").asText();
            assertThatThrownBy(() -> Template.compile(template).render(vars, FIXED))
                    .as(template)
                    .isInstanceOfSatisfying(TemplateException.class, e -> {
                        assertThat(e.kind().name()).as("kind").isEqualTo(type);
                        assertThat(e.detail()).as("message").isEqualTo(message);
                    });
        }
    }
}
