package dev.cmf4j.format;

import com.fasterxml.jackson.core.JacksonException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.MissingNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * JSON plumbing for the header and masks meta: parsing untrusted bytes into a tree with typed errors,
 * reading typed fields out of an object while remembering which were consumed (the rest are kept
 * verbatim so a round trip preserves unknown fields), and building compact output.
 */
public final class Json {
    private Json() {}

    /** Jackson's parser with nesting depth bounded so a hostile header cannot exhaust the stack. */
    static final JsonFactory FACTORY = JsonFactory.builder()
            .streamReadConstraints(StreamReadConstraints.builder().maxNestingDepth(200).build()).build();
    static final JsonNodeFactory NODES = JsonNodeFactory.instance;

    /**
     * The mapper, for writing only. Built on first use: constructing an ObjectMapper initializes date formats and
     * locale data, ~0.1-0.25 s of a fresh {@code cmf run} that only reads (docs/CPU_KERNELS.md, "Time to first token").
     */
    private static final class Mapper {
        static final ObjectMapper MAPPER = new ObjectMapper(FACTORY);
    }

    /** Parses UTF-8 JSON bytes that must hold one object. */
    static ObjectNode parseObject(byte[] bytes, String label, long offset, String what) {
        JsonNode n;
        try (JsonParser p = FACTORY.createParser(bytes)) {
            n = p.nextToken() == null ? MissingNode.getInstance() : tree(p);
        } catch (JacksonException e) {
            throw new CmfException.Parse(label, offset, what + " is not valid JSON: " + e.getOriginalMessage(), e);
        } catch (java.io.IOException e) {
            throw new CmfException.Parse(label, offset, what + " is not valid UTF-8 JSON: " + e.getMessage(), e);
        }
        if (!(n instanceof ObjectNode o)) {
            throw new CmfException.Parse(label, offset, what + " must be a JSON object, found "
                    + (n == null ? "nothing" : n.getNodeType()));
        }
        return o;
    }

    /**
     * The tree of the value at the parser's current token, node for node what {@code ObjectMapper.readTree} builds
     * with default features (ints as int, long or BigInteger nodes by size; floats as doubles; a repeated key's
     * last value, in the first one's place; anything after the value is not read); leaves the parser on the
     * value's last token. Nesting is bounded by the parser's constraints.
     */
    public static JsonNode tree(JsonParser p) throws java.io.IOException {
        JsonToken t = p.currentToken();
        if (t == null) throw new JsonParseException(p, "no JSON value");
        return switch (t) {
            case START_OBJECT -> {
                ObjectNode o = NODES.objectNode();
                for (JsonToken k = p.nextToken(); k != JsonToken.END_OBJECT; k = p.nextToken()) {
                    if (k != JsonToken.FIELD_NAME) throw new JsonParseException(p, "expected a field name, found " + k);
                    String name = p.currentName();
                    p.nextToken();
                    o.replace(name, tree(p));
                }
                yield o;
            }
            case START_ARRAY -> {
                ArrayNode a = NODES.arrayNode();
                for (JsonToken k = p.nextToken(); k != JsonToken.END_ARRAY; k = p.nextToken()) {
                    if (k == null) throw new JsonParseException(p, "unexpected end of input in an array");
                    a.add(tree(p));
                }
                yield a;
            }
            case VALUE_STRING -> NODES.textNode(p.getText());
            case VALUE_NUMBER_INT -> switch (p.getNumberType()) {
                case INT -> NODES.numberNode(p.getIntValue());
                case LONG -> NODES.numberNode(p.getLongValue());
                default -> NODES.numberNode(p.getBigIntegerValue());
            };
            case VALUE_NUMBER_FLOAT -> p.getNumberType() == JsonParser.NumberType.BIG_DECIMAL
                    ? NODES.numberNode(p.getDecimalValue()) : NODES.numberNode(p.getDoubleValue());
            case VALUE_TRUE -> NODES.booleanNode(true);
            case VALUE_FALSE -> NODES.booleanNode(false);
            case VALUE_NULL -> NODES.nullNode();
            case VALUE_EMBEDDED_OBJECT -> NODES.pojoNode(p.getEmbeddedObject());
            default -> throw new JsonParseException(p, "unexpected token " + t);
        };
    }

