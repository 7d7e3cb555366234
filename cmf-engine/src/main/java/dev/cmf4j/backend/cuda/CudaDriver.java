package dev.cmf4j.backend.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.cmf4j.backend.cuda.NativeLib.I32;
import static dev.cmf4j.backend.cuda.NativeLib.I64;
import static dev.cmf4j.backend.cuda.NativeLib.PTR;
import static dev.cmf4j.backend.cuda.NativeLib.SIZE_T;
import static dev.cmf4j.backend.cuda.NativeLib.fn;

/**
 * The CUDA driver API ({@code libcuda.so.1}) through {@code java.lang.foreign}: the calls this backend
 * makes, bound by their <em>versioned</em> symbols ({@code cuda.h} {@code #define}s {@code cuMemAlloc} to
 * {@code cuMemAlloc_v2} and so on; the plain names still exist with their old ABIs, so binding them would
 * compile and misbehave — GPU_NOTES.md §3.1). Every wrapper checks the returned {@code CUresult} and
 * throws a {@link CudaException} carrying {@code cuGetErrorName}/{@code cuGetErrorString}.
 *
 * <p>Layouts: {@code CUdeviceptr} is a Java long, handles are addresses, {@code size_t} is the
 * platform's, enums/{@code CUdevice}/{@code unsigned} are ints. Not thread-affine itself, but the
 * current context is per OS thread: call it from a {@link CudaContext}'s owner thread.
 */
public final class CudaDriver {
    /** The binding table: exact symbols and C signatures (all return {@code CUresult}). */
    static final List<NativeLib.Binding> TABLE = List.of(
            new NativeLib.Binding("cuInit", fn(I32, I32)),
            new NativeLib.Binding("cuDriverGetVersion", fn(I32, PTR)),
            new NativeLib.Binding("cuDeviceGetCount", fn(I32, PTR)),
            new NativeLib.Binding("cuDeviceGet", fn(I32, PTR, I32)),
            new NativeLib.Binding("cuDeviceGetName", fn(I32, PTR, I32, I32)),
            new NativeLib.Binding("cuDeviceGetAttribute", fn(I32, PTR, I32, I32)),
            new NativeLib.Binding("cuDeviceTotalMem_v2", fn(I32, PTR, I32)),
            new NativeLib.Binding("cuDevicePrimaryCtxRetain", fn(I32, PTR, I32)),
            new NativeLib.Binding("cuDevicePrimaryCtxRelease_v2", fn(I32, I32)),
            new NativeLib.Binding("cuCtxSetCurrent", fn(I32, PTR)),
            new NativeLib.Binding("cuCtxSynchronize", fn(I32)),
            new NativeLib.Binding("cuMemAlloc_v2", fn(I32, PTR, SIZE_T)),
            new NativeLib.Binding("cuMemFree_v2", fn(I32, I64)),
            new NativeLib.Binding("cuMemAllocHost_v2", fn(I32, PTR, SIZE_T)),
            new NativeLib.Binding("cuMemFreeHost", fn(I32, PTR)),
            new NativeLib.Binding("cuMemcpyHtoD_v2", fn(I32, I64, PTR, SIZE_T)),
            new NativeLib.Binding("cuMemcpyDtoH_v2", fn(I32, PTR, I64, SIZE_T)),
            new NativeLib.Binding("cuMemcpyHtoDAsync_v2", fn(I32, I64, PTR, SIZE_T, PTR)),
            new NativeLib.Binding("cuMemcpyDtoDAsync_v2", fn(I32, I64, I64, SIZE_T, PTR)),
            new NativeLib.Binding("cuMemcpyDtoHAsync_v2", fn(I32, PTR, I64, SIZE_T, PTR)),
            new NativeLib.Binding("cuStreamSynchronize", fn(I32, PTR)),
            new NativeLib.Binding("cuMemsetD8_v2", fn(I32, I64, ValueLayout.JAVA_BYTE, SIZE_T)),
            new NativeLib.Binding("cuModuleLoadData", fn(I32, PTR, PTR)),
            new NativeLib.Binding("cuModuleUnload", fn(I32, PTR)),
            new NativeLib.Binding("cuModuleGetFunction", fn(I32, PTR, PTR, PTR)),
            new NativeLib.Binding("cuFuncGetAttribute", fn(I32, PTR, I32, PTR)),
            new NativeLib.Binding("cuLaunchKernel", fn(I32, PTR, I32, I32, I32, I32, I32, I32, I32, PTR, PTR, PTR)),
            new NativeLib.Binding("cuEventCreate", fn(I32, PTR, I32)),
            new NativeLib.Binding("cuEventRecord", fn(I32, PTR, PTR)),
            new NativeLib.Binding("cuEventSynchronize", fn(I32, PTR)),
            new NativeLib.Binding("cuEventElapsedTime_v2", fn(I32, PTR, PTR, PTR)),
            new NativeLib.Binding("cuEventDestroy_v2", fn(I32, PTR)),
            new NativeLib.Binding("cuStreamCreate", fn(I32, PTR, I32)),
            new NativeLib.Binding("cuStreamDestroy_v2", fn(I32, PTR)),
            new NativeLib.Binding("cuStreamBeginCapture_v2", fn(I32, PTR, I32)),
            new NativeLib.Binding("cuStreamEndCapture", fn(I32, PTR, PTR)),
            new NativeLib.Binding("cuGraphInstantiateWithFlags", fn(I32, PTR, PTR, I64)),
            new NativeLib.Binding("cuGraphLaunch", fn(I32, PTR, PTR)),
            new NativeLib.Binding("cuGraphExecDestroy", fn(I32, PTR)),
            new NativeLib.Binding("cuGraphDestroy", fn(I32, PTR)),
            new NativeLib.Binding("cuGetErrorName", fn(I32, I32, PTR)),
            new NativeLib.Binding("cuGetErrorString", fn(I32, I32, PTR)));

