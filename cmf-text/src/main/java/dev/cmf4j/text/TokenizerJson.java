package dev.cmf4j.text;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;


import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/**
 * Reads a Hugging Face tokenizer.json. The model's vocabulary and merges (most of a 10-30 MB file)
 * are streamed straight into compact tables; the small component objects are read as trees and
 * mapped to components. Anything this implementation cannot honour is a {@link TokenizerException}
 * naming the JSON path, never a silent skip.
 */
final class TokenizerJson {
    private TokenizerJson() {}

    /** Field names are not canonicalized: a vocabulary has hundreds of thousands of distinct ones. */
    private static final JsonFactory FACTORY = JsonFactory.builder()
            .disable(JsonFactory.Feature.CANONICALIZE_FIELD_NAMES)
            .disable(JsonFactory.Feature.INTERN_FIELD_NAMES)
            .build();
    /**
     * For the overrides only: the file's components are read with {@link #tree}, as constructing an ObjectMapper
     * initializes date formats and locale data, ~0.1-0.25 s of a fresh {@code cmf run} (docs/CPU_KERNELS.md).
     */
    private static final class Mapper {
        static final ObjectMapper MAPPER = new ObjectMapper(FACTORY);
    }

    static Tokenizer parse(byte[] json) {
        try (JsonParser p = FACTORY.createParser(json)) {
            return parse(p);
        } catch (JsonProcessingException e) {
            String loc = e.getLocation() == null ? "" : " at line " + e.getLocation().getLineNr() + ", column " + e.getLocation().getColumnNr();
            throw new TokenizerException(null, "malformed tokenizer.json" + loc + ": " + e.getOriginalMessage(), e);
        } catch (IOException e) {
            throw new TokenizerException(null, "cannot read tokenizer.json: " + e.getMessage(), e);
        }
    }

    private static Tokenizer parse(JsonParser p) throws IOException {
        if (p.nextToken() != JsonToken.START_OBJECT) throw new TokenizerException("$", "tokenizer.json must be a JSON object");
        ModelJson model = null;
        JsonNode addedTokens = null, normalizer = null, preTokenizer = null, postProcessor = null, decoder = null;
        JsonNode truncation = null, padding = null;
        while (p.nextToken() == JsonToken.FIELD_NAME) {
            String name = p.currentName();
            p.nextToken();
            switch (name) {
                case "model" -> model = readModel(p);
                case "version" -> {
                    JsonNode v = tree(p);
                    if (!v.isTextual() || !v.asText().equals("1.0")) {
                        throw new TokenizerException("$.version", "unknown tokenizer.json version " + v);
                    }
                }
                case "added_tokens" -> addedTokens = tree(p);
                case "normalizer" -> normalizer = tree(p);
                case "pre_tokenizer" -> preTokenizer = tree(p);
                case "post_processor" -> postProcessor = tree(p);
                case "decoder" -> decoder = tree(p);
                case "truncation" -> truncation = tree(p);
                case "padding" -> padding = tree(p);
                default -> p.skipChildren();
            }
        }
        if (model == null) throw new TokenizerException("$.model", "tokenizer.json has no model");
        BpeModel bpe = model.build();
        TextNormalizer norm = normalizer(normalizer, "$.normalizer");
        PreTokenizer pre = preTokenizer(preTokenizer, "$.pre_tokenizer");
        PostProcessor post = postProcessor(postProcessor, "$.post_processor");
        TokenDecoder dec = decoder(decoder, "$.decoder");
        List<AddedToken> added = addedTokens(addedTokens, "$.added_tokens");
        return new Tokenizer(bpe, added, norm, pre, post, dec, truncation(truncation), padding(padding));
    }