    /** Compact UTF-8 bytes of a tree (no whitespace, like serde_json's to_vec). */
    public static byte[] compact(JsonNode node) {
        try {
            return Mapper.MAPPER.writeValueAsBytes(node);
        } catch (JacksonException e) {
            throw new IllegalStateException("cannot serialize JSON", e);
        }
    }

    static ObjectNode object() { return NODES.objectNode(); }

    /**
     * Typed access to the fields of one JSON object. Every accessor returns null when the field is
     * absent or JSON null, throws {@link CmfException.Parse} naming the field path when it has the
     * wrong type, and marks the field consumed; {@link #rest} returns the unconsumed ones.
     */
    static final class Fields {
        final ObjectNode node;
        final String label;
        final long offset;
        final String path;
        private final Set<String> used = new HashSet<>();

        Fields(ObjectNode node, String label, long offset, String path) {
            this.node = node;
            this.label = label;
            this.offset = offset;
            this.path = path;
        }

        CmfException.Parse error(String key, String expected, JsonNode found) {
            return new CmfException.Parse(label, offset, path + "." + key + ": expected " + expected + ", found "
                    + (found.isValueNode() ? found.toString() : found.getNodeType().toString().toLowerCase()));
        }

        private JsonNode take(String key) {
            used.add(key);
            JsonNode v = node.get(key);
            return v == null || v.isNull() ? null : v;
        }

        boolean has(String key) { JsonNode v = node.get(key); return v != null && !v.isNull(); }

        JsonNode raw(String key) { return take(key); }

        String string(String key) {
            JsonNode v = take(key);
            if (v == null) return null;
            if (!v.isTextual()) throw error(key, "a string", v);
            return v.textValue();
        }

        String requiredString(String key) {
            String s = string(key);
            if (s == null) throw new CmfException.Parse(label, offset, path + "." + key + " is missing");
            return s;
        }

        Integer integer(String key) {
            JsonNode v = take(key);
            if (v == null) return null;
            return asInt(key, v);
        }

        int requiredInt(String key) {
            Integer i = integer(key);
            if (i == null) throw new CmfException.Parse(label, offset, path + "." + key + " is missing");
            return i;
        }

        private int asInt(String key, JsonNode v) {
            if (v.isIntegralNumber() && v.canConvertToInt()) return v.intValue();
            if (v.isFloatingPointNumber() && v.doubleValue() == Math.rint(v.doubleValue())
                    && Math.abs(v.doubleValue()) <= Integer.MAX_VALUE) return (int) v.doubleValue();
            throw error(key, "a 32-bit integer", v);
        }

        Long longValue(String key) {
            JsonNode v = take(key);
            if (v == null) return null;
            if (v.isIntegralNumber() && v.canConvertToLong()) return v.longValue();
            throw error(key, "a 64-bit integer", v);
        }

        Double dbl(String key) {
            JsonNode v = take(key);
            if (v == null) return null;
            if (!v.isNumber()) throw error(key, "a number", v);
            return v.doubleValue();
        }

        Boolean bool(String key) {
            JsonNode v = take(key);
            if (v == null) return null;
            if (!v.isBoolean()) throw error(key, "true or false", v);
            return v.booleanValue();
        }

        ObjectNode obj(String key) {
            JsonNode v = take(key);
            if (v == null) return null;
            if (!(v instanceof ObjectNode o)) throw error(key, "an object", v);
            return o;
        }

        Fields sub(String key) {
            ObjectNode o = obj(key);
            return o == null ? null : new Fields(o, label, offset, path + "." + key);
        }

