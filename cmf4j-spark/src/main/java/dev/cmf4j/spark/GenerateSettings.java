package dev.cmf4j.spark;

import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.Message;
import dev.cmf4j.api.ModelOptions;
import dev.cmf4j.api.Reply;
import dev.cmf4j.api.Sampling;

import java.io.Serializable;
import java.util.List;

/**
 * What a task needs to generate: the model to open and how to sample, taken from a {@link CmfGenerate}'s params on
 * the driver and shipped to the executors with the task.
 *
 * @param modelPath   a path every executor can read, a file shipped with {@code --files} (its name), or {@code hf://ORG/REPO}
 * @param window      rows of one partition in flight at once; also the conversations the model decodes together
 * @param chat        a text prompt is sent as one user message through the chat template
 */
record GenerateSettings(String modelPath, String device, int threads, int contextLength, String skill, int window,
                        int maxTokens, boolean greedy, float temperature, int topK, float topP, Long seed,
                        boolean ignoreEos, boolean chat) implements Serializable {

    /**
     * How the executor opens the model. The model's queue is large because every task of the executor puts its window
     * in it; each task bounds its own.
     */
    ModelOptions options() {
        return ModelOptions.defaults().withDevice(device).withThreads(threads).withContextLength(contextLength)
                .withSkill(skill).withParallel(window).withMaxQueue(1 << 16);
    }

    Sampling sampling() {
        Sampling s = greedy ? Sampling.greedy()
                : Sampling.defaults().withTemperature(temperature).withTopK(topK).withTopP(topP);
        return s.withSeed(seed).withMaxTokens(maxTokens).withIgnoreEos(ignoreEos);
    }

    /** One row's generation on the calling thread (the model's scheduler batches it with every other thread's). */
    Reply generate(CmfModel model, Prompt prompt) {
        return switch (prompt) {
            case Prompt.Text t when chat -> model.newChat().complete(List.of(Message.user(t.text())), sampling());
            case Prompt.Text t -> model.complete(t.text(), sampling(), null);
            case Prompt.Messages m -> model.newChat().complete(m.messages(), sampling());
        };
    }
}
