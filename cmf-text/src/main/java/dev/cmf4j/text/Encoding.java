package dev.cmf4j.text;

import java.util.Arrays;
import java.util.List;

/**
 * The result of {@link Tokenizer#encode}: token ids, their token strings, and for each token the
 * range of the input it covers in Unicode code points ({@code [start, end)}; special tokens added by
 * the post-processor cover {@code [0, 0)}), as the reference's {@code encode(...).offsets}.
 */
public record Encoding(int[] ids, List<String> tokens, int[] starts, int[] ends) {
    public Encoding {
        if (tokens.size() != ids.length || starts.length != ids.length || ends.length != ids.length) {
            throw new IllegalArgumentException("ids, tokens and offsets differ in length");
        }
        tokens = List.copyOf(tokens);
    }

    public int size() {
        return ids.length;
    }

    @Override public boolean equals(Object o) {
        return o instanceof Encoding e && Arrays.equals(ids, e.ids) && tokens.equals(e.tokens)
                && Arrays.equals(starts, e.starts) && Arrays.equals(ends, e.ends);
    }

    @Override public int hashCode() {
        return Arrays.hashCode(ids) * 31 + tokens.hashCode();
    }

    @Override public String toString() {
        return "Encoding" + Arrays.toString(ids) + tokens;
    }
}
