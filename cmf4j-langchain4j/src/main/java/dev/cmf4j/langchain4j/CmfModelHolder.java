package dev.cmf4j.langchain4j;

import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.ModelOptions;
import dev.cmf4j.api.Sampling;
import dev.langchain4j.model.chat.request.ChatRequestParameters;

import java.nio.file.Path;
import java.util.List;

/**
 * What both adapters' builders collect: the model (a path to open, or an open {@link CmfModel} to share) and the
 * default sampling. A model the adapter opened is closed with it; a shared one is left to its owner.
 */
final class CmfModelHolder implements AutoCloseable {
    final CmfModel model;
    final boolean owned;
    final Sampling sampling;

    CmfModelHolder(Path path, CmfModel shared, ModelOptions options, Sampling sampling) {
        if ((path == null) == (shared == null)) throw new IllegalStateException("give the builder exactly one of modelPath(Path) and model(CmfModel)");
        this.model = shared != null ? shared : Cmf.open(path, options == null ? ModelOptions.defaults() : options);
        this.owned = shared == null;
        this.sampling = sampling;
    }

    /** The sampling as LangChain4j's default parameters (what a request's own parameters override). */
    ChatRequestParameters defaults() {
        return ChatRequestParameters.builder()
                .modelName(model.name())
                .temperature((double) sampling.temperature())
                .topP((double) sampling.topP())
                .topK(sampling.topK() == 0 ? null : sampling.topK())
                .maxOutputTokens(sampling.maxTokens() == 0 ? null : sampling.maxTokens())
                .stopSequences(sampling.stops().isEmpty() ? null : List.copyOf(sampling.stops()))
                .presencePenalty((double) sampling.presencePenalty())
                .frequencyPenalty((double) sampling.frequencyPenalty())
                .build();
    }

    @Override public void close() { if (owned) model.close(); }
}