    /**
     * Bound when the driver has them (a missing one is no error): {@code cuLaunchKernelEx} (CUDA 12.0+ drivers;
     * {@code cuda.h} maps the name to itself without per-thread default streams) for programmatic dependent launch.
     */
    static final List<NativeLib.Binding> OPTIONAL = List.of(
            new NativeLib.Binding("cuLaunchKernelEx", fn(I32, PTR, PTR, PTR, PTR)),
            // virtual memory management (CUDA 10.2+; unversioned names): KV caches backed page by page (KvPages)
            new NativeLib.Binding("cuMemGetAllocationGranularity", fn(I32, PTR, PTR, I32)),
            new NativeLib.Binding("cuMemAddressReserve", fn(I32, PTR, SIZE_T, SIZE_T, I64, I64)),
            new NativeLib.Binding("cuMemAddressFree", fn(I32, I64, SIZE_T)),
            new NativeLib.Binding("cuMemCreate", fn(I32, PTR, SIZE_T, PTR, I64)),
            new NativeLib.Binding("cuMemRelease", fn(I32, I64)),
            new NativeLib.Binding("cuMemMap", fn(I32, I64, SIZE_T, SIZE_T, I64, I64)),
            new NativeLib.Binding("cuMemSetAccess", fn(I32, I64, SIZE_T, PTR, SIZE_T)),
            new NativeLib.Binding("cuMemUnmap", fn(I32, I64, SIZE_T)));

    /** Where the driver library is looked for: the loader's soname first, then the usual install places. */
    static final List<String> LIBRARY = List.of("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/usr/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1");

    /** {@code -Dcmf.cuda.driver=PATH}: the driver library to open before {@link #LIBRARY}'s (one outside the loader's path; tests: the mock). */
    static final String DRIVER_PROPERTY = "cmf.cuda.driver";

    /** {@link #LIBRARY}, after {@code -Dcmf.cuda.driver}'s path when it is set. */
    static List<String> libraryNames() {
        String forced = System.getProperty(DRIVER_PROPERTY);
        if (forced == null || forced.isBlank()) return LIBRARY;
        List<String> names = new ArrayList<>(List.of(forced));
        names.addAll(LIBRARY);
        return names;
    }