    /**
     * The tree of the value at the parser's current token, node for node what {@code ObjectMapper.readTree} builds
     * with default features (ints as int, long or BigInteger nodes by size; floats as doubles; a repeated key's
     * last value, in the first one's place; anything after the value is not read); leaves the parser on the
     * value's last token. The same as dev.cmf4j.format.Json#tree (cmf-text does not depend on cmf-format).
     */
    private static JsonNode tree(JsonParser p) throws IOException {
        JsonToken t = p.currentToken();
        if (t == null) throw new JsonParseException(p, "no JSON value");
        return switch (t) {
            case START_OBJECT -> {
                ObjectNode o = JsonNodeFactory.instance.objectNode();
                for (JsonToken k = p.nextToken(); k != JsonToken.END_OBJECT; k = p.nextToken()) {
                    if (k != JsonToken.FIELD_NAME) throw new JsonParseException(p, "expected a field name, found " + k);
                    String name = p.currentName();
                    p.nextToken();
                    o.replace(name, tree(p));
                }
                yield o;
            }
            case START_ARRAY -> {
                ArrayNode a = JsonNodeFactory.instance.arrayNode();
                for (JsonToken k = p.nextToken(); k != JsonToken.END_ARRAY; k = p.nextToken()) {
                    if (k == null) throw new JsonParseException(p, "unexpected end of input in an array");
                    a.add(tree(p));
                }
                yield a;
            }
            case VALUE_STRING -> JsonNodeFactory.instance.textNode(p.getText());
            case VALUE_NUMBER_INT -> switch (p.getNumberType()) {
                case INT -> JsonNodeFactory.instance.numberNode(p.getIntValue());
                case LONG -> JsonNodeFactory.instance.numberNode(p.getLongValue());
                default -> JsonNodeFactory.instance.numberNode(p.getBigIntegerValue());
            };
            case VALUE_NUMBER_FLOAT -> p.getNumberType() == JsonParser.NumberType.BIG_DECIMAL
                    ? JsonNodeFactory.instance.numberNode(p.getDecimalValue()) : JsonNodeFactory.instance.numberNode(p.getDoubleValue());
            case VALUE_TRUE -> JsonNodeFactory.instance.booleanNode(true);
            case VALUE_FALSE -> JsonNodeFactory.instance.booleanNode(false);
            case VALUE_NULL -> JsonNodeFactory.instance.nullNode();
            case VALUE_EMBEDDED_OBJECT -> JsonNodeFactory.instance.pojoNode(p.getEmbeddedObject());
            default -> throw new JsonParseException(p, "unexpected token " + t);
        };
    }

    /**
     * {@code base} with some components replaced: each top-level key of {@code overrides}
     * ({@code normalizer}, {@code pre_tokenizer}, {@code post_processor}, {@code decoder},
     * {@code added_tokens}, {@code truncation}, {@code padding}; null removes the component) replaces the base's, and
     * {@code "extra_added_tokens"} appends added tokens. The model is shared, so this is cheap; it
     * lets tests run many component configurations over one large vocabulary.
     */
    static Tokenizer withOverrides(Tokenizer base, byte[] overrides) {
        JsonNode o;
        try {
            o = Mapper.MAPPER.readTree(overrides);
        } catch (IOException e) {
            throw new TokenizerException(null, "malformed overrides: " + e.getMessage(), e);
        }
        if (o == null || !o.isObject()) throw new TokenizerException("$", "overrides must be a JSON object");
        TextNormalizer norm = o.has("normalizer") ? normalizer(o.get("normalizer"), "$.normalizer") : base.normalizer;
        PreTokenizer pre = o.has("pre_tokenizer") ? preTokenizer(o.get("pre_tokenizer"), "$.pre_tokenizer") : base.preTokenizer;
        PostProcessor post = o.has("post_processor") ? postProcessor(o.get("post_processor"), "$.post_processor") : base.postProcessor;
        TokenDecoder dec = o.has("decoder") ? decoder(o.get("decoder"), "$.decoder") : base.decoder;
        List<AddedToken> added = new ArrayList<>(o.has("added_tokens") ? addedTokens(o.get("added_tokens"), "$.added_tokens") : base.addedList);
        if (o.has("extra_added_tokens")) added.addAll(addedTokens(o.get("extra_added_tokens"), "$.extra_added_tokens"));
        Truncation trunc = o.has("truncation") ? truncation(o.get("truncation")) : base.truncation;
        Padding pad = o.has("padding") ? padding(o.get("padding")) : base.padding;
        return new Tokenizer(base.model, added, norm, pre, post, dec, trunc, pad);
    }

    // ------------------------------------------------------------------------------ model

    private static final class ModelJson {
        String type;
        String unkToken, prefix, suffix;
        boolean fuseUnk, byteFallback, ignoreMerges;
        Double dropout;
        StringIntMap vocab;
        List<String> mergeLeft = new ArrayList<>(), mergeRight = new ArrayList<>();
        boolean sawMerges, vocabNotObject, mergesNotArray;
        int legacyBadLine = -1;

