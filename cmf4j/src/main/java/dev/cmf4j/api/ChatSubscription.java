package dev.cmf4j.api;

import dev.cmf4j.runtime.GenerationRequest;

import java.util.concurrent.Flow;

/**
 * One subscriber's generation for {@link Chat#publisher}: runs on its own virtual thread and waits for demand before
 * each event, so a slow subscriber holds back only its own reply (the scheduler's thread never waits on it).
 */
final class ChatSubscription implements Flow.Subscription {
    /** Thrown out of the text callback when the subscriber cancels: stops the run quietly. */
    private static final class Cancelled extends RuntimeException {
        Cancelled() { super(null, null, false, false); }
    }

    private final Run run;
    private final GenerationRequest request;
    private final Flow.Subscriber<? super ChatEvent> subscriber;
    private long demand;
    private boolean cancelled;

    ChatSubscription(Run run, GenerationRequest request, Flow.Subscriber<? super ChatEvent> subscriber) {
        this.run = run;
        this.request = request;
        this.subscriber = subscriber;
    }

    void start() {
        subscriber.onSubscribe(this);
        Thread.ofVirtual().name("cmf-publisher").start(() -> {
            Reply reply;
            try {
                reply = run.run(request, text -> emit(new ChatEvent.Text(text)), null);
                emit(new ChatEvent.Done(reply));
            } catch (Cancelled c) {
                return;
            } catch (RuntimeException e) {
                if (!isCancelled()) subscriber.onError(e);
                return;
            }
            if (!isCancelled()) subscriber.onComplete();
        });
    }

    @Override public synchronized void request(long n) {
        if (n <= 0) {   // rule 3.9: a non-positive request is an error
            cancelled = true;
            run.cancel();
            notifyAll();
            Thread.ofVirtual().start(() -> subscriber.onError(new IllegalArgumentException("request(n) needs n > 0, got " + n)));
            return;
        }
        demand = demand + n < 0 ? Long.MAX_VALUE : demand + n;
        notifyAll();
    }

    @Override public synchronized void cancel() {
        cancelled = true;
        run.cancel();
        notifyAll();
    }

    private synchronized boolean isCancelled() { return cancelled; }

    private void emit(ChatEvent e) {
        synchronized (this) {
            while (demand == 0 && !cancelled) {
                try {
                    wait();
                } catch (InterruptedException x) {
                    Thread.currentThread().interrupt();
                    throw new Cancelled();
                }
            }
            if (cancelled) throw new Cancelled();
            demand--;
        }
        subscriber.onNext(e);
    }
}
