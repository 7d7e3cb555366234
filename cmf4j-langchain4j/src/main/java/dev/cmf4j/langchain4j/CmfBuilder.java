package dev.cmf4j.langchain4j;

import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.ModelOptions;
import dev.cmf4j.api.Sampling;

import java.nio.file.Path;
import java.util.List;

/**
 * The settings {@link CmfChatModel.Builder} and {@link CmfStreamingChatModel.Builder} share: which model, how to open
 * it, how to sample (greedy unless told otherwise; a request's own parameters win).
 */
public abstract class CmfBuilder<B extends CmfBuilder<B>> {
    Path modelPath;
    CmfModel model;
    ModelOptions options = ModelOptions.defaults();
    Sampling sampling = Sampling.greedy();

    CmfBuilder() {}

    @SuppressWarnings("unchecked")
    private B self() { return (B) this; }

    /** The CMF file to open (closed with the chat model). */
    public B modelPath(Path p) { modelPath = p; return self(); }

    /** An open model to share (left open when the chat model closes): one model, many chat models and threads. */
    public B model(CmfModel m) { model = m; return self(); }

    /** Device, threads, context and parallel sequences for {@link #modelPath}. */
    public B modelOptions(ModelOptions o) { options = o; return self(); }

    /** All sampling settings at once. */
    public B sampling(Sampling s) { sampling = s; return self(); }

    public B temperature(double t) { sampling = sampling.withTemperature((float) t); return self(); }

    public B topK(int k) { sampling = sampling.withTopK(k); return self(); }

    public B topP(double p) { sampling = sampling.withTopP((float) p); return self(); }

    public B minP(double p) { sampling = sampling.withMinP((float) p); return self(); }

    public B repetitionPenalty(double r) { sampling = sampling.withRepetitionPenalty((float) r); return self(); }

    public B presencePenalty(double p) { sampling = sampling.withPresencePenalty((float) p); return self(); }

    public B frequencyPenalty(double f) { sampling = sampling.withFrequencyPenalty((float) f); return self(); }

    public B seed(Long s) { sampling = sampling.withSeed(s); return self(); }

    public B maxTokens(int n) { sampling = sampling.withMaxTokens(n); return self(); }

    public B stopSequences(List<String> s) { sampling = sampling.withStops(s); return self(); }

    CmfModelHolder holder() { return new CmfModelHolder(modelPath, model, options, sampling); }
}