    public static final int ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76, ATTR_SM_COUNT = 16;
    /** {@code CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED}: cuMemAddressReserve, cuMemCreate, cuMemMap work. */
    public static final int ATTR_VIRTUAL_MEMORY = 102;
    /**
     * {@code CU_FUNC_ATTRIBUTE_PTX_VERSION} (5 in cuda.h's CUfunction_attribute; 3 is LOCAL_SIZE_BYTES): the virtual
     * architecture a loaded function was compiled for (major·10 + minor).
     */
    public static final int FUNC_ATTR_PTX_VERSION = 5;

    private final MethodHandle init, driverVersion, deviceCount, deviceGet, deviceName, deviceAttr, totalMem,
            primaryRetain, primaryRelease, ctxSetCurrent, ctxSync, memAlloc, memFree, memAllocHost, memFreeHost,
            htod, dtoh, htodAsync, dtohAsync, dtodAsync, streamSync, memset, moduleLoad, moduleUnload, moduleGetFunction, funcGetAttribute, launch, eventCreate, eventRecord,
            eventSync, eventElapsed, eventDestroy, errName, errString, streamCreate, streamDestroy, beginCapture,
            endCapture, graphInstantiate, graphLaunch, graphExecDestroy, graphDestroy;
    /** {@code cuLaunchKernelEx}, or null when the driver lacks it. */
    private final MethodHandle launchEx;
    /** The virtual memory calls, or null when the driver lacks them. */
    private final MethodHandle granularity, addressReserve, addressFree, memCreate, memRelease, memMap, memSetAccess, memUnmap;

    private CudaDriver(Map<String, MethodHandle> h) {
        init = h.get("cuInit"); driverVersion = h.get("cuDriverGetVersion"); deviceCount = h.get("cuDeviceGetCount");
        deviceGet = h.get("cuDeviceGet"); deviceName = h.get("cuDeviceGetName"); deviceAttr = h.get("cuDeviceGetAttribute");
        totalMem = h.get("cuDeviceTotalMem_v2"); primaryRetain = h.get("cuDevicePrimaryCtxRetain");
        primaryRelease = h.get("cuDevicePrimaryCtxRelease_v2"); ctxSetCurrent = h.get("cuCtxSetCurrent");
        ctxSync = h.get("cuCtxSynchronize"); memAlloc = h.get("cuMemAlloc_v2"); memFree = h.get("cuMemFree_v2");
        memAllocHost = h.get("cuMemAllocHost_v2"); memFreeHost = h.get("cuMemFreeHost"); htod = h.get("cuMemcpyHtoD_v2");
        dtoh = h.get("cuMemcpyDtoH_v2"); memset = h.get("cuMemsetD8_v2");
        htodAsync = h.get("cuMemcpyHtoDAsync_v2"); dtohAsync = h.get("cuMemcpyDtoHAsync_v2");
        dtodAsync = h.get("cuMemcpyDtoDAsync_v2");
        streamSync = h.get("cuStreamSynchronize"); moduleLoad = h.get("cuModuleLoadData");
        moduleUnload = h.get("cuModuleUnload"); moduleGetFunction = h.get("cuModuleGetFunction");
        funcGetAttribute = h.get("cuFuncGetAttribute");
        launch = h.get("cuLaunchKernel"); eventCreate = h.get("cuEventCreate"); eventRecord = h.get("cuEventRecord");
        eventSync = h.get("cuEventSynchronize"); eventElapsed = h.get("cuEventElapsedTime_v2");
        eventDestroy = h.get("cuEventDestroy_v2"); errName = h.get("cuGetErrorName"); errString = h.get("cuGetErrorString");
        streamCreate = h.get("cuStreamCreate"); streamDestroy = h.get("cuStreamDestroy_v2");
        beginCapture = h.get("cuStreamBeginCapture_v2"); endCapture = h.get("cuStreamEndCapture");
        graphInstantiate = h.get("cuGraphInstantiateWithFlags"); graphLaunch = h.get("cuGraphLaunch");
        graphExecDestroy = h.get("cuGraphExecDestroy"); graphDestroy = h.get("cuGraphDestroy");
        launchEx = h.get("cuLaunchKernelEx");
        granularity = h.get("cuMemGetAllocationGranularity"); addressReserve = h.get("cuMemAddressReserve");
        addressFree = h.get("cuMemAddressFree"); memCreate = h.get("cuMemCreate"); memRelease = h.get("cuMemRelease");
        memMap = h.get("cuMemMap"); memSetAccess = h.get("cuMemSetAccess"); memUnmap = h.get("cuMemUnmap");
    }

