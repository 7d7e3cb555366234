package dev.cmf4j.backend.cuda;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.locks.LockSupport;

/**
 * One GPU: its primary context, bound once on an <em>owner platform thread</em> that runs every CUDA call
 * for this device (the current context is per OS thread, and a virtual thread can change carrier at any
 * park, so no other thread may touch CUDA state — GPU_NOTES.md §3.5). Work is submitted with
 * {@link #call}; a call made from the owner thread itself runs in place.
 */
public final class CudaContext implements AutoCloseable {
    /** Device facts read at open. */
    public record Info(int ordinal, String name, int ccMajor, int ccMinor, int smCount, long totalMemory,
                       int driverVersion, String nvrtcVersion) {
        public String arch() { return "sm_" + ccMajor + ccMinor; }

        @Override public String toString() {
            return String.format("%s (%s, %d SMs, %.1f GiB; driver CUDA %d.%d, NVRTC %s)", name, arch(), smCount,
                    totalMemory / (double) (1L << 30), driverVersion / 1000, driverVersion % 1000 / 10, nvrtcVersion);
        }
    }

    private final CudaDriver cu;
    private final Thread ownerThread;
    /**
     * The hand-off to the owner thread. A decode step submits ~60–110 GPU calls per token, so the hand-off
     * is a spin on volatile fields (sub-microsecond while both sides are busy) rather than an executor's
     * queue and park/unpark (tens of microseconds per round trip); each side parks after spinning
     * {@link #SPIN_NANOS} without news, so an idle context costs no CPU.
     */
    private final Object submitLock = new Object();
    private volatile Callable<?> pending;
    private volatile boolean done, stopped;
    private volatile Object result;
    private volatile Throwable failure;
    private volatile Thread waiter;
    private static final long SPIN_NANOS = 2_000_000;
    private final Info info;
    private final MemorySegment module;
    private final int dev;

    private CudaContext(int ordinal) { this(CudaDriver.get(), ordinal, Nvrtc.libraryNames(), KernelCache.defaultCache()); }

    /** Opens GPU {@code ordinal} through {@code cu}, NVRTC from the first of {@code nvrtcNames}, caching in {@code cache}. */
    CudaContext(CudaDriver cu, int ordinal, List<String> nvrtcNames, KernelCache cache) {
        this.cu = cu;
        ownerThread = Thread.ofPlatform().daemon().name("cuda-" + ordinal).start(this::serve);
        try {
            Object[] r = call(() -> {
                int count = cu.deviceCount();
                if (ordinal >= count)
                    throw new CudaUnavailableException(count == 0 ? "the NVIDIA driver reports no GPU (use --device cpu)"
                            : "GPU " + ordinal + " requested, the driver reports " + count);
                int d = cu.device(ordinal);
                cu.setCurrent(cu.primaryContextRetain(d));
                List<String> tried = new ArrayList<>();
                Nvrtc nvrtc = Nvrtc.find(nvrtcNames, tried);
                if (nvrtc == null)
                    throw new CudaUnavailableException("NVRTC (libnvrtc.so.13 from the CUDA toolkit or NVIDIA's nvrtc "
                            + "redistributable) is needed to compile the kernels and was not found (tried " + String.join(", ", tried)
                            + "); set CMF_NVRTC=/path/to/libnvrtc.so or use --device cpu");
                Info i = new Info(ordinal, cu.deviceName(d), cu.attribute(CudaDriver.ATTR_CC_MAJOR, d),
                        cu.attribute(CudaDriver.ATTR_CC_MINOR, d), cu.attribute(CudaDriver.ATTR_SM_COUNT, d),
                        cu.totalMemory(d), cu.driverVersion(), nvrtc.version());
                return new Object[] {i, loadKernels(nvrtc, i, cache), d};
            });
            info = (Info) r[0];
            module = (MemorySegment) r[1];
            dev = (Integer) r[2];
        } catch (RuntimeException e) {
            stop();
            throw e;
        }
    }

