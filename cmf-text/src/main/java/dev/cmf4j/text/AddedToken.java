package dev.cmf4j.text;

/**
 * A token matched in the raw text before the model runs ({@code "added_tokens"} in tokenizer.json).
 *
 * @param content    the text to match
 * @param singleWord match only when not inside a word
 * @param lstrip     also swallow whitespace on the left
 * @param rstrip     also swallow whitespace on the right
 * @param normalized match against the normalized text (else against the raw text)
 * @param special    a special token: skipped by {@code decode(ids, skipSpecialTokens=true)}
 */
public record AddedToken(String content, boolean singleWord, boolean lstrip, boolean rstrip, boolean normalized, boolean special) {
}
