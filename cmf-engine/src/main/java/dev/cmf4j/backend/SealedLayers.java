package dev.cmf4j.backend;

/**
 * Which attention layers a device forward runs sealed ({@code --o1}: an exact ring of the last {@code window} keys,
 * {@code sinks} permanent keys, the far field on at most {@code landmarks} landmark keys) and with what budget; the
 * model's {@code AttentionMemory.Sealed} resolved to the plan's layers (docs/MEMORY.md has the operator).
 *
 * @param layers one flag per layer of the plan
 */
public record SealedLayers(boolean[] layers, int landmarks, int window, int sinks) {
    public SealedLayers {
        layers = layers.clone();
        if (landmarks < 4 || window < 1 || sinks < 0)
            throw new IllegalArgumentException("sealed layers: landmarks " + landmarks + ", window " + window + ", sinks " + sinks);
    }

    /** Whether layer {@code i} is sealed. */
    public boolean seals(int i) { return layers[i]; }

    /** Prompts up to window + sinks + SLACK positions stay exact (tiny prompts give duplicate landmarks): the CPU's rule. */
    public static final int SLACK = 8;

    /**
     * Whether a sequence holding {@code held} positions seals before a step of {@code tokens} rows: at the first
     * single-token step past window + sinks + {@link #SLACK}, or when asked (State.seal) once it holds its sinks and 4.
     */
    public static boolean due(int held, int tokens, boolean requested, int window, int sinks) {
        return tokens == 1 && held > window + sinks + SLACK || requested && held >= Math.max(4, sinks);
    }
}
