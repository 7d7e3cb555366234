package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.model.graph.Overlay;
import dev.cmf4j.runtime.GenerationRequest;
import dev.cmf4j.runtime.JsonConstraint;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.TokenSink;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A {@code /v1/chat/completions} or {@code /v1/completions} body, checked field by field (a wrong type or a value
 * out of range is a 400 naming the field) and turned into token ids through the model's chat template.
 *
 * @param maxTokens   the budget; when the request gives none, what the context leaves
 * @param topLogprobs -1 for no log-probabilities
 * @param seed        null for a random one
 * @param ignoreEos   generate past end-of-sequence ids (vLLM's and llama.cpp's extension, for benchmarks)
 * @param json        the JSON the output must be ({@code response_format}, or a forced tool call), or null
 * @param toolCalls   whether tool calls are parsed out of the output ({@link ToolRequest})
 * @param reasoning   whether the template marks reasoning ({@code <think>}), split into {@code reasoning_content}
 * @param reasoningInside the prompt ends inside a reasoning block
 */
record CompletionRequest(boolean chat, int[] prompt, int maxTokens, int n, boolean stream, boolean includeUsage,
                         float temperature, float topP, int topK, float minP, float repetitionPenalty, Long seed,
                         List<String> stops, float presencePenalty, float frequencyPenalty, Map<Integer, Float> logitBias,
                         int topLogprobs, boolean ignoreEos, JsonConstraint json, boolean toolCalls,
                         boolean reasoning, boolean reasoningInside, Overlay overlay) {

    /** The {@code n} generations this request asks for (choice i seeded with seed + i). */
    List<GenerationRequest> generations(ServedModel m, Duration timeout, List<? extends TokenSink> sinks) {
        List<GenerationRequest> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            SamplingParams p = new SamplingParams(temperature, topK, topP, minP, repetitionPenalty, 0f, seed == null ? null : seed + i);
            out.add(new GenerationRequest(prompt, maxTokens, p, ignoreEos && json == null ? java.util.Set.of() : m.codec().eosIds(), stops, presencePenalty, frequencyPenalty,
                    logitBias, topLogprobs, timeout, sinks.get(i), json, overlay));
        }
        return out;
    }

    static CompletionRequest parse(JsonNode body, boolean chat, ServedModel m, int maxChoices, ObjectMapper json) {
        if (body == null || !body.isObject()) throw ApiError.badRequest(null, "the request body must be a JSON object");
        Fields f = new Fields(body);
        ToolRequest tools = chat ? ToolRequest.parse(f, json) : ToolRequest.NONE;
        String rendered = chat ? chatPrompt(f, m, json, tools) : null;
        int[] prompt = chat ? m.codec().tokenizer().encodeIds(rendered, false) : textPrompt(f, m);
        Overlay overlay = overlay(f, m, prompt);
        int ctx = m.maxContext();
        if (prompt.length >= ctx)
            throw new ApiError(400, "invalid_request_error", chat ? "messages" : "prompt", "context_length_exceeded",
                    "This model's maximum context length is " + ctx + " tokens. However, your prompt has " + prompt.length
                            + " tokens, which leaves no room to generate.");
        Integer max = f.integer("max_completion_tokens", 1, ctx);
        if (max == null) max = f.integer("max_tokens", 1, ctx);
        int maxTokens = max != null ? max : ctx - prompt.length;
        Integer n = f.integer("n", 1, maxChoices);
        boolean stream = Boolean.TRUE.equals(f.bool("stream"));
        JsonNode so = f.object("stream_options");
        boolean usage = so != null && Boolean.TRUE.equals(new Fields(so, "stream_options.").bool("include_usage"));
        Float t = f.number("temperature", 0, 2);
        Float topP = f.number("top_p", 0, 1);
        if (topP != null && topP == 0f) throw ApiError.badRequest("top_p", "top_p must be > 0 (got 0)");
        Integer topK = f.integer("top_k", -1, Integer.MAX_VALUE);
        Float minP = f.number("min_p", 0, 1);
        if (minP != null && minP == 1f) throw ApiError.badRequest("min_p", "min_p must be < 1 (got 1)");
        Float rep = f.number("repetition_penalty", 0, 100);
        if (rep != null && rep == 0f) throw ApiError.badRequest("repetition_penalty", "repetition_penalty must be > 0");
        Long seed = f.longInteger("seed");
        List<String> stops = f.stops("stop");
        if (!tools.stops().isEmpty()) {
            stops = new ArrayList<>(stops);
            stops.addAll(tools.stops());
        }
        Float presence = f.number("presence_penalty", -2, 2), frequency = f.number("frequency_penalty", -2, 2);
        Map<Integer, Float> bias = f.logitBias("logit_bias", m.model().graph().vocab());
        int topLogprobs = -1;
        if (chat) {
            boolean lp = Boolean.TRUE.equals(f.bool("logprobs"));
            Integer top = f.integer("top_logprobs", 0, 20);
            if (top != null && !lp) throw ApiError.badRequest("top_logprobs", "top_logprobs needs logprobs: true");
            if (lp) topLogprobs = top == null ? 0 : top;
        } else {
            Integer lp = f.integer("logprobs", 0, 5);
            if (lp != null) topLogprobs = lp;
            if (Boolean.TRUE.equals(f.bool("echo"))) throw ApiError.badRequest("echo", "echo is not supported");
        }
        return new CompletionRequest(chat, prompt, maxTokens, n == null ? 1 : n, stream, usage,
                t == null ? 1f : t, topP == null ? 1f : topP, topK == null || topK < 0 ? 0 : topK, minP == null ? 0f : minP,
                rep == null ? 1f : rep, seed, stops, presence == null ? 0f : presence, frequency == null ? 0f : frequency,
                bias, topLogprobs, Boolean.TRUE.equals(f.bool("ignore_eos")),
                tools.forced() != null ? tools.forced() : responseFormat(f), tools.parseCalls(),
                chat && m.codec().template().source().contains(ReasoningSplitter.OPEN), chat && ReasoningSplitter.endsInside(rendered),
                overlay);
    }

    /**
     * The skill and adapter of the request: {@code skill} (an id or "none"), else the skill in {@code model}
     * ("NAME:skill"), else the server's default; {@code lora} as a name or llama-server's
     * {@code [{"id": N or NAME, "scale": S}]} (one adapter with a non-zero scale per request). {@code prompt} null:
     * there is none to route ({@code skill: "auto"} is refused).
     */
    static Overlay overlay(Fields f, ServedModel m, int[] prompt) {
        var g = m.model().graph();
        String model = f.text("model");
        String skill = f.text("skill");
        String where = "skill";
        if (skill == null && model != null && model.startsWith(m.name() + ":")) {
            skill = model.substring(m.name().length() + 1);
            where = "model";
        }
        Overlay def = m.defaultOverlay();
        if (skill == null) skill = def.skillId();
        if ("auto".equals(skill) && prompt == null)
            throw ApiError.badRequest(where, "skill auto routes a prompt; name the skill (or \"none\")");
        if ("auto".equals(skill)) {   // the skill whose routing subspace fits the prompt; the backbone when novel
            var file = m.model().file();
            try {
                skill = dev.cmf4j.runtime.SkillRouter.route(g, prompt, file.header().skills(), file.header().routing()).winner();
            } catch (IllegalArgumentException e) {
                throw ApiError.badRequest(where, e.getMessage());
            }
        }
        String adapter = def.adapterName();
        float scale = def.adapterScale();
        JsonNode lora = f.node("lora");
        if (lora != null && !lora.isNull()) {
            adapter = null;
            if (lora.isTextual()) {
                adapter = lora.asText();
                scale = 1f;
            } else if (lora.isArray()) {
                for (int i = 0; i < lora.size(); i++) {
                    JsonNode e = lora.get(i);
                    String at = "lora[" + i + "]";
                    if (!e.isObject() || !e.has("id")) throw ApiError.badRequest(at, at + " must be {\"id\": N or NAME, \"scale\": S}");
                    JsonNode id = e.get("id");
                    String name;
                    if (id.isInt()) {
                        if (id.asInt() < 0 || id.asInt() >= g.adapters().size())
                            throw ApiError.badRequest(at + ".id", "no LoRA adapter " + id.asInt() + " (loaded: " + g.adapters().size() + ")");
                        name = g.adapters().get(id.asInt());
                    } else if (id.isTextual()) {
                        name = id.asText();
                    } else {
                        throw ApiError.badRequest(at + ".id", at + ".id must be an adapter's index or name");
                    }
                    JsonNode sc = e.get("scale");
                    float s = sc == null || sc.isNull() ? 1f : (float) sc.asDouble(Double.NaN);
                    if (sc != null && !sc.isNull() && !sc.isNumber()) throw ApiError.badRequest(at + ".scale", at + ".scale must be a number");
                    if (!Float.isFinite(s)) throw ApiError.badRequest(at + ".scale", at + ".scale must be finite");
                    if (s == 0f) continue;
                    if (adapter != null) throw ApiError.badRequest("lora", "one LoRA adapter per request (with a non-zero scale)");
                    adapter = name;
                    scale = s;
                }
            } else {
                throw ApiError.badRequest("lora", "lora must be an adapter name or a list of {\"id\", \"scale\"}");
            }
        }
        Overlay o;
        try {
            o = g.overlay(skill, adapter, scale);
        } catch (IllegalArgumentException e) {
            throw ApiError.badRequest(e.getMessage().contains("LoRA") ? "lora" : where, e.getMessage());
        }
        String task = f.text("task");
        try {
            return g.withTask(o, task != null ? task : def.taskName());
        } catch (IllegalArgumentException e) {
            throw ApiError.badRequest("task", e.getMessage());
        }
    }

    /** {@code response_format}: none for text, any JSON object, or a JSON Schema (a 400 for keywords not supported). */
    private static JsonConstraint responseFormat(Fields f) {
        JsonNode rf = f.object("response_format");
        if (rf == null) return null;
        String type = new Fields(rf, "response_format.").text("type");
        if (type == null || type.equals("text")) return null;
        if (type.equals("json_object")) return JsonConstraint.anyObject();
        if (!type.equals("json_schema"))
            throw ApiError.badRequest("response_format.type", "response_format.type must be text, json_object or json_schema, got '" + type + "'");
        JsonNode js = new Fields(rf, "response_format.").object("json_schema");
        JsonNode schema = js == null ? null : new Fields(js, "response_format.json_schema.").object("schema");
        if (schema == null) throw ApiError.badRequest("response_format.json_schema.schema", "response_format.json_schema.schema is required");
        try {
            return JsonConstraint.of(schema);
        } catch (IllegalArgumentException e) {
            throw ApiError.badRequest("response_format.json_schema.schema", e.getMessage());
        }
    }

    /** The conversation rendered by the model's template (with the assistant prompt). */
    private static String chatPrompt(Fields f, ServedModel m, ObjectMapper json, ToolRequest tools) {
        JsonNode msgs = f.node("messages");
        if (msgs == null) throw ApiError.badRequest("messages", "messages is required");
        if (!msgs.isArray() || msgs.isEmpty()) throw ApiError.badRequest("messages", "messages must be a non-empty array");
        List<Map<String, Object>> messages = new ArrayList<>();
        for (int i = 0; i < msgs.size(); i++) messages.add(message(msgs.get(i), "messages[" + i + "]", json));
        JsonNode kw = f.object("chat_template_kwargs");
        @SuppressWarnings("unchecked")
        Map<String, Object> kwargs = kw == null ? Map.of() : json.convertValue(kw, Map.class);
        String text;
        try {
            text = m.codec().template().render(messages, tools.definitions(), true, kwargs);
        } catch (RuntimeException e) {
            throw ApiError.badRequest("messages", "the chat template failed on these messages: " + e.getMessage());
        }
        return text;
    }

    /** One message: a role, and content as a string, as text parts, or null (kept as the template expects). */
    private static Map<String, Object> message(JsonNode msg, String where, ObjectMapper json) {
        if (!msg.isObject()) throw ApiError.badRequest(where, where + " must be an object");
        JsonNode role = msg.get("role");
        if (role == null || !role.isTextual()) throw ApiError.badRequest(where + ".role", where + ".role must be a string");
        @SuppressWarnings("unchecked")
        Map<String, Object> out = new LinkedHashMap<>(json.convertValue(msg, Map.class));
        JsonNode content = msg.get("content");
        if (content == null || content.isNull()) {
            out.put("content", role.asText().equals("assistant") ? null : "");
        } else if (content.isArray()) {   // text parts joined: the bundled templates take strings
            StringBuilder sb = new StringBuilder();
            for (int i = 0; i < content.size(); i++) {
                JsonNode part = content.get(i);
                String at = where + ".content[" + i + "]";
                if (!part.isObject() || !"text".equals(part.path("type").asText()))
                    throw ApiError.badRequest(at, at + " must be a text part ({\"type\": \"text\", \"text\": ...}); this model takes text only");
                if (!part.path("text").isTextual()) throw ApiError.badRequest(at + ".text", at + ".text must be a string");
                sb.append(part.get("text").asText());
            }
            out.put("content", sb.toString());
        } else if (!content.isTextual()) {
            throw ApiError.badRequest(where + ".content", where + ".content must be a string or an array of text parts");
        }
        return out;
    }

    /** A completion's prompt: a string, an array of token ids, or an array holding one string. */
    private static int[] textPrompt(Fields f, ServedModel m) {
        JsonNode p = f.node("prompt");
        if (p == null) throw ApiError.badRequest("prompt", "prompt is required");
        if (p.isTextual()) return encode(p.asText(), m);
        if (p.isArray() && p.size() == 1 && p.get(0).isTextual()) return encode(p.get(0).asText(), m);
        if (p.isArray() && !p.isEmpty()) {
            int v = m.model().graph().vocab();
            int[] ids = new int[p.size()];
            for (int i = 0; i < ids.length; i++) {
                JsonNode e = p.get(i);
                if (!e.canConvertToInt() || !e.isIntegralNumber() || e.asInt() < 0 || e.asInt() >= v)
                    throw ApiError.badRequest("prompt", "prompt[" + i + "] must be a token id in [0, " + v + ") (one string, or token ids)");
                ids[i] = e.asInt();
            }
            return ids;
        }
        throw ApiError.badRequest("prompt", "prompt must be a non-empty string or an array of token ids");
    }

    private static int[] encode(String s, ServedModel m) {
        int[] ids = m.codec().encode(s);
        if (ids.length == 0) throw ApiError.badRequest("prompt", "the prompt is empty");
        return ids;
    }

    /** Typed, range-checked reads of a JSON object's optional fields; null (absent or JSON null) means not given. */
    static final class Fields {
        private final JsonNode o;
        private final String prefix;

        Fields(JsonNode o) { this(o, ""); }

        Fields(JsonNode o, String prefix) {
            this.o = o;
            this.prefix = prefix;
        }

        JsonNode node(String name) {
            JsonNode v = o.get(name);
            return v == null || v.isNull() ? null : v;
        }

        String text(String name) {
            JsonNode v = node(name);
            if (v != null && !v.isTextual()) throw wrong(name, "a string");
            return v == null ? null : v.asText();
        }

        Boolean bool(String name) {
            JsonNode v = node(name);
            if (v != null && !v.isBoolean()) throw wrong(name, "a boolean");
            return v == null ? null : v.asBoolean();
        }

        JsonNode object(String name) {
            JsonNode v = node(name);
            if (v != null && !v.isObject()) throw wrong(name, "an object");
            return v;
        }

        Integer integer(String name, int min, int max) {
            JsonNode v = node(name);
            if (v == null) return null;
            if (!v.isIntegralNumber() || !v.canConvertToInt()) throw wrong(name, "an integer");
            int x = v.asInt();
            if (x < min || x > max)
                throw ApiError.badRequest(prefix + name, prefix + name + " must be in [" + min + ", " + (max == Integer.MAX_VALUE ? "∞" : max) + "], got " + x);
            return x;
        }

        Long longInteger(String name) {
            JsonNode v = node(name);
            if (v == null) return null;
            if (!v.isIntegralNumber() || !v.canConvertToLong()) throw wrong(name, "an integer");
            return v.asLong();
        }

        Float number(String name, double min, double max) {
            JsonNode v = node(name);
            if (v == null) return null;
            if (!v.isNumber()) throw wrong(name, "a number");
            double x = v.asDouble();
            if (!(x >= min && x <= max)) throw ApiError.badRequest(prefix + name, prefix + name + " must be in [" + min + ", " + max + "], got " + x);
            return (float) x;
        }

        /** A stop string or up to 16 of them, none empty. */
        List<String> stops(String name) {
            JsonNode v = node(name);
            if (v == null) return List.of();
            List<String> out = new ArrayList<>();
            if (v.isTextual()) out.add(v.asText());
            else if (v.isArray() && v.size() <= 16) for (JsonNode s : v) {
                if (!s.isTextual()) throw wrong(name, "a string or an array of strings");
                out.add(s.asText());
            }
            else throw wrong(name, "a string or an array of at most 16 strings");
            if (out.stream().anyMatch(String::isEmpty)) throw ApiError.badRequest(prefix + name, "a stop string must not be empty");
            return out;
        }

        /** {@code {"id": bias}} with ids in the vocabulary and biases in [-100, 100]. */
        Map<Integer, Float> logitBias(String name, int vocab) {
            JsonNode v = object(name);
            if (v == null) return Map.of();
            Map<Integer, Float> out = new LinkedHashMap<>();
            for (var e : v.properties()) {
                int id;
                try {
                    id = Integer.parseInt(e.getKey());
                } catch (NumberFormatException x) {
                    throw ApiError.badRequest(name, name + " keys must be token ids, got '" + e.getKey() + "'");
                }
                if (id < 0 || id >= vocab) throw ApiError.badRequest(name, name + ": token id " + id + " is outside the vocabulary [0, " + vocab + ")");
                if (!e.getValue().isNumber() || !(Math.abs(e.getValue().asDouble()) <= 100))
                    throw ApiError.badRequest(name, name + "[" + id + "] must be a number in [-100, 100]");
                out.put(id, (float) e.getValue().asDouble());
            }
            return out;
        }

        private ApiError wrong(String name, String what) {
            return ApiError.badRequest(prefix + name, prefix + name + " must be " + what + ", got " + o.get(name).getNodeType().toString().toLowerCase());
        }
    }
}
