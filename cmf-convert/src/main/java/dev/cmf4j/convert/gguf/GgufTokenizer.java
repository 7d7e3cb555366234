package dev.cmf4j.convert.gguf;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.convert.ConvertException;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Rebuilds a Hugging Face {@code tokenizer.json} from a GGUF file's {@code tokenizer.ggml.*} section:
 * <ul>
 *   <li>{@code gpt2} (byte-level BPE: Llama 3, Qwen2/3, GPT-2): vocab and merges as stored, the split
 *       regex chosen by {@code tokenizer.ggml.pre} (llama-bpe, qwen2 (+ NFC normalizer), gpt-4o (o200k),
 *       gpt-2 otherwise), ByteLevel pre-tokenizer/decoder;</li>
 *   <li>{@code llama} (SentencePiece BPE: Llama 2, Gemma): all pieces in the vocab, merges derived from
 *       the piece scores the way transformers' SentencePiece converter does, byte fallback,
 *       "▁" for spaces (with a prepended one when {@code add_space_prefix});</li>
 *   <li>{@code gemma4} (Gemma's BPE): the stored merges, byte fallback, "▁" for spaces.</li>
 * </ul>
 * Control and user-defined tokens (token types 3 and 4) become {@code added_tokens} (special = control).
 * A BOS post-processor is added when {@code tokenizer.ggml.add_bos_token} is true.
 */
public final class GgufTokenizer {
    private GgufTokenizer() {}

    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    static final String GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    static final String LLAMA3_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static final String QWEN2_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

    /** OpenAI's o200k split (gpt-4o, gpt-oss), as in their tokenizer.json. */
    static final String O200K_REGEX = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
            + "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
            + "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

    private static final int TYPE_CONTROL = 3, TYPE_USER_DEFINED = 4;

    /** The tokenizer.json bytes, or null when the file has no tokenizer or an unsupported model (noted in {@code notes}). */
    public static byte[] toJson(GgufReader r, ObjectNode notes) {
        String model = r.string("tokenizer.ggml.model");
        if (model == null) return null;
        List<Object> tokens = r.array("tokenizer.ggml.tokens");
        if (tokens == null) throw new ConvertException(r.file() + ": tokenizer.ggml.tokens is missing");
        List<String> toks = new ArrayList<>(tokens.size());
        for (Object o : tokens) {
            if (!(o instanceof String s)) throw new ConvertException(r.file() + ": tokenizer.ggml.tokens holds a non-string");
            toks.add(s);
        }
        int[] types = ints(r, "tokenizer.ggml.token_type", toks.size(), 1);
        ObjectNode root = F.objectNode();
        root.put("version", "1.0");
        root.putNull("truncation");
        root.putNull("padding");
        ArrayNode added = root.putArray("added_tokens");
        for (int i = 0; i < toks.size(); i++) {
            if (types[i] == TYPE_CONTROL || types[i] == TYPE_USER_DEFINED) {
                ObjectNode a = added.addObject();
                a.put("id", i).put("content", toks.get(i)).put("single_word", false).put("lstrip", false).put("rstrip", false)
                        .put("normalized", types[i] != TYPE_CONTROL).put("special", types[i] == TYPE_CONTROL);
            }
        }
        Long bos = r.integer("tokenizer.ggml.bos_token_id");
        boolean addBos = Boolean.TRUE.equals(r.bool("tokenizer.ggml.add_bos_token"));
        switch (model) {
            case "gpt2" -> byteLevel(r, root, toks, types, notes);
            case "llama" -> sentencePiece(r, root, toks, types);
            case "gemma4" -> gemma(r, root, toks);
            default -> {
                notes.put("tokenizer", "GGUF tokenizer model \"" + model + "\" is not converted; the file has no vocab section");
                return null;
            }
        }
        if (addBos && bos != null && bos >= 0 && bos < toks.size()) {
            String b = toks.get((int) (long) bos);
            ObjectNode pp = F.objectNode();
            pp.put("type", "TemplateProcessing");
            ArrayNode single = pp.putArray("single");
            single.addObject().putObject("SpecialToken").put("id", b).put("type_id", 0);
            single.addObject().putObject("Sequence").put("id", "A").put("type_id", 0);
            ArrayNode pair = pp.putArray("pair");
            pair.addObject().putObject("SpecialToken").put("id", b).put("type_id", 0);
            pair.addObject().putObject("Sequence").put("id", "A").put("type_id", 0);
            pair.addObject().putObject("SpecialToken").put("id", b).put("type_id", 1);
            pair.addObject().putObject("Sequence").put("id", "B").put("type_id", 1);
            ObjectNode st = pp.putObject("special_tokens").putObject(b);
            st.put("id", b);
            st.putArray("ids").add(bos);
            st.putArray("tokens").add(b);
            if (model.equals("gpt2")) {
                ObjectNode seq = F.objectNode();
                seq.put("type", "Sequence");
                ArrayNode ps = seq.putArray("processors");
                ps.add(root.get("post_processor"));
                ps.add(pp);
                root.set("post_processor", seq);
            } else {
                root.set("post_processor", pp);
            }
        }
        try {
            return new ObjectMapper().writeValueAsBytes(orderKeys(root));
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    private static ObjectNode orderKeys(ObjectNode root) {
        ObjectNode o = F.objectNode();
        for (String k : List.of("version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model")) {
            o.set(k, root.has(k) ? root.get(k) : F.nullNode());
        }
        return o;
    }

    private static ObjectNode byteLevelPart(String type) {
        ObjectNode b = F.objectNode();
        b.put("type", type);
        b.put("add_prefix_space", false).put("trim_offsets", false).put("use_regex", false);
        return b;
    }

    private static void byteLevel(GgufReader r, ObjectNode root, List<String> toks, int[] types, ObjectNode notes) {
        String pre = r.string("tokenizer.ggml.pre");
        String regex;
        boolean nfc = false, ignoreMerges = false;
        switch (pre == null ? "default" : pre) {
            case "llama-bpe", "llama3", "llama-v3" -> { regex = LLAMA3_REGEX; ignoreMerges = true; }
            case "qwen2", "qwen3", "deepseek-r1-qwen" -> { regex = QWEN2_REGEX; nfc = true; }
            case "gpt-4o", "llama4" -> regex = O200K_REGEX;
            case "gpt-2", "gpt2", "default" -> regex = GPT2_REGEX;
            default -> {
                regex = GPT2_REGEX;
                notes.put("tokenizer", "GGUF pre-tokenizer \"" + pre + "\" is not known; the GPT-2 split regex was used");
            }
        }
        if (nfc) root.putObject("normalizer").put("type", "NFC"); else root.putNull("normalizer");
        ObjectNode pt = root.putObject("pre_tokenizer");
        pt.put("type", "Sequence");
        ArrayNode pts = pt.putArray("pretokenizers");
        ObjectNode split = pts.addObject();
        split.put("type", "Split");
        split.putObject("pattern").put("Regex", regex);
        split.put("behavior", "Isolated").put("invert", false);
        pts.add(byteLevelPart("ByteLevel"));
        root.set("post_processor", byteLevelPart("ByteLevel"));
        root.set("decoder", byteLevelPart("ByteLevel"));
        ObjectNode m = root.putObject("model");
        m.put("type", "BPE").putNull("dropout").putNull("unk_token").putNull("continuing_subword_prefix")
                .putNull("end_of_word_suffix").put("fuse_unk", false).put("byte_fallback", false).put("ignore_merges", ignoreMerges);
        ObjectNode vocab = m.putObject("vocab");
        for (int i = 0; i < toks.size(); i++) if (types[i] != TYPE_CONTROL && types[i] != TYPE_USER_DEFINED) vocab.put(toks.get(i), i);
        ArrayNode merges = m.putArray("merges");
        List<Object> ms = r.array("tokenizer.ggml.merges");
        if (ms != null) {
            for (Object o : ms) {
                if (!(o instanceof String s) || s.indexOf(' ') < 0) throw new ConvertException(r.file() + ": tokenizer.ggml.merges entry " + o + " is not \"a b\"");
                int sp = s.indexOf(' ');
                merges.addArray().add(s.substring(0, sp)).add(s.substring(sp + 1));
            }
        }
    }

    /**
     * Gemma's tokenizer.json (Gemma 3 and 4): spaces become "▁" and split before each, BPE with the stored merges and
     * byte fallback, every piece in the vocab.
     */
    private static void gemma(GgufReader r, ObjectNode root, List<String> toks) {
        ObjectNode norm = root.putObject("normalizer");
        norm.put("type", "Replace");
        norm.putObject("pattern").put("String", " ");
        norm.put("content", "\u2581");
        ObjectNode pt = root.putObject("pre_tokenizer");
        pt.put("type", "Split");
        pt.putObject("pattern").put("String", " ");
        pt.put("behavior", "MergedWithPrevious").put("invert", false);
        root.putNull("post_processor");
        ObjectNode dec = root.putObject("decoder");
        dec.put("type", "Sequence");
        ArrayNode ds = dec.putArray("decoders");
        ObjectNode d1 = ds.addObject();
        d1.put("type", "Replace");
        d1.putObject("pattern").put("String", "\u2581");
        d1.put("content", " ");
        ds.addObject().put("type", "ByteFallback");
        ds.addObject().put("type", "Fuse");
        Long unk = r.integer("tokenizer.ggml.unknown_token_id");
        ObjectNode m = root.putObject("model");
        m.put("type", "BPE").putNull("dropout");
        if (unk != null && unk >= 0 && unk < toks.size()) m.put("unk_token", toks.get((int) (long) unk)); else m.putNull("unk_token");
        m.putNull("continuing_subword_prefix").putNull("end_of_word_suffix").put("fuse_unk", true).put("byte_fallback", true)
                .put("ignore_merges", false);
        ObjectNode vocab = m.putObject("vocab");
        for (int i = 0; i < toks.size(); i++) vocab.put(toks.get(i), i);
        ArrayNode merges = m.putArray("merges");
        List<Object> ms = r.array("tokenizer.ggml.merges");
        if (ms == null) throw new ConvertException(r.file() + ": tokenizer.ggml.merges is missing (gemma4 tokenizers are BPE)");
        for (Object o : ms) {
            if (!(o instanceof String st) || st.indexOf(' ') < 0) throw new ConvertException(r.file() + ": tokenizer.ggml.merges entry " + o + " is not \"a b\"");
            int sp = st.indexOf(' ');
            merges.addArray().add(st.substring(0, sp)).add(st.substring(sp + 1));
        }
    }

    private static void sentencePiece(GgufReader r, ObjectNode root, List<String> toks, int[] types) {
        boolean prefix = !Boolean.FALSE.equals(r.bool("tokenizer.ggml.add_space_prefix"));
        float[] scores = floats(r, "tokenizer.ggml.scores", toks.size());
        ArrayNode norms = F.arrayNode();
        if (prefix) {
            ObjectNode p = norms.addObject();
            p.put("type", "Prepend").put("prepend", "\u2581");
        }
        ObjectNode rep = norms.addObject();
        rep.put("type", "Replace");
        rep.putObject("pattern").put("String", " ");
        rep.put("content", "\u2581");
        if (norms.size() == 1) root.set("normalizer", rep);
        else root.putObject("normalizer").put("type", "Sequence").set("normalizers", norms);
        root.putNull("pre_tokenizer");
        root.putNull("post_processor");
        ObjectNode dec = root.putObject("decoder");
        dec.put("type", "Sequence");
        ArrayNode ds = dec.putArray("decoders");
        ObjectNode d1 = ds.addObject();
        d1.put("type", "Replace");
        d1.putObject("pattern").put("String", "\u2581");
        d1.put("content", " ");
        ds.addObject().put("type", "ByteFallback");
        ds.addObject().put("type", "Fuse");
        if (prefix) ds.addObject().put("type", "Strip").put("content", " ").put("start", 1).put("stop", 0);
        Long unk = r.integer("tokenizer.ggml.unknown_token_id");
        ObjectNode m = root.putObject("model");
        m.put("type", "BPE").putNull("dropout");
        if (unk != null && unk >= 0 && unk < toks.size()) m.put("unk_token", toks.get((int) (long) unk)); else m.putNull("unk_token");
        m.putNull("continuing_subword_prefix").putNull("end_of_word_suffix").put("fuse_unk", true).put("byte_fallback", true)
                .put("ignore_merges", false);
        ObjectNode vocab = m.putObject("vocab");
        Map<String, Integer> ids = new HashMap<>();
        for (int i = 0; i < toks.size(); i++) {
            vocab.put(toks.get(i), i);
            ids.putIfAbsent(toks.get(i), i);
        }
        ArrayNode merges = m.putArray("merges");
        for (String[] mg : spmMerges(toks, scores, ids)) merges.addArray().add(mg[0]).add(mg[1]);
    }

    /**
     * transformers' SentencePieceExtractor: for every piece, every split into two pieces that are both in
     * the vocab is a merge (ordered by the left then right piece id); all merges are then stably sorted
     * by the merged piece's score, highest first.
     */
    static List<String[]> spmMerges(List<String> toks, float[] scores, Map<String, Integer> ids) {
        record M(String l, String r, float score) {}
        List<M> all = new ArrayList<>();
        for (int i = 0; i < toks.size(); i++) {
            String piece = toks.get(i);
            if (ids.get(piece) != i || piece.isEmpty()) continue;   // a duplicate string: the first id wins, like a Python dict; "" has no split
            List<M> local = new ArrayList<>();
            for (int k = piece.offsetByCodePoints(0, 1); k < piece.length(); k = piece.offsetByCodePoints(k, 1)) {
                String a = piece.substring(0, k), b = piece.substring(k);
                if (ids.containsKey(a) && ids.containsKey(b)) local.add(new M(a, b, scores[i]));
            }
            local.sort((x, y) -> {
                int c = Integer.compare(ids.get(x.l()), ids.get(y.l()));
                return c != 0 ? c : Integer.compare(ids.get(x.r()), ids.get(y.r()));
            });
            all.addAll(local);
        }
        all.sort((x, y) -> Float.compare(y.score(), x.score()));      // List.sort is stable
        List<String[]> out = new ArrayList<>(all.size());
        for (M x : all) out.add(new String[] {x.l(), x.r()});
        return out;
    }

    private static int[] ints(GgufReader r, String key, int n, int dflt) {
        int[] out = new int[n];
        java.util.Arrays.fill(out, dflt);
        List<Object> a = r.array(key);
        if (a == null) return out;
        if (a.size() != n) throw new ConvertException(r.file() + ": " + key + " has " + a.size() + " entries for " + n + " tokens");
        for (int i = 0; i < n; i++) {
            if (!(a.get(i) instanceof Long l)) throw new ConvertException(r.file() + ": " + key + "[" + i + "] is not an integer");
            out[i] = (int) (long) l;
        }
        return out;
    }

    private static float[] floats(GgufReader r, String key, int n) {
        float[] out = new float[n];
        List<Object> a = r.array(key);
        if (a == null) return out;
        if (a.size() != n) throw new ConvertException(r.file() + ": " + key + " has " + a.size() + " entries for " + n + " tokens");
        for (int i = 0; i < n; i++) {
            Object o = a.get(i);
            if (o instanceof Double d) out[i] = (float) (double) d;
            else if (o instanceof Long l) out[i] = l;
            else throw new ConvertException(r.file() + ": " + key + "[" + i + "] is not a number");
        }
        return out;
    }
}
