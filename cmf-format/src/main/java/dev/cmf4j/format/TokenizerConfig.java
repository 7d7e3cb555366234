package dev.cmf4j.format;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.List;
import java.util.Map;

/**
 * The header's {@code tokenizer_config} chat bundle: the Jinja chat template and special token ids.
 * Any field may be null; a file without the bundle gets the ChatML fallback from the chat layer.
 */
public record TokenizerConfig(String chatTemplate, List<Integer> eosTokenIds, Integer bosTokenId,
                              Integer padTokenId, Map<String, JsonNode> extra) {

    public TokenizerConfig { extra = extra == null ? Map.of() : Map.copyOf(extra); }

    static TokenizerConfig read(Json.Fields f) {
        if (f == null) return null;
        return new TokenizerConfig(f.string("chat_template"), f.ints("eos_token_ids"), f.integer("bos_token_id"),
                f.integer("pad_token_id"), f.rest());
    }

    public ObjectNode toJson() {
        return new Json.Out().put("chat_template", chatTemplate).ints("eos_token_ids", eosTokenIds)
                .put("bos_token_id", bosTokenId).put("pad_token_id", padTokenId).extra(extra).done();
    }
}
