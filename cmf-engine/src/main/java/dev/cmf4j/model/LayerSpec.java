package dev.cmf4j.model;

import dev.cmf4j.backend.Activation;

/**
 * One decoder layer. Every layer runs the same fixed sequence (see {@code Graph}); the optional parts
 * are null when a family does not have them.
 *
 * @param preMixer      norm before the mixer (input_layernorm)
 * @param postMixer     norm of the mixer output before the residual add (Gemma sandwich); null = none
 * @param preFfn        norm before the FFN
 * @param postFfn       norm of the FFN output before the residual add (Gemma sandwich); null = none
 * @param perLayerInput Gemma4 per-layer input injection after the FFN; null = none
 * @param layerScalar   1-element tensor multiplying the layer output (Gemma4); null = none
 */
public record LayerSpec(int index, Mixer mixer, Ffn ffn, Norm preMixer, Norm postMixer, Norm preFfn,
                        Norm postFfn, PerLayerInput perLayerInput, String layerScalar) {

    /**
     * Gemma4 PLE step: x += norm(proj(act(gate(x)) · pli[layer])).
     */
    public record PerLayerInput(String gate, String projection, Norm postNorm, Activation act) {}
}