        BpeModel build() {
            if (type != null && !type.equals("BPE")) {
                throw new TokenizerException("$.model.type", "unsupported model type \"" + type + "\" (only BPE is implemented)");
            }
            if (vocabNotObject) throw new TokenizerException("$.model.vocab", "vocab must be an object of token -> id");
            if (mergesNotArray) throw new TokenizerException("$.model.merges", "merges must be an array");
            if (vocab == null) throw new TokenizerException("$.model.vocab", "BPE model without a vocab");
            if (!sawMerges) throw new TokenizerException("$.model.merges", "BPE model without merges");
            if (legacyBadLine >= 0) {
                throw new TokenizerException("$.model.merges[" + legacyBadLine + "]", "a merge must be two tokens separated by one space");
            }
            int prefixLen = prefix == null ? 0 : prefix.length();
            MergeTable merges = new MergeTable(mergeLeft.size());
            int[] pow31 = {1};
            for (int r = 0; r < mergeLeft.size(); r++) {
                // A legacy merge is one string "a b"; a pair is two strings.
                String l = mergeLeft.get(r), rr = mergeRight.get(r);
                String sa = l, sb = rr == null ? l : rr;
                int af = 0, at = rr == null ? l.indexOf(' ') : l.length();
                int bf = rr == null ? at + 1 : 0, bt = sb.length();
                int ha = StringIntMap.hash(sa, af, at), hb = StringIntMap.hash(sb, bf, bt);
                int aid = vocab.get(sa, af, at, ha), bid = vocab.get(sb, bf, bt, hb);
                if (aid < 0) throw new TokenizerException("$.model.merges[" + r + "]", "merge token \"" + sa.substring(af, at) + "\" is not in the vocabulary");
                if (bid < 0) throw new TokenizerException("$.model.merges[" + r + "]", "merge token \"" + sb.substring(bf, bt) + "\" is not in the vocabulary");
                int mf = Math.min(bf + prefixLen, bt); // the merged token drops the continuation prefix of b
                int hm = StringIntMap.hash(sb, mf, bt);
                int lb = bt - mf;
                if (pow31.length <= lb) pow31 = powers(lb + 1);
                int hMerged = ha * pow31[lb] + hm;
                int mid = vocab.getConcat(sa, af, at, sb, mf, bt, hMerged);
                if (mid < 0) {
                    throw new TokenizerException("$.model.merges[" + r + "]", "merged token \"" + sa.substring(af, at) + sb.substring(mf, bt) + "\" is not in the vocabulary");
                }
                merges.put(aid, bid, r, mid);
            }
            // Dropout is a training-time regularizer; inference tokenization ignores it (documented in docs/TEXT.md).
            return new BpeModel(vocab, merges, unkToken, prefix, suffix, fuseUnk, byteFallback, ignoreMerges);
        }
    }

    /** 31^k for k < n (String hash arithmetic: the hash of a + b is hash(a) * 31^len(b) + hash(b)). */
    private static int[] powers(int n) {
        int[] p = new int[Math.max(n, 64)];
        p[0] = 1;
        for (int i = 1; i < p.length; i++) p[i] = p[i - 1] * 31;
        return p;
    }

    private static ModelJson readModel(JsonParser p) throws IOException {
        if (p.currentToken() != JsonToken.START_OBJECT) throw new TokenizerException("$.model", "model must be an object");
        ModelJson m = new ModelJson();
        while (p.nextToken() == JsonToken.FIELD_NAME) {
            String name = p.currentName();
            JsonToken t = p.nextToken();
            String path = "$.model." + name;
            switch (name) {
                case "type" -> m.type = text(p, t, path);
                case "unk_token" -> m.unkToken = optText(p, t, path);
                case "continuing_subword_prefix" -> m.prefix = optText(p, t, path);
                case "end_of_word_suffix" -> m.suffix = optText(p, t, path);
                case "fuse_unk" -> m.fuseUnk = optBool(p, t, path);
                case "byte_fallback" -> m.byteFallback = optBool(p, t, path);
                case "ignore_merges" -> m.ignoreMerges = optBool(p, t, path);
                case "dropout" -> {
                    if (t != JsonToken.VALUE_NULL) {
                        if (!t.isNumeric()) throw new TokenizerException(path, "dropout must be a number or null");
                        m.dropout = p.getDoubleValue();
                        if (m.dropout < 0 || m.dropout > 1) throw new TokenizerException(path, "dropout must be in [0, 1]");
                    }
                }
                // A non-BPE model has a differently shaped vocab; judge the shape only once the type is known.
                case "vocab" -> { if (t == JsonToken.START_OBJECT) m.vocab = readVocab(p, t); else { m.vocabNotObject = true; p.skipChildren(); } }
                case "merges" -> { if (t == JsonToken.START_ARRAY) readMerges(p, t, m); else { m.mergesNotArray = true; p.skipChildren(); } }
                default -> p.skipChildren();
            }
        }
        return m;
    }

