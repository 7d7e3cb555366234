package dev.cmf4j.server;

import dev.cmf4j.model.graph.Overlay;

import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.TextCodec;

/**
 * The model a server answers with: its name in the API, its text codec and the scheduler that runs it, and the draft
 * model the scheduler drafts with (or null). Closing stops the scheduler and closes the models.
 */
public record ServedModel(String name, Model model, TextCodec codec, Scheduler scheduler, Overlay defaultOverlay, Model draft)
        implements AutoCloseable {

    public ServedModel {
        if (defaultOverlay == null) defaultOverlay = Overlay.NONE;
    }

    /** Opens a scheduler of {@code cfg} over {@code model}. */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg) { return start(name, model, cfg, null); }

    /** As {@link #start(String, Model, Scheduler.Config)}; requests that name no skill run with {@code defaultOverlay}. */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg, Overlay defaultOverlay) {
        return start(name, model, cfg, defaultOverlay, null, 0);
    }

    /**
     * As {@link #start(String, Model, Scheduler.Config, Overlay)}, drafting up to {@code draftMax} tokens per step with
     * {@code draft} (speculative decoding; null: none), which this served model then owns.
     */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg, Overlay defaultOverlay, Model draft, int draftMax) {
        return start(name, model, cfg, defaultOverlay, draft, draftMax, false);
    }

    /**
     * As above; with {@code mtp} the model's own MTP head drafts ({@link Model#mtpGraph}) and {@code draft}
     * is null.
     */
    public static ServedModel start(String name, Model model, Scheduler.Config cfg, Overlay defaultOverlay, Model draft, int draftMax,
                                    boolean mtp) {
        TextCodec codec = TextCodec.of(model.file());
        Scheduler.Draft d = mtp ? Scheduler.Draft.mtp(model.mtpGraph(), draftMax)
                : draft == null ? null : new Scheduler.Draft(draft.graph(), draftMax);
        return new ServedModel(name, model, codec, new Scheduler(model.graph(), codec, cfg, d), defaultOverlay, draft);
    }

    /**
     * Runs two short generations together and waits for them, so the JIT has compiled the prefill and batched decode
     * paths before the first client comes (its first request would otherwise wait seconds).
     */
    public void warmUp() throws InterruptedException {
        int[] text = codec.encode("The quick brown fox jumps over the lazy dog, and the warm-up is done.");
        int[] prompt = java.util.Arrays.copyOf(text, Math.max(1, Math.min(text.length, maxContext() / 2)));
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(2);
        dev.cmf4j.runtime.TokenSink sink = c -> done.countDown();
        for (int i = 0; i < 2; i++)
            scheduler.submit(dev.cmf4j.runtime.GenerationRequest.of(prompt, 8, dev.cmf4j.runtime.SamplingParams.GREEDY, java.util.Set.of(), sink));
        done.await();
    }

    /** Positions one sequence may hold: the scheduler's context within the model's. */
    public int maxContext() { return Math.min(scheduler.config().maxContext(), model.spec().maxPositions()); }

    @Override public void close() {
        scheduler.close();
        model.close();
        if (draft != null) draft.close();
    }
}