        ArrayNode array(String key) {
            JsonNode v = take(key);
            if (v == null) return null;
            if (!(v instanceof ArrayNode a)) throw error(key, "an array", v);
            return a;
        }

        List<Integer> ints(String key) {
            ArrayNode a = array(key);
            if (a == null) return null;
            List<Integer> out = new ArrayList<>(a.size());
            for (int i = 0; i < a.size(); i++) {
                JsonNode e = a.get(i);
                if (e.isNull()) throw error(key + "[" + i + "]", "a 32-bit integer", e);
                out.add(asInt(key + "[" + i + "]", e));
            }
            return Collections.unmodifiableList(out);
        }

        List<Double> doubles(String key) {
            ArrayNode a = array(key);
            if (a == null) return null;
            List<Double> out = new ArrayList<>(a.size());
            for (int i = 0; i < a.size(); i++) {
                JsonNode e = a.get(i);
                if (!e.isNumber()) throw error(key + "[" + i + "]", "a number", e);
                out.add(e.doubleValue());
            }
            return Collections.unmodifiableList(out);
        }

        List<String> strings(String key) {
            ArrayNode a = array(key);
            if (a == null) return null;
            List<String> out = new ArrayList<>(a.size());
            for (int i = 0; i < a.size(); i++) {
                JsonNode e = a.get(i);
                if (!e.isTextual()) throw error(key + "[" + i + "]", "a string", e);
                out.add(e.textValue());
            }
            return Collections.unmodifiableList(out);
        }

        /** A string field that must be one of {@code allowed} (format enums: unknown values are Parse errors). */
        String oneOf(String key, List<String> allowed) {
            String s = string(key);
            if (s != null && !allowed.contains(s)) {
                throw new CmfException.Parse(label, offset, path + "." + key + ": unknown value \"" + s
                        + "\" (expected one of " + allowed + ")");
            }
            return s;
        }

        /** Fields not consumed by any accessor, in document order (kept for round trips). */
        Map<String, JsonNode> rest() {
            Map<String, JsonNode> m = new LinkedHashMap<>();
            for (var it = node.properties().iterator(); it.hasNext(); ) {
                var e = it.next();
                if (!used.contains(e.getKey())) m.put(e.getKey(), e.getValue().deepCopy());
            }
            return Collections.unmodifiableMap(m);
        }
    }

    /** Builds an object field by field, skipping null values. */
    static final class Out {
        final ObjectNode node = object();

        Out put(String k, String v) { if (v != null) node.put(k, v); return this; }
        Out put(String k, Integer v) { if (v != null) node.put(k, v); return this; }
        /** Longs that fit an int are stored as ints so trees compare equal to parsed ones. */
        Out put(String k, Long v) {
            if (v != null) { if (v == v.intValue()) node.put(k, v.intValue()); else node.put(k, v); }
            return this;
        }
        Out put(String k, Double v) { if (v != null) node.put(k, v); return this; }
        Out put(String k, Boolean v) { if (v != null) node.put(k, v); return this; }
        Out put(String k, JsonNode v) { if (v != null) node.set(k, v.deepCopy()); return this; }
        Out putNull(String k) { node.putNull(k); return this; }

        Out ints(String k, List<Integer> v) {
            if (v != null) { ArrayNode a = node.putArray(k); v.forEach(a::add); }
            return this;
        }

        Out doubles(String k, List<Double> v) {
            if (v != null) { ArrayNode a = node.putArray(k); v.forEach(a::add); }
            return this;
        }

        Out strings(String k, List<String> v) {
            if (v != null) { ArrayNode a = node.putArray(k); v.forEach(a::add); }
            return this;
        }

        Out extra(Map<String, JsonNode> extra) {
            if (extra != null) extra.forEach((k, v) -> { if (!node.has(k)) node.set(k, v.deepCopy()); });
            return this;
        }

        ObjectNode done() { return node; }
    }
}
