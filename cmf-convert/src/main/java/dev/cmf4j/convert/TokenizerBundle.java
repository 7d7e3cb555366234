package dev.cmf4j.convert;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.zip.GZIPInputStream;

/**
 * The tokenizer and chat bundle of a Hugging Face folder: {@code tokenizer.json} (plain or
 * {@code .gz}) for the vocab section, and the header's {@code tokenizer_config}:
 * {@code chat_template} (from {@code chat_template.jinja}, {@code chat_template.json} or
 * {@code tokenizer_config.json}), {@code eos_token_ids} (generation_config, then config, then the
 * tokenizer's eos token), {@code bos_token_id}, {@code pad_token_id}, plus the special-token strings a
 * template refers to ({@code bos_token}, {@code eos_token}, {@code pad_token}, {@code unk_token}) and
 * {@code add_bos_token}/{@code add_eos_token} when the tokenizer config states them.
 */
public final class TokenizerBundle {
    private TokenizerBundle() {}

    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    /** tokenizer.json files beyond this are refused (the largest real ones are ~35 MB). */
    static final long MAX_TOKENIZER_BYTES = 1L << 30;

    /** tokenizer.json bytes from {@code dir} (plain or gzipped), or null when neither exists. */
    public static byte[] readTokenizerJson(Path dir) {
        Path plain = dir.resolve("tokenizer.json"), gz = dir.resolve("tokenizer.json.gz");
        try {
            if (Files.isRegularFile(plain)) {
                if (Files.size(plain) > MAX_TOKENIZER_BYTES) throw new ConvertException(plain + ": larger than 1 GiB");
                return Files.readAllBytes(plain);
            }
            if (Files.isRegularFile(gz)) {
                try (InputStream in = new GZIPInputStream(Files.newInputStream(gz))) {
                    return readBounded(in, gz);
                }
            }
        } catch (java.util.zip.ZipException e) {
            throw new ConvertException(gz + ": not a valid gzip file: " + e.getMessage(), e);
        } catch (java.io.EOFException e) {
            throw new ConvertException(gz + ": truncated gzip file", e);
        } catch (IOException e) {
            throw new ConvertException(dir + ": cannot read tokenizer.json: " + e.getMessage(), e);
        }
        return null;
    }