    private static StringIntMap readVocab(JsonParser p, JsonToken t) throws IOException {
        if (t != JsonToken.START_OBJECT) throw new TokenizerException("$.model.vocab", "vocab must be an object of token -> id");
        StringIntMap vocab = new StringIntMap(1 << 16);
        while (p.nextToken() == JsonToken.FIELD_NAME) {
            String token = p.currentName();
            JsonToken v = p.nextToken();
            if (v != JsonToken.VALUE_NUMBER_INT) {
                throw new TokenizerException("$.model.vocab[\"" + token + "\"]", "token id must be an integer");
            }
            long id = p.getLongValue();
            if (id < 0 || id > Integer.MAX_VALUE - 1) {
                throw new TokenizerException("$.model.vocab[\"" + token + "\"]", "token id " + id + " is out of range");
            }
            vocab.put(token, (int) id);
        }
        return vocab;
    }

    private static void readMerges(JsonParser p, JsonToken t, ModelJson m) throws IOException {
        if (t != JsonToken.START_ARRAY) throw new TokenizerException("$.model.merges", "merges must be an array");
        m.sawMerges = true;
        int index = 0;
        for (JsonToken e; (e = p.nextToken()) != JsonToken.END_ARRAY; index++) {
            String path = "$.model.merges[" + index + "]";
            if (e == JsonToken.VALUE_STRING) {
                String line = p.getText();
                if (line.startsWith("#version")) continue;
                int sp = line.indexOf(' ');
                if (sp < 0 || line.indexOf(' ', sp + 1) >= 0) {
                    if (m.legacyBadLine < 0) m.legacyBadLine = index;
                    continue;
                }
                m.mergeLeft.add(line); // split when resolved, without substrings
                m.mergeRight.add(null);
            } else if (e == JsonToken.START_ARRAY) {
                if (p.nextToken() != JsonToken.VALUE_STRING) throw new TokenizerException(path, "a merge pair must hold two strings");
                String a = p.getText();
                if (p.nextToken() != JsonToken.VALUE_STRING) throw new TokenizerException(path, "a merge pair must hold two strings");
                String b = p.getText();
                if (p.nextToken() != JsonToken.END_ARRAY) throw new TokenizerException(path, "a merge pair must hold exactly two strings");
                m.mergeLeft.add(a);
                m.mergeRight.add(b);
            } else {
                throw new TokenizerException(path, "a merge must be a string \"a b\" or a pair [a, b]");
            }
        }
    }

    private static String text(JsonParser p, JsonToken t, String path) throws IOException {
        if (t != JsonToken.VALUE_STRING) throw new TokenizerException(path, "expected a string");
        return p.getText();
    }

    private static String optText(JsonParser p, JsonToken t, String path) throws IOException {
        return t == JsonToken.VALUE_NULL ? null : text(p, t, path);
    }

    private static boolean optBool(JsonParser p, JsonToken t, String path) {
        if (t == JsonToken.VALUE_NULL) return false;
        if (t != JsonToken.VALUE_TRUE && t != JsonToken.VALUE_FALSE) throw new TokenizerException(path, "expected true or false");
        return t == JsonToken.VALUE_TRUE;
    }

    // ------------------------------------------------------------------------------ components

    private static boolean absent(JsonNode n) {
        return n == null || n instanceof NullNode || n.isMissingNode();
    }

    private static String type(JsonNode n, String path) {
        if (!n.isObject()) throw new TokenizerException(path, "expected an object with a \"type\"");
        JsonNode t = n.get("type");
        if (t == null || !t.isTextual()) throw new TokenizerException(path, "component has no \"type\"");
        return t.asText();
    }

