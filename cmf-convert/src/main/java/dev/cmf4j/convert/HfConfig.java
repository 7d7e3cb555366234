package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Typed, checked access to a Hugging Face {@code config.json}. Multimodal wrappers
 * ({@code Gemma4ForConditionalGeneration}, Qwen3.5 VL) keep the language model's settings in
 * {@code text_config}; {@link #text()} returns that view. Every getter names the file and key when the
 * value has the wrong type, so a bad config gives a message the user can act on.
 */
public final class HfConfig {
    static final ObjectMapper JSON = new ObjectMapper();

    private final ObjectNode node;
    private final String where;

    HfConfig(ObjectNode node, String where) {
        this.node = node;
        this.where = where;
    }

    /** Reads and parses {@code file}. */
    public static HfConfig read(Path file) {
        try {
            if (Files.size(file) > 64L << 20) throw new ConvertException(file + ": config is over 64 MB");
            JsonNode n = JSON.readTree(file.toFile());
            if (!(n instanceof ObjectNode o)) throw new ConvertException(file + ": not a JSON object");
            return new HfConfig(o, file.toString());
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new ConvertException(file + ": not valid JSON: " + e.getOriginalMessage(), e);
        } catch (IOException e) {
            throw new ConvertException(file + ": cannot read: " + e.getMessage(), e);
        }
    }

    public static HfConfig of(ObjectNode node, String where) { return new HfConfig(node, where); }

    /** The raw JSON (for provenance). */
    public ObjectNode json() { return node; }

    public String where() { return where; }

    /** The language-model part: {@code text_config} when present (multimodal wrappers), else this config. */
    public HfConfig text() {
        JsonNode t = node.get("text_config");
        if (t instanceof ObjectNode o) return new HfConfig(o, where + " text_config");
        return this;
    }

    public boolean has(String key) {
        JsonNode v = node.get(key);
        return v != null && !v.isNull();
    }

    public JsonNode raw(String key) {
        JsonNode v = node.get(key);
        return v == null || v.isNull() ? null : v;
    }

    public HfConfig sub(String key) {
        JsonNode v = raw(key);
        if (v == null) return null;
        if (!(v instanceof ObjectNode o)) throw bad(key, "an object", v);
        return new HfConfig(o, where + " " + key);
    }

    public String string(String key, String dflt) {
        JsonNode v = raw(key);
        if (v == null) return dflt;
        if (!v.isTextual()) throw bad(key, "a string", v);
        return v.asText();
    }

    public Integer integer(String key) {
        JsonNode v = raw(key);
        if (v == null) return null;
        if (v.isIntegralNumber() && v.canConvertToInt()) return v.intValue();
        if (v.isFloatingPointNumber() && v.doubleValue() == Math.rint(v.doubleValue()) && Math.abs(v.doubleValue()) < Integer.MAX_VALUE)
            return (int) v.doubleValue();
        throw bad(key, "an integer", v);
    }

    public int integer(String key, int dflt) {
        Integer i = integer(key);
        return i == null ? dflt : i;
    }

    public int requiredInt(String key) {
        Integer i = integer(key);
        if (i == null) throw new ConvertException(where + ": \"" + key + "\" is missing");
        if (i < 0) throw new ConvertException(where + ": \"" + key + "\" is negative (" + i + ")");
        return i;
    }

    /** A positive integer key (sizes, counts). */
    public int positiveInt(String key) {
        int i = requiredInt(key);
        if (i <= 0) throw new ConvertException(where + ": \"" + key + "\" must be positive, found " + i);
        return i;
    }

    public Double dbl(String key) {
        JsonNode v = raw(key);
        if (v == null) return null;
        if (!v.isNumber()) throw bad(key, "a number", v);
        return v.doubleValue();
    }

    public double dbl(String key, double dflt) {
        Double d = dbl(key);
        return d == null ? dflt : d;
    }

    public Boolean bool(String key) {
        JsonNode v = raw(key);
        if (v == null) return null;
        if (!v.isBoolean()) throw bad(key, "true or false", v);
        return v.booleanValue();
    }

    public boolean bool(String key, boolean dflt) {
        Boolean b = bool(key);
        return b == null ? dflt : b;
    }

    public List<String> strings(String key) {
        JsonNode v = raw(key);
        if (v == null) return null;
        if (!v.isArray()) throw bad(key, "an array of strings", v);
        List<String> out = new ArrayList<>();
        for (JsonNode e : v) {
            if (!e.isTextual()) throw bad(key, "an array of strings", v);
            out.add(e.asText());
        }
        return out;
    }

    public List<Integer> ints(String key) {
        JsonNode v = raw(key);
        if (v == null) return null;
        if (v.isIntegralNumber()) return List.of(v.intValue());
        if (!v.isArray()) throw bad(key, "an integer or array of integers", v);
        List<Integer> out = new ArrayList<>();
        for (JsonNode e : v) {
            if (!e.isIntegralNumber() || !e.canConvertToInt()) throw bad(key, "an array of integers", v);
            out.add(e.intValue());
        }
        return out;
    }

    ConvertException bad(String key, String expected, JsonNode found) {
        String f = found.toString();
        if (f.length() > 80) f = f.substring(0, 80) + "...";
        return new ConvertException(where + ": \"" + key + "\" should be " + expected + ", found " + f);
    }

    ConvertException error(String message) {
        return new ConvertException(where + ": " + message);
    }
}
