package dev.cmf4j.text;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.zip.GZIPInputStream;

/**
 * A Hugging Face {@code tokenizer.json} tokenizer that gives the same ids, tokens, offsets and
 * decoded text as the {@code tokenizers} library (and so as transformers).
 *
 * <p>Encoding runs the reference's pipeline: added tokens are cut out of the raw text, the rest is
 * normalized piece by piece (and normalized added tokens are cut out of that), pre-tokenized into
 * words, each word is BPE-encoded, and the post-processor adds special tokens. Decoding maps ids to
 * token strings and runs the decoder chain. Instances are immutable and thread-safe.
 */
public final class Tokenizer {
    final BpeModel model;
    final List<AddedToken> addedList;
    private final AddedVocabulary added;
    final TextNormalizer normalizer;
    final PreTokenizer preTokenizer;
    final PostProcessor postProcessor;
    final TokenDecoder decoder;
    final TokenizerJson.Truncation truncation;
    final TokenizerJson.Padding padding;
    private final int specialsPerSequence;
    private final boolean byteFallbackDecoding;

    Tokenizer(BpeModel model, List<AddedToken> addedList, TextNormalizer normalizer, PreTokenizer preTokenizer,
              PostProcessor postProcessor, TokenDecoder decoder, TokenizerJson.Truncation truncation,
              TokenizerJson.Padding padding) {
        this.model = model;
        this.addedList = List.copyOf(addedList);
        this.added = new AddedVocabulary(this.addedList, model, normalizer);
        this.normalizer = normalizer;
        this.preTokenizer = preTokenizer;
        this.postProcessor = postProcessor;
        this.decoder = decoder;
        this.truncation = truncation;
        this.padding = padding;
        this.specialsPerSequence = TokenizerJson.addedCount(postProcessor);
        this.byteFallbackDecoding = containsByteFallback(decoder);
    }

    // ------------------------------------------------------------------------------ loading

    /** Parses tokenizer.json bytes (UTF-8 JSON; gzip-compressed bytes are also accepted). */
    public static Tokenizer fromJson(byte[] json) {
        if (json.length >= 2 && (json[0] & 0xFF) == 0x1F && (json[1] & 0xFF) == 0x8B) {
            try {
                json = readAll(new GZIPInputStream(new java.io.ByteArrayInputStream(json)));
            } catch (IOException e) {
                throw new TokenizerException(null, "cannot decompress gzip tokenizer.json: " + e.getMessage(), e);
            }
        }
        return TokenizerJson.parse(json);
    }

    /** Reads tokenizer.json (plain or gzip) from a stream; does not close it. */
    public static Tokenizer fromJson(InputStream in) {
        try {
            return fromJson(readAll(in));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read tokenizer.json: " + e.getMessage(), e);
        }
    }

    /** Reads a tokenizer.json or tokenizer.json.gz file. */
    public static Tokenizer fromFile(Path path) {
        try {
            return fromJson(Files.readAllBytes(path));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read " + path + ": " + e.getMessage(), e);
        } catch (TokenizerException e) {
            throw new TokenizerException(e.path(), path + ": " + e.getMessage(), e);
        }
    }

    /** Largest tokenizer.json accepted after decompression: a guard against gzip bombs. */
    private static final long MAX_JSON_BYTES = 1L << 30;