    private static volatile CudaDriver instance;

    /**
     * The driver, loaded and initialised ({@code cuInit(0)}) once per process.
     *
     * @throws CudaUnavailableException when the library is absent, lacks a symbol, or cuInit fails
     */
    public static CudaDriver get() {
        CudaDriver d = instance;
        if (d != null) return d;
        synchronized (CudaDriver.class) {
            if (instance == null) instance = load(libraryNames());
            return instance;
        }
    }

    /** Loads the driver from the first of {@code names} that opens; package-private for the fallback tests. */
    static CudaDriver load(List<String> names) {
        List<String> tried = new ArrayList<>();
        SymbolLookup lib = NativeLib.open(names, tried);
        if (lib == null)
            throw new CudaUnavailableException("no NVIDIA driver: could not open libcuda.so.1 (tried " + String.join(", ", tried)
                    + "); install the NVIDIA driver or use --device cpu");
        var handles = new java.util.HashMap<>(NativeLib.bind(lib, "libcuda.so.1", TABLE));
        handles.putAll(NativeLib.bindFound(lib, OPTIONAL));
        CudaDriver d = new CudaDriver(handles);
        try {
            d.cuInit();
        } catch (CudaException e) {
            throw new CudaUnavailableException("NVIDIA driver present but cuInit failed: " + e.getMessage()
                    + "; no usable GPU (use --device cpu)", e);
        }
        return d;
    }

    // ---- error checking ----

    void check(int rc, String call) {
        if (rc != 0) throw error(rc, call);
    }

