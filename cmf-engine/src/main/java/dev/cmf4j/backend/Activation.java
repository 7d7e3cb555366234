package dev.cmf4j.backend;

/** Element-wise activations, each with the formula transformers uses. */
public enum Activation {
    /** x·σ(x). */
    SILU,
    /** GELU, tanh approximation (gelu_pytorch_tanh / gelu_tanh). */
    GELU_TANH,
    /** Exact GELU (erf). */
    GELU;

    private static final double SQRT_2_OVER_PI = Math.sqrt(2.0 / Math.PI);

    public float apply(float x) {
        return switch (this) {
            case SILU -> x / (1f + (float) Math.exp(-x));
            case GELU_TANH -> (float) (0.5 * x * (1.0 + Math.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))));
            case GELU -> (float) (0.5 * x * (1.0 + Erf.erf(x / Math.sqrt(2.0))));
        };
    }

    /** erf with |error| below 1.2e-7 (Numerical Recipes erfc, Chebyshev fit): enough for float32 GELU. */
    static final class Erf {
        private Erf() {}

        static double erf(double x) {
            double z = Math.abs(x);
            double t = 1.0 / (1.0 + 0.5 * z);
            double r = t * Math.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
                    + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
                    + t * (-0.82215223 + t * 0.17087277)))))))));
            return x >= 0 ? 1.0 - r : r - 1.0;
        }
    }
}
