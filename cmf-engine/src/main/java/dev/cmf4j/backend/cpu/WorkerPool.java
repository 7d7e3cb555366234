package dev.cmf4j.backend.cpu;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/**
 * A persistent pool of worker threads that splits an index range across cores. Threads stay alive
 * between calls (no per-op thread hand-off cost beyond an unpark); the calling thread works too.
 * One job runs at a time; concurrent callers queue on the submit lock.
 */
public final class WorkerPool implements AutoCloseable {

    /** Work over indices [from, to). */
    @FunctionalInterface
    public interface RangeBody { void run(int from, int to); }

    private final Thread[] workers;
    private final Object submitLock = new Object();
    private final AtomicInteger nextIndex = new AtomicInteger();
    private final AtomicInteger running = new AtomicInteger();
    private final AtomicReference<Throwable> failure = new AtomicReference<>();
    private volatile long generation;
    private volatile boolean closed;
    private volatile RangeBody body;
    private volatile int end, grain;
    private volatile Thread submitter;

    private static volatile WorkerPool shared;

    /** A pool with {@code threads} threads in all (the caller counts as one). */
    public WorkerPool(int threads) {
        if (threads < 1) throw new IllegalArgumentException("threads must be >= 1");
        workers = new Thread[threads - 1];
        for (int i = 0; i < workers.length; i++) {
            Thread t = new Thread(this::workLoop, "cmf-worker-" + (i + 1));
            t.setDaemon(true);
            workers[i] = t;
            t.start();
        }
    }

    /** The process-wide pool, sized by {@code -Dcmf.threads} or the available processors. */
    public static WorkerPool shared() {
        WorkerPool p = shared;
        if (p == null) {
            synchronized (WorkerPool.class) {
                p = shared;
                if (p == null) {
                    int n = Integer.getInteger("cmf.threads", Runtime.getRuntime().availableProcessors());
                    shared = p = new WorkerPool(Math.max(1, n));
                }
            }
        }
        return p;
    }

    public int threads() { return workers.length + 1; }

    /**
     * Runs {@code body} over [0, n) in chunks of about {@code grain} indices, spread over the pool; returns
     * when all are done. Runs inline when the range is one chunk or the pool has one thread.
     */
    public void parallelFor(int n, int grain, RangeBody body) {
        if (n <= 0) return;
        grain = Math.max(1, grain);
        if (workers.length == 0 || n <= grain || Thread.currentThread().getName().startsWith("cmf-worker-")) {
            body.run(0, n);
            return;
        }
        synchronized (submitLock) {
            this.body = body;
            this.end = n;
            this.grain = Math.max(grain, (n + 4 * threads() - 1) / (4 * threads()));
            this.submitter = Thread.currentThread();
            nextIndex.set(0);
            failure.set(null);
            running.set(workers.length);
            generation++;
            for (Thread w : workers) LockSupport.unpark(w);
            drain();
            while (running.get() > 0) LockSupport.park(this);
            this.body = null;
            Throwable t = failure.get();
            if (t instanceof RuntimeException re) throw re;
            if (t instanceof Error e) throw e;
            if (t != null) throw new RuntimeException(t);
        }
    }

    private void drain() {
        RangeBody b = body;
        int n = end, g = grain;
        try {
            for (int from; (from = nextIndex.getAndAdd(g)) < n; ) b.run(from, Math.min(n, from + g));
        } catch (Throwable t) {
            failure.compareAndSet(null, t);
            nextIndex.set(n);
        }
    }

    private void workLoop() {
        long seen = 0;
        while (!closed) {
            long g = generation;
            if (g == seen) { LockSupport.park(this); continue; }
            seen = g;
            drain();
            if (running.decrementAndGet() == 0) LockSupport.unpark(submitter);
        }
    }

    @Override public void close() {
        closed = true;
        for (Thread w : workers) LockSupport.unpark(w);
    }
}