    /** The exception for status {@code rc} of {@code call}, described by the driver itself when it can. */
    CudaException error(int rc, String call) {
        String name = null, text = null;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment p = a.allocate(PTR);
            if ((int) errName.invokeExact(rc, p) == 0) name = NativeLib.cString(p.get(PTR, 0));
            if ((int) errString.invokeExact(rc, p) == 0) text = NativeLib.cString(p.get(PTR, 0));
        } catch (Throwable ignored) {
            // fall back to the built-in names
        }
        return new CudaException(call, rc, name, text);
    }


    // ---- typed wrappers (each checks its status) ----

    void cuInit() {
        try { check((int) init.invokeExact(0), "cuInit"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public int driverVersion() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I32);
            check((int) driverVersion.invokeExact(v), "cuDriverGetVersion");
            return v.get(I32, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public int deviceCount() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I32);
            check((int) deviceCount.invokeExact(v), "cuDeviceGetCount");
            return v.get(I32, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public int device(int ordinal) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I32);
            check((int) deviceGet.invokeExact(v, ordinal), "cuDeviceGet");
            return v.get(I32, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public String deviceName(int dev) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(256);
            check((int) deviceName.invokeExact(v, 256, dev), "cuDeviceGetName");
            return v.getString(0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public int attribute(int attr, int dev) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I32);
            check((int) deviceAttr.invokeExact(v, attr, dev), "cuDeviceGetAttribute");
            return v.get(I32, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public long totalMemory(int dev) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I64);
            check((int) totalMem.invokeExact(v, dev), "cuDeviceTotalMem_v2");
            return v.get(I64, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public MemorySegment primaryContextRetain(int dev) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) primaryRetain.invokeExact(v, dev), "cuDevicePrimaryCtxRetain");
            return v.get(PTR, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void primaryContextRelease(int dev) {
        try { check((int) primaryRelease.invokeExact(dev), "cuDevicePrimaryCtxRelease_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void setCurrent(MemorySegment ctx) {
        try { check((int) ctxSetCurrent.invokeExact(ctx), "cuCtxSetCurrent"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void synchronize() {
        try { check((int) ctxSync.invokeExact(), "cuCtxSynchronize"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Device memory of {@code bytes}; returns the {@code CUdeviceptr}. */
    public long memAlloc(long bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I64);
            check((int) memAlloc.invokeExact(v, bytes), "cuMemAlloc_v2 (" + bytes + " bytes)");
            return v.get(I64, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void memFree(long dptr) {
        try { check((int) memFree.invokeExact(dptr), "cuMemFree_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Page-locked host memory of {@code bytes}, as a segment of that size (6-9x faster copies than pageable). */
    public MemorySegment memAllocHost(long bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) memAllocHost.invokeExact(v, bytes), "cuMemAllocHost_v2 (" + bytes + " bytes)");
            return v.get(PTR, 0).reinterpret(bytes);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void memFreeHost(MemorySegment p) {
        try { check((int) memFreeHost.invokeExact(p), "cuMemFreeHost"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Synchronous copy of {@code bytes} from host memory {@code src} (a native segment) to {@code dst}. */
    public void copyToDevice(long dst, MemorySegment src, long bytes) {
        try { check((int) htod.invokeExact(dst, src, bytes), "cuMemcpyHtoD_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Synchronous copy of {@code bytes} from device {@code src} to host memory {@code dst} (a native segment). */
    public void copyToHost(MemorySegment dst, long src, long bytes) {
        try { check((int) dtoh.invokeExact(dst, src, bytes), "cuMemcpyDtoH_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /**
     * Copy queued on the default stream ({@code NULL}) behind earlier work; with pinned {@code src} the host does
     * not wait. {@code src} must stay unchanged until a later {@link #syncDefaultStream}.
     */
    public void copyToDeviceAsync(long dst, MemorySegment src, long bytes) {
        try { check((int) htodAsync.invokeExact(dst, src, bytes, MemorySegment.NULL), "cuMemcpyHtoDAsync_v2"); }
        catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Copy to pinned host memory queued on the default stream; {@code dst} is valid after {@link #syncDefaultStream}. */
    public void copyToHostAsync(MemorySegment dst, long src, long bytes) {
        try { check((int) dtohAsync.invokeExact(dst, src, bytes, MemorySegment.NULL), "cuMemcpyDtoHAsync_v2"); }
        catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Waits for everything queued on the default stream. */
    public void syncDefaultStream() {
        try { check((int) streamSync.invokeExact(MemorySegment.NULL), "cuStreamSynchronize"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void memsetD8(long dst, byte value, long bytes) {
        try { check((int) memset.invokeExact(dst, value, bytes), "cuMemsetD8_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Loads a CUBIN (or NUL-terminated PTX) image; returns the {@code CUmodule}. */
    public MemorySegment moduleLoad(MemorySegment image) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) moduleLoad.invokeExact(v, image), "cuModuleLoadData");
            return v.get(PTR, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void moduleUnload(MemorySegment module) {
        try { check((int) moduleUnload.invokeExact(module), "cuModuleUnload"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public MemorySegment function(MemorySegment module, String name) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) moduleGetFunction.invokeExact(v, module, a.allocateFrom(name)), "cuModuleGetFunction(" + name + ")");
            return v.get(PTR, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** {@code cuFuncGetAttribute}: attribute {@code attr} of the loaded function {@code f}. */
    public int functionAttribute(MemorySegment f, int attr) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I32);
            check((int) funcGetAttribute.invokeExact(v, attr, f), "cuFuncGetAttribute(" + attr + ")");
            return v.get(I32, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /**
     * Enqueues {@code f} on the default stream. {@code params} is the kernel's {@code void**}: one pointer per
     * argument, each to storage of exactly that argument's size.
     */
    public void launch(MemorySegment f, int gx, int gy, int gz, int bx, int by, int bz, int sharedBytes, MemorySegment params) {
        try {
            check((int) launch.invokeExact(f, gx, gy, gz, bx, by, bz, sharedBytes, MemorySegment.NULL, params, MemorySegment.NULL),
                    "cuLaunchKernel");
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public MemorySegment eventCreate() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) eventCreate.invokeExact(v, 0), "cuEventCreate");
            return v.get(PTR, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void eventRecord(MemorySegment e) {
        try { check((int) eventRecord.invokeExact(e, MemorySegment.NULL), "cuEventRecord"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Records {@code e} on {@code stream}. */
    public void eventRecord(MemorySegment e, MemorySegment stream) {
        try { check((int) eventRecord.invokeExact(e, stream), "cuEventRecord"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Milliseconds between two recorded events (waits for {@code end}). */
    public float elapsedMs(MemorySegment start, MemorySegment end) {
        try (Arena a = Arena.ofConfined()) {
            check((int) eventSync.invokeExact(end), "cuEventSynchronize");
            MemorySegment v = a.allocate(ValueLayout.JAVA_FLOAT);
            check((int) eventElapsed.invokeExact(v, start, end), "cuEventElapsedTime_v2");
            return v.get(ValueLayout.JAVA_FLOAT, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void eventDestroy(MemorySegment e) {
        try { check((int) eventDestroy.invokeExact(e), "cuEventDestroy_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    // ---- streams and graphs (the resident forward: one non-default stream per session, one graph per decode step) ----

    /** {@code CU_STREAM_NON_BLOCKING}: no implicit synchronisation with the legacy default stream. */
    public static final int STREAM_NON_BLOCKING = 1;
    /** {@code CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}: only this thread's unsafe calls are checked during capture. */
    public static final int CAPTURE_THREAD_LOCAL = 1;

    /** A new stream ({@code CUstream}); capture needs one (the legacy default stream cannot be captured). */
    public MemorySegment streamCreate(int flags) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) streamCreate.invokeExact(v, flags), "cuStreamCreate");
            return v.get(PTR, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void streamDestroy(MemorySegment stream) {
        try { check((int) streamDestroy.invokeExact(stream), "cuStreamDestroy_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** As {@link #launch} on {@code stream}. */
    public void launch(MemorySegment f, int gx, int gy, int gz, int bx, int by, int bz, int sharedBytes, MemorySegment stream,
                       MemorySegment params) {
        try {
            check((int) launch.invokeExact(f, gx, gy, gz, bx, by, bz, sharedBytes, stream, params, MemorySegment.NULL),
                    "cuLaunchKernel");
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Whether the driver has {@code cuLaunchKernelEx}, so {@link #launchProgrammatic} works (given cc ≥ 9.0). */
    public boolean hasLaunchEx() { return launchEx != null; }

    /** {@code sizeof(CUlaunchConfig)}: grid xyz, block xyz, shared bytes (7 unsigned), stream, attrs, numAttrs. */
    static final long LAUNCH_CONFIG_BYTES = 56, LAUNCH_CONFIG_STREAM = 32, LAUNCH_CONFIG_ATTRS = 40, LAUNCH_CONFIG_NUM_ATTRS = 48;
    /** {@code sizeof(CUlaunchAttribute)}: the id, padding to 8, a 64-byte value union. */
    static final long LAUNCH_ATTRIBUTE_BYTES = 72, LAUNCH_ATTRIBUTE_VALUE = 8;
    /** {@code CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION}. */
    public static final int ATTR_PROGRAMMATIC_STREAM_SERIALIZATION = 6;

    /**
     * A {@code CUlaunchConfig} for {@link #launchProgrammatic}, in {@code arena}, with its one attribute (programmatic
     * stream serialization) set; the launch writes the grid, block and stream into it each time, so one config
     * serves one thread's launches (cuLaunchKernelEx reads it while enqueueing, not after).
     */
    public MemorySegment programmaticConfig(Arena arena) {
        MemorySegment attr = arena.allocate(LAUNCH_ATTRIBUTE_BYTES, 8);
        attr.set(ValueLayout.JAVA_INT, 0, ATTR_PROGRAMMATIC_STREAM_SERIALIZATION);
        attr.set(ValueLayout.JAVA_INT, LAUNCH_ATTRIBUTE_VALUE, 1);   // programmaticStreamSerializationAllowed
        MemorySegment cfg = arena.allocate(LAUNCH_CONFIG_BYTES, 8);
        cfg.set(PTR, LAUNCH_CONFIG_ATTRS, attr);
        cfg.set(ValueLayout.JAVA_INT, LAUNCH_CONFIG_NUM_ATTRS, 1);
        return cfg;
    }

    /**
     * As {@link #launch} on {@code stream}, through {@code cuLaunchKernelEx} with programmatic stream serialization
     * (programmatic dependent launch, cc ≥ 9.0): the kernel may start before the previous kernel on the stream has
     * finished, once every block of that one has executed {@code griddepcontrol.launch_dependents} (or exited); it
     * must execute {@code griddepcontrol.wait} before touching anything the previous kernels write or read. Kept
     * as a programmatic edge when the stream is being captured. {@code cfg}: from {@link #programmaticConfig}, not
     * used by another thread meanwhile.
     */
    public void launchProgrammatic(MemorySegment cfg, MemorySegment f, int gx, int gy, int gz, int bx, int by, int bz,
                                   int sharedBytes, MemorySegment stream, MemorySegment params) {
        if (launchEx == null) throw new IllegalStateException("cuLaunchKernelEx is not available");
        cfg.set(ValueLayout.JAVA_INT, 0, gx);
        cfg.set(ValueLayout.JAVA_INT, 4, gy);
        cfg.set(ValueLayout.JAVA_INT, 8, gz);
        cfg.set(ValueLayout.JAVA_INT, 12, bx);
        cfg.set(ValueLayout.JAVA_INT, 16, by);
        cfg.set(ValueLayout.JAVA_INT, 20, bz);
        cfg.set(ValueLayout.JAVA_INT, 24, sharedBytes);
        cfg.set(PTR, LAUNCH_CONFIG_STREAM, stream);
        try {
            check((int) launchEx.invokeExact(cfg, f, params, MemorySegment.NULL), "cuLaunchKernelEx");
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Host-to-device copy queued on {@code stream}; {@code src} (pinned) must stay unchanged until the stream passes it. */
    public void copyToDeviceAsync(long dst, MemorySegment src, long bytes, MemorySegment stream) {
        try { check((int) htodAsync.invokeExact(dst, src, bytes, stream), "cuMemcpyHtoDAsync_v2"); }
        catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Device-to-device copy queued on {@code stream}. */
    public void copyDeviceAsync(long dst, long src, long bytes, MemorySegment stream) {
        try { check((int) dtodAsync.invokeExact(dst, src, bytes, stream), "cuMemcpyDtoDAsync_v2"); }
        catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Device-to-host copy queued on {@code stream}; {@code dst} (pinned) is valid after {@link #streamSynchronize}. */
    public void copyToHostAsync(MemorySegment dst, long src, long bytes, MemorySegment stream) {
        try { check((int) dtohAsync.invokeExact(dst, src, bytes, stream), "cuMemcpyDtoHAsync_v2"); }
        catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void streamSynchronize(MemorySegment stream) {
        try { check((int) streamSync.invokeExact(stream), "cuStreamSynchronize"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Starts recording {@code stream}'s work into a graph instead of running it. */
    public void beginCapture(MemorySegment stream, int mode) {
        try { check((int) beginCapture.invokeExact(stream, mode), "cuStreamBeginCapture_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Ends the capture; returns the recorded {@code CUgraph}. */
    public MemorySegment endCapture(MemorySegment stream) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) endCapture.invokeExact(stream, v), "cuStreamEndCapture");
            return v.get(PTR, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** An executable graph ({@code CUgraphExec}) of {@code graph}. */
    public MemorySegment graphInstantiate(MemorySegment graph) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) graphInstantiate.invokeExact(v, graph, 0L), "cuGraphInstantiateWithFlags");
            return v.get(PTR, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void graphLaunch(MemorySegment exec, MemorySegment stream) {
        try { check((int) graphLaunch.invokeExact(exec, stream), "cuGraphLaunch"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void graphExecDestroy(MemorySegment exec) {
        try { check((int) graphExecDestroy.invokeExact(exec), "cuGraphExecDestroy"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void graphDestroy(MemorySegment graph) {
        try { check((int) graphDestroy.invokeExact(graph), "cuGraphDestroy"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    // ---- virtual memory: address ranges reserved once, physical memory mapped into them as it is needed ----

    /** Whether the driver binds every virtual memory call (the device must also report {@link #ATTR_VIRTUAL_MEMORY}). */
    public boolean hasVirtualMemory() {
        return granularity != null && addressReserve != null && addressFree != null && memCreate != null && memRelease != null
                && memMap != null && memSetAccess != null && memUnmap != null;
    }

    /** {@code sizeof(CUmemAllocationProp)}: type, handle types, location {type, id}, win32 metadata, allocFlags. */
    static final long ALLOCATION_PROP_BYTES = 32;

    /** Pinned device memory on {@code dev}, no export handles ({@code CUmemAllocationProp}). */
    private static MemorySegment deviceProp(Arena a, int dev) {
        MemorySegment p = a.allocate(ALLOCATION_PROP_BYTES, 8);   // zeroed: no handle types, no flags
        p.set(I32, 0, 1);    // CU_MEM_ALLOCATION_TYPE_PINNED
        p.set(I32, 8, 1);    // location.type = CU_MEM_LOCATION_TYPE_DEVICE
        p.set(I32, 12, dev); // location.id
        return p;
    }

    /** The size every physical allocation and mapping on {@code dev} is a multiple of (the minimum granularity). */
    public long allocationGranularity(int dev) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(SIZE_T);
            check((int) granularity.invokeExact(v, deviceProp(a, dev), 0), "cuMemGetAllocationGranularity");
            return v.get(I64, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Reserves {@code bytes} of device address space (no memory behind it yet), aligned to {@code alignment}. */
    public long addressReserve(long bytes, long alignment) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I64);
            check((int) addressReserve.invokeExact(v, bytes, alignment, 0L, 0L), "cuMemAddressReserve (" + bytes + " bytes)");
            return v.get(I64, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void addressFree(long ptr, long bytes) {
        try { check((int) addressFree.invokeExact(ptr, bytes), "cuMemAddressFree"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** {@code bytes} (a multiple of the granularity) of physical memory on {@code dev}; returns its handle. */
    public long memCreate(long bytes, int dev) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I64);
            check((int) memCreate.invokeExact(v, bytes, deviceProp(a, dev), 0L), "cuMemCreate (" + bytes + " bytes)");
            return v.get(I64, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void memRelease(long handle) {
        try { check((int) memRelease.invokeExact(handle), "cuMemRelease"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Maps all of {@code handle}'s memory at {@code ptr} (in a reserved range) and lets {@code dev} read and write it. */
    public void memMap(long ptr, long bytes, long handle, int dev) {
        try (Arena a = Arena.ofConfined()) {
            check((int) memMap.invokeExact(ptr, bytes, 0L, handle, 0L), "cuMemMap (" + bytes + " bytes)");
            MemorySegment desc = a.allocate(12, 4);   // CUmemAccessDesc: location {type, id}, flags
            desc.set(I32, 0, 1);   // CU_MEM_LOCATION_TYPE_DEVICE
            desc.set(I32, 4, dev);
            desc.set(I32, 8, 3);   // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            int rc = (int) memSetAccess.invokeExact(ptr, bytes, desc, 1L);
            if (rc != 0) {
                int ignored = (int) memUnmap.invokeExact(ptr, bytes);
                throw error(rc, "cuMemSetAccess");
            }
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void memUnmap(long ptr, long bytes) {
        try { check((int) memUnmap.invokeExact(ptr, bytes), "cuMemUnmap"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }
}
