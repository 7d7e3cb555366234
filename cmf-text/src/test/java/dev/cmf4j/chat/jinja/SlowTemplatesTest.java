package dev.cmf4j.chat.jinja;

import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

/**
 * The slow units the template fuzzer found (SlowTemplates/: exponential macros, nested long loops, strings built to the
 * output cap, reprs of reprs), each rendered with the engine's default limits as a chat template would be: it renders
 * or fails with a {@link TemplateException} that says what happened, and stops within the render's wall-time limit
 * (the 60 s bound is a hang guard far above it, not a speed check). Kept apart from TemplateFuzzTestInputs/ so the
 * fuzzer does not spend its runs mutating them (docs/FUZZING.md).
 */
class SlowTemplatesTest {
    @TestFactory Stream<DynamicTest> eachSlowUnitStopsWithinItsLimits() throws Exception {
        Path dir = Path.of(SlowTemplatesTest.class.getResource("SlowTemplates").toURI());
        var files = Files.list(dir).sorted().toList();
        assertThat(files).as("the kept slow units").hasSizeGreaterThanOrEqualTo(8);
        return files.stream().map(f -> DynamicTest.dynamicTest(f.getFileName().toString(), () -> {
            String source = new String(Files.readAllBytes(f), StandardCharsets.UTF_8);
            assertTimeoutPreemptively(Duration.ofSeconds(60), () -> TemplateFuzzTest.compileAndRender(source, Interpreter.MAX_RENDER_MILLIS));
        }));
    }
}