    private static JsonNode field(JsonNode n, String name, String path) {
        JsonNode v = n.get(name);
        if (absent(v)) throw new TokenizerException(path + "." + name, "missing field \"" + name + "\"");
        return v;
    }

    private static String str(JsonNode n, String name, String path) {
        JsonNode v = field(n, name, path);
        if (!v.isTextual()) throw new TokenizerException(path + "." + name, "expected a string");
        return v.asText();
    }

    private static String str(JsonNode n, String name, String path, String dflt) {
        return absent(n.get(name)) ? dflt : str(n, name, path);
    }

    private static boolean bool(JsonNode n, String name, String path, boolean dflt) {
        JsonNode v = n.get(name);
        if (absent(v)) return dflt;
        if (!v.isBoolean()) throw new TokenizerException(path + "." + name, "expected true or false");
        return v.asBoolean();
    }

    private static int integer(JsonNode n, String name, String path, int dflt) {
        JsonNode v = n.get(name);
        if (absent(v)) return dflt;
        if (!v.canConvertToInt() || !v.isIntegralNumber()) throw new TokenizerException(path + "." + name, "expected an integer");
        return v.asInt();
    }

    private static int character(JsonNode n, String name, String path) {
        String s = str(n, name, path);
        if (s.codePointCount(0, s.length()) != 1) throw new TokenizerException(path + "." + name, "expected a single character");
        return s.codePointAt(0);
    }

    private static List<JsonNode> array(JsonNode n, String name, String path) {
        JsonNode v = field(n, name, path);
        if (!v.isArray()) throw new TokenizerException(path + "." + name, "expected an array");
        List<JsonNode> out = new ArrayList<>();
        v.forEach(out::add);
        return out;
    }

    private static SplitPattern pattern(JsonNode n, String name, String path) {
        JsonNode v = field(n, name, path);
        String p = path + "." + name;
        if (v.isObject() && v.size() == 1 && v.has("String") && v.get("String").isTextual()) {
            return SplitPattern.Literal.of(v.get("String").asText());
        }
        if (v.isObject() && v.size() == 1 && v.has("Regex") && v.get("Regex").isTextual()) {
            try {
                return SplitPattern.Regex.of(v.get("Regex").asText());
            } catch (IllegalArgumentException e) {
                throw new TokenizerException(p, e.getMessage());
            }
        }
        throw new TokenizerException(p, "a pattern must be {\"String\": ...} or {\"Regex\": ...}");
    }

    private static SplitBehavior behavior(JsonNode n, String name, String path, SplitBehavior dflt) {
        JsonNode v = n.get(name);
        if (absent(v)) {
            if (dflt != null) return dflt;
            throw new TokenizerException(path + "." + name, "missing field \"" + name + "\"");
        }
        SplitBehavior b = v.isTextual() ? SplitBehavior.fromJson(v.asText()) : null;
        if (b == null) throw new TokenizerException(path + "." + name, "unknown split behavior " + v);
        return b;
    }

    static TextNormalizer normalizer(JsonNode n, String path) {
        if (absent(n)) return null;
        String type = type(n, path);
        return switch (type) {
            case "NFC" -> new TextNormalizer.Unicode(UnicodeNormalization.Form.NFC);
            case "NFD" -> new TextNormalizer.Unicode(UnicodeNormalization.Form.NFD);
            case "NFKC" -> new TextNormalizer.Unicode(UnicodeNormalization.Form.NFKC);
            case "NFKD" -> new TextNormalizer.Unicode(UnicodeNormalization.Form.NFKD);
            case "Replace" -> new TextNormalizer.Replace(pattern(n, "pattern", path), str(n, "content", path));
            case "Prepend" -> new TextNormalizer.Prepend(str(n, "prepend", path));
            case "Lowercase" -> new TextNormalizer.Lowercase();
            case "Strip" -> new TextNormalizer.Strip(bool(n, "strip_left", path, true), bool(n, "strip_right", path, true));
            case "StripAccents" -> new TextNormalizer.StripAccents();
            case "Nmt" -> new TextNormalizer.Nmt();
            case "ByteLevel" -> new TextNormalizer.ByteLevel();
            case "BertNormalizer" -> {
                JsonNode sa = n.get("strip_accents");
                Boolean strip = absent(sa) ? null : sa.asBoolean();
                yield new TextNormalizer.Bert(bool(n, "clean_text", path, true), bool(n, "handle_chinese_chars", path, true),
                        strip, bool(n, "lowercase", path, true));
            }
            case "Sequence" -> {
                List<JsonNode> items = array(n, "normalizers", path);
                List<TextNormalizer> list = new ArrayList<>();
                for (int i = 0; i < items.size(); i++) {
                    TextNormalizer x = normalizer(items.get(i), path + ".normalizers[" + i + "]");
                    if (x != null) list.add(x);
                }
                yield new TextNormalizer.Sequence(List.copyOf(list));
            }
            default -> throw new TokenizerException(path + ".type", "unsupported normalizer type \"" + type + "\"");
        };
    }

