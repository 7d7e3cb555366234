package dev.cmf4j.api;

import dev.cmf4j.chat.ToolCallStream;
import dev.cmf4j.runtime.Completion;
import dev.cmf4j.runtime.GenerationException;
import dev.cmf4j.runtime.GenerationRequest;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.TokenLogprobs;
import dev.cmf4j.runtime.TokenSink;

import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.IntConsumer;

/**
 * One generation on its way through the model's scheduler. The scheduler's thread only queues what it produces; the
 * caller's thread takes it from the queue and runs the caller's callbacks, so a slow callback never stalls the other
 * conversations in the batch.
 */
final class Run {
    private sealed interface Event {}

    private record Piece(String text) implements Event {}

    private record Token(int id) implements Event {}

    private record End(Completion completion) implements Event {}

    private final CmfModel model;
    private final LinkedBlockingQueue<Event> events = new LinkedBlockingQueue<>();
    private final boolean parseTools;
    private volatile Scheduler.Ticket ticket;   // set on the caller's thread, cancelled from a subscriber's

    Run(CmfModel model, boolean parseTools) {
        this.model = model;
        this.parseTools = parseTools;
    }

    /**
     * Submits {@code request} (its sink replaced) and waits for its end, calling {@code onText} with each piece of
     * text (tool-call blocks held back when the chat has tools) and {@code onToken} with each id on this thread.
     *
     * @throws InferenceException when it cannot run or does not finish (the model closed, a failure, a cancel)
     */
    Reply run(GenerationRequest request, Consumer<String> onText, IntConsumer onToken) {
        TokenSink sink = new TokenSink() {
            @Override public void token(int id, TokenLogprobs lp) { if (onToken != null) events.add(new Token(id)); }

            @Override public void text(String piece) { events.add(new Piece(piece)); }

            @Override public void finished(Completion c) { events.add(new End(c)); }
        };
        submit(request.withSink(sink));
        ToolCallStream tools = parseTools ? new ToolCallStream() : null;
        StringBuilder text = new StringBuilder();
        List<ToolCall> calls = new ArrayList<>();
        try {
            while (true) {
                switch (events.take()) {
                    case Token t -> onToken.accept(t.id());
                    case Piece p -> {
                        String shown = p.text();
                        if (tools != null) shown = release(tools.push(shown), calls);
                        text.append(shown);
                        if (onText != null && !shown.isEmpty()) onText.accept(shown);
                    }
                    case End e -> {
                        Completion c = e.completion();
                        failIfBroken(c);
                        if (tools != null) {
                            String rest = release(tools.finish(), calls);
                            text.append(rest);
                            if (onText != null && !rest.isEmpty()) onText.accept(rest);
                        }
                        Reply.Finish f = !calls.isEmpty() ? Reply.Finish.TOOL_CALLS
                                : c.finish() == Completion.Finish.STOP ? Reply.Finish.STOP : Reply.Finish.LENGTH;
                        return new Reply(tools != null ? text.toString().strip() : c.text(), calls, c.tokens(), f, c.promptTokens(), c.cachedTokens());
                    }
                }
            }
        } catch (InterruptedException e) {
            cancelAndWait();
            Thread.currentThread().interrupt();
            throw new InferenceException(InferenceException.Kind.CANCELLED, "the generation was cancelled: its thread was interrupted", e);
        } catch (RuntimeException | Error e) {   // a callback failed: the generation stops with it
            cancelAndWait();
            throw e;
        }
    }

    /** Ends the generation before the scheduler's next step (a publisher's cancel). */
    void cancel() {
        Scheduler.Ticket t = ticket;
        if (t != null) t.cancel();
    }

    private void submit(GenerationRequest r) {
        if (model.isClosed()) throw closed();
        try {
            ticket = model.scheduler().submit(r);
        } catch (Scheduler.QueueFull e) {
            throw new InferenceException(InferenceException.Kind.BUSY, e.getMessage(), e);
        } catch (GenerationException.ContextLimit e) {
            throw new InferenceException(InferenceException.Kind.CONTEXT_LIMIT, e.getMessage(), e);
        } catch (GenerationException e) {
            throw new InferenceException(InferenceException.Kind.BAD_INPUT, e.getMessage(), e);
        } catch (IllegalStateException e) {   // the scheduler closed between the check and the submit
            throw closed();
        }
    }

    private String release(ToolCallStream.Out out, List<ToolCall> calls) {
        for (dev.cmf4j.chat.ToolCall c : out.calls())
            calls.add(new ToolCall("call_" + UUID.randomUUID().toString().replace("-", "").substring(0, 24), c.name(), c.argumentsJson()));
        return out.content();
    }

    private void failIfBroken(Completion c) {
        switch (c.finish()) {
            case STOP, LENGTH -> { }
            case CANCELLED -> {
                if (model.isClosed()) throw new InferenceException(InferenceException.Kind.CLOSED,
                        "the model was closed while this generation ran (after " + c.tokens().length + " tokens)");
                throw new InferenceException(InferenceException.Kind.CANCELLED, "the generation was cancelled after " + c.tokens().length + " tokens");
            }
            case TIMEOUT -> throw new InferenceException(InferenceException.Kind.FAILED, "the generation ran past its timeout");
            case ERROR -> throw new InferenceException(InferenceException.Kind.FAILED, "the generation failed: " + c.error());
        }
    }

    private InferenceException closed() {
        return new InferenceException(InferenceException.Kind.CLOSED, "the model " + model.name() + " is closed");
    }

    /** After a failed callback or an interrupt: cancel and wait (within a step) for the scheduler to let go of it. */
    private void cancelAndWait() {
        cancel();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        try {
            while (System.nanoTime() < deadline)
                if (events.poll(100, TimeUnit.MILLISECONDS) instanceof End) return;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
