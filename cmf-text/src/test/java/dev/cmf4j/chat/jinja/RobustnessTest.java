package dev.cmf4j.chat.jinja;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Hostile or broken templates fail with a TemplateException naming what is wrong: never a hang, OOM or stray exception. */
class RobustnessTest {

    private static TemplateException fails(String template) {
        try {
            Template.compile(template).render(Map.of("x", List.of(1, 2)));
        } catch (TemplateException e) {
            return e;
        }
        throw new AssertionError("expected a TemplateException for " + template);
    }

    @Test
    void limits() {
        assertThat(fails("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").kind()).isEqualTo(TemplateException.Kind.LimitExceeded);
        assertThat(fails("{{ 'x' * 1000000000 }}").kind()).isEqualTo(TemplateException.Kind.LimitExceeded);
        assertThat(fails("{% set s = 'xxxxxxxxxxxxxxxx' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}").kind())
                .isEqualTo(TemplateException.Kind.LimitExceeded);
        assertThat(fails("{{ 2 ** 100 }}").kind()).isEqualTo(TemplateException.Kind.OverflowError);
        assertThat(fails("{{ range(10**6) | list }}").detail()).contains("MAX_RANGE");
    }

    @Test
    void stepAndSizeBudgetsStopHostileLoops() {
        // two million steps, or the wall-time limit first on a slow or busy machine
        assertThat(fails("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").detail())
                .containsAnyOf("steps", "took longer than");
        assertThat(fails("{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}").detail())
                .containsAnyOf("steps", "took longer than");
        assertThat(fails("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}").detail())
                .contains("string concatenation exceeds");
        assertThat(fails("{% set ns = namespace(s=[1]) %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}").detail())
                .contains("list concatenation too large");
    }

    @Test
    void raiseExceptionWithAnEmptyMessageStillSaysWhatHappened() {
        TemplateException e = fails("{{ raise_exception(undefined_name) }}");
        assertThat(e.kind()).isEqualTo(TemplateException.Kind.TemplateError);
        assertThat(e.detail()).isEmpty();   // as jinja2's str(e)
        assertThat(e.getMessage()).contains("raised an exception with an empty message");
        assertThat(fails("{{ raise_exception('no tools here') }}").getMessage()).isEqualTo("no tools here");
    }

    @Test
    void aRenderPastItsWallTimeLimitStops() {
        // an exponential macro within the step budget (the fuzzer's slow units: 5–15 s before the limit)
        var t = Template.compile("{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 2) }}{% endif %}{% endmacro %}{{ f(0) }}");
        assertThatThrownBy(() -> t.render(Map.of(), java.time.Clock.systemUTC(), 1))
                .isInstanceOfSatisfying(TemplateException.class, e -> {
                    assertThat(e.kind()).isEqualTo(TemplateException.Kind.LimitExceeded);
                    assertThat(e.detail()).contains("took longer than 1 ms");
                });
        assertThat(Template.compile("{% for m in x %}{{ m }}{% endfor %}").render(Map.of("x", List.of(1, 2)), java.time.Clock.systemUTC(), 1))
                .as("a real template's render stays far inside it").isEqualTo("12");
    }

    @Test
    void deepNestingIsAnErrorNotACrash() {
        String deep = "{{ " + "(".repeat(5000) + "1" + ")".repeat(5000) + " }}";
        TemplateException e = null;
        try {
            Template.compile(deep).render(Map.of());
        } catch (TemplateException ex) {
            e = ex;
        } catch (StackOverflowError so) {
            throw new AssertionError("stack overflow escaped", so);
        }
        // either it renders (the stack was deep enough) or it is a clean limit error
        if (e != null) assertThat(e.kind()).isEqualTo(TemplateException.Kind.LimitExceeded);
    }

    @Test
    void longOperatorChainsAreFine() {
        String chain = "{{ " + "1 + ".repeat(3000) + "1 }}";
        try {
            assertThat(Template.compile(chain).render(Map.of())).isEqualTo("3001");
        } catch (TemplateException e) {
            assertThat(e.kind()).isEqualTo(TemplateException.Kind.LimitExceeded);
        }
    }

    @Test
    void syntaxErrorsNameTheLine() {
        TemplateException e = fails("ok\n\n{{ x | }}");
        assertThat(e.kind()).isEqualTo(TemplateException.Kind.TemplateSyntaxError);
        assertThat(e.line()).isEqualTo(3);
        assertThat(e.getMessage()).endsWith("(template line 3)");
        assertThat(fails("{{ 'unterminated }}").kind()).isEqualTo(TemplateException.Kind.TemplateSyntaxError);
        assertThat(fails("{# never closed").detail()).isEqualTo("Missing end of comment tag");
        assertThat(fails("{% raw %} never closed").detail()).isEqualTo("Missing end of raw directive");
        assertThat(fails("{% for %}").kind()).isEqualTo(TemplateException.Kind.TemplateSyntaxError);
        assertThat(fails("{% break %}").detail()).contains("outside of a for loop");
        assertThat(fails("{% include 'x' %}").kind()).isEqualTo(TemplateException.Kind.Unsupported);
        assertThat(fails("{{ ) }}").kind()).isEqualTo(TemplateException.Kind.TemplateSyntaxError);
        assertThat(fails("{{ x[} }}").kind()).isEqualTo(TemplateException.Kind.TemplateSyntaxError);
    }

    @Test
    void runtimeErrorsNameTheLine() {
        TemplateException e = fails("a\n{% for i in x %}\n{{ i + 'q' }}\n{% endfor %}");
        assertThat(e.kind()).isEqualTo(TemplateException.Kind.TypeError);
        assertThat(e.line()).isEqualTo(3);
    }

    /** Bounded fuzz: random splices of template syntax only ever render or throw TemplateException. */
    @Test
    void randomTemplatesNeverEscapeAsOtherExceptions() {
        String[] pieces = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", " if ", " for ", " in ", " endif ", " endfor ", " set ",
                "x", "x.y", "x[0]", "'s'", "\"q\"", "(", ")", "[", "]", "{", "}", ",", ":", "|", " upper ", " is ", " defined ",
                "1", "2.5", " and ", " or ", " not ", "~", "*", "**", "/", "//", "%", "\n", " ", "loop.index", "range(3)",
                " macro ", " endmacro ", " raw ", " endraw ", "namespace(a=1)", "ns.a", " else ", " elif ", "none", "true"};
        Random rnd = new Random(42);
        for (int n = 0; n < 3000; n++) {
            StringBuilder b = new StringBuilder();
            int len = 1 + rnd.nextInt(14);
            for (int i = 0; i < len; i++) b.append(pieces[rnd.nextInt(pieces.length)]);
            String t = b.toString();
            try {
                Template.compile(t).render(Map.of("x", List.of(Map.of("y", 1)), "ns", Map.of("a", 1)));
            } catch (TemplateException expected) {
                assertThat(expected.getMessage()).isNotBlank();
            } catch (RuntimeException | StackOverflowError other) {
                throw new AssertionError("template " + t.replace("\n", "\\n") + " threw " + other, other);
            }
        }
    }

    @Test
    void inputValuesAreCheckedAtTheBoundary() {
        assertThatThrownBy(() -> Template.compile("{{ x }}").render(Map.of("x", new Object())))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("cannot pass a java.lang.Object");
    }
}
