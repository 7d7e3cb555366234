package dev.cmf4j.backend.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Function;
import java.util.concurrent.locks.LockSupport;

/**
 * One GPU: its primary context, bound once on an <em>owner platform thread</em> that runs every CUDA call
 * for this device (the current context is per OS thread, and a virtual thread can change carrier at any
 * park, so no other thread may touch CUDA state — GPU_NOTES.md §3.5). Work is submitted with
 * {@link #call}; a call made from the owner thread itself runs in place.
 */
public final class CudaContext implements AutoCloseable {
    /**
     * Device facts read at open.
     *
     * @param kernels where the code of {@code kernels.cu} came from, e.g. {@code "kernels.fatbin sm_90 (nvcc 13.0.88)"}
     *                or {@code "NVRTC 13.0 (-Dcmf.cuda.nvrtc=force)"}
     */
    public record Info(int ordinal, String name, int ccMajor, int ccMinor, int smCount, long totalMemory,
                       int driverVersion, String kernels) {
        public String arch() { return "sm_" + ccMajor + ccMinor; }

        @Override public String toString() {
            return String.format("%s (%s, %d SMs, %.1f GiB; driver CUDA %d.%d; kernels: %s)", name, arch(), smCount,
                    totalMemory / (double) (1L << 30), driverVersion / 1000, driverVersion % 1000 / 10, kernels);
        }
    }

    /** {@code -Dcmf.cuda.nvrtc=force}: compile every kernel file with NVRTC even when a fresh fatbin is shipped. */
    static final String NVRTC_PROPERTY = "cmf.cuda.nvrtc";

    private final CudaDriver cu;
    private final Thread ownerThread;
    /**
     * The hand-off to the owner thread. A decode step submits ~60–110 GPU calls per token, so the hand-off
     * is a spin on volatile fields (sub-microsecond while both sides are busy) rather than an executor's
     * queue and park/unpark (tens of microseconds per round trip); each side parks after spinning
     * {@link #SPIN_NANOS} without news, so an idle context costs no CPU. The spin is short (50 µs by default,
     * {@code -Dcmf.cuda.spinMicros=N}): long enough for back-to-back hand-offs (a resident decode step is one
     * hand-off per token; the hybrid path's products follow each other within tens of µs of CPU work), short
     * enough that a server idle between requests, or a caller sampling between tokens, does not keep a core
     * busy for milliseconds after every hand-off (it was 2 ms: up to 2 ms of a core burnt per hand-off).
     */
    private final Object submitLock = new Object();
    private volatile Callable<?> pending;
    private volatile boolean done, stopped;
    private volatile Object result;
    private volatile Throwable failure;
    private volatile Thread waiter;
    static final long SPIN_NANOS = 1_000 * Math.max(0, Long.getLong("cmf.cuda.spinMicros", 50));
    private final Info info;
    private final int dev;
    private final List<String> nvrtcNames;
    private final KernelCache cache;
    private final Function<String, KernelSource> sources;
    private final boolean forceNvrtc;
    /** Owner thread only: the kernel modules loaded so far, by .cu name, and where each came from. */
    private final Map<String, MemorySegment> modules = new HashMap<>();
    private final Map<String, String> origins = new HashMap<>();
    /** Owner thread only: NVRTC once looked up (null until needed; {@link #nvrtcMissing} when it was not found). */
    private Nvrtc nvrtc;
    private String nvrtcMissing;
    /** Things worth one line on standard error (a stale fatbin), taken by {@link #takeNotes}. */
    private final List<String> notes = new CopyOnWriteArrayList<>();

    private CudaContext(int ordinal) {
        this(CudaDriver.get(), ordinal, Nvrtc.libraryNames(), KernelCache.defaultCache(), KernelSource::resource,
                forceNvrtc(System.getProperty(NVRTC_PROPERTY)));
    }

    /** As the full constructor with this package's kernel resources and no forced NVRTC. */
    CudaContext(CudaDriver cu, int ordinal, List<String> nvrtcNames, KernelCache cache) {
        this(cu, ordinal, nvrtcNames, cache, KernelSource::resource, false);
    }