    /** The owner thread's loop: run each submitted task, publish its outcome, wake the submitter. */
    private void serve() {
        long idleSince = System.nanoTime();
        while (!stopped) {
            Callable<?> work = pending;
            if (work == null) {
                if (System.nanoTime() - idleSince < SPIN_NANOS) Thread.onSpinWait();
                else LockSupport.park(this);   // call() unparks after publishing `pending`
                continue;
            }
            pending = null;
            Object r = null;
            Throwable f = null;
            try { r = work.call(); } catch (Throwable t) { f = t; }
            result = r;
            failure = f;
            done = true;
            LockSupport.unpark(waiter);
            idleSince = System.nanoTime();
        }
    }

    private void stop() {
        stopped = true;
        LockSupport.unpark(ownerThread);
    }

    private static volatile CudaContext first;

    /** GPU 0, opened once per process. @throws CudaUnavailableException when there is none to use */
    public static CudaContext get() {
        CudaContext c = first;
        if (c != null) return c;
        synchronized (CudaContext.class) {
            if (first == null) first = new CudaContext(0);
            return first;
        }
    }

    public Info info() { return info; }

    public CudaDriver driver() { return cu; }

    /** The loaded kernel module ({@code kernels.cu}). Owner thread only. */
    MemorySegment module() { return module; }

    /** Runs {@code work} on the owner thread and returns its result; exceptions surface unchanged. */
    @SuppressWarnings("unchecked")
    public <T> T call(Callable<T> work) {
        Object r;
        Throwable f;
        if (Thread.currentThread() == ownerThread) {
            try { return work.call(); } catch (Throwable t) { f = t; r = null; }
        } else {
            synchronized (submitLock) {   // one task in flight; other submitters wait here
                if (stopped) throw new IllegalStateException("CUDA context closed");
                done = false;
                waiter = Thread.currentThread();
                pending = work;
                LockSupport.unpark(ownerThread);
                long t0 = System.nanoTime();
                while (!done) {
                    if (System.nanoTime() - t0 < SPIN_NANOS) Thread.onSpinWait();
                    else LockSupport.parkNanos(this, 1_000_000);   // serve() unparks after `done`
                }
                r = result;
                f = failure;
                result = null;
                failure = null;
            }
        }
        if (f == null) return (T) r;
        if (f instanceof RuntimeException e) throw e;
        if (f instanceof Error e) throw e;
        throw new IllegalStateException(f);
    }

    /** The CUDA C source of the kernels, a resource of this package. */
    static String kernelSource() {
        try (InputStream in = CudaContext.class.getResourceAsStream("kernels.cu")) {
            if (in == null) throw new IllegalStateException("resource dev/cmf4j/backend/cuda/kernels.cu missing from the jar");
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /** NVRTC options for an architecture: exact f32 math (no fast-math, no FMA contraction surprises beyond the default). */
    static List<String> compileOptions(String arch) {
        return List.of("--gpu-architecture=" + arch, "-default-device", "--std=c++17");
    }

    private MemorySegment loadKernels(Nvrtc nvrtc, Info i, KernelCache cache) {
        String src = kernelSource();
        List<String> opts = compileOptions(i.arch());
        String key = KernelCache.key(src, opts, "nvrtc " + i.nvrtcVersion(), i.arch());
        byte[] cubin = cache.get(key);
        if (cubin == null) {
            cubin = nvrtc.compileToCubin(src, "kernels.cu", opts);
            cache.put(key, cubin);
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment img = a.allocate(cubin.length + 1L);
            MemorySegment.copy(cubin, 0, img, ValueLayout.JAVA_BYTE, 0, cubin.length);
            return cu.moduleLoad(img);
        }
    }

    /** Stops the owner thread of a context opened for a test; the process-wide one lives until exit. */
    @Override public void close() {
        if (this != first) stop();
    }
}
