package dev.cmf4j.model;

/**
 * One RMSNorm: y = x / sqrt(mean(x²) + eps) · (w or 1+w). {@code weight} is null for a norm without a
 * learned scale (Gemma4's v_norm and router norm).
 */
public record Norm(String weight, NormStyle style, float eps, int dim) {
    public static Norm unscaled(int dim, float eps) { return new Norm(null, NormStyle.PLAIN, eps, dim); }
}
