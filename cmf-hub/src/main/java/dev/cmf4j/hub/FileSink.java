package dev.cmf4j.hub;

import java.io.EOFException;
import java.io.IOException;
import java.net.http.HttpResponse.BodySubscriber;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Flow;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongConsumer;

/**
 * A response body written into a file at its own offsets: bytes {@code [from, to)} of the remote file land at
 * {@code [from, to)} of the channel as they arrive, and {@code reached} tells how far that got, also after a cut.
 * The first {@code skip} bytes of the body are dropped (a server that ignored the Range header sends the file
 * from its start); bytes past {@code to} end the transfer.
 */
final class FileSink implements BodySubscriber<byte[]> {
    private static final byte[] DONE = new byte[0];

    private final FileChannel out;
    private final long to;
    private final AtomicLong reached;
    private final LongConsumer onBytes;
    private final String name;
    private final Duration stallTimeout;
    private final CompletableFuture<byte[]> body = new CompletableFuture<>();
    private long skip;
    private volatile Flow.Subscription subscription;
    private volatile long lastByteNanos = System.nanoTime();

    FileSink(FileChannel out, long from, long to, long skip, AtomicLong reached, LongConsumer onBytes, String name, Duration stallTimeout) {
        this.out = out;
        this.to = to;
        this.skip = skip;
        this.reached = reached;
        this.onBytes = onBytes;
        this.name = name;
        this.stallTimeout = stallTimeout;
        reached.set(from);
    }

    /** Ends a transfer that received nothing for longer than the stall timeout (the caller retries it). */
    void cutIfStalled(long now) {
        if (now - lastByteNanos > stallTimeout.toNanos())
            abort(new IOException(name + ": no data for " + stallTimeout.toMillis() + " ms"));
    }

    void whenDone(Runnable r) { body.whenComplete((b, e) -> r.run()); }

    private void abort(IOException why) {
        Flow.Subscription s = subscription;
        if (s != null) s.cancel();
        body.completeExceptionally(why);
    }

    @Override public void onSubscribe(Flow.Subscription s) {
        subscription = s;
        if (body.isDone()) s.cancel();
        else s.request(1);
    }

    @Override public void onNext(List<ByteBuffer> items) {
        lastByteNanos = System.nanoTime();
        try {
            for (ByteBuffer b : items) {
                int drop = (int) Math.min(skip, b.remaining());
                b.position(b.position() + drop);
                skip -= drop;
                long pos = reached.get();
                if (b.remaining() > to - pos) b.limit(b.position() + (int) (to - pos));
                int n = b.remaining();
                while (b.hasRemaining()) pos += out.write(b, pos);
                reached.set(pos);
                if (n > 0) onBytes.accept(n);
            }
        } catch (IOException e) {
            abort(new IOException(name + ": cannot write the download: " + e.getMessage(), e));
            return;
        }
        if (reached.get() >= to) {          // all we asked for; a whole-file answer may still be flowing
            subscription.cancel();
            body.complete(DONE);
        } else {
            subscription.request(1);
        }
    }

    @Override public void onError(Throwable t) {
        body.completeExceptionally(t instanceof IOException ? t : new IOException(t.getMessage(), t));
    }

    @Override public void onComplete() {
        if (reached.get() < to) body.completeExceptionally(new EOFException(name + ": connection closed at byte " + reached.get() + " of " + to));
        else body.complete(DONE);
    }

    @Override public CompletionStage<byte[]> getBody() { return body; }
}
