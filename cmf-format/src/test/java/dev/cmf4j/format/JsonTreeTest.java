package dev.cmf4j.format;

import com.fasterxml.jackson.core.JacksonException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** The header's streaming tree reader builds what ObjectMapper.readTree built before it, and fails with its words. */
class JsonTreeTest {
    private static final ObjectMapper MAPPER = new ObjectMapper(Json.FACTORY);

    private static final String[] INPUTS = {
            "{}", "{} trailing", "{}{", "{\"a\":1,\"a\":[2,{\"b\":null}],\"z\":true,\"y\":false}",
            "{\"c\":1e400,\"d\":123456789012345678901234567890,\"e\":3000000000,\"f\":1.5,\"g\":-0.0,\"h\":-7}",
            "{\"s\":\"\\u00e9\\n\\\"x\\\"\",\"n\":{\"m\":{\"k\":[[],{}]}}}",
            "", "  ", "[1]", "\"x\"", "3", "null",
            "[1", "{\"a\":", "{\"a\" 1}", "nul", "{\"a\":1]", "{\"a\":01}", "{\"a\":\"\\q\"}", "{a:1}",
            "[".repeat(250) + "]".repeat(250),
    };

    @Test
    void sameTreesAndSameErrorsAsObjectMapper() {
        for (String s : INPUTS) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            JsonNode want;
            try {
                want = MAPPER.readTree(b);
            } catch (Exception e) {
                String msg = e instanceof JacksonException j ? j.getOriginalMessage() : e.getMessage();
                CmfException.Parse got = assertThrows(CmfException.Parse.class, () -> Json.parseObject(b, "t", 0, "header"), s);
                assertEquals("header is not valid JSON: " + msg, got.getMessage().substring(got.getMessage().indexOf("header is")), s);
                continue;
            }
            if (want.isObject()) {
                JsonNode got = Json.parseObject(b, "t", 0, "header");
                assertEquals(want, got, s);
                assertEquals(want.toString(), got.toString(), s);   // key order and number node kinds too
            } else {
                CmfException.Parse got = assertThrows(CmfException.Parse.class, () -> Json.parseObject(b, "t", 0, "header"), s);
                assertEquals("header must be a JSON object, found " + want.getNodeType(),
                        got.getMessage().substring(got.getMessage().indexOf("header must")), s);
            }
        }
    }
}
