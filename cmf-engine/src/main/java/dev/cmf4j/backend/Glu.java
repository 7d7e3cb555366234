package dev.cmf4j.backend;

/** How a gated MLP combines its gate and up projections into the down projection's input. */
public sealed interface Glu {
    float apply(float gate, float up);

    /** act(gate)·up: SwiGLU (silu) and GeGLU (gelu). */
    record Gated(Activation act) implements Glu {
        @Override public float apply(float gate, float up) { return act.apply(gate) * up; }
    }

    /**
     * GPT-OSS's clamped SwiGLU: gate ≤ limit, |up| ≤ limit, out = gate·σ(alpha·gate)·(up + 1).
     */
    record ClampedSwiglu(float alpha, float limit) implements Glu {
        @Override public float apply(float gate, float up) {
            float g = Math.min(gate, limit);
            float u = Math.max(-limit, Math.min(up, limit));
            float glu = g / (1f + (float) Math.exp(-g * alpha));
            return (u + 1f) * glu;
        }
    }
}
