package dev.cmf4j.model;

import dev.cmf4j.backend.Glu;

/** The position-wise feed-forward part of one layer. */
public sealed interface Ffn permits Ffn.GatedMlp, Ffn.Moe, Ffn.DenseAndMoe {

    /** down(glu(gate(x), up(x))), with optional biases (null = none). */
    record GatedMlp(String gate, String up, String down, Glu glu, String gateBias, String upBias, String downBias)
            implements Ffn {
        public GatedMlp(String gate, String up, String down, Glu glu) { this(gate, up, down, glu, null, null, null); }
    }

    /**
     * Mixture of experts: a router picks {@code topK} experts per token and weighs them; an optional shared
     * expert (scaled by σ(sharedGate·x) when that gate exists) is added.
     */
    record Moe(Router router, Experts experts, int topK, Glu glu, GatedMlp shared, String sharedGate)
            implements Ffn {}

    /**
     * Gemma4 26B-style block: a dense MLP on the pre-FFN-normed input and, beside it, an MoE fed from the
     * layer's residual input; each has its own post norm and the two are summed.
     */
    record DenseAndMoe(GatedMlp mlp, Norm postMlp, Moe moe, Norm preMoe, Norm postMoe) implements Ffn {}

    /** How routers turn router logits into (expert, weight) pairs. */
    sealed interface Router {
        /** Qwen-MoE: softmax over all experts, top-k, optional renormalization of the k weights. */
        record SoftmaxTopK(String weight, String bias, boolean normTopK) implements Router {}

        /** GPT-OSS: top-k of the (biased) logits, softmax over the k selected. */
        record TopKSoftmax(String weight, String bias) implements Router {}

        /**
         * Gemma4: x̂ = rmsnorm(x) (no scale) · scale · hidden^-½, softmax(proj·x̂), top-k, renormalize, then
         * multiply by per_expert_scale of the chosen experts.
         */
        record ScaledSoftmaxTopK(String proj, String scale, String perExpertScale, float eps) implements Router {}

        /**
         * Embryo resonance routing (top-1, weight exactly 1): expert e has a centre μ_e, {@code rank} orthonormal
         * directions u_e and a bias b_e; score_e = b_e − (‖y − μ_e‖² − Σ_i ((y − μ_e)·u_ei)²) and the first
         * maximum wins. Descriptors are per expert ({@code %d} in the names) or stacked [experts, ·] tensors.
         *
         * @param u null when rank is 0
         */
        record Resonance(String mu, String u, String bias, boolean stacked, int rank) implements Router {
            public String nameOf(String name, int expert) { return stacked ? name : name.formatted(expert); }
        }
    }

    /**
     * Where the expert matrices live. Each {@link ExpertMatrix} names either one tensor per expert (the name
     * holds {@code %d} for the expert index) or one 3-D tensor [experts, ·, ·].
     *
     * @param gate       gate projection, or null when fused into {@code gateUp}
     * @param up         up projection, or null when fused into {@code gateUp}
     * @param gateUp     fused gate+up, or null
     * @param interleaved fused gate/up columns alternate (gpt-oss: even = gate, odd = up); else first half gate
     * @param gateBias   optional biases, per expert ({@code %d}) or one [experts, n] tensor ({@code fused})
     */
    record Experts(int count, int intermediate, ExpertMatrix gate, ExpertMatrix up, ExpertMatrix gateUp,
                   boolean interleaved, ExpertMatrix down, ExpertMatrix gateBias, ExpertMatrix upBias,
                   ExpertMatrix gateUpBias, ExpertMatrix downBias) {}

    /**
     * One projection of every expert.
     *
     * @param name       tensor name; contains {@code %d} when stored per expert
     * @param fused      one tensor [experts, rows, cols] holding every expert
     * @param inputMajor stored [in, out] (x·W, gpt-oss HF layout) instead of [out, in]
     */
    record ExpertMatrix(String name, boolean fused, boolean inputMajor) {
        public String nameOf(int expert) { return fused ? name : name.formatted(expert); }
    }
}
