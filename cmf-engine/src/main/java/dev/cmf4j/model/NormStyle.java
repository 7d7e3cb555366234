package dev.cmf4j.model;

/** How an RMSNorm applies its weight: {@code qwen}/llama style x̂·w, or {@code gemma} style x̂·(1+w). */
public enum NormStyle {
    /** x̂·w (llama, qwen, gpt-oss, gemma4). */
    PLAIN,
    /** x̂·(1+w) (gemma, gemma2, gemma3, qwen3-next): the stored weight is an offset from 1. */
    OFFSET;

    /** The CMF {@code arch.norm_style} value ("qwen" or "gemma"); null for anything else. */
    public static NormStyle ofArch(String s) {
        if (s == null) return null;
        return switch (s.toLowerCase(java.util.Locale.ROOT)) {
            case "qwen", "llama", "plain" -> PLAIN;
            case "gemma", "offset" -> OFFSET;
            default -> null;
        };
    }
}
