package dev.cmf4j.backend.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.cmf4j.backend.cuda.NativeLib.I32;
import static dev.cmf4j.backend.cuda.NativeLib.I64;
import static dev.cmf4j.backend.cuda.NativeLib.PTR;
import static dev.cmf4j.backend.cuda.NativeLib.SIZE_T;
import static dev.cmf4j.backend.cuda.NativeLib.fn;

/**
 * NCCL ({@code libnccl.so.2}) through {@code java.lang.foreign}: the collectives several GPUs of one process exchange
 * activations with (issue 26's tensor-parallel steps: an all-reduce after each row-parallel product). One process owns
 * every GPU, so the communicators come from {@code ncclCommInitAll}; the calls of one collective, one per GPU, go
 * between {@link #groupStart} and {@link #groupEnd}, each from the thread that owns that GPU's context or all from
 * one thread inside the group. Every wrapper checks the {@code ncclResult_t} and throws a {@link CudaException}
 * carrying {@code ncclGetErrorString}.
 */
public final class Nccl {
    static final List<NativeLib.Binding> TABLE = List.of(
            new NativeLib.Binding("ncclGetVersion", fn(I32, PTR)),
            new NativeLib.Binding("ncclGetErrorString", fn(PTR, I32)),
            new NativeLib.Binding("ncclCommInitAll", fn(I32, PTR, I32, PTR)),
            new NativeLib.Binding("ncclCommDestroy", fn(I32, PTR)),
            new NativeLib.Binding("ncclCommCount", fn(I32, PTR, PTR)),
            new NativeLib.Binding("ncclAllReduce", fn(I32, I64, I64, SIZE_T, I32, I32, PTR, PTR)),
            new NativeLib.Binding("ncclGroupStart", fn(I32)),
            new NativeLib.Binding("ncclGroupEnd", fn(I32)));

    /**
     * Where the library is looked for: {@code -Dcmf.nccl} (a path), the loader's soname, then the usual install places
     * (the CUDA toolkit's, and the {@code nvidia-nccl} wheel that PyTorch installs).
     */
    static List<String> candidates() {
        List<String> names = new ArrayList<>();
        String forced = System.getProperty("cmf.nccl");
        if (forced != null) names.add(forced);
        names.add("libnccl.so.2");
        names.add("/usr/lib/x86_64-linux-gnu/libnccl.so.2");
        names.add("/usr/local/cuda/lib64/libnccl.so.2");
        for (String root : List.of("/usr/local/lib", "/usr/lib"))
            try (var dirs = Files.list(Path.of(root))) {
                dirs.filter(d -> d.getFileName().toString().startsWith("python3"))
                        .forEach(d -> {
                            for (String site : List.of("dist-packages", "site-packages"))
                                names.add(d.resolve(site).resolve("nvidia/nccl/lib/libnccl.so.2").toString());
                        });
            } catch (java.io.IOException | RuntimeException e) {
                // no such folder: nothing to add
            }
        return names;
    }

    /** {@code ncclDataType_t} ncclFloat32 and {@code ncclRedOp_t} ncclSum. */
    static final int FLOAT32 = 7, SUM = 0;

    private final MethodHandle version, errorString, initAll, destroy, count, allReduce, groupStart, groupEnd;
    private final String library;

    private Nccl(Map<String, MethodHandle> h, String library) {
        version = h.get("ncclGetVersion"); errorString = h.get("ncclGetErrorString"); initAll = h.get("ncclCommInitAll");
        destroy = h.get("ncclCommDestroy"); count = h.get("ncclCommCount"); allReduce = h.get("ncclAllReduce");
        groupStart = h.get("ncclGroupStart"); groupEnd = h.get("ncclGroupEnd");
        this.library = library;
    }

    /**
     * NCCL from the first of {@code names} that opens.
     *
     * @throws CudaUnavailableException when none opens or one lacks a call, saying what was tried
     */
    public static Nccl load(List<String> names) {
        List<String> tried = new ArrayList<>();
        for (String n : names) {
            SymbolLookup lib = NativeLib.open(List.of(n), tried);
            if (lib != null) return new Nccl(NativeLib.bind(lib, n, TABLE), n);
        }
        throw new CudaUnavailableException("no NCCL: could not open libnccl.so.2 (tried " + String.join(", ", tried)
                + "); install NCCL (e.g. the libnccl2 package) or name it with -Dcmf.nccl=PATH");
    }

    /** NCCL from the usual places ({@link #candidates}). */
    public static Nccl load() { return load(candidates()); }

    /** The library this was opened from. */
    public String library() { return library; }

    /** The library's version as major.minor.patch (ncclGetVersion's code: major·10000 + minor·100 + patch). */
    public String version() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I32);
            check((int) version.invokeExact(v), "ncclGetVersion");
            int code = v.get(I32, 0);
            return code / 10000 + "." + code / 100 % 100 + "." + code % 100;
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** One communicator per device of {@code devices} (CUDA ordinals), rank i on devices[i]. */
    public MemorySegment[] initAll(int... devices) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment comms = a.allocate(PTR, devices.length);
            check((int) initAll.invokeExact(comms, devices.length, a.allocateFrom(I32, devices)), "ncclCommInitAll");
            MemorySegment[] out = new MemorySegment[devices.length];
            for (int i = 0; i < out.length; i++) out[i] = comms.getAtIndex(PTR, i);
            return out;
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** How many ranks {@code comm}'s clique has. */
    public int count(MemorySegment comm) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I32);
            check((int) count.invokeExact(comm, v), "ncclCommCount");
            return v.get(I32, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void destroy(MemorySegment comm) {
        try { check((int) destroy.invokeExact(comm), "ncclCommDestroy"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /**
     * recv = the sum over the clique of every rank's send ({@code count} f32 values; send == recv is in place), queued
     * on {@code stream}; inside a group until {@link #groupEnd}.
     */
    public void allReduceSum(long send, long recv, long count, MemorySegment comm, MemorySegment stream) {
        try {
            check((int) allReduce.invokeExact(send, recv, count, FLOAT32, SUM, comm, stream), "ncclAllReduce");
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void groupStart() {
        try { check((int) groupStart.invokeExact(), "ncclGroupStart"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    public void groupEnd() {
        try { check((int) groupEnd.invokeExact(), "ncclGroupEnd"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** ncclResult_t names (nccl.h), for the message. */
    private static final String[] RESULTS = {"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
            "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"};

    private void check(int rc, String call) throws Throwable {
        if (rc == 0) return;
        String text = NativeLib.cString((MemorySegment) errorString.invokeExact(rc));
        throw new CudaException(call, rc, rc < RESULTS.length ? RESULTS[rc] : "ncclResult " + rc, text);
    }

}
