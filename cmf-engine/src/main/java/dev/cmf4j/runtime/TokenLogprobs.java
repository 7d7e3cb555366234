package dev.cmf4j.runtime;

/**
 * The log-probability of a sampled token under the model's distribution (log-softmax of the raw logits, before
 * penalties and temperature, as OpenAI and vLLM report them) and the {@code top} most probable alternatives.
 *
 * @param topIds      the most probable ids, most probable first (lower id first on ties)
 * @param topLogprobs their log-probabilities
 */
public record TokenLogprobs(int id, float logprob, int[] topIds, float[] topLogprobs) {

    /** Of {@code id} in the row {@code logits[off, off + v)}, with the {@code top} most probable ids (0 = none). */
    public static TokenLogprobs of(float[] logits, int off, int v, int id, int top) {
        float max = Float.NEGATIVE_INFINITY;
        for (int i = 0; i < v; i++) max = Math.max(max, logits[off + i]);
        double sum = 0;
        for (int i = 0; i < v; i++) sum += Math.exp(logits[off + i] - max);
        float logZ = (float) (max + Math.log(sum));
        int k = Math.min(top, v);
        int[] ids = new int[k];
        float[] lps = new float[k];
        int n = 0;
        for (int i = 0; i < v && k > 0; i++) {   // insertion into a k-long descending list: k ≤ 20 in practice
            float x = logits[off + i];
            if (n == k && x <= lps[n - 1]) continue;
            int j = n < k ? n++ : n - 1;
            while (j > 0 && lps[j - 1] < x) { lps[j] = lps[j - 1]; ids[j] = ids[j - 1]; j--; }
            lps[j] = x;
            ids[j] = i;
        }
        for (int i = 0; i < k; i++) lps[i] -= logZ;
        return new TokenLogprobs(id, logits[off + id] - logZ, ids, lps);
    }
}