    private static byte[] readAll(InputStream in) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream(1 << 20);
        byte[] buf = new byte[1 << 16];
        long total = 0;
        for (int r; (r = in.read(buf)) > 0; ) {
            total += r;
            if (total > MAX_JSON_BYTES) throw new IOException("tokenizer.json is larger than " + MAX_JSON_BYTES + " bytes");
            out.write(buf, 0, r);
        }
        return out.toByteArray();
    }

    // ------------------------------------------------------------------------------ vocabulary

    /** One past the largest id of the vocabulary and the added tokens. */
    public int vocabSize() {
        return Math.max(model.maxId(), added.maxId()) + 1;
    }

    /** The token string of {@code id} (added tokens first, then the model's vocabulary), or null. */
    public String idToToken(int id) {
        String t = added.idToToken(id);
        return t != null ? t : model.idToToken(id);
    }

    /** The id of a token string, or -1. */
    public int tokenToId(String token) {
        int id = added.tokenToId(token);
        return id >= 0 ? id : model.tokenToId(token);
    }

    /** True when {@code id} is a special added token (skipped by {@code decode(ids, true)}). */
    public boolean isSpecial(int id) {
        AddedToken t = added.token(id);
        return t != null && t.special();
    }

    /** The added tokens by id. */
    public Map<Integer, AddedToken> addedTokens() {
        return added.all();
    }

    // ------------------------------------------------------------------------------ encoding

    /** Encodes {@code text}; {@code addSpecialTokens} lets the post-processor add its special tokens (BOS, ...). */
    public Encoding encode(String text, boolean addSpecialTokens) {
        EncodingBuilder out = new EncodingBuilder();
        NormalizedText root = NormalizedText.of(text, 0);
        for (AddedVocabulary.Span raw : added.findRaw(text)) {
            if (raw.end() <= raw.start() && raw.id() < 0) continue;
            NormalizedText piece = root.slice(raw.start(), raw.end());
            if (raw.id() >= 0) { addToken(out, raw.id(), piece); continue; }
            NormalizedText normalized = normalizer == null ? piece : normalizer.normalize(piece);
            for (AddedVocabulary.Span sp : added.findNormalized(normalized.text)) {
                if (sp.end() <= sp.start()) continue;
                NormalizedText sub = normalized.slice(sp.start(), sp.end());
                if (sp.id() >= 0) addToken(out, sp.id(), sub);
                else tokenizeText(out, sub);
            }
        }
        if (truncation != null) truncate(out, addSpecialTokens);
        toCodePoints(out, text);
        if (postProcessor != null) postProcessor.process(out, addSpecialTokens);
        if (padding != null) pad(out);
        return out.build();
    }

    /** The ids of {@link #encode}. */
    public int[] encodeIds(String text, boolean addSpecialTokens) {
        return encode(text, addSpecialTokens).ids();
    }

    private void addToken(EncodingBuilder out, int id, NormalizedText piece) {
        out.add(id, piece.text, piece.inputStart(0), piece.inputEnd(piece.length()));
    }

    private void tokenizeText(EncodingBuilder out, NormalizedText piece) {
        List<NormalizedText> words = preTokenizer == null ? List.of(piece) : preTokenizer.apply(List.of(piece));
        for (NormalizedText w : words) {
            model.tokenize(w.text, (id, s, e) -> out.add(id, model.idToToken(id), w.inputStart(s), w.inputEnd(e)));
        }
    }

    private void truncate(EncodingBuilder out, boolean addSpecialTokens) {
        int max = truncation.maxLength() - (addSpecialTokens ? specialsPerSequence : 0);
        if (max < 0) max = 0;
        int n = out.size();
        if (n <= max) return;
        int from = truncation.left() ? n - max : 0;
        EncodingBuilder kept = new EncodingBuilder();
        for (int i = from; i < from + max; i++) kept.add(out.ids.a[i], out.tokens.get(i), out.starts.a[i], out.ends.a[i]);
        out.ids.n = 0; out.tokens.clear(); out.starts.n = 0; out.ends.n = 0;
        for (int i = 0; i < kept.size(); i++) out.add(kept.ids.a[i], kept.tokens.get(i), kept.starts.a[i], kept.ends.a[i]);
    }

    private void pad(EncodingBuilder out) {
        int target = padding.fixedLength() >= 0 ? padding.fixedLength() : out.size();
        if (padding.multipleOf() > 0 && target % padding.multipleOf() != 0) {
            target += padding.multipleOf() - target % padding.multipleOf();
        }
        while (out.size() < target) {
            if (padding.left()) out.insert(0, padding.padId(), padding.padToken(), 0, 0);
            else out.add(padding.padId(), padding.padToken(), 0, 0);
        }
    }

    /** Input UTF-16 offsets to code point offsets (what the reference reports). */
    private static void toCodePoints(EncodingBuilder out, String text) {
        boolean surrogates = false;
        for (int i = 0; i < text.length() && !surrogates; i++) surrogates = Character.isSurrogate(text.charAt(i));
        if (!surrogates) return;
        int[] cp = new int[text.length() + 1];
        int c = 0;
        for (int i = 0; i < text.length(); i++) {
            cp[i] = c;
            if (!(Character.isLowSurrogate(text.charAt(i)) && i > 0 && Character.isHighSurrogate(text.charAt(i - 1)))) c++;
        }
        cp[text.length()] = c;
        for (int i = 0; i < out.size(); i++) {
            int s = out.starts.a[i], e = out.ends.a[i];
            out.starts.a[i] = cp[Math.min(Math.max(s, 0), text.length())];
            out.ends.a[i] = cp[Math.min(Math.max(e, 0), text.length())];
        }
    }

    // ------------------------------------------------------------------------------ decoding

    /** Decodes ids to text; unknown ids are skipped, as are special tokens when {@code skipSpecialTokens}. */
    public String decode(int[] ids, boolean skipSpecialTokens) {
        return decodeTokens(tokensFor(ids, 0, ids.length, skipSpecialTokens));
    }

    List<String> tokensFor(int[] ids, int from, int to, boolean skipSpecialTokens) {
        List<String> tokens = new ArrayList<>(to - from);
        for (int i = from; i < to; i++) {
            String t = idToToken(ids[i]);
            if (t == null) continue;
            if (skipSpecialTokens && added.isSpecialContent(t)) continue;
            tokens.add(t);
        }
        return tokens;
    }

    String decodeTokens(List<String> tokens) {
        if (decoder == null) return String.join(" ", tokens);
        return String.join("", decoder.decodeChain(tokens));
    }

    /** Whether {@code id} would be dropped by decode (unknown, or special while skipping). */
    boolean decodesToNothing(int id, boolean skipSpecialTokens) {
        String t = idToToken(id);
        return t == null || (skipSpecialTokens && added.isSpecialContent(t));
    }

    /** Whether {@code id} is a {@code <0xNN>} token that a ByteFallback decoder joins with its neighbours. */
    boolean isFallbackByte(int id) {
        if (!byteFallbackDecoding) return false;
        String t = idToToken(id);
        return t != null && TokenDecoder.ByteFallback.byteValue(t) >= 0;
    }

    /** A decoder for generation: feed ids one at a time, get text as soon as it is final. */
    public StreamingDecoder streamingDecoder(boolean skipSpecialTokens) {
        return new StreamingDecoder(this, skipSpecialTokens);
    }

    private static boolean containsByteFallback(TokenDecoder d) {
        if (d instanceof TokenDecoder.ByteFallback) return true;
        if (d instanceof TokenDecoder.Sequence s) return s.decoders().stream().anyMatch(Tokenizer::containsByteFallback);
        return false;
    }
}