    /**
     * Opens GPU {@code ordinal} through {@code cu} and loads {@code kernels.cu}'s module: the shipped fatbin from
     * {@code sources} when it was built from that source (and {@code forceNvrtc} is off), else the source compiled
     * by NVRTC (looked up at {@code nvrtcNames} only then; compiled images cached in {@code cache}).
     */
    CudaContext(CudaDriver cu, int ordinal, List<String> nvrtcNames, KernelCache cache,
                Function<String, KernelSource> sources, boolean forceNvrtc) {
        this.cu = cu;
        this.nvrtcNames = List.copyOf(nvrtcNames);
        this.cache = cache;
        this.sources = sources;
        this.forceNvrtc = forceNvrtc;
        ownerThread = Thread.ofPlatform().daemon().name("cuda-" + ordinal).start(this::serve);
        try {
            Object[] r = call(() -> {
                int count = cu.deviceCount();
                if (ordinal >= count)
                    throw new CudaUnavailableException(count == 0 ? "the NVIDIA driver reports no GPU (use --device cpu)"
                            : "GPU " + ordinal + " requested, the driver reports " + count);
                int d = cu.device(ordinal);
                cu.setCurrent(cu.primaryContextRetain(d));
                int major = cu.attribute(CudaDriver.ATTR_CC_MAJOR, d), minor = cu.attribute(CudaDriver.ATTR_CC_MINOR, d);
                module(KERNELS, major, minor);   // at open, so a device that cannot run the kernels fails here
                return new Object[] {new Info(ordinal, cu.deviceName(d), major, minor, cu.attribute(CudaDriver.ATTR_SM_COUNT, d),
                        cu.totalMemory(d), cu.driverVersion(), origins.get(KERNELS)), d};
            });
            info = (Info) r[0];
            dev = (Integer) r[1];
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

    private static final java.util.Map<Integer, CudaContext> others = new java.util.HashMap<>();

    /** GPU {@code ordinal}, opened once per process (0 is {@link #get()}'s). @throws CudaUnavailableException when there is none to use */
    public static CudaContext get(int ordinal) {
        if (ordinal == 0) return get();
        synchronized (CudaContext.class) {
            return others.computeIfAbsent(ordinal, CudaContext::new);
        }
    }

    public Info info() { return info; }

    public CudaDriver driver() { return cu; }

    /** The loaded kernel module of {@code kernels.cu}. Owner thread only. */
    MemorySegment module() { return module(KERNELS); }

    /**
     * The module of the kernel file {@code cuName} of this package (e.g. {@code "kernels.cu"}), loaded on first use
     * as at open: its shipped fatbin when fresh, else NVRTC. Owner thread only.
     */
    MemorySegment module(String cuName) { return module(cuName, info.ccMajor(), info.ccMinor()); }

    /** Where module {@code cuName}'s code came from (as {@link Info#kernels}), or null when it is not loaded. Owner thread only. */
    String moduleOrigin(String cuName) { return origins.get(cuName); }

    /** The notes gathered since the last call (e.g. a stale fatbin compiled with NVRTC instead), each one line. */
    public List<String> takeNotes() {
        List<String> out = new ArrayList<>();
        for (String n : notes) { out.add(n); notes.remove(n); }
        return out;
    }

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

    /** The kernel file every context loads at open. */
    static final String KERNELS = "kernels.cu";

    /** The CUDA C source of {@code kernels.cu}, a resource of this package. */
    static String kernelSource() { return KernelSource.resource(KERNELS).source(); }

    /**
     * NVRTC options for an architecture. They must stay those of {@value KernelSource#BUILD_SCRIPT}'s nvcc
     * ({@code -std=c++17}, nvcc's default f32 math: no fast-math, FMA contraction on) so a fatbin and an NVRTC
     * build compute the same numbers; {@code -default-device} only spares NVRTC the {@code __device__} markers.
     */
    static List<String> compileOptions(String arch) {
        return List.of("--gpu-architecture=" + arch, "-default-device", "--std=c++17");
    }

    /** Parses {@code -Dcmf.cuda.nvrtc}: unset or {@code auto} (the shipped fatbin when fresh), or {@code force}. */
    static boolean forceNvrtc(String value) {
        if (value == null || value.isBlank() || value.equalsIgnoreCase("auto")) return false;
        if (value.equalsIgnoreCase("force")) return true;
        throw new IllegalArgumentException("-D" + NVRTC_PROPERTY + "=" + value + ": expected auto or force");
    }

    /** Owner thread: the module of {@code cuName} on a device of compute capability major.minor, loaded once. */
    private MemorySegment module(String cuName, int major, int minor) {
        MemorySegment m = modules.get(cuName);
        if (m != null) return m;
        KernelSource k = sources.apply(cuName);
        String why = forceNvrtc ? "-D" + NVRTC_PROPERTY + "=force" : k.fatbinProblem();
        if (why == null) {
            Fatbin.Entry pick = Fatbin.parse(k.fatbin()).choose(major, minor);
            if (pick == null) {
                why = KernelSource.fatbinName(cuName) + " holds no code for sm_" + major + minor + " ("
                        + String.join(" ", Fatbin.parse(k.fatbin()).labels()) + ")";
            } else {
                try {
                    m = loadImage(k.fatbin());
                    origins.put(cuName, KernelSource.fatbinName(cuName) + " " + pick.label() + (pick.ptx() ? " PTX, compiled by the driver" : "")
                            + " (nvcc " + k.stamp().getOrDefault("nvcc", "?") + ")");
                } catch (CudaException e) {
                    why = "the driver rejected " + KernelSource.fatbinName(cuName) + ": " + e.getMessage();
                }
            }
        }
        if (m == null) {
            Nvrtc nv = nvrtc();
            if (nv == null)
                throw new CudaUnavailableException(cuName + ": " + why + ", and NVRTC (libnvrtc.so.13 from the CUDA toolkit or "
                        + "NVIDIA's nvrtc redistributable), needed to compile it instead, was not found (" + nvrtcMissing
                        + "); set CMF_NVRTC=/path/to/libnvrtc.so, rebuild the fatbin with " + KernelSource.BUILD_SCRIPT
                        + ", or use --device cpu");
            m = loadImage(compile(nv, k, "sm_" + major + minor));
            origins.put(cuName, "NVRTC " + nv.version() + " (" + why + ")");
            if (!forceNvrtc) notes.add(why + "; compiled " + cuName + " with NVRTC " + nv.version() + " instead"
                    + (k.fatbinProblem() != null ? " (rebuild it with " + KernelSource.BUILD_SCRIPT + ")" : ""));
        }
        modules.put(cuName, m);
        return m;
    }

    /** Owner thread: NVRTC, looked up on first need; null when absent ({@link #nvrtcMissing} says where it was sought). */
    private Nvrtc nvrtc() {
        if (nvrtc == null && nvrtcMissing == null) {
            List<String> tried = new ArrayList<>();
            nvrtc = Nvrtc.find(nvrtcNames, tried);
            if (nvrtc == null) nvrtcMissing = "tried " + String.join(", ", tried);
        }
        return nvrtc;
    }

    /** The CUBIN of {@code k}'s source for {@code arch}, from the disk cache or compiled now. */
    private byte[] compile(Nvrtc nv, KernelSource k, String arch) {
        List<String> opts = compileOptions(arch);
        String key = KernelCache.key(k.source(), opts, "nvrtc " + nv.version(), arch);
        byte[] cubin = cache.get(key);
        if (cubin == null) {
            cubin = nv.compileToCubin(k.source(), k.name(), opts);
            cache.put(key, cubin);
        }
        return cubin;
    }

    private MemorySegment loadImage(byte[] image) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment img = a.allocate(image.length + 1L);   // NUL-terminated: the driver reads PTX as a C string
            MemorySegment.copy(image, 0, img, ValueLayout.JAVA_BYTE, 0, image.length);
            return cu.moduleLoad(img);
        }
    }

    /** Stops the owner thread of a context opened for a test; the process-wide one lives until exit. */
    @Override public void close() {
        if (this != first) stop();
    }
}
