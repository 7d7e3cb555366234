package dev.cmf4j.model;

/**
 * A model's multi-token-prediction head (DeepSeek-V3, Qwen3-Next): from the model's last-layer hidden state h at
 * position i (before its final norm) and the token at i + 1, it predicts the token at i + 2:
 * <pre>
 *   x = projection · [embeddingNorm(embed(token)); hiddenNorm(h)]      (embedding first)
 *   x = body's one decoder layer (x)                                    (its own K/V over the head's positions)
 *   logits = head(finalNorm(x))
 * </pre>
 * Its x before the final norm stands in for h at the next position, so one head drafts several tokens.
 *
 * @param body          the layer, final norm, embedding and head as a one-layer spec (embedding and head shared with
 *                      the model unless the file says otherwise)
 * @param projection    [hidden, 2·hidden] ({@code model.mtp.fc.weight})
 * @param embeddingNorm the norm of the embedded token ({@code model.mtp.pre_fc_norm_embedding.weight})
 * @param hiddenNorm    the norm of the model's hidden state ({@code model.mtp.pre_fc_norm_hidden.weight})
 */
public record MtpSpec(ModelSpec body, String projection, Norm embeddingNorm, Norm hiddenNorm) {}
