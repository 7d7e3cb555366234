package dev.cmf4j.backend.cpu.kernel;

import java.lang.invoke.VarHandle;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A persistent pool of worker threads for the CPU kernels, sized to the machine by default.
 *
 * <p>{@link #run(int, Task)} hands out chunk indices {@code 0..chunks-1} to the calling thread and
 * the {@code threads-1} workers; whoever is free takes the next chunk (an atomic counter), so a
 * thread slowed down by the OS or a noisy neighbour simply takes fewer chunks and all threads finish
 * together. Between jobs the workers spin for a short while ({@link #spinNanos()}, the gap between
 * two matmuls of one token is far shorter) and then park, so an idle pool costs no CPU. Handing a
 * job to spinning workers costs well under a microsecond; waking parked ones costs an unpark each.
 *
 * <p>One job runs at a time (callers from several threads are serialised). A task that calls
 * {@code run} again from inside a chunk gets its chunks run inline on that thread (no deadlock).
 * The pool owns scratch buffers ({@link #scratch(int, int)}) that kernels reuse across calls, so a
 * kernel call allocates nothing after the first use at a given size.
 */
public final class WorkerPool implements AutoCloseable {

    /** Work of one chunk; chunks of one job must be independent of each other. */
    @FunctionalInterface
    public interface Task {
        /** Runs chunk {@code chunk} on thread {@code worker} (0 = the caller, 1..threads-1 the workers). */
        void run(int chunk, int worker);
    }

    /** Work over indices {@code [from, to)}. */
    @FunctionalInterface
    public interface RangeBody {
        void run(int from, int to);
    }

    /**
     * Long enough for the caller's serial work between two jobs of a token (norms, rope, merges: tens of µs), short
     * enough that a worker sharing its core with another process parks instead of burning the time slice it needs
     * for the next job (docs/CPU_KERNELS.md, "API").
     */
    private static final long DEFAULT_SPIN_NANOS = 50_000;

    private final int threads;
    private final long spinNanos;
    private final Thread[] workers;
    private final boolean[] parked;                 // guarded by the volatile job handshake
    private final ReentrantLock submit = new ReentrantLock();
    /** The job being run, or the last one; a new object per job, so a worker late for one can never run another's chunks. */
    private volatile Job job = new Job(null, 0);
    private volatile boolean closed;
    private Thread owner;                           // thread inside run(), for reentrancy detection
    private final float[][] scratch = new float[8][];
    private short[] shortScratch = new short[0];
    private final float[][][] workerScratch;
    final MatvecJob matvecJob = new MatvecJob();
    final GemmJob gemmJob = new GemmJob();

    /** A pool with one thread per available processor. */
    public WorkerPool() {
        this(Runtime.getRuntime().availableProcessors());
    }

    /** A pool running jobs on {@code threads} threads in all (the caller counts as one). */
    public WorkerPool(int threads) {
        this(threads, DEFAULT_SPIN_NANOS);
    }

    /**
     * @param threads   threads in all, the calling thread included (1 = run everything inline)
     * @param spinNanos how long an idle worker spins before parking
     */
    public WorkerPool(int threads, long spinNanos) {
        if (threads < 1 || threads > 1024) throw new IllegalArgumentException("threads must be 1..1024, got " + threads);
        this.threads = threads;
        this.spinNanos = Math.max(0, spinNanos);
        this.workers = new Thread[threads - 1];
        this.parked = new boolean[threads - 1];
        this.workerScratch = new float[threads][2][];
        for (int i = 0; i < workers.length; i++) {
            final int id = i;
            Thread t = new Thread(() -> workerLoop(id), "cmf-worker-" + (i + 1));
            t.setDaemon(true);
            workers[i] = t;
            t.start();
        }
    }

    /** Threads in all, the calling thread included. */
    public int threads() { return threads; }

    /** How long an idle worker spins before parking. */
    public long spinNanos() { return spinNanos; }

    /**
     * Runs {@code task} for every chunk in {@code 0..chunks-1} on all threads and returns when all
     * chunks are done. An exception thrown by a chunk is rethrown here (after the others finish).
     */
    public void run(int chunks, Task task) {
        if (chunks <= 0) return;
        Thread me = Thread.currentThread();
        if (owner == me || isWorker(me) || threads == 1 || chunks == 1) {   // nested, serial or trivial: inline
            for (int c = 0; c < chunks; c++) task.run(c, 0);
            return;
        }
        submit.lock();
        try {
            if (closed) throw new IllegalStateException("worker pool is closed");
            owner = me;
            Job j = new Job(task, chunks);
            job = j;                                               // publishes the job
            VarHandle.fullFence();                                 // order it before reading parked[]
            for (int i = 0; i < workers.length; i++) if (parked[i]) LockSupport.unpark(workers[i]);
            work(j, 0);
            // wait for the chunks others took, not for every worker to check in: a worker still waking up (or
            // descheduled by the OS) when the chunks ran out finds none left and cannot delay the caller
            int spins = 0;
            while (j.done() < chunks) {
                if (++spins < 4096) Thread.onSpinWait(); else Thread.yield();
            }
            j.task = null;
            Throwable f = j.failure;
            if (f != null) {
                if (f instanceof RuntimeException re) throw re;
                if (f instanceof Error e) throw e;
                throw new IllegalStateException(f);
            }
        } finally {
            owner = null;
            submit.unlock();
        }
    }

    /**
     * Holds the pool for a kernel job whose shared state and scratch are set up before {@link #run} and read by its
     * chunks (the matvec and GEMM jobs): without it, a second thread's job could overwrite that state between the
     * first one's set-up and its chunks. Reentrant; pair with {@link #release()}. Not from inside a chunk, whose
     * job already holds the pool and its state.
     */
    void hold() {
        Thread me = Thread.currentThread();
        if (owner == me || isWorker(me))
            throw new IllegalStateException("a kernel job cannot start inside a chunk of another job on the same pool");
        submit.lock();
    }

    /** Ends a {@link #hold()}. */
    void release() { submit.unlock(); }

    /**
     * Runs {@code body} over {@code [0, n)} in ranges of at least {@code grain} indices (at most
     * about 4 per thread), spread over the threads; returns when all are done.
     */
    public void parallelFor(int n, int grain, RangeBody body) {
        if (n <= 0) return;
        int step = Math.max(Math.max(1, grain), Simd.ceilDiv(n, 4 * threads));
        int chunks = Simd.ceilDiv(n, step);
        run(chunks, (c, w) -> body.run(c * step, Math.min(n, c * step + step)));
    }

    /**
     * A float buffer of at least {@code length} reused across calls; {@code slot} (0..7) keeps
     * buffers of different roles apart. Only for use while holding the pool (inside a kernel call
     * on the submitting thread, before or after {@link #run}); contents are not preserved.
     */
    public float[] scratch(int slot, int length) {
        float[] b = scratch[slot];
        if (b == null || b.length < length) {
            b = new float[Math.max(length, b == null ? 0 : b.length + b.length / 2)];
            scratch[slot] = b;
        }
        return b;
    }

    /** A short buffer of at least {@code length}, as {@link #scratch} (one slot: int8 activations). */
    public short[] shortScratch(int length) {
        if (shortScratch.length < length) shortScratch = new short[Math.max(length, shortScratch.length + shortScratch.length / 2)];
        return shortScratch;
    }

    /**
     * A float buffer of at least {@code length} owned by thread {@code worker} (as passed to
     * {@link Task#run}); {@code slot} is 0 or 1. Contents are not preserved across jobs.
     */
    public float[] workerScratch(int worker, int slot, int length) {
        float[] b = workerScratch[worker][slot];
        if (b == null || b.length < length) {
            b = new float[length];
            workerScratch[worker][slot] = b;
        }
        return b;
    }

    private boolean isWorker(Thread t) {
        for (Thread w : workers) if (w == t) return true;
        return false;
    }

    /** One job: its task, its chunk count, the next chunk to hand out and the chunks finished. */
    private static final class Job {
        private static final VarHandle NEXT, DONE;
        static {
            try {
                var l = java.lang.invoke.MethodHandles.lookup();
                NEXT = l.findVarHandle(Job.class, "next", int.class);
                DONE = l.findVarHandle(Job.class, "done", int.class);
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }
        Task task;                                  // published with the job; read only by a thread that took a chunk
        final int chunks;
        private volatile int next, done;
        volatile Throwable failure;

        Job(Task task, int chunks) { this.task = task; this.chunks = chunks; }

        int take() { return (int) NEXT.getAndAdd(this, 1); }

        void finished() { DONE.getAndAdd(this, 1); }

        int done() { return done; }
    }

    private static void work(Job j, int worker) {
        int n = j.chunks, c;
        while ((c = j.take()) < n) {
            try {
                j.task.run(c, worker);
            } catch (Throwable e) {
                if (j.failure == null) j.failure = e;
            } finally {
                j.finished();
            }
        }
    }

    private void workerLoop(int id) {
        Job seen = job;
        while (true) {
            Job j;
            long spinStart = System.nanoTime();
            int spins = 0;
            while ((j = job) == seen) {
                if (closed) return;
                Thread.onSpinWait();
                if ((++spins & 63) == 0 && System.nanoTime() - spinStart > spinNanos) {
                    parked[id] = true;
                    // Dekker handshake with run(): we publish parked, then re-read the job;
                    // run() publishes the job, then reads parked. One of us sees the other.
                    VarHandle.fullFence();
                    if (job == seen && !closed) LockSupport.park(this);
                    parked[id] = false;
                    spinStart = System.nanoTime();
                }
            }
            seen = j;
            if (closed) return;
            work(j, id + 1);
        }
    }

    /** Stops the workers (they exit after the current job). */
    @Override
    public void close() {
        closed = true;
        for (Thread w : workers) LockSupport.unpark(w);
    }
}