    private static byte[] readBounded(InputStream in, Path where) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream(1 << 20);
        byte[] buf = new byte[1 << 16];
        long total = 0;
        for (int n; (n = in.read(buf)) > 0; ) {
            total += n;
            if (total > MAX_TOKENIZER_BYTES) throw new ConvertException(where + ": decompresses to more than 1 GiB");
            out.write(buf, 0, n);
        }
        return out.toByteArray();
    }

    /**
     * Builds {@code tokenizer_config} from the folder's files; {@code tokenizerJson} (may be null) resolves
     * special-token strings to ids. Returns null when nothing at all is known.
     */
    public static ObjectNode chatBundle(Path dir, HfConfig config, byte[] tokenizerJson) {
        HfConfig tc = optional(dir.resolve("tokenizer_config.json"));
        HfConfig gen = optional(dir.resolve("generation_config.json"));
        ObjectNode out = F.objectNode();

        String template = null;
        try {
            Path jinja = dir.resolve("chat_template.jinja");
            if (Files.isRegularFile(jinja)) template = Files.readString(jinja, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new ConvertException(dir.resolve("chat_template.jinja") + ": cannot read: " + e.getMessage(), e);
        }
        if (template == null) {
            HfConfig ctj = optional(dir.resolve("chat_template.json"));
            if (ctj != null) template = templateOf(ctj);
        }
        if (template == null && tc != null) template = templateOf(tc);

        Map<String, String> specials = new java.util.LinkedHashMap<>();
        if (tc != null) {
            for (String k : List.of("bos_token", "eos_token", "pad_token", "unk_token")) {
                String s = tokenText(tc, k);
                if (s != null) specials.put(k, s);
            }
        }
        Map<String, Integer> ids = resolveIds(tc, tokenizerJson, new LinkedHashSet<>(specials.values()));

        Set<Integer> eos = new LinkedHashSet<>();
        if (gen != null && gen.ints("eos_token_id") != null) eos.addAll(gen.ints("eos_token_id"));
        HfConfig text = config == null ? null : config.text();
        if (eos.isEmpty() && config != null) {
            if (config.ints("eos_token_id") != null) eos.addAll(config.ints("eos_token_id"));
            else if (text.ints("eos_token_id") != null) eos.addAll(text.ints("eos_token_id"));
        }
        if (specials.containsKey("eos_token") && ids.get(specials.get("eos_token")) != null) eos.add(ids.get(specials.get("eos_token")));
        Integer bos = firstId(gen, config, text, "bos_token_id", specials.get("bos_token"), ids);
        Integer pad = firstId(gen, config, text, "pad_token_id", specials.get("pad_token"), ids);

        if (template != null) out.put("chat_template", template);
        if (!eos.isEmpty()) {
            ArrayNode e = out.putArray("eos_token_ids");
            eos.forEach(e::add);
        }
        if (bos != null) out.put("bos_token_id", bos);
        if (pad != null) out.put("pad_token_id", pad);
        specials.forEach(out::put);
        if (tc != null) {
            for (String k : List.of("add_bos_token", "add_eos_token")) {
                Boolean b = tc.bool(k);
                if (b != null) out.put(k, b);
            }
        }
        return out.isEmpty() ? null : out;
    }

    private static Integer firstId(HfConfig gen, HfConfig config, HfConfig text, String key, String tokenText,
                                   Map<String, Integer> ids) {
        for (HfConfig c : new HfConfig[] {gen, config, text}) {
            if (c != null && c.ints(key) != null && !c.ints(key).isEmpty()) return c.ints(key).getFirst();
        }
        return tokenText == null ? null : ids.get(tokenText);
    }

    private static HfConfig optional(Path p) {
        return Files.isRegularFile(p) ? HfConfig.read(p) : null;
    }

    /** {@code chat_template}: a string, or a list of {name, template} (the "default" one, else the first). */
    static String templateOf(HfConfig c) {
        JsonNode t = c.raw("chat_template");
        if (t == null) return null;
        if (t.isTextual()) return t.asText();
        if (t.isArray()) {
            String first = null;
            for (JsonNode e : t) {
                String name = e.path("name").asText(""), tpl = e.path("template").asText(null);
                if (tpl == null) continue;
                if (first == null) first = tpl;
                if (name.equals("default")) return tpl;
            }
            return first;
        }
        throw c.bad("chat_template", "a string or a list of {name, template}", t);
    }

    /** A special token's text: a string or an AddedToken object {content: ...}. */
    static String tokenText(HfConfig c, String key) {
        JsonNode v = c.raw(key);
        if (v == null) return null;
        if (v.isTextual()) return v.asText();
        if (v.isObject() && v.path("content").isTextual()) return v.get("content").asText();
        return null;
    }

    /**
     * Ids of {@code wanted} token strings: from tokenizer_config's added_tokens_decoder, then tokenizer.json's
     * added_tokens and model.vocab (streamed, so a 30 MB tokenizer is not built into a tree).
     */
    static Map<String, Integer> resolveIds(HfConfig tc, byte[] tokenizerJson, Set<String> wanted) {
        Map<String, Integer> out = new HashMap<>();
        if (wanted.isEmpty()) return out;
        if (tc != null) {
            JsonNode dec = tc.raw("added_tokens_decoder");
            if (dec != null && dec.isObject()) {
                dec.fields().forEachRemaining(e -> {
                    String content = e.getValue().path("content").asText(null);
                    if (content != null && wanted.contains(content)) {
                        try {
                            out.putIfAbsent(content, Integer.parseInt(e.getKey()));
                        } catch (NumberFormatException ignored) {
                            // not an id; skip
                        }
                    }
                });
            }
        }
        if (tokenizerJson != null && !out.keySet().containsAll(wanted)) {
            try {
                scanTokenizer(tokenizerJson, wanted, out);
            } catch (IOException e) {
                throw new ConvertException("tokenizer.json: not valid JSON: " + e.getMessage(), e);
            }
        }
        return out;
    }

    private static void scanTokenizer(byte[] json, Set<String> wanted, Map<String, Integer> out) throws IOException {
        try (JsonParser p = new JsonFactory().createParser(json)) {
            if (p.nextToken() != JsonToken.START_OBJECT) throw new IOException("top level is not an object");
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String f = p.currentName();
                JsonToken t = p.nextToken();
                if (f.equals("added_tokens") && t == JsonToken.START_ARRAY) {
                    while (p.nextToken() == JsonToken.START_OBJECT) {
                        String content = null;
                        Integer id = null;
                        while (p.nextToken() == JsonToken.FIELD_NAME) {
                            String k = p.currentName();
                            JsonToken v = p.nextToken();
                            if (k.equals("content") && v == JsonToken.VALUE_STRING) content = p.getText();
                            else if (k.equals("id") && v == JsonToken.VALUE_NUMBER_INT) id = p.getIntValue();
                            else p.skipChildren();
                        }
                        if (content != null && id != null && wanted.contains(content)) out.putIfAbsent(content, id);
                    }
                } else if (f.equals("model") && t == JsonToken.START_OBJECT) {
                    while (p.nextToken() == JsonToken.FIELD_NAME) {
                        String k = p.currentName();
                        JsonToken v = p.nextToken();
                        if (k.equals("vocab") && v == JsonToken.START_OBJECT) {
                            while (p.nextToken() == JsonToken.FIELD_NAME) {
                                String tok = p.currentName();
                                p.nextToken();
                                if (wanted.contains(tok) && p.currentToken() == JsonToken.VALUE_NUMBER_INT) out.putIfAbsent(tok, p.getIntValue());
                                else p.skipChildren();
                            }
                        } else if (k.equals("vocab") && v == JsonToken.START_ARRAY) {   // Unigram: [[piece, score], ...]
                            int id = 0;
                            while (p.nextToken() == JsonToken.START_ARRAY) {
                                if (p.nextToken() == JsonToken.VALUE_STRING && wanted.contains(p.getText())) out.putIfAbsent(p.getText(), id);
                                while (p.nextToken() != JsonToken.END_ARRAY) p.skipChildren();
                                id++;
                            }
                        } else {
                            p.skipChildren();
                        }
                    }
                } else {
                    p.skipChildren();
                }
            }
        }
    }
}