    static PreTokenizer preTokenizer(JsonNode n, String path) {
        if (absent(n)) return null;
        String type = type(n, path);
        return switch (type) {
            case "Split" -> new PreTokenizer.Split(pattern(n, "pattern", path), behavior(n, "behavior", path, null),
                    bool(n, "invert", path, false));
            case "ByteLevel" -> new PreTokenizer.ByteLevel(bool(n, "add_prefix_space", path, true),
                    bool(n, "trim_offsets", path, true), bool(n, "use_regex", path, true));
            case "Metaspace" -> new PreTokenizer.Metaspace(character(n, "replacement", path), prependScheme(n, path),
                    bool(n, "split", path, true));
            case "Digits" -> new PreTokenizer.Digits(bool(n, "individual_digits", path, false));
            case "Punctuation" -> new PreTokenizer.Punctuation(behavior(n, "behavior", path, SplitBehavior.ISOLATED));
            case "Whitespace" -> new PreTokenizer.Whitespace();
            case "WhitespaceSplit" -> new PreTokenizer.WhitespaceSplit();
            case "BertPreTokenizer" -> new PreTokenizer.Bert();
            case "Delimiter", "CharDelimiterSplit" -> new PreTokenizer.CharDelimiter(character(n, "delimiter", path));
            case "FixedLength" -> {
                int len = integer(n, "length", path, 5);
                if (len <= 0) throw new TokenizerException(path + ".length", "length must be positive");
                yield new PreTokenizer.FixedLength(len);
            }
            case "Sequence" -> {
                List<JsonNode> items = array(n, "pretokenizers", path);
                List<PreTokenizer> list = new ArrayList<>();
                for (int i = 0; i < items.size(); i++) {
                    PreTokenizer x = preTokenizer(items.get(i), path + ".pretokenizers[" + i + "]");
                    if (x != null) list.add(x);
                }
                yield new PreTokenizer.Sequence(List.copyOf(list));
            }
            default -> throw new TokenizerException(path + ".type", "unsupported pre-tokenizer type \"" + type + "\"");
        };
    }

    private static PreTokenizer.PrependScheme prependScheme(JsonNode n, String path) {
        PreTokenizer.PrependScheme scheme = switch (str(n, "prepend_scheme", path, "always")) {
            case "always" -> PreTokenizer.PrependScheme.ALWAYS;
            case "first" -> PreTokenizer.PrependScheme.FIRST;
            case "never" -> PreTokenizer.PrependScheme.NEVER;
            default -> throw new TokenizerException(path + ".prepend_scheme", "unknown prepend_scheme " + n.get("prepend_scheme"));
        };
        JsonNode aps = n.get("add_prefix_space");
        if (!absent(aps) && !aps.asBoolean()) {
            if (!absent(n.get("prepend_scheme")) && scheme != PreTokenizer.PrependScheme.NEVER) {
                throw new TokenizerException(path, "add_prefix_space does not match declared prepend_scheme");
            }
            scheme = PreTokenizer.PrependScheme.NEVER;
        }
        return scheme;
    }

