package dev.cmf4j.runtime;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.chat.ChatTemplate;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.TokenizerConfig;
import dev.cmf4j.text.StreamingDecoder;
import dev.cmf4j.text.Tokenizer;

import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Text in and out of a model: its tokenizer, chat template and end-of-sequence ids, as the CMF file
 * carries them (vocab section = tokenizer.json, {@code tokenizer_config} = template + ids). A file
 * without a template falls back to ChatML.
 */
public final class TextCodec {
    private final Tokenizer tokenizer;
    private final ChatTemplate template;
    private final Set<Integer> eos;

    public TextCodec(Tokenizer tokenizer, ChatTemplate template, Set<Integer> eos) {
        this.tokenizer = tokenizer;
        this.template = template;
        this.eos = Set.copyOf(eos);
    }

    /**
     * The tokenizer and template of an open CMF file.
     *
     * @throws GenerationException.BadInput when the file carries no tokenizer
     */
    public static TextCodec of(CmfFile file) {
        byte[] vocab = file.vocab().orElseThrow(() -> new GenerationException.BadInput(file.label()
                + " carries no tokenizer (vocab section): text commands need one; use 'cmf generate --ids' for raw ids"));
        Tokenizer tok = Tokenizer.fromJson(vocab);
        TokenizerConfig tc = file.header().tokenizerConfig();
        Map<String, String> special = new LinkedHashMap<>();
        Set<Integer> eos = new LinkedHashSet<>();
        String source = null;
        if (tc != null) {
            source = tc.chatTemplate();
            if (tc.eosTokenIds() != null) eos.addAll(tc.eosTokenIds());
            for (var e : tc.extra().entrySet()) {
                String token = tokenString(e.getValue());
                if (e.getKey().endsWith("_token") && token != null) special.put(e.getKey(), token);
            }
            if (!special.containsKey("bos_token") && tc.bosTokenId() != null) putToken(special, "bos_token", tok, tc.bosTokenId());
            if (!special.containsKey("pad_token") && tc.padTokenId() != null) putToken(special, "pad_token", tok, tc.padTokenId());
            if (!special.containsKey("eos_token") && tc.eosTokenIds() != null && !tc.eosTokenIds().isEmpty())
                putToken(special, "eos_token", tok, tc.eosTokenIds().getFirst());
        }
        if (special.containsKey("eos_token")) {
            int id = tok.tokenToId(special.get("eos_token"));
            if (id >= 0) eos.add(id);
        }
        ChatTemplate t = source == null || source.isBlank() ? ChatTemplate.chatMl(special) : ChatTemplate.of(source, special);
        return new TextCodec(tok, t, eos);
    }

    private static void putToken(Map<String, String> special, String key, Tokenizer tok, int id) {
        String s = tok.idToToken(id);
        if (s != null) special.put(key, s);
    }

    private static String tokenString(JsonNode v) {
        if (v == null) return null;
        if (v.isTextual()) return v.asText();
        if (v.isObject() && v.get("content") != null && v.get("content").isTextual()) return v.get("content").asText();
        return null;
    }

    public Tokenizer tokenizer() { return tokenizer; }

    public ChatTemplate template() { return template; }

    /** Ids that end a reply: the file's eos ids and the template's eos token. */
    public Set<Integer> eosIds() { return eos; }

    /** Plain text to ids, with the tokenizer's own special tokens (e.g. Gemma's BOS). */
    public int[] encode(String text) { return tokenizer.encodeIds(text, true); }

    /** The conversation rendered by the chat template (with the assistant prompt), as a string. */
    public String render(List<? extends Map<String, ?>> messages, Map<String, ?> kwargs) {
        return template.render(messages, null, true, kwargs);
    }

    /** The rendered conversation as ids (the template already holds the special tokens). */
    public int[] encodeChat(List<? extends Map<String, ?>> messages, Map<String, ?> kwargs) {
        return tokenizer.encodeIds(render(messages, kwargs), false);
    }

    public String decode(int[] ids) { return tokenizer.decode(ids, false); }

    /** An incremental decoder for streaming; special tokens hidden when {@code skipSpecial}. */
    public Generator.TextStream stream(boolean skipSpecial) {
        StreamingDecoder d = tokenizer.streamingDecoder(skipSpecial);
        return new Generator.TextStream() {
            @Override public String push(int id) { return d.feed(id); }

            @Override public String flush() { return d.finish(); }
        };
    }
}
