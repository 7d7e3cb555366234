package dev.cmf4j.runtime;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The JSON machine on its own: what it accepts, what it refuses, and that every prefix's closing parses. */
class JsonConstraintTest {
    static final ObjectMapper JSON = new ObjectMapper();

    static boolean accepts(JsonConstraint c, String text) {
        JsonConstraint.State s = c.start().feed(text);
        return s != null && s.complete();
    }

    static boolean prefix(JsonConstraint c, String text) { return c.start().feed(text) != null; }

    @Test void anyObjectAcceptsJsonObjectsAndRefusesTheRest() {
        JsonConstraint o = JsonConstraint.anyObject();
        for (String ok : new String[] {"{}", "{\"a\": 1}", "{\"a\": [1, -2.5e3, true, null, \"x\\\"y\\u00e9\"], \"b\": {\"c\": {}}}", " {\"k\":\"v\"} "})
            assertThat(accepts(o, ok)).as(ok).isTrue();
        for (String bad : new String[] {"[1]", "\"s\"", "{a: 1}", "{\"a\" 1}", "{\"a\": 01}", "{\"a\": tru}", "{\"a\": 1,}", "{}}", "{\"a\": \"\n\"}"})
            assertThat(accepts(o, bad)).as(bad).isFalse();
        assertThat(prefix(o, "{\"a\": [1, 2")).isTrue();
        assertThat(prefix(o, "{\"a\": [1, 2]]")).isFalse();
        assertThat(prefix(o, "{" + " ".repeat(9))).as("a whitespace run is bounded").isFalse();
    }

    @Test void aSchemaNarrowsKeysTypesAndEnums() throws Exception {
        JsonConstraint c = JsonConstraint.of(JSON.readTree("""
                {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                 "tags": {"type": "array", "items": {"enum": ["a", "bb"]}, "maxItems": 2}, "ok": {"type": "boolean"}},
                 "required": ["name", "age"]}"""));
        assertThat(accepts(c, "{\"name\": \"x\", \"age\": 3}")).isTrue();
        assertThat(accepts(c, "{\"age\": 3, \"name\": \"x\", \"tags\": [\"bb\", \"a\"], \"ok\": false}")).isTrue();
        assertThat(accepts(c, "{\"name\": \"x\"}")).as("required age missing").isFalse();
        assertThat(prefix(c, "{\"nom")).as("no such key").isFalse();
        assertThat(prefix(c, "{\"age\": 3.5")).as("an integer").isFalse();
        assertThat(prefix(c, "{\"name\": 3")).as("a string").isFalse();
        assertThat(prefix(c, "{\"tags\": [\"c")).as("an enum").isFalse();
        assertThat(prefix(c, "{\"tags\": [\"a\", \"a\", ")).as("maxItems").isFalse();
        assertThat(prefix(c, "{\"name\": \"x\", \"name\"")).as("a key twice").isFalse();
        assertThatThrownBy(() -> JsonConstraint.of(JSON.readTree("{\"anyOf\": []}"))).hasMessageContaining("'anyOf' is not supported");
        assertThatThrownBy(() -> JsonConstraint.of(JSON.readTree("{\"type\": \"object\", \"properties\": {}, \"required\": [\"x\"]}")))
                .hasMessageContaining("not a property");
    }

    @Test void textAroundTheDocumentIsFixed() {
        JsonConstraint c = JsonConstraint.anyObject().between("<tool_call>\n", "\n</tool_call>");
        assertThat(accepts(c, "<tool_call>\n{\"a\": 1}\n</tool_call>")).isTrue();
        assertThat(prefix(c, "<tool_calls>")).isFalse();
        assertThat(accepts(c, "<tool_call>\n{\"a\": 1}")).as("the closing tag is missing").isFalse();
        assertThat(prefix(c, "<tool_call>\n{} x")).isFalse();
        assertThat(c.start().feed("<tool_").closing()).isEqualTo("call>\n{}\n</tool_call>");
        assertThat(c.start().feed("<tool_call>\n{\"k\": [1").closing()).isEqualTo("]}\n</tool_call>");
    }

    /** Every prefix of random valid documents, closed by {@code closing()}, is a complete document that parses and validates. */
    @Test void theClosingOfEveryPrefixCompletesAValidDocument() throws Exception {
        JsonConstraint c = JsonConstraint.of(JSON.readTree("""
                {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                 "c": {"type": "object", "properties": {"d": {"enum": [1, 22, "x"]}}, "required": ["d"]}}, "required": ["b", "c"]}"""));
        String[] docs = {"{\"a\": -1.5e+2, \"b\": [\"q\\\\\", \"\\u12ab\"], \"c\": {\"d\": 22}}", "{\"c\":{\"d\":\"x\"},\"b\":[\"\"]}"};
        for (String doc : docs) {
            assertThat(accepts(c, doc)).as(doc).isTrue();
            for (int n = 0; n <= doc.length(); n++) {
                JsonConstraint.State s = c.start().feed(doc.substring(0, n));
                String closed = doc.substring(0, n) + s.closing();
                assertThat(accepts(c, closed)).as(closed).isTrue();
                JsonNode parsed = JSON.readTree(closed);
                assertThat(parsed.has("b") && parsed.get("b").size() >= 1 && parsed.at("/c/d").isValueNode()).as(closed).isTrue();
            }
        }
        JsonConstraint any = JsonConstraint.anyObject();
        SplittableRandom r = new SplittableRandom(3);
        String doc = "{\"k\": [1, {\"x\": \"y\"}, [true, null]], \"m\": -0.25}";
        for (int n = 0; n <= doc.length(); n++) {
            String closed = doc.substring(0, n) + any.start().feed(doc.substring(0, n)).closing();
            assertThat(JSON.readTree(closed).isObject()).as(closed).isTrue();
        }
        assertThat(r).isNotNull();
    }
}