    static PostProcessor postProcessor(JsonNode n, String path) {
        if (absent(n)) return null;
        String type = type(n, path);
        return switch (type) {
            case "TemplateProcessing" -> template(n, path);
            case "ByteLevel" -> new PostProcessor.ByteLevel(bool(n, "add_prefix_space", path, true), bool(n, "trim_offsets", path, true));
            case "BertProcessing" -> {
                Map.Entry<String, Integer> sep = tokenPair(n, "sep", path), cls = tokenPair(n, "cls", path);
                yield new PostProcessor.Bert(sep.getKey(), sep.getValue(), cls.getKey(), cls.getValue());
            }
            case "RobertaProcessing" -> {
                Map.Entry<String, Integer> sep = tokenPair(n, "sep", path), cls = tokenPair(n, "cls", path);
                yield new PostProcessor.Roberta(sep.getKey(), sep.getValue(), cls.getKey(), cls.getValue(),
                        bool(n, "trim_offsets", path, true), bool(n, "add_prefix_space", path, true));
            }
            case "Sequence" -> {
                List<JsonNode> items = array(n, "processors", path);
                List<PostProcessor> list = new ArrayList<>();
                for (int i = 0; i < items.size(); i++) {
                    PostProcessor x = postProcessor(items.get(i), path + ".processors[" + i + "]");
                    if (x != null) list.add(x);
                }
                yield new PostProcessor.Sequence(List.copyOf(list));
            }
            default -> throw new TokenizerException(path + ".type", "unsupported post-processor type \"" + type + "\"");
        };
    }

    private static Map.Entry<String, Integer> tokenPair(JsonNode n, String name, String path) {
        JsonNode v = field(n, name, path);
        if (!v.isArray() || v.size() != 2 || !v.get(0).isTextual() || !v.get(1).canConvertToInt()) {
            throw new TokenizerException(path + "." + name, "expected [token, id]");
        }
        return Map.entry(v.get(0).asText(), v.get(1).asInt());
    }

