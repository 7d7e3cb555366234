package dev.cmf4j.server;

import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.TextCodec;

/**
 * The model a server answers with: its name in the API, its text codec and the scheduler that runs it.
 * Closing stops the scheduler and closes the model.
 */
public record ServedModel(String name, Model model, TextCodec codec, Scheduler scheduler) implements AutoCloseable {

    /** Opens a scheduler of {@code cfg} over {@code model}. */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg) {
        TextCodec codec = TextCodec.of(model.file());
        return new ServedModel(name, model, codec, new Scheduler(model.graph(), codec, cfg));
    }

    /** Positions one sequence may hold: the scheduler's context within the model's. */
    public int maxContext() { return Math.min(scheduler.config().maxContext(), model.spec().maxPositions()); }

    @Override public void close() {
        scheduler.close();
        model.close();
    }
}
