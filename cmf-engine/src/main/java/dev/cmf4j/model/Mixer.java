package dev.cmf4j.model;

/**
 * The token mixer of one layer: what moves information between positions. Each kind has its own
 * executor in {@code dev.cmf4j.model.graph}; adding a kind is a record here plus one executor class.
 */
public sealed interface Mixer permits Mixer.Attention, Mixer.BoundedAttention, Mixer.GatedDeltaNet {

    /**
     * Softmax attention with grouped K/V heads, in every variant the fixtures exercise.
     *
     * @param heads        query heads
     * @param kvHeads      key/value heads (heads % kvHeads == 0)
     * @param headDim      per-head width of q, k and v
     * @param qProj        [heads·headDim (·2 with {@code outputGate}), hidden]
     * @param kProj        [kvHeads·headDim, hidden]; null on a KV-shared layer
     * @param vProj        [kvHeads·headDim, hidden]; null when V is the K projection ({@code attention_k_eq_v})
     *                     or on a KV-shared layer
     * @param oProj        [hidden, heads·headDim]
     * @param qBias        optional biases (gpt-oss)
     * @param qNorm        per-head RMSNorm on q before rope (qwen3, gemma); null when absent
     * @param kNorm        per-head RMSNorm on k before rope
     * @param vNorm        per-head RMSNorm on v (Gemma4, no scale); null when absent
     * @param outputGate   q_proj also emits a per-head gate: out·σ(gate) before o_proj (Qwen3-Next)
     * @param scale        multiplies q·k (head_dim^-½ unless the family says otherwise)
     * @param softcap      attention logit soft-capping, 0 = none
     * @param window       sliding window (query i sees keys j with i − window < j ≤ i); 0 = full causal
     * @param sinks        per-head sink logits joining the softmax denominator (gpt-oss); null when absent
     * @param rope         rotary embedding of q and k
     * @param kvSource     layer whose K/V this layer reads instead of its own (KV sharing); −1 = own
     */
    record Attention(int heads, int kvHeads, int headDim,
                     String qProj, String kProj, String vProj, String oProj,
                     String qBias, String kBias, String vBias, String oBias,
                     Norm qNorm, Norm kNorm, Norm vNorm,
                     boolean outputGate, float scale, float softcap, int window, String sinks,
                     Rope rope, int kvSource) implements Mixer {
        public boolean sharesKv() { return kvSource >= 0; }

        public boolean sliding() { return window > 0; }

        public int qDim() { return heads * headDim; }

        public int kvDim() { return kvHeads * headDim; }
    }

    /**
     * The natively bounded anchor {@code swa_sink_v1} (Embryo): a ring of the last {@code window} unrotated keys and
     * values plus {@code sinks} trained sink vectors per KV group. A query scores the sinks unrotated and each window
     * key after rotating itself by its distance to that key; one softmax covers both. The current token is in its
     * own window. No absolute position appears, so the state is a fixed number of bytes whatever the context.
     *
     * @param sinkK, sinkV  [kvHeads, sinks, headDim] trained sink keys and values (weights, not positions)
     * @param rotaryDim     leading head dims the relative rotation turns (rotate-half pairing over that span)
     * @param ropeTheta     base of the rotation frequencies theta^(−2i/rotaryDim)
     * @param scale         multiplies every score (headDim^-½)
     */
    record BoundedAttention(int heads, int kvHeads, int headDim, String qProj, String kProj, String vProj, String oProj,
                            String sinkK, String sinkV, int window, int sinks, int rotaryDim, double ropeTheta,
                            float scale) implements Mixer {
        public int qDim() { return heads * headDim; }

        public int kvDim() { return kvHeads * headDim; }

        /** Bytes of one sequence's state: the key and value rings, float32. */
        public long stateBytes() { return 2L * kvHeads * window * headDim * Float.BYTES; }
    }

    /**
     * Gated DeltaNet (Qwen3-Next linear attention): a causal depthwise conv over [q;k;v], L2-normed q/k,
     * per-head decay g = −exp(A_log)·softplus(a + dt_bias) and write strength β = σ(b), the delta rule
     * state S[dk×dv] per value head, then a gated RMSNorm with z and the output projection.
     *
     * @param input      where q, k, v, z, a, b come from (fused Qwen3-Next layout or split projections)
     * @param conv       depthwise conv weight [convDim, 1, kernel] (or [convDim, kernel])
     * @param convBias   optional conv bias
     * @param norm       gated RMSNorm over each value head (x̂·w·silu(z))
     */
    record GatedDeltaNet(int keyHeads, int valueHeads, int keyDim, int valueDim, int convKernel,
                         GdnInput input, String conv, String convBias, String aLog, String dtBias,
                         Norm norm, String outProj) implements Mixer {
        public int qkDim() { return keyHeads * keyDim; }

        public int vDim() { return valueHeads * valueDim; }

        public int convDim() { return 2 * qkDim() + vDim(); }

        /** Bytes of one sequence's state: the conv ring of the last kernel−1 inputs and S per value head, float32. */
        public long stateBytes() {
            return (long) Float.BYTES * ((long) (convKernel - 1) * convDim() + (long) valueHeads * keyDim * valueDim);
        }
    }

    /** Where a Gated DeltaNet layer gets its inputs. */
    sealed interface GdnInput {
        /**
         * transformers' Qwen3-Next layout: {@code in_proj_qkvz} [2·qk + 2·v, hidden] grouped per key head as
         * (q, k, v-group, z-group), and {@code in_proj_ba} [2·valueHeads, hidden] grouped as (b-group, a-group).
         */
        record Fused(String qkvz, String ba) implements GdnInput {}

        /** Split projections (Qwen3.5 layout): qkv flat [q; k; v], z [v], b and a [valueHeads]. */
        record Split(String qkv, String z, String b, String a) implements GdnInput {}
    }
}
