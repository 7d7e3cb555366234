package dev.cmf4j.runtime;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * JSON output enforced while sampling: an incremental character machine over a JSON document, optionally narrowed by
 * a subset of JSON Schema ({@code type} object/array/string/number/integer/boolean/null, {@code properties},
 * {@code required}, {@code additionalProperties: false} implied when properties are given, {@code items},
 * {@code minItems}/{@code maxItems}, {@code enum}, {@code const}). A {@link State} is immutable: feeding a character
 * returns the next state or null when the character cannot continue any valid document, so each candidate token is
 * tried without copying. {@link State#closing} is the shortest text that completes the document, which the scheduler
 * forces when the token budget runs short, so the output always parses.
 */
public final class JsonConstraint {

    /** What a value must be. */
    sealed interface Schema permits AnyValue, ObjectOf, ArrayOf, StringValue, NumberValue, Literals {}

    record AnyValue() implements Schema {}

    /** @param properties null for any keys with any values */
    record ObjectOf(Map<String, Schema> properties, List<String> required) implements Schema {}

    record ArrayOf(Schema items, int minItems, int maxItems) implements Schema {}

    record StringValue() implements Schema {}

    record NumberValue(boolean integer) implements Schema {}

    /** One of these exact JSON texts (true/false/null, an enum's values, a const). */
    record Literals(List<String> texts) implements Schema {}

    /** Consecutive whitespace characters allowed between tokens (a small model can loop on blank lines). */
    private static final int MAX_WHITESPACE = 8;

    private final Schema root;
    private final String prefix, suffix;

    private JsonConstraint(Schema root, String prefix, String suffix) {
        this.root = root;
        this.prefix = prefix;
        this.suffix = suffix;
    }

    /** Any JSON object ({@code response_format: json_object}). */
    public static JsonConstraint anyObject() { return new JsonConstraint(new ObjectOf(null, List.of()), "", ""); }

    /**
     * A document matching {@code schema}.
     *
     * @throws IllegalArgumentException naming a keyword this subset does not support
     */
    public static JsonConstraint of(JsonNode schema) { return new JsonConstraint(compile(schema, "schema"), "", ""); }

    /**
     * Output that is exactly one tool call in the Hermes/Qwen form {@code <tool_call>\n{"name": ..., "arguments":
     * {...}}\n</tool_call>} ({@link dev.cmf4j.chat.ToolCallParser} reads it back): the name one of {@code names}, the
     * arguments following {@code parameters} when this subset supports that schema, else any object (also when null).
     * The server's forced {@code tool_choice} and the library's required tools both use it.
     */
    public static JsonConstraint toolCall(List<String> names, JsonNode parameters) {
        if (names.isEmpty()) throw new IllegalArgumentException("a forced tool call needs at least one tool name");
        var json = com.fasterxml.jackson.databind.node.JsonNodeFactory.instance;
        var schema = json.objectNode().put("type", "object");
        var props = schema.putObject("properties");
        var e = props.putObject("name").putArray("enum");
        names.forEach(e::add);
        schema.putArray("required").add("name").add("arguments");
        JsonConstraint c;
        try {
            props.set("arguments", parameters == null || parameters.isNull() ? json.objectNode().put("type", "object") : parameters);
            c = of(schema);
        } catch (IllegalArgumentException unsupported) {
            props.set("arguments", json.objectNode().put("type", "object"));
            c = of(schema);
        }
        return c.between(dev.cmf4j.chat.ToolCallParser.OPEN + "\n", "\n" + dev.cmf4j.chat.ToolCallParser.CLOSE);
    }

    /** The same document with fixed text before and after it (a tool call's tags). */
    public JsonConstraint between(String before, String after) { return new JsonConstraint(root, before, after); }

    /** The state before any character. */
    public State start() {
        Frame doc = new Value(root, new Root(false, suffix, 0));
        return new State(prefix.isEmpty() ? doc : new Prefix(prefix, 0, doc), 0);
    }

    private static Schema compile(JsonNode s, String at) {
        if (s == null || s.isBoolean() && s.asBoolean()) return new AnyValue();
        if (!s.isObject()) throw new IllegalArgumentException(at + " must be a JSON Schema object");
        for (var e : s.properties()) {
            switch (e.getKey()) {
                case "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
                     "const", "title", "description", "$schema", "default", "examples", "strict", "name" -> {}
                default -> throw new IllegalArgumentException(at + ": the keyword '" + e.getKey() + "' is not supported");
            }
        }
        if (s.has("const")) return new Literals(List.of(s.get("const").toString()));
        if (s.has("enum")) {
            if (!s.get("enum").isArray() || s.get("enum").isEmpty()) throw new IllegalArgumentException(at + ".enum must be a non-empty array");
            List<String> texts = new ArrayList<>();
            for (JsonNode v : s.get("enum")) texts.add(v.toString());
            return new Literals(texts);
        }
        JsonNode t = s.get("type");
        if (t == null) return s.has("properties") ? object(s, at) : new AnyValue();
        if (!t.isTextual()) throw new IllegalArgumentException(at + ".type must be one type name (type lists are not supported)");
        return switch (t.asText()) {
            case "object" -> object(s, at);
            case "array" -> new ArrayOf(compile(s.get("items"), at + ".items"), s.path("minItems").asInt(0),
                    s.has("maxItems") ? s.get("maxItems").asInt() : Integer.MAX_VALUE);
            case "string" -> new StringValue();
            case "number" -> new NumberValue(false);
            case "integer" -> new NumberValue(true);
            case "boolean" -> new Literals(List.of("true", "false"));
            case "null" -> new Literals(List.of("null"));
            default -> throw new IllegalArgumentException(at + ".type '" + t.asText() + "' is not a JSON Schema type");
        };
    }

    private static Schema object(JsonNode s, String at) {
        JsonNode props = s.get("properties");
        if (props == null) return new ObjectOf(null, List.of());
        Map<String, Schema> p = new LinkedHashMap<>();
        for (var e : props.properties()) p.put(e.getKey(), compile(e.getValue(), at + ".properties." + e.getKey()));
        List<String> req = new ArrayList<>();
        for (JsonNode r : s.path("required")) {
            if (!p.containsKey(r.asText())) throw new IllegalArgumentException(at + ".required names '" + r.asText() + "', which is not a property");
            req.add(r.asText());
        }
        return new ObjectOf(p, req);
    }

    /** Where the machine is: the innermost open frame and the whitespace run so far. */
    public record State(Frame top, int whitespace) {
        /** The state after {@code c}, or null when no valid document continues with it. */
        public State feed(char c) {
            boolean ws = c == ' ' || c == '\n' || c == '\t' || c == '\r';
            if (ws && top.skipsWhitespace()) return whitespace < MAX_WHITESPACE ? new State(top, whitespace + 1) : null;
            Frame f = top.feed(c);
            return f == null ? null : new State(f, 0);
        }

        /** The state after all of {@code text}, or null. */
        public State feed(String text) {
            State s = this;
            for (int i = 0; i < text.length() && s != null; i++) s = s.feed(text.charAt(i));
            return s;
        }

        /** Whether the document is complete. */
        public boolean complete() { return top instanceof Root r && r.done && r.pos == r.suffix.length(); }

        /** The shortest text that completes the document from here. */
        public String closing() { return top.closing(); }
    }

    /** One open construct; a value frame hands its parent {@link #valueDone} when its value ends. */
    public sealed interface Frame permits Prefix, Root, Value, Obj, Key, Arr, Str, Num, Lit {
        Frame feed(char c);

        default boolean skipsWhitespace() { return false; }

        /** The parent after a child value ended. */
        default Frame valueDone() { throw new IllegalStateException(getClass().getSimpleName() + " holds no value"); }

        /** The shortest text that completes the document from this frame. */
        String closing();
    }

    /** Fixed text before the document. */
    record Prefix(String text, int pos, Frame next) implements Frame {
        @Override public Frame feed(char c) {
            if (text.charAt(pos) != c) return null;
            return pos + 1 == text.length() ? next : new Prefix(text, pos + 1, next);
        }

        @Override public String closing() { return text.substring(pos) + next.closing(); }
    }

    /** Outside the document: before it ends, or after it, {@code pos} characters into the fixed text after it. */
    record Root(boolean done, String suffix, int pos) implements Frame {
        @Override public Frame feed(char c) {
            return done && pos < suffix.length() && suffix.charAt(pos) == c ? new Root(true, suffix, pos + 1) : null;
        }

        @Override public boolean skipsWhitespace() { return done && suffix.isEmpty(); }

        @Override public Frame valueDone() { return new Root(true, suffix, 0); }

        @Override public String closing() { return done ? suffix.substring(pos) : ""; }
    }

    /** Expecting a value of {@code schema}. */
    record Value(Schema schema, Frame parent) implements Frame {
        @Override public boolean skipsWhitespace() { return true; }

        @Override public Frame feed(char c) {
            return switch (schema) {
                case AnyValue a -> switch (c) {
                    case '{' -> new Obj(new ObjectOf(null, List.of()), List.of(), Obj.START, null, parent);
                    case '[' -> new Arr(new ArrayOf(a, 0, Integer.MAX_VALUE), 0, Arr.START, parent);
                    case '"' -> new Str(0, parent);
                    case 't', 'f', 'n' -> new Lit(List.of("true", "false", "null"), 0, parent).feed(c);
                    default -> c == '-' || c >= '0' && c <= '9' ? new Num(false, Num.START, parent).feed(c) : null;
                };
                case ObjectOf o -> c == '{' ? new Obj(o, List.of(), Obj.START, null, parent) : null;
                case ArrayOf a -> c == '[' ? new Arr(a, 0, Arr.START, parent) : null;
                case StringValue s -> c == '"' ? new Str(0, parent) : null;
                case NumberValue n -> new Num(n.integer(), Num.START, parent).feed(c);
                case Literals l -> new Lit(l.texts(), 0, parent).feed(c);
            };
        }

        @Override public String closing() { return minimal(schema) + parent.valueDone().closing(); }
    }

    /** The shortest JSON text of a schema. */
    static String minimal(Schema s) {
        return switch (s) {
            case AnyValue a -> "0";
            case ObjectOf o -> {
                StringBuilder b = new StringBuilder("{");
                for (String k : o.required()) b.append(b.length() > 1 ? "," : "").append('"').append(k).append("\":").append(minimal(o.properties().get(k)));
                yield b.append('}').toString();
            }
            case ArrayOf a -> {
                StringBuilder b = new StringBuilder("[");
                for (int i = 0; i < a.minItems(); i++) b.append(i > 0 ? "," : "").append(minimal(a.items()));
                yield b.append(']').toString();
            }
            case StringValue v -> "\"\"";
            case NumberValue n -> "0";
            case Literals l -> shortest(l.texts());
        };
    }

    private static String shortest(List<String> texts) {
        String best = texts.getFirst();
        for (String t : texts) if (t.length() < best.length()) best = t;
        return best;
    }

    /**
     * An object: {@code seen} keys so far, {@code phase} what comes next, {@code key} the key whose value is being
     * read (after the colon).
     */
    record Obj(ObjectOf schema, List<String> seen, int phase, String key, Frame parent) implements Frame {
        static final int START = 0, KEY_DONE = 1, AFTER_VALUE = 2, AFTER_COMMA = 3;

        @Override public boolean skipsWhitespace() { return true; }

        /** Keys that may come next (null: any). */
        List<String> keysLeft() {
            if (schema.properties() == null) return null;
            List<String> left = new ArrayList<>();
            for (String k : schema.properties().keySet()) if (!seen.contains(k)) left.add(k);
            return left;
        }

        boolean requiredDone() { return seen.containsAll(schema.required()); }

        @Override public Frame feed(char c) {
            List<String> left = keysLeft();
            return switch (phase) {
                case START -> c == '}' && requiredDone() ? parent.valueDone()
                        : c == '"' && (left == null || !left.isEmpty()) ? new Key(left, "", this) : null;
                case AFTER_COMMA -> c == '"' ? new Key(left, "", this) : null;
                case KEY_DONE -> c == ':' ? new Value(schema.properties() == null ? new AnyValue() : schema.properties().get(key),
                        new Obj(schema, seen, AFTER_VALUE, key, parent)) : null;
                case AFTER_VALUE -> c == '}' && requiredDone() ? parent.valueDone()
                        : c == ',' && (left == null || !left.isEmpty()) ? new Obj(schema, seen, AFTER_COMMA, null, parent) : null;
                default -> null;
            };
        }

        /** A value's parent is this object already past the value (made at the colon). */
        @Override public Frame valueDone() { return this; }

        Obj withKey(String k) {
            List<String> s = new ArrayList<>(seen);
            s.add(k);
            return new Obj(schema, List.copyOf(s), KEY_DONE, k, parent);
        }

        @Override public String closing() {
            StringBuilder b = new StringBuilder();
            List<String> missing = new ArrayList<>(schema.required());
            missing.removeAll(seen);
            switch (phase) {
                case KEY_DONE -> {
                    b.append(':').append(minimal(schema.properties() == null ? new AnyValue() : schema.properties().get(key)));
                    for (String k : missing) b.append(",\"").append(k).append("\":").append(minimal(schema.properties().get(k)));
                }
                case AFTER_COMMA -> {
                    if (missing.isEmpty()) {   // a key must come: the one allowed with the shortest value
                        List<String> left = keysLeft();
                        String best = "\"\":0";
                        if (left != null) {
                            best = null;
                            for (String k : left) {
                                String kv = "\"" + k + "\":" + minimal(schema.properties().get(k));
                                if (best == null || kv.length() < best.length()) best = kv;
                            }
                        }
                        b.append(best);
                    }
                    for (int i = 0; i < missing.size(); i++)
                        b.append(i > 0 || b.length() > 0 ? "," : "").append('"').append(missing.get(i)).append("\":").append(minimal(schema.properties().get(missing.get(i))));
                }
                default -> {
                    for (int i = 0; i < missing.size(); i++)
                        b.append(i > 0 || phase == AFTER_VALUE ? "," : "").append('"').append(missing.get(i)).append("\":").append(minimal(schema.properties().get(missing.get(i))));
                }
            }
            return b.append('}') + parent.valueDone().closing();
        }
    }

    /** An object key being read: {@code allowed} keys (null: any string without escapes), {@code text} so far. */
    record Key(List<String> allowed, String text, Obj owner) implements Frame {
        @Override public Frame feed(char c) {
            if (c == '"') return allowed == null || allowed.contains(text) ? owner.withKey(text) : null;
            if (c < 0x20 || c == '\\') return null;
            String t = text + c;
            if (allowed == null) return new Key(null, t, owner);
            for (String k : allowed) if (k.startsWith(t)) return new Key(allowed, t, owner);
            return null;
        }

        @Override public String closing() {
            if (allowed == null) return "\"" + owner.withKey(text).closing();
            String best = null;   // the key whose completion is shortest (a missing required key usually)
            for (String k : allowed) {
                if (!k.startsWith(text)) continue;
                String c = k.substring(text.length()) + "\"" + owner.withKey(k).closing();
                if (best == null || c.length() < best.length()) best = c;
            }
            return best;
        }
    }

    record Arr(ArrayOf schema, int count, int phase, Frame parent) implements Frame {
        static final int START = 0, AFTER_VALUE = 1;

        @Override public boolean skipsWhitespace() { return true; }

        @Override public Frame feed(char c) {
            if (c == ']') return count >= schema.minItems() ? parent.valueDone() : null;
            if (phase == AFTER_VALUE) return c == ',' && count < schema.maxItems() ? new Value(schema.items(), this) : null;
            return count < schema.maxItems() ? new Value(schema.items(), this).feed(c) : null;
        }

        @Override public Frame valueDone() { return new Arr(schema, count + 1, AFTER_VALUE, parent); }

        @Override public String closing() {
            StringBuilder b = new StringBuilder();
            for (int i = count; i < schema.minItems(); i++) b.append(i > 0 ? "," : "").append(minimal(schema.items()));
            return b.append(']') + parent.valueDone().closing();
        }
    }

    /** A string value: {@code escape} 0 none, 1 after a backslash, 2..5 after that many \\u hex digits minus one. */
    record Str(int escape, Frame parent) implements Frame {
        @Override public Frame feed(char c) {
            if (escape == 1) {
                if (c == 'u') return new Str(2, parent);
                return "\"\\/bfnrt".indexOf(c) >= 0 ? new Str(0, parent) : null;
            }
            if (escape >= 2) {
                if (Character.digit(c, 16) < 0) return null;
                return new Str(escape == 5 ? 0 : escape + 1, parent);
            }
            if (c == '"') return parent.valueDone();
            if (c == '\\') return new Str(1, parent);
            return c < 0x20 ? null : this;
        }

        @Override public String closing() {
            String finish = escape == 1 ? "n" : escape >= 2 ? "0".repeat(6 - escape) : "";
            return finish + "\"" + parent.valueDone().closing();
        }
    }

    /** A number: {@code phase} is what was read last. */
    record Num(boolean integer, int phase, Frame parent) implements Frame {
        static final int START = 0, MINUS = 1, ZERO = 2, INT = 3, DOT = 4, FRAC = 5, E = 6, E_SIGN = 7, EXP = 8;

        boolean ends() { return phase == ZERO || phase == INT || phase == FRAC || phase == EXP; }

        @Override public Frame feed(char c) {
            boolean digit = c >= '0' && c <= '9';
            int next = switch (phase) {
                case START -> c == '-' ? MINUS : c == '0' ? ZERO : digit ? INT : -1;
                case MINUS -> c == '0' ? ZERO : digit ? INT : -1;
                case ZERO -> !integer && c == '.' ? DOT : !integer && (c == 'e' || c == 'E') ? E : -1;
                case INT -> digit ? INT : !integer && c == '.' ? DOT : !integer && (c == 'e' || c == 'E') ? E : -1;
                case DOT, FRAC -> digit ? FRAC : phase == FRAC && (c == 'e' || c == 'E') ? E : -1;
                case E -> c == '+' || c == '-' ? E_SIGN : digit ? EXP : -1;
                case E_SIGN, EXP -> digit ? EXP : -1;
                default -> -1;
            };
            if (next >= 0) return new Num(integer, next, parent);
            if (!ends()) return null;
            Frame after = parent.valueDone();   // the number ended: the character belongs to what follows
            boolean ws = c == ' ' || c == '\n' || c == '\t' || c == '\r';
            return ws && after.skipsWhitespace() ? after : after.feed(c);
        }

        @Override public String closing() {
            return (ends() ? "" : "0") + parent.valueDone().closing();
        }
    }

    /** One of several exact texts, {@code pos} characters matched. */
    record Lit(List<String> texts, int pos, Frame parent) implements Frame {
        @Override public Frame feed(char c) {
            List<String> next = new ArrayList<>();
            boolean whole = false;
            for (String t : texts) {
                if (t.length() > pos && t.charAt(pos) == c) next.add(t);
                if (t.length() == pos) whole = true;
            }
            if (!next.isEmpty()) return new Lit(List.copyOf(next), pos + 1, parent);
            if (!whole) return null;
            Frame after = parent.valueDone();
            boolean ws = c == ' ' || c == '\n' || c == '\t' || c == '\r';
            return ws && after.skipsWhitespace() ? after : after.feed(c);
        }

        @Override public String closing() {
            String best = null;
            for (String t : texts) if (t.length() >= pos && (best == null || t.length() < best.length())) best = t;
            return best.substring(pos) + parent.valueDone().closing();
        }
    }
}