    private static PostProcessor.Template template(JsonNode n, String path) {
        JsonNode specials = n.get("special_tokens");
        List<JsonNode> single = array(n, "single", path);
        List<PostProcessor.Piece> pieces = new ArrayList<>();
        for (int i = 0; i < single.size(); i++) {
            JsonNode e = single.get(i);
            String p = path + ".single[" + i + "]";
            String seqId = null, specialId = null;
            if (e.isObject() && e.has("Sequence")) seqId = str(e.get("Sequence"), "id", p + ".Sequence");
            else if (e.isObject() && e.has("SpecialToken")) specialId = str(e.get("SpecialToken"), "id", p + ".SpecialToken");
            else if (e.isTextual()) {
                String s = e.asText().split(":", 2)[0];
                if (s.startsWith("$")) seqId = s.substring(1).isEmpty() || s.substring(1).chars().allMatch(Character::isDigit) ? "A" : s.substring(1).toUpperCase();
                else specialId = s;
            } else {
                throw new TokenizerException(p, "a template piece must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
            }
            if (seqId != null) {
                if (!seqId.equals("A")) throw new TokenizerException(p, "the single-sequence template may only use sequence A");
                pieces.add(new PostProcessor.Piece(true, "A", new int[0], List.of()));
                continue;
            }
            JsonNode sp = specials == null ? null : specials.get(specialId);
            if (absent(sp)) throw new TokenizerException(path + ".special_tokens", "missing SpecialToken with id \"" + specialId + "\"");
            String sp0 = path + ".special_tokens[\"" + specialId + "\"]";
            List<JsonNode> ids = array(sp, "ids", sp0), toks = array(sp, "tokens", sp0);
            if (ids.size() != toks.size()) throw new TokenizerException(sp0, "ids and tokens must be of the same length");
            int[] idArr = new int[ids.size()];
            List<String> tokArr = new ArrayList<>();
            for (int k = 0; k < ids.size(); k++) {
                if (!ids.get(k).canConvertToInt() || ids.get(k).asInt() < 0) throw new TokenizerException(sp0 + ".ids[" + k + "]", "expected a token id");
                idArr[k] = ids.get(k).asInt();
                tokArr.add(toks.get(k).asText());
            }
            pieces.add(new PostProcessor.Piece(false, null, idArr, List.copyOf(tokArr)));
        }
        return new PostProcessor.Template(List.copyOf(pieces));
    }

    /** Special tokens the post-processor adds to one sequence (for truncation's budget). */
    static int addedCount(PostProcessor p) {
        if (p == null) return 0;
        return switch (p) {
            case PostProcessor.Template t -> t.single().stream().mapToInt(x -> x.ids().length).sum();
            case PostProcessor.Bert b -> 2;
            case PostProcessor.Roberta r -> 2;
            case PostProcessor.ByteLevel b -> 0;
            case PostProcessor.Sequence s -> s.processors().stream().mapToInt(TokenizerJson::addedCount).sum();
        };
    }

    static TokenDecoder decoder(JsonNode n, String path) {
        if (absent(n)) return null;
        String type = type(n, path);
        return switch (type) {
            case "ByteLevel" -> new TokenDecoder.ByteLevel();
            case "Metaspace" -> new TokenDecoder.Metaspace(character(n, "replacement", path), prependScheme(n, path));
            case "ByteFallback" -> new TokenDecoder.ByteFallback();
            case "Fuse" -> new TokenDecoder.Fuse();
            case "Strip" -> new TokenDecoder.Strip(character(n, "content", path), integer(n, "start", path, 0), integer(n, "stop", path, 0));
            case "Replace" -> new TokenDecoder.Replace(pattern(n, "pattern", path), str(n, "content", path));
            case "BPEDecoder" -> new TokenDecoder.Bpe(str(n, "suffix", path, "</w>"));
            case "WordPiece" -> new TokenDecoder.WordPiece(str(n, "prefix", path, "##"), bool(n, "cleanup", path, true));
            case "CTC" -> new TokenDecoder.Ctc(str(n, "pad_token", path, "<pad>"), str(n, "word_delimiter_token", path, "|"),
                    bool(n, "cleanup", path, true));
            case "Sequence" -> {
                List<JsonNode> items = array(n, "decoders", path);
                List<TokenDecoder> list = new ArrayList<>();
                for (int i = 0; i < items.size(); i++) {
                    TokenDecoder x = decoder(items.get(i), path + ".decoders[" + i + "]");
                    if (x != null) list.add(x);
                }
                yield new TokenDecoder.Sequence(List.copyOf(list));
            }
            default -> throw new TokenizerException(path + ".type", "unsupported decoder type \"" + type + "\"");
        };
    }

    private static List<AddedToken> addedTokens(JsonNode n, String path) {
        List<AddedToken> out = new ArrayList<>();
        if (absent(n)) return out;
        if (!n.isArray()) throw new TokenizerException(path, "added_tokens must be an array");
        Iterator<JsonNode> it = n.elements();
        for (int i = 0; it.hasNext(); i++) {
            JsonNode t = it.next();
            String p = path + "[" + i + "]";
            if (!t.isObject()) throw new TokenizerException(p, "an added token must be an object");
            boolean special = bool(t, "special", p, false);
            out.add(new AddedToken(str(t, "content", p), bool(t, "single_word", p, false), bool(t, "lstrip", p, false),
                    bool(t, "rstrip", p, false), bool(t, "normalized", p, !special), special));
        }
        return out;
    }

    // ------------------------------------------------------------------------------ truncation, padding

    record Truncation(int maxLength, boolean left) {}

    record Padding(int fixedLength, int multipleOf, boolean left, int padId, String padToken) {}

    private static Truncation truncation(JsonNode n) {
        if (absent(n)) return null;
        String path = "$.truncation";
        int max = integer(n, "max_length", path, 512);
        if (max < 0) throw new TokenizerException(path + ".max_length", "max_length must not be negative");
        String strategy = str(n, "strategy", path, "LongestFirst");
        if (!strategy.equals("LongestFirst") && !strategy.equals("OnlyFirst") && !strategy.equals("OnlySecond")) {
            throw new TokenizerException(path + ".strategy", "unknown truncation strategy \"" + strategy + "\"");
        }
        boolean left = str(n, "direction", path, "Right").equals("Left");
        return strategy.equals("OnlySecond") ? null : new Truncation(max, left);
    }

    private static Padding padding(JsonNode n) {
        if (absent(n)) return null;
        String path = "$.padding";
        JsonNode strategy = n.get("strategy");
        int fixed = -1;
        if (!absent(strategy) && strategy.isObject() && strategy.has("Fixed")) fixed = strategy.get("Fixed").asInt();
        else if (!absent(strategy) && !(strategy.isTextual() && strategy.asText().equals("BatchLongest"))) {
            throw new TokenizerException(path + ".strategy", "unknown padding strategy " + strategy);
        }
        int multiple = integer(n, "pad_to_multiple_of", path, 0);
        boolean left = str(n, "direction", path, "Right").equals("Left");
        return new Padding(fixed, multiple, left, integer(n, "pad_id", path, 0), str(n, "pad_token", path, "[PAD]"));
    }
}
